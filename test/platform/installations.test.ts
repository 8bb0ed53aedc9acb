/**
 * Installations sharing one Redis, or one PostgreSQL database (docs/deployment.md, "What is shared, and how"): what
 * one installation shares (change-feed messages: key changes, breaker openings, cancels; rate-limit windows;
 * background jobs) is named after it (REDIS_PREFIX, by default `portico:<installation id>`, the id kept in its
 * database), so its own instances hear it and no other installation on the same Redis does (whichever database
 * number it uses: Redis pub/sub ignores the number), and none in another schema of the same PostgreSQL database
 * (NOTIFY ignores the schema). Every installation here uses the one Redis database of PORTICO_TEST_REDIS_URL; most
 * use the default prefix (REDIS_PREFIX ''), which is what is tested, and their keys are removed after.
 *
 * "Never hears": after the message, the other installation publishes a marker on its own feed and waits for it on
 * its own subscriber connection; Redis delivers a connection's messages in the order it handled the PUBLISHes (and
 * PostgreSQL a session's notifications in commit order), so a message that had reached it would have come first.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Redis } from 'ioredis';
import { sql } from 'kysely';
import { buildTestApp, TEST_PG_URL, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { metricValue } from '../helpers/metrics.js';
import { awayFromMinuteEdge } from '../helpers/minute-window.js';
import { parseModelConfig } from '../../src/models/config.js';
import { dropInstallationKeys } from '../helpers/redis-keys.js';
import { testRedisPrefix, testRedisUrl } from '../helpers/services.js';
import { waitFor } from '../helpers/wait.js';

/** the one Redis (and database number) every installation here uses */
const REDIS = testRedisUrl();
/** REDIS_PREFIX '': the default prefix, `portico:<installation id>` */
const DEFAULT_PREFIX = { REDIS_PREFIX: '' };
const pgOff = process.env.PORTICO_TEST_PG === 'off';

type Heard = Array<{ channel: string; message: Record<string, unknown> }>;

/** Listens on `channels` of an instance's feed and keeps what it hears. */
function listen(t: TestApp, channels: string[]): Heard {
  const heard: Heard = [];
  for (const channel of channels) t.core.feed.subscribe(channel, (message) => heard.push({ channel, message }));
  return heard;
}

/** Publishes a marker on the instance's own feed and waits until its own subscriber has it (see the file's comment). */
async function marker(t: TestApp, heard: Heard, channel = 'probe'): Promise<void> {
  const id = randomBytes(6).toString('hex');
  await t.core.feed.publish(channel, { marker: id });
  await waitFor(() => heard.some((h) => h.message.marker === id), { what: `the marker on ${channel}` });
}

const notMarkers = (heard: Heard) => heard.filter((h) => h.message.marker === undefined);

function models(a: ScriptedUpstream, b: ScriptedUpstream) {
  return parseModelConfig(`
models:
  - name: m1
    provider: openai-compatible
    base_url: ${a.url}
    retries: 0
  - name: breaker
    breaker: { failures: 2, cooldown_ms: 60000 }
    retry_backoff_ms: 10
    deployments:
      - { id: br-a, provider: openai-compatible, base_url: ${a.url}, weight: 1 }
      - { id: br-b, provider: openai-compatible, base_url: ${b.url}, weight: 0 }
`).models;
}

describe('installations on one Redis: each hears only its own', { skip: pgOff && 'PORTICO_TEST_PG=off' }, () => {
  const run = randomBytes(4).toString('hex');
  const schemaA = `t_inst_a_${run}`;
  const schemaB = `t_inst_b_${run}`;
  let a: ScriptedUpstream;
  let b: ScriptedUpstream;
  /** installation A: two instances on one PostgreSQL schema; B: another schema; C: PGlite; all on one Redis */
  let a1: TestApp;
  let a2: TestApp;
  let inB: TestApp;
  let inC: TestApp;
  let redis: Redis;

  before(async () => {
    a = await startScriptedUpstream();
    b = await startScriptedUpstream();
    // a request limit makes every key's requests counted in Redis (high enough never to refuse one here)
    const env = { REDIS_URL: REDIS, ...DEFAULT_PREFIX, RATE_LIMIT_RPM: '100000', BACKGROUND_STALE_MS: '1000' };
    a1 = await buildTestApp({ db: 'postgres', dbSchema: schemaA, models: models(a, b), env });
    a2 = await buildTestApp({ db: 'postgres', dbSchema: schemaA, models: models(a, b), env });
    inB = await buildTestApp({ db: 'postgres', dbSchema: schemaB, models: models(a, b), env });
    inC = await buildTestApp({ db: 'pglite', models: models(a, b), env });
    redis = new Redis(REDIS);
  });
  after(async () => {
    for (const t of [a1, a2, inB, inC]) await t?.close();
    // A's and B's keys (their databases are schemas the test made); C's went with it
    for (const t of [a1, inB]) if (t?.core.redisPrefix) await dropInstallationKeys(REDIS, t.core.redisPrefix);
    redis?.disconnect();
    await a?.close();
    await b?.close();
    const c = new pg.Client({ connectionString: TEST_PG_URL });
    await c.connect();
    for (const s of [schemaA, schemaB]) await c.query(`drop schema if exists ${s} cascade`);
    await c.end();
  });

  test('the prefix is derived from the database: one for the instances of an installation, another for each other installation', async () => {
    const prefix = a1.core.redisPrefix!;
    assert.match(prefix, /^portico:[0-9a-f]{16}$/);
    assert.equal(a2.core.redisPrefix, prefix, 'the instances of one installation share it');
    const stored = await a1.core.db.db.selectFrom('settings').select('value').where('key', '=', 'installation_id').executeTakeFirstOrThrow();
    assert.equal(prefix, `portico:${stored.value}`, 'the id kept in the database');
    assert.notEqual(inB.core.redisPrefix, prefix, 'another database (here another schema) is another installation');
    assert.notEqual(inC.core.redisPrefix, prefix);
    assert.notEqual(inC.core.redisPrefix, inB.core.redisPrefix);
  });

  test('a feed message reaches the other instance, and no other installation on the same Redis', async () => {
    const heard = [a2, inB, inC].map((t) => listen(t, ['probe']));
    // each listener is subscribed before anything is published
    for (const [i, t] of [a2, inB, inC].entries()) await marker(t, heard[i]!);
    await a1.core.feed.publish('probe', { from: 'a1' });
    await waitFor(() => notMarkers(heard[0]!).length, { what: 'the message on the other instance' });
    assert.deepEqual(notMarkers(heard[0]!), [{ channel: 'probe', message: { from: 'a1' } }]);
    await marker(inB, heard[1]!);
    await marker(inC, heard[2]!);
    assert.deepEqual(notMarkers(heard[1]!), [], 'B (another schema) heard nothing of A');
    assert.deepEqual(notMarkers(heard[2]!), [], 'C (PGlite) heard nothing of A');
  });

  test('a key revoked on one instance is refused by the other at once; other installations hear nothing of it', async () => {
    const heard = [inB, inC].map((t) => listen(t, ['keys']));
    for (const [i, t] of [inB, inC].entries()) await marker(t, heard[i]!, 'keys');
    const key = await a1.inferenceKey('revoked');
    const list = await a1.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${key}` } });
    assert.equal(list.statusCode, 200);
    // A2 has the key verified in memory
    assert.equal((await a2.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${key}` } })).statusCode, 200);
    const id = (await a1.core.db.db.selectFrom('api_keys').select('id').where('user_id', '=', 'revoked').executeTakeFirstOrThrow()).id;
    const revoked = await a1.app.inject({
      method: 'POST',
      url: '/v1/portal/api-keys/revoke',
      headers: { authorization: `Bearer ${await a1.token('revoked')}` },
      payload: { api_key_id: id },
    });
    assert.equal(revoked.statusCode, 200, revoked.body);
    // well inside KEY_CACHE_FRESH_MS would not do: the entry is fresh for 1 s, so only the message can drop it this soon
    await waitFor(async () => (await a2.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${key}` } })).statusCode === 401, {
      what: 'A2 refuses the key',
    });
    for (const [i, t] of [inB, inC].entries()) {
      await marker(t, heard[i]!, 'keys');
      assert.deepEqual(notMarkers(heard[i]!), [], 'another installation heard nothing of the revocation');
    }
  });

  test("a breaker opened on one instance keeps the other off the deployment; other installations' breakers stay closed", async () => {
    const heard = [inB, inC].map((t) => listen(t, ['route_health', 'probe']));
    const call = (t: TestApp, key: string) =>
      t.app.inject({ method: 'POST', url: '/v1/responses', headers: { authorization: `Bearer ${key}` }, payload: { model: 'breaker', input: 'hi', store: false } });
    const keys = await Promise.all([a1, a2, inB, inC].map((t) => t.inferenceKey('breaker-user')));
    // every instance knows the deployment (its breaker, subscribed to the feed) before A1 opens it
    for (const [i, t] of [a1, a2, inB, inC].entries()) assert.equal((await call(t, keys[i]!)).statusCode, 200);
    const circuit = async (t: TestApp) => metricValue(await t.runtime.scrape(), 'portico_model_circuit_state', { model: 'breaker', deployment: 'br-a' });
    for (const t of [a2, inB, inC]) assert.equal(await circuit(t), 0);
    a.script({ status: 500 }, { status: 500 });
    assert.equal((await call(a1, keys[0]!)).statusCode, 200, 'answered by br-b');
    assert.equal((await call(a1, keys[0]!)).statusCode, 200);
    assert.equal(await circuit(a1), 2, 'open on A1');
    await waitFor(async () => (await circuit(a2)) === 2, { what: 'open on A2' });
    for (const [i, t] of [inB, inC].entries()) {
      await marker(t, heard[i]!);
      assert.deepEqual(
        notMarkers(heard[i]!).filter((h) => h.channel === 'route_health'),
        [],
        'no breaker message of A',
      );
      assert.equal(await circuit(t), 0, "another installation's breaker stays closed");
    }
  });

  test('rate-limit windows: counted once for the installation, under its prefix', async () => {
    const key = await a1.inferenceKey('limited');
    const keyId = (await a1.core.db.db.selectFrom('api_keys').select('id').where('user_id', '=', 'limited').executeTakeFirstOrThrow()).id;
    await awayFromMinuteEdge(10);
    const minute = Math.floor(Date.now() / 60_000);
    const get = (t: TestApp) => t.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${key}` } });
    assert.deepEqual([(await get(a1)).statusCode, (await get(a2)).statusCode, (await get(a1)).statusCode], [200, 200, 200]);
    assert.equal(await redis.get(`${a1.core.redisPrefix}:rl:rpm:${keyId}:${minute}`), '3', "one count of the key's requests on both instances");
    assert.equal(await redis.exists(`portico:rl:rpm:${keyId}:${minute}`), 0, 'nothing outside the prefix');
  });

  test("background jobs go to the installation's own queue and are run by it", async () => {
    a.script({ text: 'later' });
    const key = await a1.inferenceKey('background');
    const made = await a1.app.inject({
      method: 'POST',
      url: '/v1/responses',
      headers: { authorization: `Bearer ${key}` },
      payload: { model: 'm1', input: 'hi', background: true },
    });
    assert.equal(made.statusCode, 200, made.body);
    const id = made.json().id;
    const done = await waitFor<{ output: Array<{ content: Array<{ text: string }> }> } | undefined>(
      async () => {
        const r = await a2.app.inject({ method: 'GET', url: `/v1/responses/${id}`, headers: { authorization: `Bearer ${key}` } });
        return r.json().status === 'completed' ? r.json() : undefined;
      },
      { what: 'the background response completed' },
    );
    assert.equal(done.output[0]!.content[0]!.text, 'later');
    const [, found] = await redis.scan('0', 'MATCH', `${a1.core.redisPrefix}:bull:portico-responses:*`, 'COUNT', 10_000);
    assert.ok(found.length > 0, "BullMQ's keys are under the installation's prefix");
  });

  test('a response queued and never taken (its job lost, or left under the old queue by an older version) is queued again and runs', async () => {
    a.script({ text: 'first' }, { text: 'again' });
    const key = await a1.inferenceKey('requeued');
    const made = await a1.app.inject({
      method: 'POST',
      url: '/v1/responses',
      headers: { authorization: `Bearer ${key}` },
      payload: { model: 'm1', input: 'hi', background: true },
    });
    const source = made.json().id;
    const read = (id: string) => a1.app.inject({ method: 'GET', url: `/v1/responses/${id}`, headers: { authorization: `Bearer ${key}` } }).then((r) => r.json());
    const first = await waitFor(
      async () => {
        const r = await read(source);
        return r.status === 'completed' || r.status === 'failed' ? r : undefined;
      },
      { what: 'the first response ended' },
    );
    assert.equal(first.status, 'completed', JSON.stringify(first));
    // a copy of it, queued a minute ago, whose job no queue of this installation holds
    const id = `resp_${randomBytes(16).toString('hex')}`;
    await sql`
      insert into responses (id, user_id, org_id, key_id, model, status, background, previous_response_id, object, input_items, request, runner_id, heartbeat_at, created_at, updated_at, deleted_at)
      select ${id}, user_id, org_id, key_id, model, 'queued', background, previous_response_id,
             object || jsonb_build_object('id', ${id}::text, 'status', 'queued', 'output', '[]'::jsonb, 'usage', null),
             input_items, request, null, null, created_at - 60, updated_at, null
        from responses where id = ${source}`.execute(a1.core.db.db);
    assert.equal((await read(id)).status, 'queued');
    const done = await waitFor(
      async () => {
        const r = await read(id);
        return r.status === 'completed' ? r : undefined;
      },
      { what: 'the stranded response ran' },
    );
    assert.equal(done!.output[0].content[0].text, 'again');
  });
});

describe('installations on one PostgreSQL database, without Redis (LISTEN/NOTIFY)', { skip: pgOff && 'PORTICO_TEST_PG=off' }, () => {
  test('a message reaches the other instance of the installation (same schema), not the installation in another schema', async () => {
    const run = randomBytes(4).toString('hex');
    const [sa, sb] = [`t_instpg_a_${run}`, `t_instpg_b_${run}`];
    const one = await buildTestApp({ db: 'postgres', dbSchema: sa });
    const two = await buildTestApp({ db: 'postgres', dbSchema: sa });
    const other = await buildTestApp({ db: 'postgres', dbSchema: sb });
    try {
      assert.equal(one.core.feed.kind, 'postgres');
      const heard = [two, other].map((t) => listen(t, ['probe']));
      for (const [i, t] of [two, other].entries()) await marker(t, heard[i]!);
      await one.core.feed.publish('probe', { from: 'one' });
      await waitFor(() => notMarkers(heard[0]!).length, { what: 'the message on the other instance' });
      await marker(other, heard[1]!);
      assert.deepEqual(notMarkers(heard[1]!), [], 'the installation in another schema heard nothing');
    } finally {
      for (const t of [one, two, other]) await t.close();
      const c = new pg.Client({ connectionString: TEST_PG_URL });
      await c.connect();
      for (const s of [sa, sb]) await c.query(`drop schema if exists ${s} cascade`);
      await c.end();
    }
  });
});

describe('installations on embedded databases sharing one Redis', () => {
  test('each has its own prefix and hears nothing of the other; REDIS_PREFIX makes two processes one installation', async () => {
    const shared = testRedisPrefix('inst');
    const apps = [
      await buildTestApp({ env: { REDIS_URL: REDIS, ...DEFAULT_PREFIX } }),
      await buildTestApp({ env: { REDIS_URL: REDIS, ...DEFAULT_PREFIX } }),
      await buildTestApp({ env: { REDIS_URL: REDIS, REDIS_PREFIX: `${shared}:` } }),
      await buildTestApp({ env: { REDIS_URL: REDIS, REDIS_PREFIX: shared } }),
    ];
    try {
      const [x, y, p, q] = apps as [TestApp, TestApp, TestApp, TestApp];
      assert.notEqual(x.core.redisPrefix, y.core.redisPrefix, 'two databases: two installations');
      assert.equal(p.core.redisPrefix, shared, 'REDIS_PREFIX wins (a trailing colon dropped)');
      assert.equal(q.core.redisPrefix, shared);
      const heard = apps.map((t) => listen(t, ['probe']));
      for (const [i, t] of apps.entries()) await marker(t, heard[i]!);
      await x.core.feed.publish('probe', { from: 'x' });
      // p and q share a prefix: one installation, whatever their databases
      await p.core.feed.publish('probe', { from: 'p' });
      await waitFor(() => notMarkers(heard[3]!).length, { what: 'q hears p' });
      assert.deepEqual(notMarkers(heard[3]!), [{ channel: 'probe', message: { from: 'p' } }], 'q heard p, not x');
      await marker(y, heard[1]!);
      assert.deepEqual(notMarkers(heard[1]!), [], 'y heard nothing of x');
      await marker(p, heard[2]!);
      assert.deepEqual(
        notMarkers(heard[2]!).map((h) => h.message.from),
        ['p'],
        'p heard only itself',
      );
    } finally {
      for (const t of apps) await t.close();
      await dropInstallationKeys(REDIS, shared);
    }
  });
});
