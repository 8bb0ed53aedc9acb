/**
 * Budgets across instances: two applications in this process on one PostgreSQL schema, each with its own
 * DATA_DIR (usage journal), sharing one Redis (PORTICO_TEST_REDIS_URL; only the keys under the installation's
 * prefix of its own are touched, and removed after), or sharing nothing but PostgreSQL. The payers are new names
 * on every run too.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Redis } from 'ioredis';
import { buildTestApp, TEST_PG_URL, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { eventually } from './util.js';
import { RedisSpendStore } from '../../src/portal/usage/spend.js';
import { BudgetGuard } from '../../src/portal/usage/budget.js';
import type { UsageScope } from '../../src/portal/usage/store.js';
import { dropInstallationKeys } from '../helpers/redis-keys.js';
import { testRedisPrefix, testRedisUrl } from '../helpers/services.js';
import { stallWatch } from '../helpers/wait.js';

const REDIS_URL = testRedisUrl();
const pgOff = process.env.PORTICO_TEST_PG === 'off';
const run = randomBytes(4).toString('hex');

test('the Redis scripts keep the spend store contract', async () => {
  const prefix = testRedisPrefix('spend');
  const s = new RedisSpendStore(REDIS_URL, async () => '', `${prefix}:spend:`);
  const payer = BudgetGuard.payerOf({ orgId: 'default', userId: `contract-${run}` });
  try {
    const first = await s.read(payer, 'e1');
    assert.deepEqual(first, { epoch: 'e1', used: 0, version: 0 });
    assert.deepEqual(await s.read(payer, 'e2'), first, 'an existing entry keeps its epoch');
    assert.equal(await s.charge(payer, 'e1', 700), true);
    assert.equal(await s.charge(payer, 'other', 5), false, 'a charge tagged with another epoch is not counted');
    await s.settle(payer, ['e1']);
    assert.deepEqual(await s.read(payer, 'x'), { epoch: 'e1', used: 700, version: 0 }, 'records of the current epoch change nothing');
    await s.settle(payer, ['e1', '']);
    assert.equal((await s.read(payer, 'x')).version, 1, 'an uncounted record raises the version');
    await s.refund(payer, 'old', 100);
    await s.refund(payer, 'e1', 200);
    await s.bump(payer);
    assert.deepEqual(await s.read(payer, 'x'), { epoch: 'e1', used: 500, version: 2 });
    await s.reset(payer);
    await s.bump(payer); // no entry: nothing to raise, nothing made
    assert.equal(await s.charge(payer, 'e1', 1), false);
    assert.deepEqual(await s.read(payer, 'e3'), { epoch: 'e3', used: 0, version: 0 });
    await s.reachable();

    // reservations: held only within what is left (base - used - reserved), atomically; dropped by the charge
    const ask = { newEpoch: 'x', epoch: 'e3', version: 0, base: 1000, ttlMs: 60_000 };
    assert.equal((await s.reserve(payer, { ...ask, version: 7, id: 'r0', micros: 1 })).status, 'stale', 'another version: read the ledger again');
    assert.deepEqual(await s.reserve(payer, { ...ask, id: 'r1', micros: 600 }), { status: 'ok', epoch: 'e3', used: 0, version: 0, reserved: 600 });
    assert.equal((await s.reserve(payer, { ...ask, id: 'r2', micros: 401 })).status, 'refused');
    assert.equal((await s.reserve(payer, { ...ask, id: 'r2', micros: 400 })).status, 'ok');
    // r1 settles for 100: its 600 go back, 100 are used
    assert.equal(await s.charge(payer, 'e3', 100, 'r1'), true);
    assert.deepEqual(await s.reserve(payer, { ...ask, id: 'r3', micros: 500 }), { status: 'ok', epoch: 'e3', used: 100, version: 0, reserved: 900 });
    await s.release(payer, 'r3');
    await s.release(payer, 'r3'); // twice: nothing more
    // a reservation of a crashed request expires: the next reservation drops it
    assert.equal((await s.reserve(payer, { ...ask, id: 'r4', micros: 500, ttlMs: 1 })).status, 'ok');
    await eventually(async () => (await s.reserve(payer, { ...ask, id: `r5-${Math.random()}`, micros: 500 })).status === 'ok');
    // nothing left at all: refused even for a free request
    assert.equal((await s.reserve(payer, { ...ask, base: 100, id: 'r6', micros: 0 })).status, 'refused');
  } finally {
    await s.reset(payer);
    await s.close();
    await dropInstallationKeys(REDIS_URL, prefix);
  }
});

describe('two instances on one PostgreSQL and one Redis', { skip: pgOff && 'PORTICO_TEST_PG=off' }, () => {
  let a: TestApp;
  let b: TestApp;
  let up: ScriptedUpstream;
  const schema = `t_budget_${run}`;
  // one installation (one schema): one prefix of its own, its keys removed after
  const prefix = testRedisPrefix('budget');
  const user = `shared-${run}`;
  const scope: UsageScope = { orgId: 'default', userId: user };
  let keyA: string;
  let keyB: string;
  before(async () => {
    up = await startScriptedUpstream({ record: false, defaultReply: { text: 'ok', usage: { prompt_tokens: 3, completion_tokens: 2 } } });
    const opts = {
      db: 'postgres' as const,
      dbSchema: schema,
      env: { BILLING_ENABLED: 'true', REDIS_URL, REDIS_PREFIX: prefix },
      models: [
        { name: 'paid', provider: 'openai-compatible' as const, base_url: up.url, type: 'text' as const, pricing: { input_per_million: 123_457, output_per_million: 98_765 } },
      ],
    };
    a = await buildTestApp(opts);
    b = await buildTestApp(opts);
    keyA = await a.inferenceKey(user);
    keyB = await b.inferenceKey(user);
  });
  after(async () => {
    await a?.close();
    await b?.close();
    await dropInstallationKeys(REDIS_URL, prefix);
    await up?.close();
    const c = new pg.Client({ connectionString: TEST_PG_URL });
    await c.connect();
    await c.query(`drop schema if exists ${schema} cascade`);
    await c.end();
  });

  // max_output_tokens bounds what each request reserves at admission (about 2.6 credits)
  const respond = (t: TestApp, key: string) =>
    t.app.inject({ method: 'POST', url: '/v1/responses', headers: { authorization: `Bearer ${key}` }, payload: { model: 'paid', input: 'hi', max_output_tokens: 16 } });
  const assertExact = async () => {
    await a.services.usage.flush();
    await b.services.usage.flush();
    await a.core.budget.idle();
    await b.core.budget.idle();
    const ledger = await a.services.usage.balance(scope);
    const micros = Math.round(ledger.balance * 1e6);
    assert.equal(await a.core.budget.balance(scope), micros, 'instance A = ledger');
    assert.equal(await b.core.budget.balance(scope), micros, 'instance B = ledger');
    return micros;
  };

  test('a grant on one instance is seen by the other at its next request', async () => {
    assert.equal((await respond(a, keyA)).statusCode, 429);
    await b.services.usage.grant(user, 'default', 1000);
    assert.equal((await respond(a, keyA)).statusCode, 200);
  });

  test('concurrent requests on both instances: both running balances equal the ledger, even when Redis loses the entry', async () => {
    const answers = await Promise.all(Array.from({ length: 80 }, (_, i) => respond(i % 2 ? a : b, i % 2 ? keyA : keyB)));
    assert.deepEqual(
      answers.map((r) => r.statusCode),
      Array(80).fill(200),
    );
    await assertExact();
    // Redis loses the entry while records are still on their way to PostgreSQL
    const redis = new Redis(REDIS_URL);
    const entry = `${prefix}:spend:${await a.services.usage.ledgerId()}:${BudgetGuard.payerOf(scope)}`;
    try {
      assert.equal(await redis.exists(entry), 1);
      const burst = Promise.all(Array.from({ length: 40 }, (_, i) => respond(i % 2 ? a : b, i % 2 ? keyA : keyB)));
      // the scenario: the entry goes while the burst is in flight (a race on purpose, not a wait for something)
      await new Promise((r) => setTimeout(r, 5));
      await redis.del(entry);
      assert.ok((await burst).every((r) => r.statusCode === 200));
      await redis.del(entry);
    } finally {
      redis.disconnect();
    }
    const left = await assertExact();
    assert.ok(left < 1000 * 1e6);
  });

  test('another database on the same Redis (another deployment, a test schema) keeps its own entries', async () => {
    // even under the same prefix (a copy of the database started with the same REDIS_PREFIX): the ledger id tells them apart
    const other = await buildTestApp({
      db: 'postgres',
      env: { BILLING_ENABLED: 'true', REDIS_URL, REDIS_PREFIX: prefix },
      models: [{ name: 'paid', provider: 'openai-compatible', base_url: up.url, type: 'text', pricing: { input_per_million: 1 } }],
    });
    try {
      assert.notEqual(await other.services.usage.ledgerId(), await a.services.usage.ledgerId());
      assert.equal(await other.core.budget.balance(scope), 0);
      assert.equal(
        (
          await other.app.inject({
            method: 'POST',
            url: '/v1/responses',
            headers: { authorization: `Bearer ${await other.inferenceKey(user)}` },
            payload: { model: 'paid', input: 'hi' },
          })
        ).statusCode,
        429,
      );
      assert.ok((await a.core.budget.balance(scope)) > 0);
    } finally {
      await other.close();
    }
  });

  test('the balance is spent across instances and refused on both', async () => {
    const balance = await a.core.budget.balance(scope);
    // b has seen the entry a just read: a charge counts at once only under the epoch its instance saw last
    await b.core.budget.balance(scope);
    // one record takes what is left (as a background response charged on another instance would)
    await b.services.usage.record({
      requestId: `drain-${run}`,
      key: { keyId: 'key_x', userId: user, orgId: 'default' },
      model: 'paid',
      operation: 'responses',
      costMicros: balance,
    });
    // the charge is sent on b's connection to Redis before record() resolves, but a reads on its own connection:
    // the record counts for both once Redis has it (or, had the charge not counted, once it reached the ledger)
    await eventually(async () => (await a.core.budget.balance(scope)) <= 0 && (await b.core.budget.balance(scope)) <= 0, 3000);
    for (const [t, key] of [
      [a, keyA],
      [b, keyB],
    ] as const) {
      const res = await respond(t, key);
      assert.equal(res.statusCode, 429);
      assert.equal(res.json().error.code, 'insufficient_quota');
    }
    assert.equal(await assertExact(), 0);
  });
});

describe('one instance on PostgreSQL without Redis: a grant by another process arrives over LISTEN/NOTIFY', { skip: pgOff && 'PORTICO_TEST_PG=off' }, () => {
  let server: TestApp;
  let cli: TestApp;
  let up: ScriptedUpstream;
  const schema = `t_budget_feed_${run}`;
  const user = `feed-${run}`;
  before(async () => {
    up = await startScriptedUpstream({ record: false, defaultReply: { text: 'ok', usage: { prompt_tokens: 3, completion_tokens: 2 } } });
    const models = [
      { name: 'paid', provider: 'openai-compatible' as const, base_url: up.url, type: 'text' as const, pricing: { input_per_million: 100_000, output_per_million: 100_000 } },
    ];
    server = await buildTestApp({ db: 'postgres', dbSchema: schema, env: { BILLING_ENABLED: 'true' }, models });
    // what `portico credits grant` builds: the same database, billing setting of its own
    cli = await buildTestApp({ db: 'postgres', dbSchema: schema, env: { BILLING_ENABLED: 'false' }, models });
  });
  after(async () => {
    await server?.close();
    await cli?.close();
    await up?.close();
    const c = new pg.Client({ connectionString: TEST_PG_URL });
    await c.connect();
    await c.query(`drop schema if exists ${schema} cascade`);
    await c.end();
  });

  test('refused, then granted elsewhere, then served within moments and charged exactly', async () => {
    const key = await server.inferenceKey(user);
    // each request reserves 1 credit ('hi': 8 input tokens estimated + max_output_tokens 2) and is charged 0.5
    const respond = () =>
      server.app.inject({ method: 'POST', url: '/v1/responses', headers: { authorization: `Bearer ${key}` }, payload: { model: 'paid', input: 'hi', max_output_tokens: 2 } });
    assert.equal((await respond()).statusCode, 429);
    await cli.services.usage.grant(user, 'default', 1.5);
    // a deadline that only bounds a failure: the loop ends when the grant arrived
    const deadline = Date.now() + 10_000;
    let status = 429;
    while (status === 429 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
      status = (await respond()).statusCode;
    }
    assert.equal(status, 200, 'the grant reached the running instance');
    assert.equal((await respond()).statusCode, 200);
    assert.equal((await respond()).statusCode, 429, 'two requests of 0.5 spent the credit a third would reserve');
    await server.services.usage.flush();
    const ledger = await server.services.usage.balance({ orgId: 'default', userId: user });
    assert.deepEqual(ledger, { granted: 1.5, used: 1, balance: 0.5, currency: 'credits' });
    assert.equal(await server.core.budget.balance({ orgId: 'default', userId: user }), 500_000);
  });

  test('a grant whose notification was lost while the listener reconnected is read after the reconnect', async () => {
    const key = await server.inferenceKey(user);
    const respond = () =>
      server.app.inject({ method: 'POST', url: '/v1/responses', headers: { authorization: `Bearer ${key}` }, payload: { model: 'paid', input: 'hi', max_output_tokens: 2 } });
    assert.equal((await respond()).statusCode, 429);
    const feed = server.core.feed as unknown as { client?: { processID?: number } };
    const pid = feed.client?.processID;
    assert.ok(pid, 'the LISTEN connection is up');
    const c = new pg.Client({ connectionString: TEST_PG_URL });
    await c.connect();
    try {
      // the listener's connection is cut, and meanwhile credits are granted with no notification at all
      await c.query('select pg_terminate_backend($1)', [pid]);
      await c.query(`insert into ${schema}.credit_grants (user_id, org_id, amount_micros, note, created_at) values ($1, 'default', 500000, '', 0)`, [user]);
    } finally {
      await c.end();
    }
    const deadline = Date.now() + 5000;
    while (!(feed.client?.processID && feed.client.processID !== pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.ok(feed.client?.processID && feed.client.processID !== pid, 'the listener reconnected');
    assert.equal((await respond()).statusCode, 200, 'after a reconnect every payer is read from the ledger again');
    assert.equal((await respond()).statusCode, 429);
  });
});

describe('Redis cannot be reached', () => {
  let t: TestApp;
  let up: ScriptedUpstream;
  let deadPort: number;
  before(async () => {
    // a port nobody listens on
    const net = await import('node:net');
    deadPort = await new Promise<number>((resolve) => {
      const s = net.createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    up = await startScriptedUpstream({ record: false, defaultReply: { text: 'ok', usage: { prompt_tokens: 3, completion_tokens: 2 } } });
    t = await buildTestApp({
      env: { BILLING_ENABLED: 'true', REDIS_URL: `redis://127.0.0.1:${deadPort}/0` },
      models: [{ name: 'paid', provider: 'openai-compatible', base_url: up.url, type: 'text', pricing: { input_per_million: 100_000 } }],
    });
  });
  after(async () => {
    await t?.close();
    await up?.close();
  });

  test('a request is answered 503 with retry-after (never a 5xx of another kind, never served unbudgeted)', async () => {
    const key = await t.inferenceKey('nobudget');
    for (let i = 0; i < 2; i++) {
      const stalls = stallWatch();
      const t0 = Date.now();
      const res = await t.app.inject({ method: 'POST', url: '/v1/responses', headers: { authorization: `Bearer ${key}` }, payload: { model: 'paid', input: 'hi' } });
      assert.equal(res.statusCode, 503, res.body);
      assert.equal(res.json().error.code, 'service_unavailable');
      assert.equal(res.headers['retry-after'], '1');
      // only the very first command waits for the connection (2 s at most); then it fails at once (500 ms plus
      // what the event loop was stalled: a wait for the connection again would take the 2 s)
      const stalled = stalls.stop();
      if (i === 1) assert.ok(Date.now() - t0 < 500 + stalled, `${Date.now() - t0} ms (${stalled.toFixed(0)} ms of stalls)`);
    }
  });

  test('credits are not granted when the running budgets could not be told', async () => {
    await assert.rejects(t.services.usage.grant('nobudget', 'default', 5), (e: any) => e.code === 'service_unavailable' && /credits not granted/.test(e.message));
    assert.deepEqual(await t.services.usage.balance({ orgId: 'default', userId: 'nobudget' }), { granted: 0, used: 0, balance: 0, currency: 'credits' });
  });
});
