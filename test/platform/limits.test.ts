/**
 * Unit tests of the per-key rate limiter (src/platform/cluster/limits.ts): requests per minute counted on
 * arrival, tokens per minute counted when usage is recorded, the key's own limit over the default, 0 = none,
 * fixed one-minute windows, the headers a refusal carries, and the Redis store shared by instances.
 */
import { describe, test, mock, after } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { randomBytes } from 'node:crypto';
import { ConcurrencyLimiter, createWindowStore, RateLimiter, type LimitedKey } from '../../src/platform/cluster/limits.js';
import { AppError } from '../../src/platform/errors.js';
import { awayFromMinuteEdge } from '../helpers/minute-window.js';
import { testRedisPrefix, testRedisUrl } from '../helpers/services.js';
import { dropInstallationKeys } from '../helpers/redis-keys.js';
import { stallWatch } from '../helpers/wait.js';

const key = (over: Partial<LimitedKey> = {}): LimitedKey => ({ keyId: `k_${randomBytes(6).toString('hex')}`, rpmLimit: null, tpmLimit: null, ...over });

async function refusal(p: Promise<unknown>): Promise<AppError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof AppError, String(e));
    return e;
  }
  assert.fail('not refused');
}

describe('RateLimiter (memory windows)', () => {
  test('rpm: the limit-th request passes, the next is 429 rate_limit_exceeded with retry-after and x-ratelimit headers', async () => {
    const rl = new RateLimiter(createWindowStore(), { rpm: 3, tpm: 0 });
    const k = key();
    await awayFromMinuteEdge(2); // the count below stays in one fixed window
    for (let i = 0; i < 3; i++) await rl.check(k);
    const e = await refusal(rl.check(k));
    assert.equal(e.code, 'rate_limit_exceeded');
    assert.match(e.message, /3 requests per minute/);
    const h = e.headers as Record<string, string>;
    const after = Number(h['retry-after']);
    assert.ok(after >= 1 && after <= 60, `retry-after ${after}`);
    assert.ok(Number(h['retry-after-ms']) <= 60_000);
    assert.equal(h['x-ratelimit-limit'], '3');
    assert.equal(h['x-ratelimit-remaining'], '0');
    // another key has its own window
    await rl.check(key());
  });

  test("the key's own limits win over the defaults; 0 means unlimited; applies() says when a check is needed", async () => {
    const rl = new RateLimiter(createWindowStore(), { rpm: 1, tpm: 0 });
    const own = key({ rpmLimit: 2 });
    await awayFromMinuteEdge(2);
    await rl.check(own);
    await rl.check(own);
    await refusal(rl.check(own));
    const unlimited = key({ rpmLimit: 0 });
    for (let i = 0; i < 50; i++) await rl.check(unlimited);
    assert.equal(rl.applies(unlimited), false);
    assert.equal(rl.applies(key()), true, 'the default rpm applies');
    assert.equal(new RateLimiter(createWindowStore(), { rpm: 0, tpm: 0 }).applies(key()), false);
    assert.equal(new RateLimiter(createWindowStore(), { rpm: 0, tpm: 0 }).applies(key({ tpmLimit: 5 })), true);
  });

  test('tpm: tokens are added after the answer; once the minute holds the limit, requests are refused', async () => {
    const rl = new RateLimiter(createWindowStore(), { rpm: 0, tpm: 100 });
    const k = key();
    await awayFromMinuteEdge(2);
    await rl.addTokens(k, 60);
    await rl.check(k);
    await rl.addTokens(k, 39);
    await rl.check(k); // 99 < 100
    await rl.addTokens(k, 1);
    const e = await refusal(rl.check(k));
    assert.match(e.message, /100 tokens per minute for this API key \(used 100\)/);
    // tokens of a key without a tpm limit are not counted at all
    const free = key({ tpmLimit: 0 });
    await rl.addTokens(free, 1_000_000);
    await rl.check(free);
  });

  test('tpm reservations: the worst case is held atomically within the limit, and settled with the real count', async () => {
    const rl = new RateLimiter(createWindowStore(), { rpm: 0, tpm: 100 });
    const k = key();
    await awayFromMinuteEdge(2);
    const held = await Promise.allSettled(Array.from({ length: 10 }, () => rl.reserveTokens(k, 8, 22)));
    const ok = held.filter((h) => h.status === 'fulfilled').map((h) => (h as PromiseFulfilledResult<any>).value);
    assert.equal(ok.length, 3, '3 x 30 fit in 100');
    const e = (held.find((h) => h.status === 'rejected') as PromiseRejectedResult).reason as AppError;
    assert.match(e.message, /may use up to 30 tokens .*90 of the 100 tokens per minute/);
    // each used 10 of its 30: 60 go back (30 used, 70 left): two more reservations fit, a third does not
    for (const h of ok) await rl.settleTokens(h, 10);
    assert.ok(await rl.reserveTokens(k, 8, 22));
    assert.ok(await rl.reserveTokens(k, 8, 22));
    await refusal(rl.reserveTokens(k, 8, 22));
    const big = await refusal(rl.reserveTokens(k, 8, 200));
    assert.match(big.message, /more than the 100 tokens per minute/);
    assert.equal(await rl.reserveTokens(key({ tpmLimit: 0 }), 8, 1_000_000), undefined, 'no limit: nothing held');
  });

  test('windows are fixed minutes: a refused key is served again when the minute turns', async () => {
    mock.timers.enable({ apis: ['Date'], now: 1_800_000_000_000 - 1_000 });
    try {
      const rl = new RateLimiter(createWindowStore(), { rpm: 1, tpm: 0 });
      const k = key();
      await rl.check(k);
      const e = await refusal(rl.check(k));
      assert.equal((e.headers as Record<string, string>)['retry-after'], '1', 'one second to the next minute');
      mock.timers.tick(1_000);
      await rl.check(k);
    } finally {
      mock.timers.reset();
    }
  });
});

describe('RateLimiter on Redis (shared by instances)', () => {
  const url = testRedisUrl();
  // one installation's prefix (REDIS_PREFIX), its own: keys no other test or installation uses, removed after
  const redis = { url, prefix: testRedisPrefix('limits') };
  const stores = [createWindowStore(redis), createWindowStore(redis)];
  after(async () => {
    for (const s of stores) await s.close();
    await dropInstallationKeys(url, redis.prefix);
  });

  test('a request right after start waits for the first connection instead of failing', async () => {
    const fresh = createWindowStore(redis);
    try {
      await new RateLimiter(fresh, { rpm: 5, tpm: 0 }).check(key());
    } finally {
      await fresh.close();
    }
  });

  test('two instances count one window: rpm 4 over A and B lets 4 through', async () => {
    const [a, b] = stores.map((s) => new RateLimiter(s, { rpm: 4, tpm: 0 }));
    const k = key();
    await awayFromMinuteEdge(2);
    // the window the checks below count in (the key named after it is read at the end)
    const window = Math.floor(Date.now() / 60_000);
    await a!.check(k);
    await b!.check(k);
    await a!.check(k);
    await b!.check(k);
    await refusal(a!.check(k));
    await refusal(b!.check(k));
    const r = new Redis(url);
    try {
      const ttl = await r.pttl(`${redis.prefix}:rl:rpm:${k.keyId}:${window}`);
      assert.ok(ttl > 60_000 && ttl <= 120_000, `window keys expire after two minutes (pttl ${ttl})`);
    } finally {
      r.disconnect();
    }
  });

  test('tpm reservations over two instances: atomic in Redis, settled back', async () => {
    const [a, b] = stores.map((s) => new RateLimiter(s, { rpm: 0, tpm: 100 }));
    const k = key();
    await awayFromMinuteEdge(2);
    const held = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => (i % 2 ? a! : b!).reserveTokens(k, 5, 20)));
    const ok = held.filter((h) => h.status === 'fulfilled').map((h) => (h as PromiseFulfilledResult<any>).value);
    assert.equal(ok.length, 4, '4 x 25 fit in 100');
    await a!.settleTokens(ok[0], 0);
    await b!.settleTokens(ok[1], 5);
    // 25 + 20 given back: one more fits, a second does not
    assert.ok(await b!.reserveTokens(k, 5, 20));
    await refusal(a!.reserveTokens(k, 5, 20));
  });

  test('tokens added on A refuse on B', async () => {
    const [a, b] = stores.map((s) => new RateLimiter(s, { rpm: 0, tpm: 10 }));
    const k = key();
    await awayFromMinuteEdge(2);
    await a!.addTokens(k, 10);
    await refusal(b!.check(k));
  });

  test('Redis unreachable: the first requests wait at most 2 s for a first connection, then checks fail at once (no offline queue), so requests are answered 503', async () => {
    const dead = createWindowStore({ url: 'redis://127.0.0.1:1/0', prefix: 'unused' });
    try {
      const rl = new RateLimiter(dead, { rpm: 5, tpm: 0 });
      // bounds: the expected time plus what this process's event loop was stalled (a busy machine's slack); a
      // later check that waited for a connection again would take the 2 s, far past its bound
      let stalls = stallWatch();
      let t0 = Date.now();
      await assert.rejects(rl.check(key()));
      assert.ok(Date.now() - t0 < 3_000 + stalls.stop(), `the first check failed after ${Date.now() - t0} ms`);
      stalls = stallWatch();
      t0 = Date.now();
      await assert.rejects(rl.check(key()));
      assert.ok(Date.now() - t0 < 500 + stalls.stop(), `a later check failed after ${Date.now() - t0} ms`);
    } finally {
      await dead.close();
    }
  });
});

describe('per-key concurrency (ConcurrencyLimiter)', () => {
  test("the key's own limit over the default, 0 = unlimited, a release gives back exactly one place however often it is called", () => {
    const c = new ConcurrencyLimiter(2);
    const k = { keyId: 'k_conc', maxConcurrency: null };
    const a = c.take(k);
    const b = c.take(k);
    assert.throws(
      () => c.take(k),
      (e: unknown) => {
        assert.ok(e instanceof AppError);
        assert.equal(e.code, 'concurrency_limit_exceeded');
        assert.equal(e.status, 429);
        assert.equal(e.headers?.['retry-after'], '1');
        return true;
      },
    );
    // another key has its own places
    c.take({ keyId: 'k_other', maxConcurrency: null })();
    a();
    a();
    a();
    assert.equal(c.inUse('k_conc'), 1);
    const d = c.take(k);
    assert.throws(() => c.take(k));
    b();
    d();
    assert.equal(c.inUse('k_conc'), 0);
    // the key's own value wins, both ways; 0 is no limit and holds nothing
    assert.throws(() => {
      c.take({ keyId: 'k_one', maxConcurrency: 1 });
      c.take({ keyId: 'k_one', maxConcurrency: 1 });
    });
    for (let i = 0; i < 5; i++) c.take({ keyId: 'k_five', maxConcurrency: 5 });
    assert.equal(c.inUse('k_five'), 5);
    for (let i = 0; i < 100; i++) c.take({ keyId: 'k_free', maxConcurrency: 0 });
    assert.equal(c.inUse('k_free'), 0);
    const unlimited = new ConcurrencyLimiter(0);
    for (let i = 0; i < 100; i++) unlimited.take(k);
    assert.equal(unlimited.inUse('k_conc'), 0);
  });
});
