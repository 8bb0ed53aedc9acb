// Per-key concurrency (issue 22 §1, "one key locked everyone out"): an inference key's requests in progress and its
// open WebSockets count together against KEY_MAX_CONCURRENCY (or the key's own max_concurrency, set through the
// portal); over it, 429 `concurrency_limit_exceeded` with retry-after, a WebSocket refused at its upgrade; the place
// comes back on every path that ends a request (answer, error, aborted stream, closed socket), exactly once.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { setup, expectError, MODEL, type Env } from '../responses/util.js';
import { openWs, refusedUpgrade, finalOf, type WsClient } from '../responses/ws-util.js';
import { testDatabases } from '../helpers/app.js';
import { waitFor } from '../helpers/wait.js';

const LIMIT = 3;

/** creates an inference key through the portal: its id and its secret */
async function makeKey(e: Env, user: string): Promise<{ id: string; key: string }> {
  const r = await fetch(`${e.url}/v1/portal/api-keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${await e.t.token(user)}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'concurrency' }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  const d = ((await r.json()) as any).data;
  return { id: d.id, key: d.api_key };
}

const post = (e: Env, key: string, body: unknown, signal?: AbortSignal) =>
  fetch(`${e.url}/v1/responses`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal,
  });

/** Asserts the 429 of a key at its limit, in the OpenAI shape with retry-after. */
async function expectConcurrency429(r: Response) {
  const retry = r.headers.get('retry-after');
  const err = await expectError(r, 429, 'concurrency_limit_exceeded');
  assert.equal(err.type, 'requests');
  assert.match(err.message, new RegExp(`${LIMIT} requests and open WebSocket`));
  assert.equal(retry, '1');
}

describe('per-key concurrency: requests and WebSockets of one key, counted together', { timeout: 120_000 }, () => {
  let e: Env;
  const held = (id: string) => e.t.runtime.concurrency.inUse(id);
  before(async () => {
    e = await setup('pglite', [], { KEY_MAX_CONCURRENCY: String(LIMIT), WS_PING_INTERVAL_MS: '0' });
  });
  after(() => e.close());

  test('a key at its limit gets 429 for the next request and the next WebSocket; another key is unaffected', async () => {
    const a = await makeKey(e, 'alice');
    const b = await makeKey(e, 'bob');
    // two open WebSockets and one stream in progress: the key's three places
    const sockets = [await openWs(e.url, a.key), await openWs(e.url, a.key)];
    e.up.script({ text: ['one ', 'two', 'three'], hangAfter: 2 });
    const ac = new AbortController();
    const stream = await post(e, a.key, { model: MODEL, input: 'hold', stream: true }, ac.signal);
    assert.equal(stream.status, 200);
    const reader = stream.body!.getReader();
    await reader.read();
    assert.equal(held(a.id), LIMIT);

    await expectConcurrency429(await post(e, a.key, { model: MODEL, input: 'over' }));
    await expectConcurrency429(await fetch(`${e.url}/v1/models`, { headers: { authorization: `Bearer ${a.key}` } }));
    // the WebSocket is refused at its upgrade, with the same 429: never accepted and then closed
    const refused = await refusedUpgrade(e.url, { authorization: `Bearer ${a.key}` });
    assert.equal(refused.status, 429);
    assert.equal(refused.body.error.code, 'concurrency_limit_exceeded');
    assert.equal(refused.headers['retry-after'], '1');
    assert.equal(held(a.id), LIMIT, 'a refusal takes no place');

    // another key: its own places
    const r = await post(e, b.key, { model: MODEL, input: 'other key' });
    assert.equal(r.status, 200, await r.clone().text());
    await r.arrayBuffer();
    const bs = await openWs(e.url, b.key);
    finalOf(await bs.turn({ model: MODEL, input: 'b on a socket' }));
    await bs.close();

    // a place comes back when the stream is abandoned, and when a socket closes
    ac.abort();
    await waitFor(() => held(a.id) === LIMIT - 1, { what: 'the aborted stream gave its place back', timeoutMs: 5000 });
    const again = await openWs(e.url, a.key);
    await expectConcurrency429(await post(e, a.key, { model: MODEL, input: 'still over' }));
    await sockets[0]!.close();
    await waitFor(() => held(a.id) === LIMIT - 1, { what: 'the closed socket gave its place back', timeoutMs: 5000 });
    const ok = await post(e, a.key, { model: MODEL, input: 'fits again' });
    assert.equal(ok.status, 200);
    await ok.arrayBuffer();
    await sockets[1]!.close();
    await again.close();
    await waitFor(() => held(a.id) === 0 && held(b.id) === 0, { what: 'every place back', timeoutMs: 5000 });
  });

  test('a WebSocket holds one place for its whole life, however many turns it runs', async () => {
    const a = await makeKey(e, 'carol');
    const ws = await openWs(e.url, a.key);
    for (let i = 0; i < LIMIT + 2; i++) finalOf(await ws.turn({ model: MODEL, input: `turn ${i}` }));
    assert.equal(held(a.id), 1);
    await ws.close();
    await waitFor(() => held(a.id) === 0, { what: 'the socket gave its place back', timeoutMs: 5000 });
  });

  test('the place comes back after answers, errors, aborted streams and closed sockets: after many, the key still opens its full number', async () => {
    const a = await makeKey(e, 'dave');
    const N = 10;
    // answers, LIMIT at a time
    for (let i = 0; i < N; i += LIMIT) {
      const rs = await Promise.all(Array.from({ length: LIMIT }, (_, j) => post(e, a.key, { model: MODEL, input: `answer ${i + j}` })));
      for (const r of rs) {
        assert.equal(r.status, 200);
        await r.arrayBuffer();
      }
      await waitFor(() => held(a.id) === 0, { what: 'answers gave their places back', timeoutMs: 5000 });
    }
    // errors: refused by the schema (after the gate), an unknown model, an upstream failure, an unknown route
    for (let i = 0; i < N; i++) {
      await expectError(await post(e, a.key, { model: MODEL, input: 'x', temperature: 'hot' }), 400);
      await expectError(await post(e, a.key, { model: 'no-such-model', input: 'x' }), 404);
      e.up.script({ status: 500, errorMessage: 'upstream broke' });
      const failed = await post(e, a.key, { model: MODEL, input: 'x' });
      assert.ok(failed.status >= 500, String(failed.status));
      await failed.arrayBuffer();
    }
    // streams the client abandons mid-way, and requests abandoned before any answer
    for (let i = 0; i < N; i++) {
      e.up.script({ text: ['a ', 'b', 'c'], hangAfter: 2 });
      const ac = new AbortController();
      const r = await post(e, a.key, { model: MODEL, input: 'stream', stream: true }, ac.signal);
      await r.body!.getReader().read();
      ac.abort();
      e.up.script({ hang: true });
      const asked = e.up.requests.length;
      const ac2 = new AbortController();
      const pending = post(e, a.key, { model: MODEL, input: 'never answered' }, ac2.signal).catch(() => undefined);
      await waitFor(() => e.up.requests.length > asked, { what: 'the request reached the upstream', timeoutMs: 5000 });
      ac2.abort();
      await pending;
    }
    // sockets closed by the client, cut, or closed with a turn in flight; an upgrade refused after the gate
    for (let i = 0; i < N; i++) {
      (await openWs(e.url, a.key)).ws.terminate();
      const c = await openWs(e.url, a.key);
      e.up.script({ text: ['slow ', 'answer', 'never'], hangAfter: 2 });
      c.create({ model: MODEL, input: 'in flight' });
      await c.next();
      await c.close();
      const bad = await refusedUpgrade(e.url, { authorization: `Bearer ${a.key}` }, '/v1/responses?unknown=1');
      assert.equal(bad.status, 400);
    }
    await waitFor(() => held(a.id) === 0, { what: `every place back (held: ${held(a.id)})`, timeoutMs: 5000 });
    // the full number, and not one more
    const open: WsClient[] = [];
    for (let i = 0; i < LIMIT; i++) open.push(await openWs(e.url, a.key));
    assert.equal((await refusedUpgrade(e.url, { authorization: `Bearer ${a.key}` })).status, 429);
    for (const c of open) await c.close();
    await waitFor(() => held(a.id) === 0, { what: 'the sockets gave their places back', timeoutMs: 5000 });
  });

  test('an upgrade whose client leaves before the answer gives its place back', async () => {
    const a = await makeKey(e, 'erin');
    const { hostname, port } = new URL(e.url);
    for (let i = 0; i < LIMIT + 2; i++) {
      const s = net.connect(Number(port), hostname);
      s.on('error', () => {});
      s.write(
        `GET /v1/responses HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n` +
          `Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer ${a.key}\r\n\r\n`,
      );
      await new Promise<void>((r) => s.once('data', () => r()));
      s.destroy();
    }
    await waitFor(() => held(a.id) === 0, { what: 'every place back', timeoutMs: 5000 });
  });
});

for (const db of testDatabases()) {
  describe(`per-key concurrency: the key's own max_concurrency from the portal (${db})`, { timeout: 60_000 }, () => {
    let e: Env;
    let jwt: string;
    before(async () => {
      e = await setup(db, [], { KEY_MAX_CONCURRENCY: String(LIMIT), WS_PING_INTERVAL_MS: '0' });
      jwt = await e.t.token('frank');
    });
    after(() => e.close());

    const put = (id: string, body: unknown) =>
      fetch(`${e.url}/v1/portal/api-keys/${id}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });

    test('set through PUT /api-keys/{id}, shown in the key object, applied at once; null is the default again; above the default is refused', async () => {
      const a = await makeKey(e, 'frank');
      const list = (await (await fetch(`${e.url}/v1/portal/api-keys`, { headers: { authorization: `Bearer ${jwt}` } })).json()) as any;
      assert.equal(list.data.list[0].max_concurrency, null);

      const set = await put(a.id, { max_concurrency: 1 });
      assert.equal(set.status, 200, await set.clone().text());
      assert.equal(((await set.json()) as any).data.max_concurrency, 1);
      const one = await openWs(e.url, a.key);
      const over = await post(e, a.key, { model: MODEL, input: 'over its own limit' });
      const err = await expectError(over, 429, 'concurrency_limit_exceeded');
      assert.match(err.message, /already has 1 requests/);
      assert.equal((await refusedUpgrade(e.url, { authorization: `Bearer ${a.key}` })).status, 429);

      // back to the server's default (3): two more fit
      const reset = await put(a.id, { max_concurrency: null });
      assert.equal(((await reset.json()) as any).data.max_concurrency, null);
      const more = [await openWs(e.url, a.key), await openWs(e.url, a.key)];
      assert.equal((await refusedUpgrade(e.url, { authorization: `Bearer ${a.key}` })).status, 429);

      // an owner may lower the key's share, not raise it above the server's
      const raise = await put(a.id, { max_concurrency: LIMIT + 1 });
      assert.equal(raise.status, 400);
      const body = (await raise.json()) as any;
      assert.match(body.meta.message, /at most 3 .*KEY_MAX_CONCURRENCY/);
      for (const bad of [0, -1, 1.5, 'many']) assert.equal((await put(a.id, { max_concurrency: bad })).status, 400, String(bad));
      // a management key has no concurrency (it does not call {base_url})
      const mk = (await (
        await fetch(`${e.url}/v1/portal/management/api-keys`, {
          method: 'POST',
          headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
          body: JSON.stringify({ name: 'mgmt' }),
        })
      ).json()) as any;
      assert.equal(mk.data.max_concurrency, undefined);
      const mput = await fetch(`${e.url}/v1/portal/management/api-keys/${mk.data.id}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
        body: JSON.stringify({ max_concurrency: 1 }),
      });
      assert.equal(mput.status, 400);

      for (const c of [one, ...more]) await c.close();
      await waitFor(() => e.t.runtime.concurrency.inUse(a.id) === 0, { what: 'every place back', timeoutMs: 5000 });
    });

    test('the operator (portico keys limit --concurrency) may raise a key above the default; its rpm and tpm stay', async () => {
      const a = await makeKey(e, 'grace');
      await e.t.services.inferenceKeys.setLimits(a.id, 1000, null);
      const row = await e.t.services.inferenceKeys.setConcurrency(a.id, LIMIT + 2);
      assert.equal(row.max_concurrency, LIMIT + 2);
      assert.equal(row.rpm_limit, 1000);
      const open: WsClient[] = [];
      for (let i = 0; i < LIMIT + 2; i++) open.push(await openWs(e.url, a.key));
      assert.equal((await refusedUpgrade(e.url, { authorization: `Bearer ${a.key}` })).status, 429);
      for (const c of open) await c.close();
      await waitFor(() => e.t.runtime.concurrency.inUse(a.id) === 0, { what: 'every place back', timeoutMs: 5000 });
      await assert.rejects(e.t.services.managementKeys.setConcurrency('mkey_none', 1), /inference keys only/);
    });
  });
}
