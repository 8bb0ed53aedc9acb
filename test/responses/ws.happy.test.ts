/**
 * The WebSocket mode of /v1/responses, as clients use it: the official SDK's ResponsesWS and a raw `ws` client.
 * Same events as SSE, turns in order, connection-local memory for store:false chains, tool-call round trips on
 * one socket, storage and usage as on HTTP, several instances, and a clean shutdown.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { ResponsesWS } from 'openai/resources/responses/ws';
import type { ResponsesServerEvent } from 'openai/resources/responses/responses';
import { buildTestApp, testDatabases, TEST_PG_URL } from '../helpers/app.js';
import { startScriptedUpstream } from '../helpers/scripted-upstream.js';
import type { ModelSpec } from '../../src/models/config.js';
import { waitFor } from '../helpers/wait.js';
import { reclaimState } from '../../src/platform/reclaim.js';
import { MODEL, assertFullObject, assertUsage, checkFraming, eventually, readSse, setup, sleep, types, type Env } from './util.js';
import { errorOf, finalOf, openWs, TERMINAL } from './ws-util.js';

const WEATHER = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } } },
  strict: false,
};

/** an event with what changes from run to run (ids, times) taken out */
function shape(e: any): any {
  return JSON.parse(JSON.stringify(e), (k, v) =>
    ['id', 'item_id', 'call_id', 'created_at', 'completed_at', 'previous_response_id'].includes(k) && v !== null ? '*' : k === 'obfuscation' ? undefined : v,
  );
}

/** resolves with every event of one response on an SDK socket, up to its terminal event */
function sdkAnswer(rws: ResponsesWS): Promise<ResponsesServerEvent[]> {
  return new Promise((resolve, reject) => {
    const got: ResponsesServerEvent[] = [];
    const onEvent = (e: ResponsesServerEvent) => {
      got.push(e);
      if (TERMINAL.has(e.type)) {
        rws.off('event', onEvent);
        resolve(got);
      }
    };
    rws.on('event', onEvent);
    rws.once('error', (err) => {
      rws.off('event', onEvent);
      reject(err);
    });
  });
}

async function sdkSocket(e: Env): Promise<ResponsesWS> {
  const rws = new ResponsesWS(e.client);
  await new Promise<void>((resolve, reject) => {
    rws.socket.on('open', () => resolve());
    rws.on('error', reject);
  });
  return rws;
}

for (const db of testDatabases()) {
  describe(`WebSocket mode: happy paths (${db})`, () => {
    let e: Env;
    before(async () => {
      e = await setup(db);
    });
    after(() => e.close());

    test('the official SDK (ResponsesWS): a turn streams the same event objects as SSE, one JSON per frame', async () => {
      const reply = { text: 'Bonjour tout le monde', chunks: 3, usage: { prompt_tokens: 7, completion_tokens: 3 } };
      e.up.script(reply);
      const sse = checkFraming(await readSse(await e.call('POST', '/v1/responses', { model: MODEL, input: 'Say hello', stream: true })));

      e.up.script(reply);
      const rws = await sdkSocket(e);
      const raw: string[] = [];
      (rws.socket.platformSocket as any).on('message', (d: Buffer) => raw.push(d.toString()));
      const answer = sdkAnswer(rws);
      rws.send({ type: 'response.create', model: MODEL, input: 'Say hello' });
      const events = await answer;
      rws.close();

      // every frame is exactly one event object
      assert.equal(raw.length, events.length);
      for (const [i, text] of raw.entries()) assert.deepEqual(JSON.parse(text), events[i]);
      assert.deepEqual(types(events), types(sse));
      assert.deepEqual(
        events.map((x) => x.sequence_number),
        events.map((_, i) => i),
      );
      // the same objects, field for field, but for ids and times
      assert.deepEqual(events.map(shape), sse.map(shape));
      const final = (events.at(-1) as any).response;
      assertFullObject(final);
      assertUsage(final.usage);
      assert.equal(final.status, 'completed');
      assert.equal(final.output[0].content[0].text, 'Bonjour tout le monde');
      // and the upstream was asked the same thing both times
      assert.deepEqual(e.up.requests.at(-1)!.body.messages, e.up.requests.at(-2)!.body.messages);
    });

    test('store:false chain on one socket: each turn sends only its new items; the upstream gets the whole conversation; nothing is stored', async () => {
      const c = await openWs(e.url, e.key);
      e.up.script({ text: 'First answer.' }, { text: 'Second answer.' }, { text: 'Third answer.' });
      const r1 = finalOf(await c.turn({ model: MODEL, store: false, instructions: 'Be brief.', input: 'one' }));
      const r2 = finalOf(await c.turn({ model: MODEL, store: false, previous_response_id: r1.id, input: [{ role: 'user', content: 'two' }] }));
      const r3 = finalOf(await c.turn({ model: MODEL, store: false, previous_response_id: r2.id, input: 'three' }));
      assert.equal(r3.previous_response_id, r2.id);
      assert.deepEqual(e.last().messages, [
        { role: 'user', content: 'one' },
        { role: 'assistant', content: 'First answer.' },
        { role: 'user', content: 'two' },
        { role: 'assistant', content: 'Second answer.' },
        { role: 'user', content: 'three' },
      ]);
      // instructions are not inherited, as on HTTP
      assert.equal(e.up.requests.at(-3)!.body.messages[0].role, 'system');
      for (const r of [r1, r2, r3]) assert.equal((await e.call('GET', `/v1/responses/${r.id}`)).status, 404, 'store:false keeps nothing');
      // only the most recent response is in memory: the one before it is gone (it was never stored)
      const old = await c.turn({ model: MODEL, store: false, previous_response_id: r1.id, input: 'again' });
      errorOf(old, 404, 'previous_response_not_found', 'previous_response_id');
      await c.close();
    });

    test('a tool-call round trip over one socket with the SDK: function_call, then function_call_output with previous_response_id', async () => {
      const rws = await sdkSocket(e);
      e.up.script({ toolCalls: [{ id: 'call_w1', name: 'get_weather', arguments: ['{"city":', '"Paris"}'] }] }, { text: 'It is 18 C and sunny in Paris.' });
      let answer = sdkAnswer(rws);
      rws.send({ type: 'response.create', model: MODEL, store: false, input: 'Weather in Paris?', tools: [WEATHER] });
      const first = await answer;
      const call = (first.at(-1) as any).response.output[0];
      assert.equal(call.type, 'function_call');
      assert.equal(call.status, 'completed');
      assert.equal(call.arguments, '{"city":"Paris"}');
      assert.deepEqual(
        types(first).filter((t) => t.startsWith('response.function_call_arguments')),
        ['response.function_call_arguments.delta', 'response.function_call_arguments.delta', 'response.function_call_arguments.done'],
      );

      answer = sdkAnswer(rws);
      rws.send({
        type: 'response.create',
        model: MODEL,
        store: false,
        previous_response_id: (first.at(-1) as any).response.id,
        input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp_c":18,"sky":"sunny"}' }],
        tools: [WEATHER],
      });
      const second = await answer;
      const final = (second.at(-1) as any).response;
      assert.equal(final.status, 'completed');
      assert.equal(final.output[0].content[0].text, 'It is 18 C and sunny in Paris.');
      const sent = e.last().messages;
      assert.deepEqual(sent[1], {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_w1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
      });
      assert.equal(sent[2].role, 'tool');
      assert.equal(sent[2].tool_call_id, 'call_w1');
      assert.equal(sent[2].content, '{"temp_c":18,"sky":"sunny"}');
      rws.close();
    });

    test('messages sent at once are answered in order, one response at a time, never interleaved', async () => {
      const starts: number[] = [];
      const ends: number[] = [];
      for (const text of ['alpha', 'beta', 'gamma']) {
        e.up.script(() => {
          starts.push(Date.now());
          void e.up.requests.at(-1)!.closed.then(() => ends.push(Date.now()));
          return { text: [text, ' ', text], delayMs: 30 };
        });
      }
      const c = await openWs(e.url, e.key);
      for (const input of ['a', 'b', 'c']) c.create({ model: MODEL, store: false, input });
      const answers = [await c.answer(), await c.answer(), await c.answer()];
      await eventually(async () => ends.length === 3);
      assert.deepEqual(
        answers.map((a) => finalOf(a).output[0].content[0].text),
        ['alpha alpha', 'beta beta', 'gamma gamma'],
      );
      for (const a of answers) {
        // each answer is one whole response: created first, numbered from 0, one response id throughout
        assert.equal(a[0].type, 'response.created');
        assert.deepEqual(
          a.map((f) => f.sequence_number),
          a.map((_, i) => i),
        );
        assert.equal(new Set(a.filter((f) => f.response).map((f) => f.response.id)).size, 1);
      }
      // the upstream never had two of them at once: each started after the one before had ended
      for (let i = 1; i < 3; i++) assert.ok(starts[i]! >= ends[i - 1]!, `turn ${i + 1} started upstream after turn ${i} ended`);
      // an open socket is not a request in hand: it would put off the event loop's collection for its whole life
      await waitFor(() => reclaimState().underWay === 0, { what: 'no request in hand while the socket is open' });
      await c.close();
    });

    test('store:true over the socket: stored, retrievable over HTTP, and a later connection continues it from storage', async () => {
      const c = await openWs(e.url, e.key);
      e.up.script({ text: 'Stored answer.' }, { text: 'Continued.' });
      const r = finalOf(await c.turn({ model: MODEL, input: 'keep this', metadata: { via: 'ws' } }));
      await c.close();
      const got = await (await e.call('GET', `/v1/responses/${r.id}`)).json();
      assert.equal(got.status, 'completed');
      assert.equal(got.output_text, 'Stored answer.');
      assert.deepEqual(got.metadata, { via: 'ws' });
      const items = await (await e.call('GET', `/v1/responses/${r.id}/input_items`)).json();
      assert.equal(items.data[0].content[0].text, 'keep this');

      const c2 = await openWs(e.url, e.key);
      const next = finalOf(await c2.turn({ model: MODEL, previous_response_id: r.id, input: 'and then?' }));
      assert.equal(next.status, 'completed');
      assert.deepEqual(
        e.last().messages.map((m: any) => m.content),
        ['keep this', 'Stored answer.', 'and then?'],
      );
      await c2.close();
    });

    test('a stored turn that continues a store:false one keeps the whole conversation as its input, so a chain from it over HTTP has all of it', async () => {
      const c = await openWs(e.url, e.key);
      e.up.script({ text: 'Unstored answer.' }, { text: 'Stored answer.' }, { text: 'Over HTTP.' });
      const r1 = finalOf(await c.turn({ model: MODEL, store: false, input: 'one' }));
      const r2 = finalOf(await c.turn({ model: MODEL, store: true, previous_response_id: r1.id, input: 'two' }));
      await c.close();
      const items = await (await e.call('GET', `/v1/responses/${r2.id}/input_items?order=asc`)).json();
      assert.deepEqual(
        items.data.map((i: any) => i.content[0].text),
        ['one', 'Unstored answer.', 'two'],
      );
      const r3 = await (await e.call('POST', '/v1/responses', { model: MODEL, previous_response_id: r2.id, input: 'three' })).json();
      assert.equal(r3.status, 'completed');
      assert.deepEqual(
        e.last().messages.map((m: any) => m.content),
        ['one', 'Unstored answer.', 'two', 'Stored answer.', 'three'],
      );
    });

    test('each turn writes its usage record, as an HTTP request does', async () => {
      const user = `ws-usage-${db}`;
      const key = await e.t.inferenceKey(user);
      const c = await openWs(e.url, key);
      e.up.script({ text: 'a', usage: { prompt_tokens: 11, completion_tokens: 2 } }, { text: 'b', usage: { prompt_tokens: 13, completion_tokens: 4 } });
      const r1 = finalOf(await c.turn({ model: MODEL, store: false, input: 'x' }));
      finalOf(await c.turn({ model: MODEL, store: false, input: 'y', previous_response_id: r1.id }));
      await c.close();
      await e.t.services.usage.flush();
      const rows = await e.t.services.db.db.selectFrom('usage_records').selectAll().where('user_id', '=', user).orderBy('input_tokens').execute();
      assert.deepEqual(
        rows.map((r) => [r.operation, r.model, r.input_tokens, r.output_tokens]),
        [
          ['responses', MODEL, 11, 2],
          ['responses', MODEL, 13, 4],
        ],
      );
      assert.equal(new Set(rows.map((r) => r.request_id)).size, 2, 'each turn has its own request id');
    });
  });
}

describe('WebSocket mode: limits of a connection', () => {
  let e: Env;
  before(async () => {
    // an age of 3 s: the turns below that must come before it have over 1 s of margin on a slow machine
    e = await setup('pglite', [], { WS_MAX_AGE_MS: '3000', REQUEST_TIMEOUT_MS: '1000', HEADERS_TIMEOUT_MS: '1000' });
  });
  after(() => e.close());

  test('an idle connection gets websocket_connection_limit_reached when it reaches its age, then is closed (1001); the HTTP request timeout does not cut it before', async () => {
    const c = await openWs(e.url, e.key);
    const opened = Date.now();
    await sleep(1100); // longer than REQUEST_TIMEOUT_MS: an upgraded connection is not an unfinished request
    finalOf(await c.turn({ model: MODEL, store: false, input: 'still here' }));
    const err = errorOf([await c.next(5000)], 400, 'websocket_connection_limit_reached', null);
    assert.match(err.message, /connection limit reached/);
    assert.ok(Date.now() - opened >= 2900, 'not before the limit');
    const closed = await c.closed;
    assert.equal(closed.code, 1001);
  });

  test('a turn in flight at the limit finishes; then the limit error, then the close', async () => {
    const c = await openWs(e.url, e.key);
    // the turn starts 1.2 s before the limit, and cannot end before it: 6 pauses of 250 ms or more before its
    // last piece of text, from 1.8 s on
    await sleep(1800);
    e.up.script({ text: ['slow', ' ', 'answer', ' ', 'here'], delayMs: 250 });
    c.create({ model: MODEL, store: false, input: 'long one' });
    const answer = await c.answer(5000);
    assert.equal(finalOf(answer).status, 'completed');
    assert.equal(finalOf(answer).output[0].content[0].text, 'slow answer here');
    errorOf([await c.next(3000)], 400, 'websocket_connection_limit_reached');
    assert.equal((await c.closed).code, 1001);
  });

  test('the SDK sees the limit as an error event with the code, then the close', async () => {
    const rws = await sdkSocket(e);
    const err = await new Promise<any>((resolve) => rws.on('error', resolve));
    assert.equal(err.error.error.code, 'websocket_connection_limit_reached');
    assert.equal(err.error.code, 'websocket_connection_limit_reached');
    const code = await new Promise<number>((resolve) => rws.on('close', (c: number) => resolve(c)));
    assert.equal(code, 1001);
  });
});

describe('WebSocket mode: keep-alive pings', () => {
  let e: Env;
  before(async () => {
    // 500 ms: the client shares this process's event loop, and a stall longer than an interval would keep its pong
    // unread when the server's next check runs (timers run before I/O), cutting the live peer too
    e = await setup('pglite', [], { WS_PING_INTERVAL_MS: '500' });
  });
  after(() => e.close());

  test('a peer that answers pings stays; one that does not is cut within two intervals', async () => {
    const live = await openWs(e.url, e.key);
    const dead = await openWs(e.url, e.key, { autoPong: false });
    // counted in the server's own clock, its pings: not in milliseconds of a machine that may be busy
    let livePings = 0;
    let deadPings = 0;
    live.ws.on('ping', () => livePings++);
    dead.ws.on('ping', () => deadPings++);
    const closed = await dead.closed;
    assert.equal(closed.code, 1006, 'cut without a closing handshake');
    // within two intervals: at the check after its first unanswered ping (without pings it would stay open)
    assert.ok(deadPings >= 1 && deadPings <= 2, `cut after ${deadPings} pings`);
    // the live peer answers three more pings, each one checked by the server, and stays
    const since = livePings;
    await waitFor(() => livePings >= since + 3 || live.closeInfo, { what: 'three more pings of the live peer' });
    assert.equal(live.closeInfo, undefined);
    finalOf(await live.turn({ model: MODEL, store: false, input: 'alive' }));
    await live.close();
  });
});

describe('WebSocket mode: shutdown', () => {
  test('closing the application closes the sockets with 1001; a turn in flight is stopped as a failed response (tests close at once)', async () => {
    const e = await setup('pglite');
    try {
      const idle = await openWs(e.url, e.key);
      const busy = await openWs(e.url, e.key);
      e.up.script({ text: ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'], delayMs: 200 });
      busy.create({ model: MODEL, store: false, input: 'long' });
      assert.equal((await busy.next()).type, 'response.created');
      await e.t.app.close();
      assert.equal((await idle.closed).code, 1001);
      assert.equal((await busy.closed).code, 1001);
      const frames = busy.frames;
      // it ends as any failure after output does: the error frame, then response.failed
      const failed = frames.at(-1);
      const err = frames.at(-2);
      assert.equal(err.type, 'error');
      assert.equal(err.status, 503);
      assert.equal(err.error.code, 'service_unavailable');
      assert.equal(failed.type, 'response.failed');
      assert.equal(failed.response.status, 'failed');
      assert.equal(failed.response.error.code, 'service_unavailable');
      assert.equal(err.sequence_number, frames.at(-3).sequence_number + 1, 'the error continues the numbering');
      assert.equal(failed.sequence_number, err.sequence_number + 1);
      const rec = e.up.requests.at(-1)!;
      await rec.closed;
      assert.equal(rec.aborted, true, 'the generation was stopped upstream');
    } finally {
      await e.close();
    }
  });

  test('graceful shutdown (the server): the turn in flight finishes within SHUTDOWN_GRACE_MS, then 1001', async () => {
    const up = await startScriptedUpstream();
    const t = await buildTestApp({
      listen: true,
      env: { SHUTDOWN_GRACE_MS: '5000' },
      runtime: { gracefulClose: true },
      models: [{ name: MODEL, provider: 'openai-compatible', base_url: up.url, type: 'text' } as ModelSpec],
    });
    try {
      const key = await t.inferenceKey('grace');
      const c = await openWs(t.url!, key);
      up.script({ text: ['one', ' two', ' three'], delayMs: 150 });
      c.create({ model: MODEL, store: false, input: 'finish me' });
      assert.equal((await c.next()).type, 'response.created');
      const closing = t.app.close();
      const answer = [c.frames[0], ...(await c.answer())];
      assert.equal(finalOf(answer).output[0].content[0].text, 'one two three');
      assert.equal((await c.closed).code, 1001);
      await closing;
    } finally {
      await t.close().catch(() => {});
      await up.close();
    }
  });
});

describe('WebSocket mode on several instances', { skip: process.env.PORTICO_TEST_PG === 'off' && 'PORTICO_TEST_PG=off' }, () => {
  test('a store:true response made over HTTP on instance A is continued over a WebSocket on instance B', async () => {
    const schema = `t_ws_${randomBytes(5).toString('hex')}`;
    const up = await startScriptedUpstream();
    const models = [{ name: MODEL, provider: 'openai-compatible', base_url: up.url, type: 'text' } as ModelSpec];
    // instances share the database and KEY_PEPPER (as docs/deployment.md requires: keys verify on every instance)
    const env = { KEY_PEPPER: randomBytes(24).toString('hex') };
    const a = await buildTestApp({ db: 'postgres', dbSchema: schema, listen: true, models, env });
    const b = await buildTestApp({ db: 'postgres', dbSchema: schema, listen: true, models, env });
    try {
      const key = await a.inferenceKey('roamer');
      up.script({ text: 'Made on A.' }, { text: 'Continued on B.' });
      const res = await fetch(`${a.url}/v1/responses`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, input: 'start on A' }),
      });
      const r1 = await res.json();
      assert.equal(r1.status, 'completed');
      const c = await openWs(b.url!, key);
      const r2 = finalOf(await c.turn({ model: MODEL, previous_response_id: r1.id, input: 'go on, B' }));
      assert.equal(r2.output[0].content[0].text, 'Continued on B.');
      assert.deepEqual(
        up.requests.at(-1)!.body.messages.map((m: any) => m.content),
        ['start on A', 'Made on A.', 'go on, B'],
      );
      // and A sees what B stored
      const got = await (await fetch(`${a.url}/v1/responses/${r2.id}`, { headers: { authorization: `Bearer ${key}` } })).json();
      assert.equal(got.previous_response_id, r1.id);
      await c.close();
    } finally {
      await a.close();
      await b.close();
      await up.close();
      const cl = new pg.Client({ connectionString: TEST_PG_URL });
      await cl.connect();
      await cl.query(`drop schema if exists ${schema} cascade`);
      await cl.end();
    }
  });
});
