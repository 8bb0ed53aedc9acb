/** stream: true — the SDK's strict responses.stream() helper and the raw SSE wire, event by event. */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { testDatabases } from '../helpers/app.js';
import { MODEL, assertFullObject, assertUsage, callItemTypes, checkFraming, expectError, readSse, setup, textItemTypes, types, type Env } from './util.js';

const weather = { type: 'function' as const, name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false };

for (const db of testDatabases()) {
  describe(`responses streaming (${db})`, () => {
    let e: Env;
    before(async () => {
      e = await setup(db);
    });
    after(() => e.close());

    const stream = (body: Record<string, unknown>) => e.call('POST', '/v1/responses', { model: MODEL, stream: true, ...body });

    test('SDK responses.stream(): text deltas, strict checks pass, final response equals the stored one', async () => {
      e.up.script({ text: ['Hel', 'lo ', 'world'], usage: { prompt_tokens: 9, completion_tokens: 3 } });
      const s = e.client.responses.stream({ model: MODEL, input: 'Say hello world' });
      const seen: string[] = [];
      let deltas = '';
      s.on('response.output_text.delta', (ev) => (deltas += ev.delta));
      for await (const ev of s) seen.push(ev.type);
      const final = await s.finalResponse();
      assert.equal(deltas, 'Hello world');
      assert.equal(final.output_text, 'Hello world');
      assert.equal(final.status, 'completed');
      assert.deepEqual(seen, ['response.created', 'response.in_progress', ...textItemTypes(3), 'response.completed']);
      assert.equal(final.usage?.total_tokens, 12);
      const stored = await e.client.responses.retrieve(final.id);
      // (the SDK's parser adds `parsed: null` to the streamed parts; the ids and texts are the same)
      assert.deepEqual(
        stored.output.map((o: any) => [o.id, o.status, o.content[0].text]),
        final.output.map((o: any) => [o.id, o.status, o.content[0].text]),
      );
      assert.deepEqual(stored.usage, final.usage);
      assert.equal(stored.status, 'completed');
    });

    test('raw wire, plain text: the reference order, framing, snapshots carry every field', async () => {
      e.up.script({ text: ['a', 'b'] });
      const events = checkFraming(await readSse(await stream({ input: 'x' })));
      assert.deepEqual(types(events), ['response.created', 'response.in_progress', ...textItemTypes(2), 'response.completed']);
      const [created, inProgress, added, partAdded, d1, d2, textDone, partDone, itemDone, completed] = events;
      for (const ev of [created, inProgress, completed]) assertFullObject(ev.response);
      assert.equal(created.response.status, 'in_progress');
      assert.equal(created.response.usage, null);
      assert.deepEqual(created.response.output, []);
      assert.deepEqual(added.item, { id: added.item.id, type: 'message', status: 'in_progress', role: 'assistant', content: [] });
      assert.equal(added.output_index, 0);
      assert.deepEqual(partAdded.part, { type: 'output_text', text: '', annotations: [], logprobs: [] });
      for (const d of [d1, d2]) {
        assert.equal(d.item_id, added.item.id);
        assert.equal(d.output_index, 0);
        assert.equal(d.content_index, 0);
        assert.deepEqual(d.logprobs, []);
      }
      assert.equal(d1.delta + d2.delta, 'ab');
      assert.equal(textDone.text, 'ab');
      assert.equal(partDone.part.text, 'ab');
      assert.equal(itemDone.item.status, 'completed');
      assert.equal(completed.response.status, 'completed');
      assertUsage(completed.response.usage);
      assert.deepEqual(completed.response.output[0], itemDone.item);
    });

    test('one function call: added, argument deltas, arguments.done, item.done', async () => {
      e.up.script({ toolCalls: [{ id: 'call_w', name: 'get_weather', arguments: ['{"city"', ':"Paris"}'] }] });
      const events = checkFraming(await readSse(await stream({ input: 'weather', tools: [weather] })));
      const n = events.filter((x) => x.type === 'response.function_call_arguments.delta').length;
      assert.ok(n >= 1);
      assert.deepEqual(types(events), ['response.created', 'response.in_progress', ...callItemTypes(n), 'response.completed']);
      const added = events[2];
      assert.deepEqual(added.item, { id: added.item.id, type: 'function_call', status: 'in_progress', call_id: 'call_w', name: 'get_weather', arguments: '' });
      const argsDone = events.find((x) => x.type === 'response.function_call_arguments.done');
      assert.equal(argsDone.name, 'get_weather');
      assert.equal(argsDone.arguments, '{"city":"Paris"}');
      assert.equal(
        events
          .filter((x) => x.type === 'response.function_call_arguments.delta')
          .map((x) => x.delta)
          .join(''),
        '{"city":"Paris"}',
      );
      const done = events[events.length - 2];
      assert.equal(done.item.status, 'completed');
      assert.equal(done.item.arguments, '{"city":"Paris"}');
    });

    test('two calls: the second at the next output_index; SDK stream accepts it', async () => {
      const two = {
        toolCalls: [
          { name: 'get_weather', arguments: '{"city":"A"}' },
          { name: 'get_weather', arguments: '{"city":"B"}' },
        ],
      };
      e.up.script(two);
      const events = checkFraming(await readSse(await stream({ input: 'w', tools: [weather] })));
      const deltas = (i: number) => events.filter((x) => x.type === 'response.function_call_arguments.delta' && x.output_index === i).length;
      assert.deepEqual(types(events), ['response.created', 'response.in_progress', ...callItemTypes(deltas(0)), ...callItemTypes(deltas(1)), 'response.completed']);
      const adds = events.filter((x) => x.type === 'response.output_item.added');
      assert.deepEqual(
        adds.map((x) => x.output_index),
        [0, 1],
      );
      assert.notEqual(adds[0].item.id, adds[1].item.id);
      assert.notEqual(adds[0].item.call_id, adds[1].item.call_id);
      e.up.script(two);
      const s = e.client.responses.stream({ model: MODEL, input: 'w', tools: [weather] });
      const final = await s.finalResponse();
      assert.deepEqual(
        final.output.map((o: any) => o.arguments),
        ['{"city":"A"}', '{"city":"B"}'],
      );
    });

    test('reasoning (upstream reasoning_content): a reasoning item with reasoning_text events, then the message', async () => {
      e.up.script({ reasoning: ['Let me ', 'think.'], text: ['Four.'], usage: { prompt_tokens: 5, completion_tokens: 3, reasoning_tokens: 2 } });
      const events = checkFraming(await readSse(await stream({ input: '2+2?', reasoning: { effort: 'low' } })));
      assert.deepEqual(types(events), [
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.content_part.added',
        'response.reasoning_text.delta',
        'response.reasoning_text.delta',
        'response.reasoning_text.done',
        'response.content_part.done',
        'response.output_item.done',
        ...textItemTypes(1),
        'response.completed',
      ]);
      assert.equal(events[2].item.type, 'reasoning');
      assert.deepEqual(events[2].item.summary, []);
      assert.equal(events[3].part.type, 'reasoning_text');
      assert.equal(events[6].text, 'Let me think.');
      const final = events[events.length - 1].response;
      assert.equal(final.output[0].type, 'reasoning');
      assert.deepEqual(final.output[0].content, [{ type: 'reasoning_text', text: 'Let me think.' }]);
      assert.equal(final.output[1].type, 'message');
      assert.equal(final.usage.output_tokens_details.reasoning_tokens, 2);
      assert.equal(final.reasoning.effort, 'low');
      // the SDK's helper accepts the reasoning events
      e.up.script({ reasoning: ['Let me ', 'think.'], text: ['Four.'] });
      const s = e.client.responses.stream({ model: MODEL, input: '2+2?' });
      const r = await s.finalResponse();
      assert.equal(r.output_text, 'Four.');
      assert.equal((r.output[0] as any).content[0].text, 'Let me think.');
    });

    test('token cap: the item ends incomplete, then response.incomplete', async () => {
      e.up.script({ text: ['x', 'y'], finishReason: 'length' });
      const events = checkFraming(await readSse(await stream({ input: 'x', max_output_tokens: 2 })));
      assert.deepEqual(types(events), ['response.created', 'response.in_progress', ...textItemTypes(2), 'response.incomplete']);
      assert.equal(events[events.length - 2].item.status, 'incomplete');
      const final = events[events.length - 1].response;
      assert.equal(final.status, 'incomplete');
      assert.deepEqual(final.incomplete_details, { reason: 'max_output_tokens' });
      e.up.script({ text: ['x', 'y'], finishReason: 'length' });
      const r = await e.client.responses.stream({ model: MODEL, input: 'x', max_output_tokens: 2 }).finalResponse();
      assert.equal(r.status, 'incomplete');
    });

    test('failure mid-way: error event then response.failed, then [DONE]', async () => {
      e.up.script({ text: ['a', 'b', 'c', 'd'], breakAfter: 3 });
      const events = checkFraming(await readSse(await stream({ input: 'x' })));
      const t = types(events);
      assert.deepEqual(t.slice(0, 2), ['response.created', 'response.in_progress']);
      assert.deepEqual(t.slice(-2), ['error', 'response.failed']);
      const err = events[events.length - 2];
      assert.equal(typeof err.code, 'string');
      assert.equal(typeof err.message, 'string');
      assert.ok('param' in err);
      const failed = events[events.length - 1].response;
      assertFullObject(failed);
      assert.equal(failed.status, 'failed');
      assert.equal(failed.error.code, err.code);
      assert.equal(failed.error.message, err.message);
      // every opened item is closed before the final events
      const opened = events.filter((x) => x.type === 'response.output_item.added').length;
      const closed = events.filter((x) => x.type === 'response.output_item.done').length;
      assert.equal(opened, closed);
      // the SDK surfaces the error event
      e.up.script({ text: ['a', 'b', 'c', 'd'], breakAfter: 3 });
      await assert.rejects(e.client.responses.stream({ model: MODEL, input: 'x' }).finalResponse());
    });

    test('an upstream that refuses at once: a plain HTTP error, not a stream', async () => {
      e.up.script({ status: 400, errorMessage: 'no such thing' });
      const err = await expectError(await stream({ input: 'x' }), 400);
      assert.match(err.message, /no such thing/);
      e.up.script({ status: 500, errorMessage: 'boom' });
      await expectError(await stream({ input: 'x' }), 502);
    });
  });
}

describe('client disconnect', () => {
  let e: Env;
  before(async () => {
    e = await setup('pglite');
  });
  after(() => e.close());

  test('a client that disconnects mid-stream aborts the upstream request', async () => {
    e.up.script({ text: Array.from({ length: 100 }, (_, i) => `t${i} `), delayMs: 30 });
    const n = e.up.requests.length;
    const ac = new AbortController();
    const res = await fetch(e.url + '/v1/responses', {
      method: 'POST',
      signal: ac.signal,
      headers: { authorization: `Bearer ${e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, stream: true, input: 'long' }),
    });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    let text = '';
    const dec = new TextDecoder();
    while (!text.includes('response.output_text.delta')) {
      const { value, done } = await reader.read();
      assert.ok(!done, 'the stream ended early');
      text += dec.decode(value, { stream: true });
    }
    ac.abort();
    await e.up.waitForRequests(n + 1);
    const upReq = e.up.requests[n];
    await Promise.race([upReq.closed, new Promise((_, rej) => setTimeout(() => rej(new Error('upstream request still open 3 s after the client left')), 3000))]);
    assert.equal(upReq.aborted, true);
    // the server is fine afterwards
    e.up.script({ text: 'still here' });
    const r = await e.client.responses.create({ model: MODEL, input: 'x' });
    assert.equal(r.output_text, 'still here');
  });
});
