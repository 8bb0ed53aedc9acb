/**
 * The realtime link (engines/openai-compatible/realtime.ts) against the scripted realtime server
 * (test/helpers/realtime-upstream.ts): events both ways in order, what the upgrade carries, and every failure path
 * as the EngineError the rest of Portico gives for it, within its timeout, with no socket left open and no
 * unhandled rejection.
 */
import { test, before, after, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRealtimeEngine, type RealtimeEngineOptions, type UpstreamRealtimeEngine } from '../../src/engines/openai-compatible/realtime.js';
import { EngineError, type RealtimeLink } from '../../src/engines/types.js';
import { startRealtimeUpstream, type RealtimeUpstream } from '../helpers/realtime-upstream.js';
import { startBlackHole } from '../helpers/black-hole.js';
import { timed, waitFor } from '../helpers/wait.js';

const KEY = 'sk-realtime-secret-4242';
let up: RealtimeUpstream;
const engines: UpstreamRealtimeEngine[] = [];
const unhandled: unknown[] = [];
const onUnhandled = (e: unknown) => unhandled.push(e);

before(async () => {
  process.on('unhandledRejection', onUnhandled);
  up = await startRealtimeUpstream();
});
after(async () => {
  await up.close();
  process.off('unhandledRejection', onUnhandled);
});
beforeEach(() => up.reset());
afterEach(async () => {
  for (const e of engines.splice(0)) await e.close();
  // every socket of the test is closed (the mock counts them at the TCP level, hanging upgrades included)
  await waitFor(() => up.open === 0, { what: `the upstream's sockets to close (${up.open} open)` });
  // a rejection nobody handled surfaces on a later turn: one turn of the loop, then none may have come
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(unhandled, []);
});

function engine(over: Partial<RealtimeEngineOptions> = {}): UpstreamRealtimeEngine {
  const e = createRealtimeEngine({ baseUrl: up.url, apiKey: KEY, ...over });
  engines.push(e);
  return e;
}

/** reads a link's events one at a time */
function reader(link: RealtimeLink) {
  const it = link.events[Symbol.asyncIterator]();
  return {
    async next(): Promise<Record<string, any>> {
      const r = await it.next();
      assert.equal(r.done, false, 'the events ended where one more was expected');
      return r.value as Record<string, any>;
    },
    /** the events up to and with the first of this type */
    async until(type: string): Promise<Array<Record<string, any>>> {
      const out: Array<Record<string, any>> = [];
      for (;;) {
        const e = await this.next();
        out.push(e);
        if (e.type === type) return out;
      }
    },
    /** the rest of the events, to their end (throws what the iteration throws) */
    async rest(): Promise<Array<Record<string, any>>> {
      const out: Array<Record<string, any>> = [];
      for (;;) {
        const r = await it.next();
        if (r.done) return out;
        out.push(r.value as Record<string, any>);
      }
    },
    /** the EngineError the events end with, and what came before it */
    async failure(): Promise<{ events: Array<Record<string, any>>; error: EngineError }> {
      const events: Array<Record<string, any>> = [];
      try {
        for (;;) {
          const r = await it.next();
          if (r.done) break;
          events.push(r.value as Record<string, any>);
        }
      } catch (err) {
        assert.ok(err instanceof EngineError, `expected an EngineError, got ${err}`);
        // thrown once: the iteration is over after it
        assert.equal((await it.next()).done, true);
        return { events, error: err };
      }
      assert.fail(`expected the events to fail; they ended after ${events.map((e) => e.type).join(', ')}`);
    },
  };
}

async function refusal(p: Promise<unknown>): Promise<EngineError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof EngineError, `expected an EngineError, got ${err}`);
    assert.ok(!err.message.includes(KEY), `the key is in the message: ${err.message}`);
    return err;
  }
  assert.fail('expected connect to fail');
}

const types = (evs: Array<Record<string, any>>) => evs.map((e) => e.type);
const audio = Buffer.alloc(4800 * 3).toString('base64'); // 300 ms of pcm16 24 kHz

// ------------------------------------------------------------------ a session, both ways

test('a session: the upgrade carries the key and ?model=, client events arrive in order, server events come back in order', async () => {
  const link = await engine({ headers: { 'OpenAI-Organization': 'org-1' } }).connect({ model: 'gpt-realtime' });
  const r = reader(link);
  const created = await r.next();
  assert.equal(created.type, 'session.created');
  assert.equal(created.session.type, 'realtime');
  assert.equal(created.session.object, 'realtime.session');
  assert.match(created.session.id, /^sess_/);
  assert.equal(created.session.model, 'gpt-realtime');

  const conn = up.connections[0]!;
  assert.equal(conn.authorization, `Bearer ${KEY}`);
  assert.equal(conn.url, '/v1/realtime?model=gpt-realtime');
  assert.equal(conn.model, 'gpt-realtime');
  assert.equal(conn.headers['openai-organization'], 'org-1');
  assert.equal(conn.headers['sec-websocket-extensions'], undefined, 'no per-message deflate offered');

  assert.equal(link.send({ type: 'session.update', session: { type: 'realtime', instructions: 'Be brief.' } }), true);
  const updated = await r.next();
  assert.equal(updated.type, 'session.updated');
  assert.equal(updated.session.instructions, 'Be brief.');

  assert.equal(link.send({ type: 'input_audio_buffer.append', audio }), true);
  assert.equal(link.send({ type: 'input_audio_buffer.commit' }), true);
  const committed = await r.until('conversation.item.done');
  assert.deepEqual(types(committed), ['input_audio_buffer.committed', 'conversation.item.added', 'conversation.item.done']);
  assert.equal(committed[0]!.previous_item_id, null);
  assert.equal(committed[1]!.item.id, committed[0]!.item_id);

  link.send({ type: 'response.create' });
  const answer = await r.until('response.done');
  assert.deepEqual(types(answer), [
    'response.created',
    'response.output_item.added',
    'conversation.item.added',
    'response.content_part.added',
    'response.output_audio.delta',
    'response.output_audio_transcript.delta',
    'response.output_audio.delta',
    'response.output_audio_transcript.delta',
    'response.output_audio.delta',
    'response.output_audio_transcript.delta',
    'response.output_audio.done',
    'response.output_audio_transcript.done',
    'response.content_part.done',
    'response.output_item.done',
    'conversation.item.done',
    'response.done',
  ]);
  const done = answer[answer.length - 1]!.response;
  assert.equal(done.status, 'completed');
  assert.equal(done.usage.output_token_details.audio_tokens, 30);
  assert.equal(done.usage.input_token_details.audio_tokens, 3);
  assert.equal(done.usage.total_tokens, done.usage.input_tokens + done.usage.output_tokens);
  assert.equal(answer[2]!.previous_item_id, committed[0]!.item_id);

  // what the upstream got, in the order sent
  assert.deepEqual(types(conn.received), ['session.update', 'input_audio_buffer.append', 'input_audio_buffer.commit', 'response.create']);

  link.close();
  assert.deepEqual(await r.rest(), [], 'closed on this side: the events end');
  await waitFor(() => conn.closed, { what: 'the upstream to see the close' });
  assert.equal(conn.closed, 1000);
  assert.equal(link.send({ type: 'response.create' }), false, 'a closed link sends nothing');
});

test('no api key: no Authorization header; a base_url with a trailing slash and a model name that needs escaping', async () => {
  const link = await engine({ apiKey: undefined, baseUrl: up.url + '/' }).connect({ model: 'my model/v2&x=1' });
  await reader(link).next();
  const conn = up.connections[0]!;
  assert.equal(conn.authorization, undefined);
  assert.equal(conn.model, 'my model/v2&x=1');
  assert.match(conn.url, /^\/v1\/realtime\?model=/);
  link.close();
});

test('the upstream error event for an unknown client event passes through, and the session goes on', async () => {
  const link = await engine().connect({ model: 'gpt-realtime' });
  const r = reader(link);
  await r.next();
  link.send({ type: 'no.such.event', event_id: 'evt_1' });
  const err = await r.next();
  assert.equal(err.type, 'error');
  assert.equal(err.error.type, 'invalid_request_error');
  assert.equal(err.error.code, 'invalid_value');
  assert.equal(err.error.param, 'type');
  assert.equal(err.error.event_id, 'evt_1');
  link.send({ type: 'input_audio_buffer.clear' });
  assert.equal((await r.next()).type, 'input_audio_buffer.cleared');
  link.close();
});

test('response.cancel mid-response: response.done with status cancelled', async () => {
  up.configure({ holdAfterDeltas: 1, audioDeltas: 5 });
  const link = await engine().connect({ model: 'gpt-realtime' });
  const r = reader(link);
  await r.next();
  link.send({ type: 'response.create' });
  await r.until('response.output_audio_transcript.delta');
  link.send({ type: 'response.cancel' });
  const rest = await r.until('response.done');
  assert.deepEqual(types(rest), ['response.output_item.done', 'conversation.item.done', 'response.done']);
  assert.equal(rest[2]!.response.status, 'cancelled');
  assert.equal(rest[2]!.response.status_details.reason, 'client_cancelled');
  assert.equal(rest[0]!.item.status, 'incomplete');
  link.close();
});

test('text items and a text-only session: conversation.item.create answered, output_text deltas, usage counted; an empty commit is an error event', async () => {
  const link = await engine().connect({ model: 'gpt-realtime' });
  const r = reader(link);
  await r.next();
  link.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'], instructions: 'abcd' } });
  await r.until('session.updated');
  link.send({ type: 'input_audio_buffer.commit', event_id: 'c1' });
  const empty = await r.next();
  assert.equal(empty.type, 'error');
  assert.equal(empty.error.code, 'input_audio_buffer_commit_empty');
  assert.equal(empty.error.event_id, 'c1');
  link.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi there!' }] } });
  const added = await r.until('conversation.item.done');
  assert.deepEqual(types(added), ['conversation.item.added', 'conversation.item.done']);
  assert.match(added[0]!.item.id, /^item_/);
  link.send({ type: 'response.create' });
  const answer = await r.until('response.done');
  assert.equal(answer.filter((e) => e.type === 'response.output_text.delta').length, 3);
  assert.equal(
    answer.some((e) => e.type === 'response.output_audio.delta'),
    false,
  );
  assert.equal(answer.find((e) => e.type === 'response.output_text.done')!.text, 'Hello there, friend.');
  const usage = answer[answer.length - 1]!.response.usage;
  assert.deepEqual(usage.input_token_details.text_tokens, 4); // ceil((4 + 9) / 4)
  assert.equal(usage.output_token_details.audio_tokens, 0);
  link.close();
});

test("the mock's requireKey: an upgrade without the right key is refused 401, which the link maps to upstream_auth_failed", async () => {
  up.configure({ requireKey: 'sk-other' });
  const e = await refusal(engine().connect({ model: 'm' }));
  assert.equal(e.code, 'upstream_auth_failed');
  assert.equal(e.upstreamStatus, 401);
});

test('the upstream closes normally (1000): the events end without an error', async () => {
  const link = await engine().connect({ model: 'gpt-realtime' });
  const r = reader(link);
  await r.next();
  up.connections[0]!.close(1000, 'bye');
  assert.deepEqual(await r.rest(), []);
});

test('leaving the events loop early closes the link', async () => {
  const link = await engine().connect({ model: 'gpt-realtime' });
  for await (const e of link.events) {
    assert.equal(e.type, 'session.created');
    break;
  }
  await waitFor(() => up.connections[0]!.closed, { what: 'the upstream to see the close' });
  assert.equal(up.connections[0]!.closed, 1000);
  assert.equal(link.send({ type: 'response.create' }), false);
});

test('a slow upstream reader: bufferedAmount grows while it does not read, and falls to 0 once it does', async () => {
  up.configure({ slowRead: true });
  const link = await engine().connect({ model: 'gpt-realtime' });
  await reader(link).next();
  const big = Buffer.alloc(256 * 1024).toString('base64');
  // the kernel's buffers take some: sent until the rest waits in the link
  await waitFor(
    () => {
      link.send({ type: 'input_audio_buffer.append', audio: big });
      return link.bufferedAmount > 1024 * 1024;
    },
    { what: 'bytes to queue in the link' },
  );
  up.resumeReading();
  await waitFor(() => link.bufferedAmount === 0, { what: 'the queue to drain' });
  link.close();
});

// ------------------------------------------------------------------ refused upgrades

const REFUSALS: Array<{ status: number; code: string; httpStatus: number; retryable: boolean; message: RegExp }> = [
  { status: 401, code: 'upstream_auth_failed', httpStatus: 502, retryable: true, message: /refused Portico's credentials \(HTTP 401\)/ },
  { status: 403, code: 'upstream_auth_failed', httpStatus: 502, retryable: true, message: /refused Portico's credentials \(HTTP 403\)/ },
  { status: 404, code: 'model_not_found', httpStatus: 502, retryable: true, message: /^upstream: The model 'gpt-x' does not exist/ },
  { status: 429, code: 'rate_limit_exceeded', httpStatus: 429, retryable: true, message: /^upstream rate limit: Slow down \(retry after 7 s\)$/ },
  { status: 500, code: 'server_error', httpStatus: 502, retryable: true, message: /^upstream error \(HTTP 500\): The server had an error/ },
  { status: 503, code: 'upstream_error', httpStatus: 502, retryable: true, message: /^upstream error \(HTTP 503\): Service Unavailable$/ },
];

for (const c of REFUSALS) {
  test(`the upgrade refused with HTTP ${c.status}: ${c.httpStatus} ${c.code}, the upstream's message read from the refusal`, async () => {
    const bodies: Record<number, string> = {
      401: JSON.stringify({ error: { message: `Incorrect API key provided: ${KEY}`, type: 'invalid_request_error', code: 'invalid_api_key' } }),
      403: JSON.stringify({ error: { message: 'Forbidden', type: 'invalid_request_error' } }),
      404: JSON.stringify({ error: { message: "The model 'gpt-x' does not exist or you do not have access to it.", type: 'invalid_request_error', code: 'model_not_found' } }),
      429: JSON.stringify({ error: { message: 'Slow down', type: 'requests' } }),
      500: JSON.stringify({ error: { message: 'The server had an error while processing your request.', type: 'server_error', code: 'server_error' } }),
      503: 'Service Unavailable',
    };
    up.configure({ refuse: { status: c.status, body: bodies[c.status], headers: c.status === 429 ? { 'retry-after': '7' } : {} } });
    const e = await refusal(engine().connect({ model: 'gpt-x' }));
    assert.equal(e.status, c.httpStatus);
    assert.equal(e.code, c.code);
    assert.equal(e.retryable, c.retryable);
    assert.equal(e.upstreamStatus, c.status);
    assert.match(e.message, c.message);
    if (c.status === 429) assert.equal(e.retryAfterMs, 7000);
  });
}

test('a refusal that echoes the key: the key never appears in the message', async () => {
  up.configure({ refuse: { status: 400, body: JSON.stringify({ error: { message: `bad header Bearer ${KEY}`, code: 'bad_header' } }) } });
  const e = await refusal(engine().connect({ model: 'gpt-realtime' }));
  assert.equal(e.status, 400);
  assert.equal(e.code, 'bad_header');
  assert.equal(e.message, 'bad header Bearer ***');
});

test('a refusal with a huge body: read bounded, the message cut', async () => {
  up.configure({ refuse: { status: 500, body: 'x'.repeat(4 * 1024 * 1024) } });
  const e = await refusal(engine().connect({ model: 'gpt-realtime' }));
  assert.equal(e.status, 502);
  assert.equal(e.upstreamStatus, 500);
  assert.ok(e.message.length < 2100, `message of ${e.message.length} characters`);
});

test('an HTTP server that answers 200 instead of upgrading: a 502 that says so', async () => {
  const plain = http.createServer((_q, s) => s.end('{"ok":true}'));
  await new Promise<void>((r) => plain.listen(0, '127.0.0.1', r));
  try {
    const e = await refusal(engine({ baseUrl: `http://127.0.0.1:${(plain.address() as AddressInfo).port}/v1` }).connect({ model: 'm' }));
    assert.equal(e.status, 502);
    assert.equal(e.code, 'upstream_error');
    assert.match(e.message, /HTTP 200 instead of a realtime WebSocket upgrade/);
  } finally {
    plain.closeAllConnections();
    await new Promise((r) => plain.close(r));
  }
});

// ------------------------------------------------------------------ unreachable, hanging

test('connection refused: 502 upstream_unavailable, retryable', async () => {
  const s = http.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  const e = await refusal(engine({ baseUrl: `http://127.0.0.1:${port}/v1` }).connect({ model: 'm' }));
  assert.equal(e.status, 502);
  assert.equal(e.code, 'upstream_unavailable');
  assert.equal(e.retryable, true);
  assert.equal(e.message, 'upstream unreachable (ECONNREFUSED)');
});

test('a host that does not resolve: 502 upstream_unavailable', async () => {
  const e = await refusal(engine({ baseUrl: 'http://no-such-host.invalid/v1', connectMs: 5000 }).connect({ model: 'm' }));
  assert.equal(e.code, 'upstream_unavailable');
  assert.ok(e.status === 502 || e.status === 504, `status ${e.status}: ${e.message}`);
  assert.ok(e.retryable);
});

test('TCP accepted, the upgrade never answered: 504 within connectMs, the socket closed', async () => {
  up.configure({ hangUpgrade: true });
  const { value: e, ms, stallMs } = await timed(() => refusal(engine({ connectMs: 300 }).connect({ model: 'm' })));
  assert.equal(e.status, 504);
  assert.equal(e.code, 'upstream_unavailable');
  assert.equal(e.retryable, true);
  assert.equal(e.message, 'upstream did not answer the realtime upgrade within 300 ms');
  assert.ok(ms >= 290 && ms < 300 + 1500 + stallMs, `${ms} ms (stalled ${stallMs} ms)`);
  // the upgrade the mock held (never answered: 'hanging') is closed by the link, not left open
  await waitFor(() => up.connections[0]!.state === 'closed', { what: 'the hung upgrade socket closed' });
});

test('an address whose connects hang: 504 "did not accept a connection" within connectMs', async () => {
  const hole = await startBlackHole();
  try {
    const { value: e, ms, stallMs } = await timed(() => refusal(engine({ baseUrl: hole.url, connectMs: 300 }).connect({ model: 'm' })));
    assert.equal(e.status, 504);
    assert.equal(e.code, 'upstream_unavailable');
    assert.equal(e.message, 'upstream did not accept a connection within 300 ms');
    assert.ok(ms >= 290 && ms < 300 + 1500 + stallMs, `${ms} ms (stalled ${stallMs} ms)`);
  } finally {
    await hole.close();
  }
});

test('upgraded, then no session.created: events throw 504 within firstEventMs, the link closed', async () => {
  up.configure({ silent: true });
  const link = await engine({ firstEventMs: 300 }).connect({ model: 'm' });
  const { value, ms, stallMs } = await timed(() => reader(link).failure());
  assert.deepEqual(value.events, []);
  assert.equal(value.error.status, 504);
  assert.equal(value.error.code, 'upstream_unavailable');
  assert.equal(value.error.message, 'upstream sent no event within 300 ms of the realtime session opening');
  assert.ok(ms < 300 + 1500 + stallMs, `${ms} ms (stalled ${stallMs} ms)`);
  await waitFor(() => up.connections[0]!.closed, { what: 'the upstream to see the close' });
  assert.equal(link.send({ type: 'response.create' }), false);
});

test('the first event arrives in time: the first-event timer does not fire later', async () => {
  const link = await engine({ firstEventMs: 200 }).connect({ model: 'm' });
  const r = reader(link);
  await r.next();
  // proving a negative: past the first-event timeout, the session still answers
  await new Promise((res) => setTimeout(res, 300));
  link.send({ type: 'input_audio_buffer.clear' });
  assert.equal((await r.next()).type, 'input_audio_buffer.cleared');
  link.close();
});

// ------------------------------------------------------------------ garbage, oversized frames

for (const [garbage, after, closeCode, message] of [
  ['text', false, 1007, 'upstream sent a realtime event that is not JSON'],
  ['array', false, 1007, 'upstream sent a realtime event that is not a JSON object'],
  ['binary', false, 1003, 'upstream sent a binary frame on the realtime session (it speaks JSON events)'],
  ['text', true, 1007, 'upstream sent a realtime event that is not JSON'],
  ['binary', true, 1003, 'upstream sent a binary frame on the realtime session (it speaks JSON events)'],
] as const) {
  test(`garbage (${garbage}) ${after ? 'after session.created' : 'as the first frame'}: 502 upstream_error, the link closed with ${closeCode}`, async () => {
    up.configure({ garbage, garbageAfterSession: after });
    const link = await engine().connect({ model: 'm' });
    const { events, error } = await reader(link).failure();
    assert.deepEqual(types(events), after ? ['session.created'] : []);
    assert.equal(error.status, 502);
    assert.equal(error.code, 'upstream_error');
    assert.equal(error.message, message);
    await waitFor(() => up.connections[0]!.closed, { what: 'the upstream to see the close' });
    assert.equal(up.connections[0]!.closed, closeCode);
    assert.equal(link.send({ type: 'response.create' }), false);
  });
}

test('a frame over maxFrameBytes: 502 upstream_error, the link closed (1009)', async () => {
  const link = await engine({ maxFrameBytes: 4096 }).connect({ model: 'm' });
  const r = reader(link);
  await r.next();
  up.connections[0]!.send({ type: 'response.output_audio.delta', delta: 'A'.repeat(8192) });
  const { error } = await r.failure();
  assert.equal(error.status, 502);
  assert.equal(error.code, 'upstream_error');
  assert.equal(error.message, 'upstream sent a realtime frame larger than 4096 bytes');
  await waitFor(() => up.connections[0]!.closed, { what: 'the upstream to see the close' });
  assert.equal(up.connections[0]!.closed, 1009);
});

test('a text frame that is not UTF-8: 502 upstream_error, the link closed', async () => {
  const link = await engine().connect({ model: 'm' });
  const r = reader(link);
  await r.next();
  up.connections[0]!.sendRaw(Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), false);
  const { error } = await r.failure();
  assert.equal(error.status, 502);
  assert.equal(error.code, 'upstream_error');
  assert.equal(error.message, 'upstream sent an invalid realtime frame (WS_ERR_INVALID_UTF8)');
  await waitFor(() => up.connections[0]!.closed, { what: 'the upstream to see the close' });
  assert.equal(up.connections[0]!.closed, 1007);
});

test('a consumer that falls behind: the link stops reading the socket (the upstream is held back), then every event arrives in order', async () => {
  const link = await engine().connect({ model: 'm' });
  const r = reader(link);
  await r.next();
  const conn = up.connections[0]!;
  const N = 1000;
  const pad = 'A'.repeat(32 * 1024);
  for (let i = 0; i < N; i++) conn.send({ type: 'response.output_audio.delta', n: i, delta: pad });
  // proving a negative: nobody reads the events; had the link kept reading, the 32 MB would have left the server by now
  await new Promise((res) => setTimeout(res, 300));
  assert.ok(conn.bufferedAmount > 0, 'the server still holds what the link did not take');
  for (let i = 0; i < N; i++) assert.equal((await r.next()).n, i);
  assert.equal(conn.bufferedAmount, 0);
  link.close();
});

// ------------------------------------------------------------------ broken mid-session

test('the socket reset mid-response (after 2 audio deltas): the deltas, then 502 upstream_stream_broken', async () => {
  up.configure({ resetAfterDeltas: 2, audioDeltas: 5 });
  const link = await engine().connect({ model: 'm' });
  const r = reader(link);
  await r.next();
  link.send({ type: 'response.create' });
  const { events, error } = await r.failure();
  assert.equal(events.filter((e) => e.type === 'response.output_audio.delta').length, 2);
  assert.equal(
    events.some((e) => e.type === 'response.done'),
    false,
  );
  assert.equal(error.status, 502);
  assert.equal(error.code, 'upstream_stream_broken');
  assert.equal(error.retryable, true);
  assert.match(error.message, /^upstream realtime connection broke \(/);
  assert.equal(link.send({ type: 'response.create' }), false);
});

test('the upstream closes with 1011 mid-response: 502 upstream_stream_broken naming the code and reason', async () => {
  up.configure({ closeAfterDeltas: { n: 1, code: 1011, reason: 'internal error' }, audioDeltas: 3 });
  const link = await engine().connect({ model: 'm' });
  const r = reader(link);
  await r.next();
  link.send({ type: 'response.create' });
  const { events, error } = await r.failure();
  assert.equal(events.filter((e) => e.type === 'response.output_audio.delta').length, 1);
  assert.equal(error.status, 502);
  assert.equal(error.code, 'upstream_stream_broken');
  assert.equal(error.message, 'upstream closed the realtime session with code 1011: internal error');
});

test('a close reason that carries the key is redacted', async () => {
  const link = await engine().connect({ model: 'm' });
  const r = reader(link);
  await r.next();
  up.connections[0]!.close(4000, `bad key ${KEY}`);
  const { error } = await r.failure();
  assert.equal(error.message, 'upstream closed the realtime session with code 4000: bad key ***');
});

// ------------------------------------------------------------------ abort, close

test('abort before the upgrade answered: connect rejects 499 aborted at once, the socket closed', async () => {
  up.configure({ hangUpgrade: true });
  const ac = new AbortController();
  const p = engine({ connectMs: 30_000 }).connect({ model: 'm', signal: ac.signal });
  await waitFor(() => up.connections.length === 1, { what: 'the upgrade request to arrive' });
  ac.abort();
  const e = await refusal(p);
  assert.equal(e.status, 499);
  assert.equal(e.code, 'aborted');
});

test('a signal already aborted: connect rejects without connecting', async () => {
  const e = await refusal(engine().connect({ model: 'm', signal: AbortSignal.abort() }));
  assert.equal(e.code, 'aborted');
  assert.equal(up.connections.length, 0);
});

test('abort after the link opened: closed cleanly (1000), the events end without an error', async () => {
  const ac = new AbortController();
  const link = await engine().connect({ model: 'm', signal: ac.signal });
  const r = reader(link);
  await r.next();
  ac.abort();
  assert.deepEqual(await r.rest(), []);
  await waitFor(() => up.connections[0]!.closed, { what: 'the upstream to see the close' });
  assert.equal(up.connections[0]!.closed, 1000);
});

test("the engine's close: open links closed (1001), links being opened refused, new connects refused", async () => {
  const e = engine();
  const link = await e.connect({ model: 'm' });
  const r = reader(link);
  await r.next();
  up.configure({ hangUpgrade: true });
  const pending = e.connect({ model: 'm' });
  await waitFor(() => up.connections.length === 2, { what: 'the second upgrade request to arrive' });
  const refused = refusal(pending);
  await e.close();
  assert.deepEqual(await r.rest(), []);
  assert.equal(up.connections[0]!.closed, 1001);
  assert.equal((await refused).code, 'engine_closed');
  assert.equal((await refusal(e.connect({ model: 'm' }))).code, 'engine_closed');
});

test('close() with a code a peer may not send becomes 1000; a reason over 123 bytes is cut', async () => {
  const link = await engine().connect({ model: 'm' });
  await reader(link).next();
  link.close(1006, 'é'.repeat(100));
  await waitFor(() => up.connections[0]!.closed, { what: 'the upstream to see the close' });
  assert.equal(up.connections[0]!.closed, 1000);
  link.close(); // again: harmless
});
