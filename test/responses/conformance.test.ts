/**
 * Conformance gaps of issue 10 (section 4) on the upstream path: a function call cut by the token cap is
 * incomplete (item, events, stored object); a cancelled background response ends its streams (live and replayed)
 * with its open item closed and a final event carrying the cancelled object, which the SDK's stream helper takes;
 * presence_penalty and frequency_penalty reach the upstream; max_tool_calls reaches a Responses upstream.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { ModelSpec } from '../../src/models/config.js';
import { MODEL, checkFraming, eventually, parseSse, readSse, setup, types, type Env } from './util.js';

const TOOLS = [{ type: 'function' as const, name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }];

describe('a function call cut by the token cap (chat upstream)', () => {
  let e: Env;
  before(async () => {
    e = await setup('pglite');
  });
  after(() => e.close());

  test('JSON: the cut call is incomplete with the arguments that were written; the call before it is completed', async () => {
    e.up.script({
      toolCalls: [
        { name: 'get_weather', arguments: '{"city": "Rome"}' },
        { name: 'get_weather', arguments: ['{"city"', ': "Par'] },
      ],
      finishReason: 'length',
    });
    const r: any = await e.client.responses.create({ model: MODEL, input: 'weather?', tools: TOOLS, max_output_tokens: 20 });
    assert.equal(r.status, 'incomplete');
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.deepEqual(
      r.output.map((o: any) => [o.type, o.status, o.arguments]),
      [
        ['function_call', 'completed', '{"city": "Rome"}'],
        ['function_call', 'incomplete', '{"city": "Par'],
      ],
    );
    const stored: any = await e.client.responses.retrieve(r.id);
    assert.equal(stored.output[1].status, 'incomplete', 'the stored object says so too');
    assert.equal(stored.output[0].status, 'completed');
  });

  test('a cut call with no arguments yet is incomplete with empty arguments (no "{}" made up)', async () => {
    e.up.script({ toolCalls: [{ name: 'get_weather', arguments: '' }], finishReason: 'length' });
    const r: any = await e.client.responses.create({ model: MODEL, input: 'weather?', tools: TOOLS });
    assert.deepEqual([r.output[0].status, r.output[0].arguments], ['incomplete', '']);
  });

  test('a call finished normally keeps status completed', async () => {
    e.up.script({ toolCalls: [{ name: 'get_weather', arguments: '{"city": "Oslo"}' }] });
    const ok: any = await e.client.responses.create({ model: MODEL, input: 'weather?', tools: TOOLS });
    assert.equal(ok.status, 'completed');
    assert.equal(ok.output[0].status, 'completed');
  });

  test('stream: the events close the cut call as incomplete; the SDK helper ends with it incomplete', async () => {
    e.up.script({ toolCalls: [{ name: 'get_weather', arguments: ['{"ci', 'ty": "Par'] }], finishReason: 'length' });
    const events = checkFraming(await readSse(await e.call('POST', '/v1/responses', { model: MODEL, input: 'w', tools: TOOLS, stream: true })));
    const t = types(events);
    assert.deepEqual(t.slice(-4), ['response.function_call_arguments.delta', 'response.function_call_arguments.done', 'response.output_item.done', 'response.incomplete']);
    assert.equal(events.find((x) => x.type === 'response.function_call_arguments.done').arguments, '{"city": "Par');
    assert.equal(events.find((x) => x.type === 'response.output_item.done').item.status, 'incomplete');
    const final = events[events.length - 1].response;
    assert.equal(final.output[0].status, 'incomplete');
    e.up.script({ toolCalls: [{ name: 'get_weather', arguments: '{"city": "Par' }], finishReason: 'length' });
    const r: any = await e.client.responses.stream({ model: MODEL, input: 'w', tools: TOOLS }).finalResponse();
    assert.equal(r.status, 'incomplete');
    assert.equal(r.output[0].status, 'incomplete');
    assert.equal(r.output[0].parsed_arguments, null);
  });
});

describe('a function call cut by the token cap (Responses upstream)', () => {
  let e: Env;
  before(async () => {
    e = await setup('pglite', [{ name: 'native', provider: 'openai-compatible', base_url: 'http://127.0.0.1:1/v1', api: 'responses', type: 'text' } as ModelSpec]);
    e.t.services.models.get('native')!.base_url = e.up.url;
  });
  after(() => e.close());

  const frame = (o: Record<string, unknown>) => `event: ${o.type as string}\ndata: ${JSON.stringify(o)}\n\n`;
  const head = [
    frame({ type: 'response.created', response: { id: 'r1', status: 'in_progress', model: 'native', output: [] } }),
    frame({
      type: 'response.output_item.added',
      output_index: 0,
      item: { id: 'fc_1', type: 'function_call', call_id: 'call_a', name: 'get_weather', arguments: '', status: 'in_progress' },
    }),
    frame({ type: 'response.function_call_arguments.delta', item_id: 'fc_1', output_index: 0, delta: '{"city": "Par' }),
  ];
  const incomplete = frame({
    type: 'response.incomplete',
    response: { id: 'r1', status: 'incomplete', model: 'native', incomplete_details: { reason: 'max_output_tokens' }, output: [], usage: { input_tokens: 5, output_tokens: 8 } },
  });

  test('the upstream stops inside the arguments: the call is incomplete', async () => {
    e.up.script({ raw: [...head, incomplete] });
    const r: any = await e.client.responses.create({ model: 'native', input: 'w', tools: TOOLS });
    assert.equal(r.status, 'incomplete');
    assert.deepEqual([r.output[0].status, r.output[0].arguments], ['incomplete', '{"city": "Par']);
  });

  test('the upstream says the call is incomplete: so does Portico', async () => {
    const done = frame({
      type: 'response.output_item.done',
      output_index: 0,
      item: { id: 'fc_1', type: 'function_call', call_id: 'call_a', name: 'get_weather', arguments: '{"city": "Par', status: 'incomplete' },
    });
    e.up.script({ raw: [...head, done, incomplete] });
    const r: any = await e.client.responses.create({ model: 'native', input: 'w', tools: TOOLS });
    assert.deepEqual([r.output[0].status, r.output[0].arguments], ['incomplete', '{"city": "Par']);
  });

  test('max_tool_calls goes to the upstream (it stops calling itself); the penalties do not (no such Responses parameters)', async () => {
    e.up.script({ text: 'ok' });
    await e.client.responses.create({ model: 'native', input: 'w', tools: TOOLS, max_tool_calls: 2, presence_penalty: 0.5, frequency_penalty: 0.25 } as never);
    const sent = e.last();
    assert.equal(sent.max_tool_calls, 2);
    assert.equal(sent.presence_penalty, undefined);
    assert.equal(sent.frequency_penalty, undefined);
  });
});

describe('presence_penalty and frequency_penalty reach a chat upstream', () => {
  let e: Env;
  before(async () => {
    e = await setup('pglite');
  });
  after(() => e.close());

  test('sent as given (negative ones too), echoed in the object; absent when not given', async () => {
    e.up.script({ text: 'a' }, { text: 'b' }, { text: 'c' });
    const r: any = await e.client.responses.create({ model: MODEL, input: 'x', presence_penalty: 1.5, frequency_penalty: -0.5 } as never);
    assert.equal(e.last().presence_penalty, 1.5);
    assert.equal(e.last().frequency_penalty, -0.5);
    assert.equal(r.presence_penalty, 1.5);
    assert.equal(r.frequency_penalty, -0.5);
    await e.client.responses.create({ model: MODEL, input: 'x' });
    assert.ok(!('presence_penalty' in e.last()) && !('frequency_penalty' in e.last()), 'the upstream default applies');
    // streaming takes the same path
    await e.client.responses.stream({ model: MODEL, input: 'x', frequency_penalty: 2 } as never).finalResponse();
    assert.equal(e.last().frequency_penalty, 2);
  });
});

describe('cancelling a background response that a client is streaming', () => {
  let e: Env;
  before(async () => {
    e = await setup('pglite', [], { BACKGROUND_CONCURRENCY: '1' });
  });
  after(() => e.close());

  /** the events a cancelled stream ends with: the open message closed as incomplete, then the cancelled object */
  function assertCancelledEnd(events: any[]) {
    const t = types(events);
    assert.deepEqual(
      t.slice(-4),
      ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete'],
      'the message closed, then the final event',
    );
    assert.equal(t.filter((x) => x === 'response.output_item.added').length, t.filter((x) => x === 'response.output_item.done').length, 'no item left open');
    const item = events.find((x) => x.type === 'response.output_item.done').item;
    assert.equal(item.status, 'incomplete');
    const final = events[events.length - 1].response;
    assert.equal(final.status, 'cancelled');
    assert.equal(final.output[0].status, 'incomplete');
    assert.equal(final.output[0].content[0].text, events.find((x) => x.type === 'response.output_text.done').text);
    return final;
  }

  test('the live stream and its replays end with the item closed and response.incomplete carrying the cancelled object', async () => {
    e.up.script({ text: Array.from({ length: 200 }, (_, i) => `w${i} `), delayMs: 30 });
    const res = await e.call('POST', '/v1/responses', { model: MODEL, input: 'long', background: true, stream: true });
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = '';
    while ((text.match(/output_text\.delta/g) ?? []).length < 3) text += dec.decode((await reader.read()).value, { stream: true });
    const id = /"id":"(resp_[^"]+)"/.exec(text)![1];
    const c: any = await e.client.responses.cancel(id);
    assert.equal(c.status, 'cancelled');
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      text += dec.decode(r.value, { stream: true });
    }
    const live = checkFraming(parseSse(text));
    const final = assertCancelledEnd(live);
    assert.deepEqual((await e.client.responses.retrieve(id)).output, final.output, 'the stored object is the final one');
    // the replay is the same stream
    const replay = checkFraming(await readSse(await e.call('GET', `/v1/responses/${id}?stream=true`)));
    assert.deepEqual(replay, live);
    // the SDK stream helper takes it, and its final response is the cancelled one
    const viaSdk: any = await e.client.responses.stream({ response_id: id }).finalResponse();
    assert.equal(viaSdk.status, 'cancelled');
    assert.equal(viaSdk.output[0].status, 'incomplete');
    // resuming after the last delta gives just the end
    const lastDelta = live.filter((x) => x.type === 'response.output_text.delta').at(-1).sequence_number;
    const tail = checkFraming(await readSse(await e.call('GET', `/v1/responses/${id}?stream=true&starting_after=${lastDelta}`)), { from: lastDelta + 1 });
    assert.deepEqual(types(tail), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
  });

  test('the SDK helper following a live response gets the cancelled object from finalResponse', async () => {
    e.up.script({ text: Array.from({ length: 200 }, (_, i) => `v${i} `), delayMs: 30 });
    const n = e.up.requests.length;
    const q = await e.client.responses.create({ model: MODEL, input: 'long', background: true });
    await e.up.waitForRequests(n + 1);
    await eventually(async () => ((await e.client.responses.retrieve(q.id)) as any).status === 'in_progress');
    const s = e.client.responses.stream({ response_id: q.id });
    const seen: string[] = [];
    s.on('event', (ev) => seen.push(ev.type));
    setTimeout(() => void e.client.responses.cancel(q.id), 200);
    const r: any = await s.finalResponse();
    assert.equal(r.status, 'cancelled');
    assert.equal(seen.at(-1), 'response.incomplete');
  });

  test('a background response waiting for a worker is in_progress (usage null, no output) until it runs', async () => {
    e.up.script({ text: Array.from({ length: 60 }, (_, i) => `a${i} `), delayMs: 30 }, { text: ['B ', 'ran'] });
    const n = e.up.requests.length;
    const a = await e.client.responses.create({ model: MODEL, input: 'slow A', background: true });
    await e.up.waitForRequests(n + 1);
    // one job at a time (BACKGROUND_CONCURRENCY 1): B waits behind A
    const b = await e.client.responses.create({ model: MODEL, input: 'waiting B', background: true });
    for (const seen of [b, await e.client.responses.retrieve(b.id), (await (await e.call('GET', `/v1/responses/${b.id}`)).json()) as any]) {
      assert.equal(seen.status, 'in_progress');
      assert.equal(seen.usage, null);
      assert.deepEqual(seen.output, []);
    }
    assert.equal(e.up.requests.length, n + 1, 'B has not started');
    await e.client.responses.cancel(a.id);
    const done = await eventually(async () => {
      const r = await e.client.responses.retrieve(b.id);
      return r.status === 'completed' ? r : undefined;
    });
    assert.equal(done.output_text, 'B ran');
    // its stream says the same: created and in_progress (no queued event, no queued status), then the output
    const events = checkFraming(await readSse(await e.call('GET', `/v1/responses/${b.id}?stream=true`)));
    assert.deepEqual(types(events).slice(0, 2), ['response.created', 'response.in_progress']);
    for (const ev of events.filter((x) => x.response)) assert.ok(['in_progress', 'completed'].includes(ev.response.status), `${ev.type}: ${ev.response.status}`);
    assert.equal(events.at(-1).type, 'response.completed');
  });

  test('cancelled while still queued: a stream of it ends with the final event too', async () => {
    e.up.script({ text: Array.from({ length: 60 }, (_, i) => `a${i} `), delayMs: 30 }, { text: 'B ran' });
    const a = await e.client.responses.create({ model: MODEL, input: 'slow A', background: true });
    const b = await e.client.responses.create({ model: MODEL, input: 'waiting B', background: true });
    assert.equal((await e.client.responses.cancel(b.id)).status, 'cancelled');
    const events = checkFraming(await readSse(await e.call('GET', `/v1/responses/${b.id}?stream=true`)));
    assert.deepEqual(types(events), ['response.created', 'response.incomplete']);
    assert.equal(events[0].response.status, 'in_progress');
    assert.equal(events[1].response.status, 'cancelled');
    const viaSdk: any = await e.client.responses.stream({ response_id: b.id }).finalResponse();
    assert.equal(viaSdk.status, 'cancelled');
    await e.client.responses.cancel(a.id);
  });
});
