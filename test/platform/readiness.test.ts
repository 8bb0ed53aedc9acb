/**
 * Readiness (issue 21, section 3): /readyz says whether this instance can serve. Redis away is the documented
 * degraded mode (requests go on, except rate-limited keys, budgets and background creates): still ready, the body
 * says Redis is degraded. The database away: not ready (503). Redis and PostgreSQL are reached through TCP
 * proxies the test cuts; the machine's servers are never touched.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Fastify from 'fastify';
import { Kysely, sql } from 'kysely';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { CLUSTER_REDIS } from '../helpers/cluster.js';
import { TEST_PG, testPgUrl, testRedisUrl } from '../helpers/services.js';
import { waitFor } from '../helpers/wait.js';
import { createOpsModule } from '../../src/platform/ops/routes.js';
import { Metrics } from '../../src/platform/ops/metrics.js';
import { PGliteWorkerClient } from '../../src/platform/db/pglite-client.js';
import { PGliteDialect } from '../../src/platform/db/pglite-dialect.js';
import { migrations } from '../../src/platform/db/migrations.js';
import type { ModelSpec } from '../../src/models/config.js';

for (const db of testDatabases()) {
  describe(`/readyz on ${db} with Redis: Redis away is degraded (200), the database away is not ready (503)`, () => {
    let up: ScriptedUpstream;
    let redis: TcpProxy;
    let pg: TcpProxy | undefined;
    let t: TestApp & { url?: string };
    let key: string;
    const readyz = async () => {
      const r = await fetch(`${t.url}/readyz`, { signal: AbortSignal.timeout(6000) });
      return { status: r.status, body: (await r.json()) as { status: string; checks: Record<string, string> } };
    };
    const respond = () =>
      fetch(`${t.url}/v1/responses`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', input: 'hi' }),
        signal: AbortSignal.timeout(10_000),
      });

    before(async () => {
      up = await startScriptedUpstream({ record: false });
      redis = await startTcpProxy(CLUSTER_REDIS.port, CLUSTER_REDIS.host);
      pg = db === 'postgres' ? await startTcpProxy(TEST_PG.port, TEST_PG.host) : undefined;
      const models = [{ name: 'm', provider: 'openai-compatible', type: 'text', base_url: up.url } as ModelSpec];
      const env: Record<string, string> = { REDIS_URL: testRedisUrl(redis.port) };
      if (pg) env.DATABASE_URL = testPgUrl({ viaPort: pg.port });
      t = await buildTestApp({ db, listen: true, models, env });
      key = await t.inferenceKey('rita');
    });
    after(async () => {
      await t?.close();
      await redis?.close();
      await pg?.close();
      await up?.close();
    });

    test('everything up: 200 ready, every check ok', async () => {
      const r = await readyz();
      assert.equal(r.status, 200);
      assert.deepEqual(r.body, { status: 'ready', checks: { database: 'ok', migrations: 'ok', redis: 'ok', models: 'ok' } });
    });

    test('Redis cut: 200 degraded naming Redis, and a request of a key without limits is still served', async () => {
      await redis.cut();
      try {
        const r = await readyz();
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.equal(r.body.status, 'degraded');
        assert.match(r.body.checks.redis!, /^degraded: .+; requests are served, except those of rate-limited keys, budget checks and background creates/);
        assert.equal(r.body.checks.database, 'ok');
        const res = await respond();
        assert.equal(res.status, 200, await res.clone().text());
        assert.equal(((await res.json()) as any).status, 'completed');
      } finally {
        await redis.restore();
      }
      // back to ready once Redis answers again (ioredis reconnects by itself)
      await waitFor(async () => (await readyz()).body.checks.redis === 'ok', { what: 'Redis ok again', timeoutMs: 15_000 });
      assert.equal((await readyz()).body.status, 'ready');
    });

    if (db === 'postgres') {
      test('PostgreSQL cut (with Redis up, then with Redis down too): 503 not ready; ready again once it is back', async () => {
        await pg!.cut();
        try {
          const r = await readyz();
          assert.equal(r.status, 503, JSON.stringify(r.body));
          assert.equal(r.body.status, 'not ready');
          assert.notEqual(r.body.checks.database, 'ok');
          assert.equal(r.body.checks.redis, 'ok');
          await redis.cut();
          const both = await readyz();
          assert.equal(both.status, 503);
          assert.equal(both.body.status, 'not ready');
          assert.match(both.body.checks.redis!, /^degraded: /);
        } finally {
          await redis.restore();
          await pg!.restore();
        }
        await waitFor(
          async () => {
            const r = await readyz();
            return r.status === 200 && r.body.checks.redis === 'ok';
          },
          { what: 'ready again, Redis ok', timeoutMs: 15_000 },
        );
      });
    }
  });
}

describe('/readyz when the embedded database cannot answer (its thread died)', () => {
  let client: PGliteWorkerClient;
  const app = Fastify();
  after(async () => {
    await app.close();
    await client?.close().catch(() => {});
  });

  test('503 not ready, with the database named; Redis is not part of it here', async () => {
    client = await PGliteWorkerClient.open({ postgresqlconf: ['shared_buffers=16MB'] });
    const db = new Kysely<any>({ dialect: new PGliteDialect(client) });
    // the migration log as a migrated database has it: ready before the thread dies
    await sql`create table portico_migrations (name varchar(255) not null primary key, timestamp varchar(255) not null)`.execute(db);
    for (const name of Object.keys(migrations)) await sql`insert into portico_migrations values (${name}, '0')`.execute(db);
    const ops = createOpsModule({ db, metrics: new Metrics(), metricsAccess: { mode: 'loopback' } });
    await app.register(async (scope) => ops.routes.root!(scope));
    await app.ready();
    const before = await app.inject({ method: 'GET', url: '/readyz' });
    assert.equal(before.statusCode, 200, before.body);
    assert.equal(before.json().status, 'ready');
    await client.worker.terminate();
    const r = await app.inject({ method: 'GET', url: '/readyz' });
    assert.equal(r.statusCode, 503);
    const body = r.json();
    assert.equal(body.status, 'not ready');
    assert.match(body.checks.database, /embedded database's thread stopped/);
    assert.equal(body.checks.redis, undefined);
  });
});
