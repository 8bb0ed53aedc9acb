/**
 * Idle WebSockets (issue 22 §1): a connection without a client message for WS_IDLE_MS, and no response in progress,
 * is closed with 1000 `websocket_idle_timeout` and gives its key's place back; a response in progress, however long,
 * is not idleness.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { setup, MODEL, type Env } from './util.js';
import { finalOf, openWs } from './ws-util.js';

const IDLE_MS = 400;

describe('WebSocket mode: idle connections are closed (WS_IDLE_MS)', () => {
  let e: Env;
  before(async () => {
    e = await setup('pglite', [], { WS_IDLE_MS: String(IDLE_MS), WS_PING_INTERVAL_MS: '0' });
  });
  after(() => e.close());

  test('a socket that sends nothing is closed with 1000 websocket_idle_timeout, and its place comes back', { timeout: 30_000 }, async () => {
    const r = await fetch(`${e.url}/v1/portal/api-keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await e.t.token('idle')}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'idle' }),
    });
    const { id, api_key: key } = ((await r.json()) as any).data;
    const c = await openWs(e.url, key);
    assert.equal(e.t.runtime.concurrency.inUse(id), 1);
    const closed = await c.closed;
    assert.equal(closed.code, 1000);
    assert.equal(closed.reason, 'websocket_idle_timeout');
    // the server closed it: its socket's close gives the place back (waited for, not timed)
    const end = Date.now() + 5000;
    while (e.t.runtime.concurrency.inUse(id) !== 0) {
      assert.ok(Date.now() < end, 'the idle socket kept its place');
      await new Promise((res) => setTimeout(res, 10));
    }
  });

  test('a socket idle after its answers is closed; a response in progress (longer than WS_IDLE_MS) is not idleness', { timeout: 30_000 }, async () => {
    const c = await openWs(e.url, e.key);
    // six pieces 150 ms apart: the response lasts about twice WS_IDLE_MS, with no client message meanwhile
    e.up.script({ text: ['a ', 'b ', 'c ', 'd ', 'e ', 'f'], delayMs: 150 });
    const started = Date.now();
    const answer = await c.turn({ model: MODEL, input: 'a slow answer' });
    assert.equal(finalOf(answer).status, 'completed');
    assert.ok(Date.now() - started > IDLE_MS, 'the response should outlast WS_IDLE_MS for this test to mean anything');
    assert.equal(c.closeInfo, undefined, 'closed while a response was in progress');
    // a message restarts the clock: another turn on the same socket
    finalOf(await c.turn({ model: MODEL, input: 'again' }));
    const closed = await c.closed;
    assert.equal(closed.code, 1000);
    assert.equal(closed.reason, 'websocket_idle_timeout');
  });

  test("a message sent in time is answered though this server's event loop was held past the idle deadline", { timeout: 30_000 }, async () => {
    const c = await openWs(e.url, e.key);
    const first = c.turn({ model: MODEL, input: 'first' });
    // when the first answer ends, the server has armed its idle clock; the client sends its next message at once and
    // then this process (the server's too) is held past the deadline: the message waits unread in the socket while
    // the idle timer comes due. Timers run before sockets are read, so a timer that decides alone closes a
    // connection whose client was on time.
    c.ws.on('message', function stall(d: Buffer) {
      if (JSON.parse(d.toString()).type !== 'response.completed') return;
      c.ws.off('message', stall);
      c.create({ model: MODEL, input: 'second, sent in time' });
      const until = performance.now() + IDLE_MS + 300;
      while (performance.now() < until);
    });
    assert.equal(finalOf(await first).status, 'completed');
    assert.equal(finalOf(await c.answer()).status, 'completed');
    assert.equal(c.closeInfo, undefined);
    // and idleness is still closed afterwards
    const closed = await c.closed;
    assert.equal(closed.reason, 'websocket_idle_timeout');
  });
});
