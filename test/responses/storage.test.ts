/** Stored responses: chaining, ownership, companions (input items, delete, input tokens), background mode and usage. */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { testDatabases } from '../helpers/app.js';
import { longestStringify } from '../helpers/stringify-spy.js';
import { MODEL, assertFullObject, checkFraming, eventually, expectError, readSse, setup, types, type Env } from './util.js';

for (const db of testDatabases()) {
  describe(`stored responses (${db})`, () => {
    let e: Env;
    let bob: OpenAI;
    let bobKey: string;
    before(async () => {
      e = await setup(db);
      bobKey = await e.t.inferenceKey('bob');
      bob = new OpenAI({ apiKey: bobKey, baseURL: e.url + '/v1', maxRetries: 0 });
    });
    after(() => e.close());

    describe('chaining', () => {
      test('previous_response_id carries the previous input and output to the upstream', async () => {
        e.up.script({ text: 'Hi Ann!' });
        const r1 = await e.client.responses.create({ model: MODEL, instructions: 'Be nice.', input: 'My name is Ann.' });
        e.up.script({ text: 'Your name is Ann.' });
        const r2 = await e.client.responses.create({ model: MODEL, previous_response_id: r1.id, input: 'What is my name?' });
        assert.equal(r2.previous_response_id, r1.id);
        assert.equal(r2.output_text, 'Your name is Ann.');
        // instructions are not carried over (as with OpenAI): only the conversation
        assert.deepEqual(e.last().messages, [
          { role: 'user', content: 'My name is Ann.' },
          { role: 'assistant', content: 'Hi Ann!' },
          { role: 'user', content: 'What is my name?' },
        ]);
        e.up.script({ text: 'Bye.' });
        await e.client.responses.create({ model: MODEL, previous_response_id: r2.id, instructions: 'Be short.', input: 'Bye' });
        assert.deepEqual(
          e.last().messages.map((m: any) => [m.role, m.content]),
          [
            ['system', 'Be short.'],
            ['user', 'My name is Ann.'],
            ['assistant', 'Hi Ann!'],
            ['user', 'What is my name?'],
            ['assistant', 'Your name is Ann.'],
            ['user', 'Bye'],
          ],
        );
      });

      test('a function call in the previous output is answered with a function_call_output item', async () => {
        const tools = [{ type: 'function' as const, name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } }, strict: false }];
        e.up.script({ reasoning: 'I should look it up.', toolCalls: [{ id: 'call_9', name: 'lookup', arguments: '{"q":"x"}' }] });
        const r1 = await e.client.responses.create({ model: MODEL, input: 'Find x', tools });
        assert.deepEqual(
          r1.output.map((o) => o.type),
          ['reasoning', 'function_call'],
        );
        e.up.script({ text: 'x is 1' });
        const r2 = await e.client.responses.create({ model: MODEL, previous_response_id: r1.id, tools, input: [{ type: 'function_call_output', call_id: 'call_9', output: '1' }] });
        assert.equal(r2.output_text, 'x is 1');
        assert.deepEqual(e.last().messages, [
          { role: 'user', content: 'Find x' },
          { role: 'assistant', content: null, tool_calls: [{ id: 'call_9', type: 'function', function: { name: 'lookup', arguments: '{"q":"x"}' } }] },
          { role: 'tool', tool_call_id: 'call_9', content: '1', name: 'lookup' },
        ]);
      });

      test("unknown id, store:false, another user's response -> 404 previous_response_not_found", async () => {
        const n = e.up.requests.length;
        await expectError(
          await e.call('POST', '/v1/responses', { model: MODEL, input: 'x', previous_response_id: 'resp_nope' }),
          404,
          'previous_response_not_found',
          'previous_response_id',
        );
        e.up.script({ text: 'not kept' });
        const unstored = await e.client.responses.create({ model: MODEL, input: 'x', store: false });
        assert.equal((unstored as any).store, false);
        assert.equal(unstored.status, 'completed');
        await expectError(await e.call('POST', '/v1/responses', { model: MODEL, input: 'y', previous_response_id: unstored.id }), 404, 'previous_response_not_found');
        await assert.rejects(e.client.responses.retrieve(unstored.id), OpenAI.NotFoundError);
        e.up.script({ text: 'mine' });
        const mine = await e.client.responses.create({ model: MODEL, input: 'x' });
        await assert.rejects(
          bob.responses.create({ model: MODEL, input: 'y', previous_response_id: mine.id }),
          (err: any) => err.status === 404 && err.code === 'previous_response_not_found',
        );
        assert.equal(e.up.requests.length, n + 2);
      });

      test('another user gets 404 on retrieve, delete, cancel and input_items; the owner still has it', async () => {
        e.up.script({ text: 'private' });
        const r = await e.client.responses.create({ model: MODEL, input: 'secret' });
        const asBob = (method: string, path: string) => fetch(e.url + path, { method, headers: { authorization: `Bearer ${bobKey}` } });
        await expectError(await asBob('GET', `/v1/responses/${r.id}`), 404, 'response_not_found');
        await expectError(await asBob('GET', `/v1/responses/${r.id}?stream=true`), 404, 'response_not_found');
        await expectError(await asBob('DELETE', `/v1/responses/${r.id}`), 404, 'response_not_found');
        await expectError(await asBob('POST', `/v1/responses/${r.id}/cancel`), 404, 'response_not_found');
        await expectError(await asBob('GET', `/v1/responses/${r.id}/input_items`), 404, 'response_not_found');
        await assert.rejects(bob.responses.retrieve(r.id), OpenAI.NotFoundError);
        assert.equal((await e.client.responses.retrieve(r.id)).output_text, 'private');
      });
    });

    describe('companions', () => {
      test('a large input is stored as a small one is (lone surrogates made whole), and no one JSON.stringify makes the upstream body or the stored items', async () => {
        // ~2.4 MB: past the size made in slices (platform/json-text.ts), a lone surrogate in every item
        const input = Array.from({ length: 40 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `item ${i} \ud800 ` + 'z'.repeat(60_000) }));
        const body = JSON.stringify({ model: MODEL, input });
        const { result: res, longest } = await longestStringify(() => e.call('POST', '/v1/responses', body));
        assert.equal(res.status, 200, await res.clone().text());
        assert.ok(longest < body.length / 2, `one JSON.stringify made ${longest} of ${body.length} characters`);
        const id = ((await res.json()) as { id: string }).id;
        const items = (await (await e.call('GET', `/v1/responses/${id}/input_items?limit=100&order=asc`)).json()) as { data: any[] };
        assert.equal(items.data.length, 40);
        items.data.forEach((it, i) => assert.equal(it.content[0].text, `item ${i} \ufffd ` + 'z'.repeat(60_000)));
        // and chained, the stored items are the conversation the upstream gets
        e.up.script({ text: 'next' });
        await e.client.responses.create({ model: MODEL, previous_response_id: id, input: 'more' });
        assert.equal(e.last().messages.length, 42);
        assert.equal(e.last().messages[39].content, `item 39 \ufffd ` + 'z'.repeat(60_000));
      });

      test('input_items: paging with limit, after, order; has_more, first_id/last_id; every item has an id', async () => {
        e.up.script({ text: 'ok' });
        const input = ['one', 'two', 'three', 'four', 'five'].map((t) => ({ role: 'user' as const, content: t }));
        const r = await e.client.responses.create({ model: MODEL, input });
        const get = async (q: string) => {
          const res = await e.call('GET', `/v1/responses/${r.id}/input_items${q}`);
          assert.equal(res.status, 200);
          return res.json() as Promise<any>;
        };
        const all = await get('?order=asc');
        assert.equal(all.object, 'list');
        assert.equal(all.data.length, 5);
        assert.equal(all.has_more, false);
        assert.deepEqual(
          all.data.map((i: any) => i.content[0].text),
          ['one', 'two', 'three', 'four', 'five'],
        );
        for (const i of all.data) {
          assert.equal(typeof i.id, 'string');
          assert.ok(i.id.length > 0);
          assert.equal(i.type, 'message');
          assert.equal(i.role, 'user');
          assert.equal(i.content[0].type, 'input_text');
        }
        assert.equal(new Set(all.data.map((i: any) => i.id)).size, 5);
        assert.equal(all.first_id, all.data[0].id);
        assert.equal(all.last_id, all.data[4].id);
        const desc = await get('');
        assert.deepEqual(
          desc.data.map((i: any) => i.content[0].text),
          ['five', 'four', 'three', 'two', 'one'],
          'desc by default',
        );
        const p1 = await get('?order=asc&limit=2');
        assert.deepEqual(
          p1.data.map((i: any) => i.content[0].text),
          ['one', 'two'],
        );
        assert.equal(p1.has_more, true);
        assert.equal(p1.first_id, p1.data[0].id);
        assert.equal(p1.last_id, p1.data[1].id);
        const p2 = await get(`?order=asc&limit=2&after=${p1.last_id}`);
        assert.deepEqual(
          p2.data.map((i: any) => i.content[0].text),
          ['three', 'four'],
        );
        assert.equal(p2.has_more, true);
        const p3 = await get(`?order=asc&limit=2&after=${p2.last_id}`);
        assert.deepEqual(
          p3.data.map((i: any) => i.content[0].text),
          ['five'],
        );
        assert.equal(p3.has_more, false);
        const d1 = await get('?order=desc&limit=3');
        assert.deepEqual(
          d1.data.map((i: any) => i.content[0].text),
          ['five', 'four', 'three'],
        );
        const d2 = await get(`?order=desc&limit=3&after=${d1.last_id}`);
        assert.deepEqual(
          d2.data.map((i: any) => i.content[0].text),
          ['two', 'one'],
        );
        await expectError(await e.call('GET', `/v1/responses/${r.id}/input_items?limit=101`), 400, undefined, 'limit');
        // an `after` that is not one of its items (the page is cut in the database)
        await expectError(await e.call('GET', `/v1/responses/${r.id}/input_items?after=msg_nope`), 400, undefined, 'after');
        // the SDK pages through them
        const texts: string[] = [];
        for await (const item of e.client.responses.inputItems.list(r.id, { limit: 2, order: 'asc' })) texts.push((item as any).content[0].text);
        assert.deepEqual(texts, ['one', 'two', 'three', 'four', 'five']);
        const page = await e.client.responses.inputItems.list(r.id, { limit: 2, order: 'asc' });
        assert.equal(page.data.length, 2);
        assert.equal(page.has_more, true);
      });

      test('delete -> {id, object, deleted}; then retrieve, delete and input_items are 404', async () => {
        e.up.script({ text: 'bye' });
        const r = await e.client.responses.create({ model: MODEL, input: 'x' });
        const res = await e.call('DELETE', `/v1/responses/${r.id}`);
        assert.equal(res.status, 200);
        assert.deepEqual(await res.json(), { id: r.id, object: 'response', deleted: true });
        await assert.rejects(e.client.responses.retrieve(r.id), OpenAI.NotFoundError);
        await assert.rejects(e.client.responses.delete(r.id), OpenAI.NotFoundError);
        await expectError(await e.call('GET', `/v1/responses/${r.id}/input_items`), 404, 'response_not_found');
        await expectError(await e.call('POST', '/v1/responses', { model: MODEL, input: 'x', previous_response_id: r.id }), 404, 'previous_response_not_found');
        e.up.script({ text: 'x' });
        const r2 = await e.client.responses.create({ model: MODEL, input: 'x' });
        assert.deepEqual(await e.client.responses.delete(r2.id), { id: r2.id, object: 'response', deleted: true });
      });

      test('POST /v1/responses/input_tokens counts without calling the upstream', async () => {
        const n = e.up.requests.length;
        const res = await e.call('POST', '/v1/responses/input_tokens', { model: MODEL, instructions: 'Be brief.', input: 'How many tokens is this sentence?' });
        assert.equal(res.status, 200);
        const body: any = await res.json();
        assert.equal(body.object, 'response.input_tokens');
        assert.ok(Number.isInteger(body.input_tokens) && body.input_tokens > 0);
        const res2 = await e.call('POST', '/v1/responses/input_tokens', { model: MODEL, instructions: 'Be brief.', input: 'How many tokens is this sentence? '.repeat(10) });
        assert.ok(((await res2.json()) as any).input_tokens > body.input_tokens);
        await expectError(await e.call('POST', '/v1/responses/input_tokens', { model: 'nope', input: 'x' }), 404, 'model_not_found');
        assert.equal(e.up.requests.length, n);
      });
    });

    describe('background', () => {
      test('in_progress at once (usage null, no output), then completed; replay from 0 and resume after N (raw and SDK)', async () => {
        e.up.script({ text: ['a', 'b', 'c'], delayMs: 20 });
        const q = await e.client.responses.create({ model: MODEL, input: 'x', background: true });
        assertFullObject(q);
        assert.equal(q.status, 'in_progress');
        assert.equal(q.background, true);
        assert.equal(q.usage, null);
        assert.deepEqual(q.output, []);
        const done = await eventually(async () => {
          const r = await e.client.responses.retrieve(q.id);
          return r.status === 'completed' ? r : undefined;
        });
        assert.equal(done.output_text, 'abc');
        assert.ok(done.usage && done.usage.total_tokens > 0);
        const events = checkFraming(await readSse(await e.call('GET', `/v1/responses/${q.id}?stream=true`)));
        assert.deepEqual(types(events), [
          'response.created',
          'response.in_progress',
          'response.output_item.added',
          'response.content_part.added',
          'response.output_text.delta',
          'response.output_text.delta',
          'response.output_text.delta',
          'response.output_text.done',
          'response.content_part.done',
          'response.output_item.done',
          'response.completed',
        ]);
        assert.equal(events[0].response.status, 'in_progress');
        assert.equal(events[events.length - 1].response.output[0].content[0].text, 'abc');
        const resumed = checkFraming(await readSse(await e.call('GET', `/v1/responses/${q.id}?stream=true&starting_after=4`)), { from: 5 });
        assert.deepEqual(resumed, events.slice(5));
        // SDK
        const s = await e.client.responses.retrieve(q.id, { stream: true, starting_after: 4 });
        const seqs: number[] = [];
        for await (const ev of s) seqs.push(ev.sequence_number);
        assert.deepEqual(
          seqs,
          events.slice(5).map((x) => x.sequence_number),
        );
        // a non-background response cannot be replayed
        e.up.script({ text: 'fg' });
        const fg = await e.client.responses.create({ model: MODEL, input: 'x' });
        await expectError(await e.call('GET', `/v1/responses/${fg.id}?stream=true`), 400);
      });

      test('replay while running follows the live events to the end', async () => {
        e.up.script({ text: Array.from({ length: 10 }, (_, i) => `${i}`), delayMs: 30 });
        const q = await e.client.responses.create({ model: MODEL, input: 'x', background: true });
        const events = checkFraming(await readSse(await e.call('GET', `/v1/responses/${q.id}?stream=true`)));
        assert.equal(events[events.length - 1].type, 'response.completed');
        assert.equal(
          events
            .filter((x) => x.type === 'response.output_text.delta')
            .map((x) => x.delta)
            .join(''),
          '0123456789',
        );
      });

      test('background + stream: the events of the response, live, every status one of the specification', async () => {
        e.up.script({ text: ['p', 'q'] });
        const res = await e.call('POST', '/v1/responses', { model: MODEL, input: 'x', background: true, stream: true });
        const events = checkFraming(await readSse(res));
        assert.deepEqual(types(events).slice(0, 3), ['response.created', 'response.in_progress', 'response.output_item.added']);
        for (const ev of events.filter((x) => x.response)) assert.ok(['in_progress', 'completed'].includes(ev.response.status), `${ev.type}: ${ev.response.status}`);
        assert.equal(events[events.length - 1].type, 'response.completed');
      });

      test('cancel a slow background response: cancelled, upstream aborted, idempotent; non-background -> 400', async () => {
        e.up.script({ text: Array.from({ length: 200 }, (_, i) => `w${i} `), delayMs: 50 });
        const n = e.up.requests.length;
        const q = await e.client.responses.create({ model: MODEL, input: 'long', background: true });
        await e.up.waitForRequests(n + 1);
        const upReq = e.up.requests[n];
        // let a few deltas through
        await eventually(async () => (await e.client.responses.retrieve(q.id)).status === 'in_progress');
        const c1 = await e.client.responses.cancel(q.id);
        assert.equal(c1.status, 'cancelled');
        assertFullObject(c1);
        await Promise.race([upReq.closed, new Promise((_, rej) => setTimeout(() => rej(new Error('upstream request still open after cancel')), 3000))]);
        assert.equal(upReq.aborted, true);
        const c2 = await e.client.responses.cancel(q.id);
        assert.equal(c2.status, 'cancelled');
        assert.equal((await e.client.responses.retrieve(q.id)).status, 'cancelled');
        // the replay of a cancelled response ends (no response.cancelled event exists)
        const events = checkFraming(await readSse(await e.call('GET', `/v1/responses/${q.id}?stream=true`)));
        assert.ok(!events.some((x) => x.type === 'response.completed'));

        e.up.script({ text: 'fg' });
        const fg = await e.client.responses.create({ model: MODEL, input: 'x' });
        await expectError(await e.call('POST', `/v1/responses/${fg.id}/cancel`), 400);
        await expectError(await e.call('POST', '/v1/responses/resp_unknown/cancel'), 404, 'response_not_found');
      });

      test('a background response whose upstream fails -> failed with error', async () => {
        e.up.script({ status: 500, errorMessage: 'upstream exploded' });
        const q = await e.client.responses.create({ model: MODEL, input: 'x', background: true });
        const r = await eventually(async () => {
          const x = await e.client.responses.retrieve(q.id);
          return x.status === 'failed' ? x : undefined;
        });
        assert.equal(typeof r.error?.code, 'string');
        assert.equal(typeof r.error?.message, 'string');
        e.up.script({ text: ['a', 'b', 'c'], breakAfter: 2 });
        const q2 = await e.client.responses.create({ model: MODEL, input: 'x', background: true });
        await eventually(async () => (await e.client.responses.retrieve(q2.id)).status === 'failed');
        const events = checkFraming(await readSse(await e.call('GET', `/v1/responses/${q2.id}?stream=true`)));
        assert.deepEqual(types(events).slice(-2), ['error', 'response.failed']);
      });
    });

    test('usage: each response writes a usage record the query API reports by model', async () => {
      const carolKey = await e.t.inferenceKey('carol');
      const carol = new OpenAI({ apiKey: carolKey, baseURL: e.url + '/v1', maxRetries: 0 });
      e.up.script({ text: 'a', usage: { prompt_tokens: 11, completion_tokens: 3 } }, { text: 'b', usage: { prompt_tokens: 20, completion_tokens: 7, cached_tokens: 4 } });
      await carol.responses.create({ model: MODEL, input: 'x' });
      await carol.responses.create({ model: MODEL, input: 'y', store: false });
      e.up.script({ text: ['c'], usage: { prompt_tokens: 5, completion_tokens: 1 } });
      await carol.responses.stream({ model: 'tiny-window', input: 'z' }).finalResponse();
      const jwt = await e.t.token('carol');
      const res = await e.t.app.inject({ method: 'GET', url: '/v1/portal/query/usage?group_by=model,operation', headers: { authorization: `Bearer ${jwt}` } });
      assert.equal(res.statusCode, 200, res.body);
      const list = res.json().data.list as any[];
      const row = (m: string) => list.find((r) => r.model === m && r.operation === 'responses');
      assert.equal(row(MODEL).requests, 2);
      assert.equal(row(MODEL).input_tokens, 31);
      assert.equal(row(MODEL).output_tokens, 10);
      assert.equal(row(MODEL).cached_tokens, 4);
      assert.equal(row('tiny-window').input_tokens, 5);
      assert.equal(row('tiny-window').output_tokens, 1);
    });
  });
}
