/**
 * Conformance on the embedded llama engine (a generated tiny GGUF): a call cut by the token cap is incomplete;
 * generation stops once max_tool_calls calls are made (not at the token cap); presence_penalty and
 * frequency_penalty reach the sampler (greedy output changes with them).
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { makeTinyGguf } from '../helpers/tiny-gguf.js';
import type { ModelSpec } from '../../src/models/config.js';
import { checkFraming, readSse, setup, type Env } from './util.js';

const TOOLS = [
  {
    type: 'function' as const,
    name: 'get_weather',
    parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } }, required: ['city'] },
    strict: true,
  },
];

describe('llama: cut calls, max_tool_calls, penalties', () => {
  let e: Env;
  before(async () => {
    const path = await makeTinyGguf();
    e = await setup('pglite', [{ name: 'tiny', provider: 'llama', path, type: 'text', context_window: 1024, parallel: 2 } as ModelSpec]);
  });
  after(() => e.close());

  test('a forced call cut by max_output_tokens is incomplete (item, events, stored object)', async () => {
    // a whole call is ~45 tokens of the tiny vocabulary: 30 cut it inside its arguments
    const cut = { model: 'tiny', input: 'Paris and Rome?', tools: TOOLS, tool_choice: 'required' as const, parallel_tool_calls: false, max_output_tokens: 30, temperature: 0 };
    const r: any = await e.client.responses.create(cut);
    assert.equal(r.status, 'incomplete');
    const call = r.output.find((o: any) => o.type === 'function_call');
    assert.ok(call, JSON.stringify(r.output));
    assert.equal(call.status, 'incomplete');
    assert.throws(() => JSON.parse(call.arguments), 'the arguments were cut');
    assert.equal(((await e.client.responses.retrieve(r.id)) as any).output.find((o: any) => o.type === 'function_call').status, 'incomplete');
    const events = checkFraming(await readSse(await e.call('POST', '/v1/responses', { ...cut, stream: true })));
    const done = events.find((x) => x.type === 'response.output_item.done' && x.item.type === 'function_call');
    assert.equal(done.item.status, 'incomplete');
    assert.equal(events[events.length - 1].type, 'response.incomplete');
  });

  test('max_tool_calls: generation stops once the calls are made, far below the token cap', async () => {
    for (const max of [1, 2]) {
      const r: any = await e.client.responses.create({
        model: 'tiny',
        input: 'Paris and Rome?',
        tools: TOOLS,
        tool_choice: 'required',
        max_tool_calls: max,
        max_output_tokens: 300,
        temperature: 0,
      } as never);
      const calls = r.output.filter((o: any) => o.type === 'function_call');
      assert.equal(r.status, 'completed', `max ${max}: ${JSON.stringify(r.output)}`);
      assert.ok(calls.length >= 1 && calls.length <= max, `max ${max}: ${calls.length} calls`);
      for (const c of calls) {
        assert.equal(c.status, 'completed');
        assert.ok(['Paris', 'Rome'].includes(JSON.parse(c.arguments).city));
      }
      // one call of this schema is ~45 tokens of the tiny vocabulary; unbounded, it writes calls up to the cap (300)
      assert.ok(r.usage.output_tokens <= 60 * max, `max ${max}: ${r.usage.output_tokens} output tokens billed`);
    }
  });

  test('presence_penalty and frequency_penalty change what greedy decoding writes (they reach the sampler)', async () => {
    const base = { model: 'tiny', input: 'Tell me about the weather in the city.', max_output_tokens: 48, temperature: 0 };
    const plain: any = await e.client.responses.create(base);
    const again: any = await e.client.responses.create(base);
    assert.equal(again.output_text, plain.output_text, 'greedy decoding is reproducible');
    const presence: any = await e.client.responses.create({ ...base, presence_penalty: 2 } as never);
    const frequency: any = await e.client.responses.create({ ...base, frequency_penalty: 2 } as never);
    assert.notEqual(presence.output_text, plain.output_text, 'presence_penalty changed the output');
    assert.notEqual(frequency.output_text, plain.output_text, 'frequency_penalty changed the output');
    assert.equal(presence.presence_penalty, 2);
    assert.equal(frequency.frequency_penalty, 2);
    // a penalty lowers repetition: fewer repeated words than without
    const repeats = (s: string) => {
      const w = s.toLowerCase().split(/\W+/).filter(Boolean);
      return w.length - new Set(w).size;
    };
    assert.ok(repeats(presence.output_text) <= repeats(plain.output_text), `${repeats(presence.output_text)} vs ${repeats(plain.output_text)} repeated words`);
    // a negative penalty (favouring repetition) is taken too, streaming as well
    const last = checkFraming(await readSse(await e.call('POST', '/v1/responses', { ...base, presence_penalty: -1, stream: true }))).at(-1);
    assert.ok(['response.completed', 'response.incomplete'].includes(last.type), last.type);
    assert.notEqual(last.response.output_text ?? last.response.output[0].content[0].text, plain.output_text);
  });
});
