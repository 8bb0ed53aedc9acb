/** The Responses API served by the embedded llama engine (a generated tiny GGUF), through the official SDK. */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { makeTinyGguf } from '../helpers/tiny-gguf.js';
import type { ModelSpec } from '../../src/models/config.js';
import { assertFullObject, assertUsage, setup, type Env } from './util.js';

describe('responses on the llama engine', () => {
  let e: Env;
  before(async () => {
    const path = await makeTinyGguf();
    // context 1024: with its small vocabulary (256 bytes + 200 merges) the tiny model spends ~590 tokens on the function-calling
    // template of one tool, more than 512. parallel is set because the registry passes `parallel: undefined` through, which overrides the engine's default (reported)
    e = await setup('pglite', [{ name: 'tiny', provider: 'llama', path, type: 'text', context_window: 1024, parallel: 2 } as ModelSpec]);
  });
  after(() => e.close());

  test('plain generation: exact usage (input tokens equal the input_tokens count; output equals the cap)', async () => {
    const body = { model: 'tiny', instructions: 'Answer briefly.', input: 'What is the weather like in the city?' };
    const count = (await (await e.call('POST', '/v1/responses/input_tokens', body)).json()) as any;
    assert.equal(count.object, 'response.input_tokens');
    const r = await e.client.responses.create({ ...body, max_output_tokens: 8, temperature: 0 });
    assertFullObject(r);
    assertUsage(r.usage);
    assert.ok(r.status === 'completed' || r.status === 'incomplete', r.status);
    assert.equal(r.model, 'tiny');
    assert.equal(r.usage!.input_tokens, count.input_tokens, 'the same number the input_tokens endpoint gives');
    if (r.status === 'incomplete') {
      assert.equal(r.usage!.output_tokens, 8);
      assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    } else assert.ok(r.usage!.output_tokens <= 8);
    assert.ok(r.output_text.length > 0);
    // greedy decoding is reproducible through the service too
    const again = await e.client.responses.create({ ...body, max_output_tokens: 8, temperature: 0 });
    assert.equal(again.output_text, r.output_text);
  });

  test('json_schema output parses and matches the schema', async () => {
    const schema = {
      type: 'object',
      properties: { color: { type: 'string', enum: ['red', 'green', 'blue'] }, ok: { type: 'boolean' }, label: { type: 'string', maxLength: 6 } },
      required: ['color', 'ok', 'label'],
      additionalProperties: false,
    };
    const r = await e.client.responses.create({
      model: 'tiny',
      input: 'Pick a color.',
      max_output_tokens: 200,
      text: { format: { type: 'json_schema', name: 'pick', schema, strict: true } },
    });
    assert.equal(r.status, 'completed', r.output_text);
    const v = JSON.parse(r.output_text);
    assert.deepEqual(Object.keys(v).sort(), ['color', 'label', 'ok']);
    assert.ok(['red', 'green', 'blue'].includes(v.color));
    assert.equal(typeof v.ok, 'boolean');
    assert.ok(typeof v.label === 'string' && v.label.length <= 6);
  });

  test('tool_choice required gives a function_call whose arguments parse', async () => {
    const tools = [
      {
        type: 'function' as const,
        name: 'get_weather',
        parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } }, required: ['city'] },
        strict: true,
      },
    ];
    const r = await e.client.responses.create({ model: 'tiny', input: 'Paris?', tools, tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 120 });
    assert.equal(r.status, 'completed');
    const calls = r.output.filter((o) => o.type === 'function_call');
    assert.equal(calls.length, 1);
    const c = calls[0] as any;
    assert.equal(c.name, 'get_weather');
    assert.match(c.call_id, /^call_/);
    const args = JSON.parse(c.arguments);
    assert.ok(['Paris', 'Rome'].includes(args.city));
  });

  test('streaming with responses.stream()', async () => {
    const s = e.client.responses.stream({ model: 'tiny', input: 'Hello!', max_output_tokens: 12 });
    let deltas = '';
    let n = 0;
    s.on('response.output_text.delta', (ev) => {
      deltas += ev.delta;
      n++;
    });
    const r = await s.finalResponse();
    assert.ok(n > 1, 'several deltas');
    assert.equal(r.output_text, deltas);
    assertUsage(r.usage);
    assert.ok(r.usage!.output_tokens > 0 && r.usage!.output_tokens <= 12);
  });

  test('chaining reuses the KV cache: cached_tokens > 0 on the continued conversation', async () => {
    const r1 = await e.client.responses.create({ model: 'tiny', input: 'What is the weather like in Paris?', max_output_tokens: 6, temperature: 0 });
    const r2 = await e.client.responses.create({ model: 'tiny', previous_response_id: r1.id, input: 'And in London?', max_output_tokens: 4, temperature: 0 });
    const u = r2.usage!;
    assert.ok(u.input_tokens > r1.usage!.input_tokens);
    assert.ok(u.input_tokens_details.cached_tokens > 0, `cached ${u.input_tokens_details.cached_tokens}`);
    assert.ok(u.input_tokens_details.cached_tokens >= r1.usage!.input_tokens, `cached ${u.input_tokens_details.cached_tokens} of the first prompt's ${r1.usage!.input_tokens}`);
    assert.ok(u.input_tokens_details.cached_tokens < u.input_tokens);
  });
});
