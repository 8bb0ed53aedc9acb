/**
 * A function_call_output must answer a function call of the conversation (issue 21, section 6), as OpenAI
 * requires: one whose call_id matches no call of the input, of the stored chain of previous_response_id, is a 400
 * naming the item's call_id, and nothing runs. What may hide a call never causes a false refusal: calls earlier in
 * the chain, truncation (the check sees the conversation before any turn is dropped), and compaction (an output
 * after a compaction item may answer a call the item stands for). The WebSocket mode: test/responses/ws.errors.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { MODEL, expectError, setup, type Env } from './util.js';

const WEATHER = { type: 'function' as const, name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false };
const output = (call_id: string, out = 'sunny') => ({ type: 'function_call_output' as const, call_id, output: out });
const call = (call_id: string) => ({ type: 'function_call' as const, call_id, name: 'get_weather', arguments: '{"city":"Paris"}' });

describe('function_call_output: the call it answers', () => {
  let e: Env;
  before(async () => {
    e = await setup('pglite');
  });
  after(() => e.close());
  const post = (path: string, body: unknown) => e.call('POST', path, body);

  test('an output whose call_id matches no call of the input: 400 naming input[i].call_id, on create and input_tokens; nothing runs', async () => {
    const before = e.up.requests.length;
    const input = [{ role: 'user', content: 'Weather in Paris?' }, call('call_1'), output('call_1'), output('call_nope')];
    for (const path of ['/v1/responses', '/v1/responses/input_tokens']) {
      const err = await expectError(await post(path, { model: MODEL, input, tools: [WEATHER] }), 400, 'invalid_value', 'input[3].call_id');
      assert.match(err.message, /No tool call found for function call output with call_id 'call_nope'/);
    }
    // streamed and background requests are refused before anything starts too
    await expectError(await post('/v1/responses', { model: MODEL, input, stream: true }), 400, 'invalid_value', 'input[3].call_id');
    await expectError(await post('/v1/responses', { model: MODEL, input, background: true }), 400, 'invalid_value', 'input[3].call_id');
    // the index is the client's: a reasoning item made from reasoning_content does not shift it
    await expectError(
      await post('/v1/responses', { model: MODEL, input: [{ role: 'assistant', content: 'Let me look.', reasoning_content: 'I should call it.' }, output('call_x')] }),
      400,
      'invalid_value',
      'input[1].call_id',
    );
    await assert.rejects(e.client.responses.create({ model: MODEL, input: [{ type: 'function_call_output', call_id: 'call_9', output: 'x' }] }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.BadRequestError);
      assert.equal(err.param, 'input[0].call_id');
      return true;
    });
    assert.equal(e.up.requests.length, before, 'nothing reached the upstream');
  });

  test('calls of the input (in any order) and of the whole stored chain are found', async () => {
    e.up.script({ text: 'ok' });
    // the output before its call: still a call of the conversation
    const r0 = await e.client.responses.create({ model: MODEL, input: [{ role: 'user', content: 'x' }, call('call_a'), output('call_a')], tools: [WEATHER] });
    assert.equal(r0.status, 'completed');
    e.up.script({ toolCalls: [{ id: 'call_chain', name: 'get_weather', arguments: '{"city":"Rome"}' }] }, { text: 'and now?' }, { text: 'Rainy in Rome.' });
    const r1 = await e.client.responses.create({ model: MODEL, input: 'Weather in Rome?', tools: [WEATHER] });
    assert.equal(r1.output[0]?.type, 'function_call');
    const r2 = await e.client.responses.create({ model: MODEL, previous_response_id: r1.id, input: 'hold on', tools: [WEATHER] });
    // the call is two responses back in the chain
    const r3 = await e.client.responses.create({ model: MODEL, previous_response_id: r2.id, input: [output('call_chain', 'rain')], tools: [WEATHER] });
    assert.equal(r3.output_text, 'Rainy in Rome.');
    // a call of another chain is not one of this conversation
    await expectError(await post('/v1/responses', { model: MODEL, previous_response_id: r2.id, input: [output('call_a')] }), 400, 'invalid_value', 'input[0].call_id');
  });

  test('truncation: the check sees the conversation before old turns are dropped (no false refusal)', async () => {
    e.up.script({ text: 'fits' });
    const long = 'words '.repeat(60);
    const r = await post('/v1/responses', {
      model: 'tiny-window',
      truncation: 'auto',
      input: [{ role: 'user', content: long }, call('call_t'), output('call_t', long), { role: 'user', content: 'And now?' }, output('call_t', 'again')],
    });
    assert.equal(r.status, 200, await r.clone().text());
    const sent = e.last().messages;
    assert.ok(!sent.some((m: any) => m.content === long), 'the old turn was dropped');
  });

  test('compaction: an output after a compaction item may answer a call the item replaced; without the item it is refused', async () => {
    e.up.script({ text: 'The user asked for the weather in Paris; get_weather was called (call_w).' });
    const compact = await post('/v1/responses/compact', { model: MODEL, input: [{ role: 'user', content: 'Weather in Paris?' }, call('call_w')] });
    assert.equal(compact.status, 200, await compact.clone().text());
    const window = ((await compact.json()) as any).output as any[];
    assert.deepEqual(
      window.map((x) => x.type),
      ['message', 'compaction'],
    );
    e.up.script({ text: 'Sunny.' });
    const r = await post('/v1/responses', { model: MODEL, input: [...window, output('call_w')], tools: [WEATHER] });
    assert.equal(r.status, 200, await r.clone().text());
    const stored = (await r.json()) as any;
    // continued from the stored response that holds the compaction item: still not a false refusal
    e.up.script({ text: 'Still sunny.' });
    const again = await post('/v1/responses', { model: MODEL, previous_response_id: stored.id, input: [output('call_w', 'later')], tools: [WEATHER] });
    assert.equal(again.status, 200, await again.clone().text());
    // an output before the compaction item is checked as any other
    await expectError(await post('/v1/responses', { model: MODEL, input: [output('call_w'), ...window] }), 400, 'invalid_value', 'input[0].call_id');
    await expectError(await post('/v1/responses', { model: MODEL, input: [window[0], output('call_w')] }), 400, 'invalid_value', 'input[1].call_id');
  });
});
