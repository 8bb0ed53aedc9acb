// Issue 22, §2: forged keys must never lock out real ones, behind a proxy too. Found by an attack on PostgreSQL:
// ~2 forged keys a second from one address made 105 of 116 requests with a known-good key from that address answer
// 429 (the throttle of failed checks ran before a stale cache entry was read again); on PGlite a key never used
// before was locked out the same way. The throttle now applies to unknown keys only: a cached key (even stale) and a
// key the verifier knows exists (the set loaded at start, added to on create, here or through the change feed, or
// by one shared read of the newest keys) are never throttled; and with TRUST_PROXY each forwarded client has its
// own throttle, while without it X-Forwarded-For is ignored.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { buildTestApp, testDatabases, TEST_PG_URL, type TestApp } from '../helpers/app.js';
import { generateApiKey } from '../../src/platform/auth/api-key-format.js';
import { FAILED_LIMIT } from '../../src/portal/keys/verifier.js';

const FORGED = 3 * FAILED_LIMIT;

type Call = (key: string, remoteAddress: string, headers?: Record<string, string>) => Promise<{ statusCode: number; headers: Record<string, unknown> }>;
const caller =
  (t: TestApp): Call =>
  (key, remoteAddress, headers = {}) =>
    t.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${key}`, ...headers }, remoteAddress });

/** counts the per-key reads (findByDigest) of an app's key store */
function countReads(t: TestApp): { reads: number } {
  const counter = { reads: 0 };
  const store = t.core.keys.store;
  const find = store.findByDigest.bind(store);
  store.findByDigest = (d: string) => {
    counter.reads++;
    return find(d);
  };
  return counter;
}

/** a forged key from `address` until it is refused with 429 (the address is then over its limit) */
async function throttle(call: Call, address: string, headers?: Record<string, string>) {
  for (let i = 0; i <= FAILED_LIMIT; i++) {
    const s = (await call(generateApiKey('inference'), address, headers)).statusCode;
    if (s === 429) return;
    assert.equal(s, 401);
  }
  assert.fail(`${address} was not throttled after ${FAILED_LIMIT + 1} forged keys`);
}

for (const db of testDatabases()) {
  describe(`a forged-key flood never locks out a real key (${db})`, () => {
    let t: TestApp;
    let call: Call;
    let counter: { reads: number };
    before(async () => {
      // KEY_CACHE_FRESH_MS 0: every cache entry is stale at once (on PostgreSQL it is read again before each request)
      t = await buildTestApp({ db, env: { KEY_CACHE_FRESH_MS: '0', MAX_ACTIVE_INFERENCE_KEYS: '50' } });
      call = caller(t);
      counter = countReads(t);
    });
    after(() => t.close());

    test(`a known key whose cache entry is stale answers 200 through ${FORGED} forged keys from its address`, async () => {
      const good = await t.inferenceKey('stale-owner');
      assert.equal((await call(good, '10.1.0.1')).statusCode, 200);
      const forged: number[] = [];
      // the first FAILED_LIMIT one at a time (each failure counted before the next check), then rounds of ten at once;
      // the good key goes with every forged one, its entry stale each time
      for (let i = 0; i < FAILED_LIMIT; i++) {
        forged.push((await call(generateApiKey('inference'), '10.1.0.1')).statusCode);
        assert.equal((await call(good, '10.1.0.1')).statusCode, 200, `the good key after ${i + 1} forged keys`);
      }
      for (let round = 0; forged.length < FORGED; round++) {
        const flood = Array.from({ length: 10 }, () => call(generateApiKey('inference'), '10.1.0.1'));
        const goods = await Promise.all(Array.from({ length: 10 }, () => call(good, '10.1.0.1')));
        assert.deepEqual(
          goods.map((r) => r.statusCode),
          Array(10).fill(200),
          `the good key during round ${round}`,
        );
        for (const r of await Promise.all(flood)) forged.push(r.statusCode);
      }
      assert.deepEqual(forged.slice(0, FAILED_LIMIT), Array(FAILED_LIMIT).fill(401));
      assert.deepEqual([...new Set(forged.slice(FAILED_LIMIT))], [429]);
    });

    test('a key made before the flood and first used during it answers 200; so does one made during it', async () => {
      const early = await t.inferenceKey('early-owner');
      await throttle(call, '10.1.0.2');
      assert.equal((await call(early, '10.1.0.2')).statusCode, 200);
      const late = await t.inferenceKey('late-owner');
      assert.equal((await call(generateApiKey('inference'), '10.1.0.2')).statusCode, 429);
      assert.equal((await call(late, '10.1.0.2')).statusCode, 200);
      // a revoked key is a real key: it is told it is revoked, not throttled
      const revoked = await t.inferenceKey('revoked-owner');
      const id = (await t.core.db.db.selectFrom('api_keys').select('id').where('user_id', '=', 'revoked-owner').executeTakeFirstOrThrow()).id;
      const res = await t.app.inject({
        method: 'POST',
        url: '/v1/portal/api-keys/revoke',
        headers: { authorization: `Bearer ${await t.token('revoked-owner')}` },
        payload: { api_key_id: id },
      });
      assert.equal(res.statusCode, 200, res.body);
      const answer = await t.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${revoked}` }, remoteAddress: '10.1.0.2' });
      assert.equal(answer.statusCode, 401);
      assert.equal(answer.json().error.code, 'api_key_revoked');
      assert.equal((await call(generateApiKey('inference'), '10.1.0.2')).statusCode, 429);
    });

    test('a flood of unknown keys still costs no more reads: at most FAILED_LIMIT per address, none once throttled', async () => {
      counter.reads = 0;
      const before = t.runtime.verifier.catchUps;
      const started = Date.now();
      await throttle(call, '10.1.0.3');
      assert.ok(counter.reads <= FAILED_LIMIT, `${counter.reads} key reads for ${FAILED_LIMIT + 1} forged keys`);
      for (let round = 0; round < 4; round++) {
        const statuses = await Promise.all(Array.from({ length: 50 }, () => call(generateApiKey('inference'), '10.1.0.3')));
        assert.deepEqual([...new Set(statuses.map((r) => r.statusCode))], [429]);
      }
      assert.ok(counter.reads <= FAILED_LIMIT, `${counter.reads} key reads for ${FAILED_LIMIT + 201} forged keys`);
      const catchUps = t.runtime.verifier.catchUps - before;
      if (db === 'pglite') assert.equal(catchUps, 0, 'PGlite: this process makes every key, the set is the truth');
      // elsewhere a throttled unknown key waits for one shared read of the newest keys, at most one a second
      else assert.ok(catchUps <= Math.ceil((Date.now() - started) / 1000) + 1, `${catchUps} reads of new keys`);
    });

    test('a restarted instance knows the keys made before it started (the set is loaded at start)', async () => {
      const key = await t.inferenceKey('before-restart');
      const { KeyVerifier } = await import('../../src/portal/keys/verifier.js');
      const fresh = new KeyVerifier(t.core.keys.store, t.config.keyPepper, 0, 60_000, 100, db === 'pglite');
      const loaded = await fresh.loadKnown();
      assert.equal(loaded.complete, true);
      assert.ok(loaded.keys >= 1);
      for (let i = 0; i < FAILED_LIMIT; i++) await assert.rejects(fresh.verify(generateApiKey('inference'), 'inference', '10.1.0.4'), { code: 'invalid_api_key' });
      await assert.rejects(fresh.verify(generateApiKey('inference'), 'inference', '10.1.0.4'), { code: 'rate_limit_exceeded' });
      assert.equal((await fresh.verify(key, 'inference', '10.1.0.4')).userId, 'before-restart');
    });
  });
}

describe('two instances on one PostgreSQL: a key made on one is never throttled on the other', { skip: process.env.PORTICO_TEST_PG === 'off' && 'PORTICO_TEST_PG=off' }, () => {
  let a: TestApp;
  let b: TestApp;
  const schema = `t_forged_${randomBytes(4).toString('hex')}`;
  before(async () => {
    const opts = { db: 'postgres' as const, dbSchema: schema, env: { KEY_CACHE_FRESH_MS: '0' } };
    a = await buildTestApp(opts);
    b = await buildTestApp(opts);
  });
  after(async () => {
    await a?.close();
    await b?.close();
    const c = new pg.Client({ connectionString: TEST_PG_URL });
    await c.connect();
    await c.query(`drop schema if exists ${schema} cascade`);
    await c.end();
  });

  test('made on A during a flood on B, first used on B at once: 200', async () => {
    const callB = caller(b);
    await throttle(callB, '10.2.0.1');
    const key = await a.inferenceKey('made-on-a');
    assert.equal((await callB(key, '10.2.0.1')).statusCode, 200);
    assert.equal((await callB(generateApiKey('inference'), '10.2.0.1')).statusCode, 429);
  });

  test("made on A while its notice is lost: B's one shared read of the newest keys finds it (200)", async () => {
    const callB = caller(b);
    await throttle(callB, '10.2.0.2');
    // A announces nothing this time (a lost message)
    const feed = a.core.feed;
    const publish = feed.publish.bind(feed);
    feed.publish = async (channel, message) => {
      if (channel !== 'keys') await publish(channel, message);
    };
    let key: string;
    try {
      key = await a.inferenceKey('made-on-a-unannounced');
    } finally {
      feed.publish = publish;
    }
    const before = b.runtime.verifier.catchUps;
    assert.equal((await callB(key, '10.2.0.2')).statusCode, 200);
    assert.ok(b.runtime.verifier.catchUps > before, 'found by a read of the newest keys');
    // forged keys are still refused, in the same read or the next one, at most one a second
    const forged = await Promise.all(Array.from({ length: 50 }, () => callB(generateApiKey('inference'), '10.2.0.2')));
    assert.deepEqual([...new Set(forged.map((r) => r.statusCode))], [429]);
    assert.ok(b.runtime.verifier.catchUps - before <= 3, `${b.runtime.verifier.catchUps - before} reads for 51 requests`);
  });
});

describe('TRUST_PROXY: one throttle per forwarded client, and no spoofing without it', () => {
  const PROXY = '10.3.0.1';
  let behind: TestApp;
  let direct: TestApp;
  let hops: TestApp;
  before(async () => {
    behind = await buildTestApp({ env: { TRUST_PROXY: `${PROXY},fd00::/8` } });
    direct = await buildTestApp();
    hops = await buildTestApp({ env: { TRUST_PROXY: '1' } });
  });
  after(async () => {
    await behind?.close();
    await direct?.close();
    await hops?.close();
  });

  test('two clients behind the same proxy: the one that floods is throttled, the other is not', async () => {
    const call = caller(behind);
    await throttle(call, PROXY, { 'x-forwarded-for': '203.0.113.7' });
    assert.equal((await call(generateApiKey('inference'), PROXY, { 'x-forwarded-for': '203.0.113.7' })).statusCode, 429);
    // the other client, through the same proxy: its own count
    assert.equal((await call(generateApiKey('inference'), PROXY, { 'x-forwarded-for': '198.51.100.9' })).statusCode, 401);
    // and its real key, new, answers
    const key = await behind.inferenceKey('second-client');
    assert.equal((await call(key, PROXY, { 'x-forwarded-for': '198.51.100.9' })).statusCode, 200);
    // an IPv6 proxy of the listed network, and a client given before the proxy's own hop
    assert.equal((await call(generateApiKey('inference'), 'fd00::5', { 'x-forwarded-for': '203.0.113.7' })).statusCode, 429);
    assert.equal((await call(generateApiKey('inference'), 'fd00::5', { 'x-forwarded-for': '2001:db8::1' })).statusCode, 401);
  });

  test('a client that is not a listed proxy cannot choose its address with X-Forwarded-For', async () => {
    const call = caller(behind);
    for (let i = 0; i < FAILED_LIMIT; i++) assert.equal((await call(generateApiKey('inference'), '192.0.2.50', { 'x-forwarded-for': `198.18.0.${i}` })).statusCode, 401);
    assert.equal((await call(generateApiKey('inference'), '192.0.2.50', { 'x-forwarded-for': '198.18.1.1' })).statusCode, 429);
    // nor through a proxy, by writing an address before the one the proxy adds
    await throttle(call, PROXY, { 'x-forwarded-for': '203.0.113.99' });
    assert.equal((await call(generateApiKey('inference'), PROXY, { 'x-forwarded-for': '198.18.2.2, 203.0.113.99' })).statusCode, 429);
  });

  test('without TRUST_PROXY the header is ignored: every request counts against the socket address', async () => {
    const call = caller(direct);
    for (let i = 0; i < FAILED_LIMIT; i++) assert.equal((await call(generateApiKey('inference'), PROXY, { 'x-forwarded-for': `198.18.3.${i}` })).statusCode, 401);
    assert.equal((await call(generateApiKey('inference'), PROXY, { 'x-forwarded-for': '198.18.4.4' })).statusCode, 429);
    assert.equal(direct.config.trustProxy, undefined);
  });

  test('TRUST_PROXY=1: the client is the address the one proxy added, whatever the client wrote before it', async () => {
    const call = caller(hops);
    await throttle(call, '127.0.0.1', { 'x-forwarded-for': '198.18.5.5, 203.0.113.20' });
    assert.equal((await call(generateApiKey('inference'), '127.0.0.1', { 'x-forwarded-for': '198.18.6.6, 203.0.113.20' })).statusCode, 429);
    assert.equal((await call(generateApiKey('inference'), '127.0.0.1', { 'x-forwarded-for': '203.0.113.21' })).statusCode, 401);
  });
});
