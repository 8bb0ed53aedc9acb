// What one client can hold of an instance (issue 9, "Slow and unauthenticated clients"): credentials are checked
// from the headers before any of the body is read; the headers and the whole request must arrive in time; idle
// connections are capped; an answer being streamed is not cut by any of these.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import http from 'node:http';
import { setup, type Env } from '../responses/util.js';
import { LINGER } from '../../src/compose/http.js';
import { stallWatch } from '../helpers/wait.js';

/** A raw connection: what the server sent, and when it closed. */
function rawClient(url: string) {
  const { hostname, port } = new URL(url);
  const sock = net.connect(Number(port), hostname);
  let data = '';
  const t0 = Date.now();
  let closedAfter = -1;
  sock.on('data', (d) => (data += d.toString('latin1')));
  sock.on('error', () => {});
  const closed = new Promise<void>((r) => sock.on('close', () => ((closedAfter = Date.now() - t0), r())));
  return {
    sock,
    closed,
    get data() {
      return data;
    },
    get closedAfter() {
      return closedAfter;
    },
    waitFor: async (re: RegExp, ms: number) => {
      const end = Date.now() + ms;
      while (!re.test(data)) {
        if (Date.now() > end) throw new Error(`no ${re} within ${ms} ms; got ${JSON.stringify(data.slice(0, 300))}`);
        await new Promise((r) => setTimeout(r, 10));
      }
      return Date.now() - t0;
    },
  };
}

describe('slow and unauthenticated clients', () => {
  let env: Env;
  let jwt: string;
  before(async () => {
    env = await setup('pglite', [], { REQUEST_TIMEOUT_MS: '2000', HEADERS_TIMEOUT_MS: '1000', MAX_CONNECTIONS: '24' });
    jwt = await env.t.token('alice');
  });
  after(() => env.close());

  /** Waits until the number of connections the server has open passes `ok` (5 s at most). */
  async function connectionsUntil(ok: (n: number) => boolean) {
    const count = () => new Promise<number>((resolve, reject) => env.t.app.server.getConnections((e, n) => (e ? reject(e) : resolve(n))));
    const end = Date.now() + 5000;
    let n = await count();
    while (!ok(n)) {
      if (Date.now() > end) throw new Error(`the server still has ${n} connections open`);
      await new Promise((r) => setTimeout(r, 10));
      n = await count();
    }
  }

  test('no key: 401 from the headers alone, before the (never sent) 1 MB body, and the connection closes', async () => {
    for (const [path, auth] of [
      ['/v1/responses', ''],
      ['/v1/responses', 'authorization: Bearer sk-forged0000000000000000000000000000000000000000\r\n'],
      ['/v1/audio/transcriptions', ''],
      ['/v1/portal/api-keys', ''],
    ] as const) {
      const c = rawClient(env.url);
      c.sock.write(`POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n${auth}content-length: 1000000\r\n\r\n{"model":`);
      // the body never comes: any answer came from the headers alone (waiting for the body would end in the 408 of
      // REQUEST_TIMEOUT_MS), so the status says it, not a clock
      await c.waitFor(/^HTTP\/1\.1 \d{3}/, 10_000);
      assert.match(c.data, /^HTTP\/1\.1 401/, path);
      await c.waitFor(/\r\n\r\n[\s\S]*\}/, 10_000);
      assert.match(c.data, /\r\nconnection: close\r\n/i, path);
      // it lingers for the rest of the body (LINGER), then closes: a body that never comes holds it idleMs
      // ends when the connection closes; the timeout only bounds a failure
      await Promise.race([c.closed, new Promise((r) => setTimeout(r, LINGER.idleMs + 10_000))]);
      assert.ok(c.closedAfter >= 0, `${path}: the connection stayed open`);
    }
  });

  test('a forged key with a 5 MB body: each client that sends its whole body before reading the answer gets the 401, not EPIPE', async () => {
    const body = Buffer.alloc(5 * 1024 * 1024, 0x61);
    const { hostname, port } = new URL(env.url);
    const one = () =>
      new Promise<string>((resolve) => {
        const r = http.request(
          {
            host: hostname,
            port: Number(port),
            method: 'POST',
            path: '/v1/responses',
            agent: false,
            headers: { authorization: 'Bearer sk-forged0000000000000000000000000000000000000000', 'content-type': 'application/json', 'content-length': body.length },
          },
          (res) => {
            let text = '';
            res.on('data', (d) => (text += d));
            res.on('end', () => resolve(`${res.statusCode} ${text}`));
            res.on('error', (e) => resolve(`response error ${(e as NodeJS.ErrnoException).code}`));
          },
        );
        r.on('error', (e) => resolve(`request error ${(e as NodeJS.ErrnoException).code}`));
        // the whole body, 64 KiB every few ms (a client on a real network), before anything is read (as most
        // clients do): the answer comes while most of it is still to be sent
        let i = 0;
        const next = () => {
          if (r.destroyed) return;
          if (i >= body.length) return void r.end();
          r.write(body.subarray(i, (i += 65536)));
          setTimeout(next, 3);
        };
        next();
      });
    const answers = await Promise.all(Array.from({ length: 10 }, one));
    for (const a of answers) assert.match(a, /^401 \{"error":\{"message":/, a);
  });

  test('no key, chunked upload: 401 at once, nothing of it read', async () => {
    const c = rawClient(env.url);
    c.sock.write(`POST /v1/audio/transcriptions HTTP/1.1\r\nhost: x\r\ncontent-type: multipart/form-data; boundary=b\r\ntransfer-encoding: chunked\r\n\r\n5\r\n--b\r\n\r\n`);
    // the upload never ends: an answer at all came before it was read (waiting for it would end in a 408)
    await c.waitFor(/^HTTP\/1\.1 \d{3}[\s\S]*\r\n\r\n/, 10_000);
    assert.match(c.data, /^HTTP\/1\.1 401/);
    assert.match(c.data, /connection: close/i);
  });

  test('a valid key with a body that never finishes: cut at REQUEST_TIMEOUT_MS (2 s), not held forever', async () => {
    const stalls = stallWatch();
    const c = rawClient(env.url);
    c.sock.write(
      `POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nauthorization: Bearer ${env.key}\r\ncontent-length: 1000\r\n\r\n{"model":"gpt-test",`,
    );
    await Promise.race([c.closed, new Promise((r) => setTimeout(r, 15_000))]);
    // the timer fired: not before 2 s, and not much later than 2 s plus what this process's event loop was stalled
    const stalled = stalls.stop();
    assert.ok(c.closedAfter >= 1900 && c.closedAfter < 4500 + stalled, `closed after ${c.closedAfter} ms (${stalled.toFixed(0)} ms of stalls)`);
    if (c.data) assert.match(c.data, /^HTTP\/1\.1 408/);
  });

  test('headers that never finish: cut at HEADERS_TIMEOUT_MS (1 s)', async () => {
    const stalls = stallWatch();
    const c = rawClient(env.url);
    c.sock.write(`GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: a`);
    await Promise.race([c.closed, new Promise((r) => setTimeout(r, 15_000))]);
    const stalled = stalls.stop();
    assert.ok(c.closedAfter >= 900 && c.closedAfter < 3500 + stalled, `closed after ${c.closedAfter} ms (${stalled.toFixed(0)} ms of stalls)`);
  });

  test('an answer streamed for longer than REQUEST_TIMEOUT_MS is not cut', async () => {
    env.up.script({ text: Array.from({ length: 12 }, (_, i) => `w${i} `), delayMs: 250 });
    const t0 = Date.now();
    const r = await fetch(`${env.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${env.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-test', input: 'long', stream: true }),
    });
    const text = await r.text();
    assert.ok(Date.now() - t0 > 2500, `the stream took only ${Date.now() - t0} ms`);
    assert.match(text, /response\.completed/);
    assert.match(text, /w11/);
  });

  test('MAX_CONNECTIONS (24): a connection past the cap is closed at once; the server serves again when they go', async () => {
    const held = Array.from({ length: 24 }, () => rawClient(env.url));
    // until the server holds its 24 (a fixed wait ate into the second before HEADERS_TIMEOUT_MS cuts them)
    await connectionsUntil((n) => n >= 24);
    const extra = rawClient(env.url);
    extra.sock.write('GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n');
    // ends when it closes; had the server kept it waiting instead, HEADERS_TIMEOUT_MS would free the held ones
    // within the wait and it would be served (the 200 checked below)
    await Promise.race([extra.closed, new Promise((r) => setTimeout(r, 10_000))]);
    assert.ok(extra.closedAfter >= 0, 'the connection past the cap was kept');
    assert.doesNotMatch(extra.data, /200 OK/);
    for (const h of held) h.sock.destroy();
    await connectionsUntil((n) => n < 24);
    const r = await fetch(`${env.url}/healthz`);
    assert.equal(r.status, 200);
    await r.arrayBuffer();
  });

  test('a portal request with a valid token still reads its body and works', async () => {
    const r = await fetch(`${env.url}/v1/portal/api-keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'after limits' }),
    });
    assert.equal(r.status, 200, await r.clone().text());
    assert.equal(((await r.json()) as any).data.name, 'after limits');
  });
});
