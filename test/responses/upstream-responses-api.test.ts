import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { setup, type Env } from './util.js';
import type { ModelSpec } from '../../src/models/config.js';

/**
 * A model whose upstream speaks /v1/responses itself (api: responses): Portico forwards the generation with
 * store:false and still owns storage, chaining and background work.
 */
describe('upstream with api: responses, through Portico', () => {
  let e: Env;
  before(async () => {
    // the model points at setup's own scripted upstream, whose URL is known only once it listens
    e = await setup('pglite', [{ name: 'native', provider: 'openai-compatible', base_url: 'http://127.0.0.1:1/v1', api: 'responses', type: 'text' } as ModelSpec]);
    e.t.services.models.get('native')!.base_url = e.up.url;
  });
  after(() => e.close());

  const upstreamResponsesCalls = () => e.up.requests.filter((r) => r.path.endsWith('/responses'));

  test('create forwards to the upstream /responses with store false; Portico stores and chains itself', async () => {
    e.up.script({ text: 'Native answer', chunks: 3, usage: { prompt_tokens: 7, completion_tokens: 3 } });
    const r = await e.client.responses.create({ model: 'native', input: 'hello', instructions: 'Be brief.' });
    assert.equal(r.status, 'completed');
    assert.equal(r.output_text, 'Native answer');
    assert.equal(r.usage?.input_tokens, 7);
    assert.equal(r.usage?.output_tokens, 3);
    const sent = upstreamResponsesCalls().at(-1)!.body;
    assert.equal(sent.store, false, 'the upstream must not store: Portico owns storage');
    assert.equal(sent.stream, false, 'a non-streaming create asks for one JSON answer');
    assert.equal(sent.instructions, 'Be brief.');
    // Portico stored it: retrieve works, and a chained request carries the history to the upstream
    assert.equal((await e.client.responses.retrieve(r.id)).output_text, 'Native answer');
    e.up.script({ text: 'Second', chunks: 1 });
    const r2 = await e.client.responses.create({ model: 'native', input: 'and then?', previous_response_id: r.id });
    assert.equal(r2.output_text, 'Second');
    const history = JSON.stringify(upstreamResponsesCalls().at(-1)!.body.input);
    assert.match(history, /hello/);
    assert.match(history, /Native answer/);
    assert.match(history, /and then\?/);
    assert.equal(upstreamResponsesCalls().at(-1)!.body.previous_response_id, undefined, 'the chain is resolved by Portico, not the upstream');
  });

  test('streaming through the SDK helper passes its strict checks', async () => {
    e.up.script({ text: 'streamed natively', chunks: 4 });
    const s = e.client.responses.stream({ model: 'native', input: 'stream please' });
    const types: string[] = [];
    for await (const ev of s) types.push(ev.type);
    const final = await s.finalResponse();
    assert.equal(final.output_text, 'streamed natively');
    assert.equal(types[0], 'response.created');
    assert.equal(types.at(-1), 'response.completed');
    assert.equal(types.filter((t) => t === 'response.output_text.delta').length, 4);
  });

  test('a function call from the upstream comes back as a function_call item', async () => {
    e.up.script({ toolCalls: [{ name: 'get_weather', arguments: '{"city":"Paris"}' }] });
    const r = await e.client.responses.create({
      model: 'native',
      input: 'weather?',
      tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }],
    });
    const call = r.output.find((o) => o.type === 'function_call') as any;
    assert.ok(call, JSON.stringify(r.output));
    assert.equal(call.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
    const sentTools = upstreamResponsesCalls().at(-1)!.body.tools;
    assert.equal(sentTools[0].name, 'get_weather', 'tools stay flat for a Responses upstream');
  });
});
