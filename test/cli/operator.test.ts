import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, TEST_JWT_SECRET, type TestApp } from '../helpers/app.js';
import { createCore, type Core } from '../../src/compose/core.js';
import { KeyVerifier } from '../../src/portal/keys/verifier.js';
import { loadConfig } from '../../src/platform/config.js';
import { cleanTmp, portico, tmp } from './helpers.js';
import { pgliteTemplate } from '../helpers/db-template.js';
import { dropInstallationKeys } from '../helpers/redis-keys.js';
import { TEST_REDIS, testRedisPrefix, testRedisUrl } from '../helpers/services.js';

for (const db of testDatabases()) {
  describe(`portico keys disable/enable and credits grant against ${db === 'pglite' ? 'a PGlite DATA_DIR' : 'a PostgreSQL schema'}`, () => {
    after(() => {
      cleanTmp();
    });

    if (db === 'pglite') {
      test('a DATA_DIR no server has open', async () => {
        const dir = tmp();
        // the new data directory starts from the suite's migrated one (test/helpers/db-template.ts)
        const env = { DATA_DIR: dir, JWT_SECRET: TEST_JWT_SECRET, PORTICO_PGLITE_TEMPLATE: await pgliteTemplate() };
        const open = async () => {
          const core = await createCore(loadConfig(env), { role: 'command', models: [] });
          return Object.assign(core, { verifier: new KeyVerifier(core.keys.store, core.config.keyPepper, 0, 60_000) });
        };
        const closeServices = (c: Core) => c.close();
        let s = await open();
        const user = { userId: 'op-user', orgRoles: {} };
        const sk = await s.keys.inference.create(user, { name: 'cli target' });
        const mk = await s.keys.management.create(user, { name: 'cli target' });
        await closeServices(s);

        for (const id of [sk.id, mk.id]) {
          const r = await portico(['keys', 'disable', id], env);
          assert.equal(r.code, 0, r.stderr);
          assert.match(r.stdout, new RegExp(`${id}: disabled`));
        }
        const grant = await portico(['credits', 'grant', '--user', 'op-user', '--amount', '12.5', '--note', 'welcome'], env);
        assert.equal(grant.code, 0, grant.stderr);
        assert.match(grant.stdout, /granted 12.5 credits to user op-user; balance 12.5/);
        const unknown = await portico(['keys', 'enable', 'key_nope'], env);
        assert.notEqual(unknown.code, 0);
        assert.match(unknown.stderr, /API key not found/);

        s = await open();
        try {
          await assert.rejects(s.verifier.verify(sk.api_key, 'inference'), (e: any) => e.code === 'api_key_disabled');
          await assert.rejects(s.verifier.verify(mk.api_key, 'management'), (e: any) => e.code === 'api_key_disabled');
          assert.deepEqual(await s.usage.balance({ orgId: 'default', userId: 'op-user' }), { granted: 12.5, used: 0, balance: 12.5, currency: 'credits' });
        } finally {
          await closeServices(s);
        }
        const en = await portico(['keys', 'enable', sk.id], env);
        assert.equal(en.code, 0, en.stderr);
        s = await open();
        try {
          assert.equal((await s.verifier.verify(sk.api_key, 'inference')).keyId, sk.id);
        } finally {
          await closeServices(s);
        }
      });
    } else {
      let t: TestApp;
      let env: Record<string, string>;
      before(async () => {
        t = await buildTestApp({ db });
        env = { DATABASE_URL: t.databaseUrl!, JWT_SECRET: TEST_JWT_SECRET, DATA_DIR: tmp() };
      });
      after(() => t.close());

      test('disable and enable a key while the server runs; credits grant changes the balance', async () => {
        const key = await t.inferenceKey('op-user');
        const id = (await t.services.db.db.selectFrom('api_keys').select('id').where('user_id', '=', 'op-user').executeTakeFirstOrThrow()).id;
        const r = await portico(['keys', 'disable', id], env);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.stdout, new RegExp(`${id}: disabled`));
        const models = () => t.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${key}` } });
        const res = await models();
        assert.equal(res.statusCode, 401);
        assert.equal(res.json().error.code, 'api_key_disabled');
        const jwt = await t.token('op-user');
        const listed = (await t.app.inject({ method: 'GET', url: '/v1/portal/api-keys?status=disabled', headers: { authorization: `Bearer ${jwt}` } })).json();
        assert.deepEqual(
          listed.data.list.map((k: any) => k.id),
          [id],
        );
        const en = await portico(['keys', 'enable', id], env);
        assert.equal(en.code, 0, en.stderr);
        // another process changed it: this one sees it once its cached entry is older than KEY_CACHE_FRESH_MS (1 s)
        const end = Date.now() + 10_000;
        let status = 0;
        while (Date.now() < end && (status = (await models()).statusCode) !== 200) await new Promise((r) => setTimeout(r, 100));
        assert.equal(status, 200);

        const before = (await t.app.inject({ method: 'GET', url: '/v1/portal/query/balance', headers: { authorization: `Bearer ${jwt}` } })).json().data;
        assert.equal(before.granted, 0);
        const g = await portico(['credits', 'grant', '--user', 'op-user', '--amount', '7'], env);
        assert.equal(g.code, 0, g.stderr);
        const orgGrant = await portico(['credits', 'grant', '--org', 'acme', '--amount', '100'], env);
        assert.equal(orgGrant.code, 0, orgGrant.stderr);
        const after = (await t.app.inject({ method: 'GET', url: '/v1/portal/query/balance', headers: { authorization: `Bearer ${jwt}` } })).json().data;
        assert.deepEqual(after, { granted: 7, used: 0, balance: 7, currency: 'credits', billing_enabled: false });
        const admin = await t.token('boss', { acme: 'admin' });
        const org = (await t.app.inject({ method: 'GET', url: '/v1/portal/query/balance?org_id=acme', headers: { authorization: `Bearer ${admin}` } })).json().data;
        assert.equal(org.granted, 100);
      });

      test('with Redis set and background jobs waiting, every command exits at once and takes no job', async () => {
        // an installation prefix of its own (REDIS_PREFIX: nothing else in that Redis is read, written or removed), with
        // three jobs waiting in the installation's queue as a serving instance would have queued them
        const redisUrl = testRedisUrl();
        const prefix = testRedisPrefix('operator');
        const { Queue } = await import('bullmq');
        const queue = new Queue('portico-responses', { prefix: `${prefix}:bull`, connection: TEST_REDIS });
        try {
          for (const id of ['resp_wait1', 'resp_wait2', 'resp_wait3']) await queue.add('respond', { id }, { jobId: id });
          const withRedis = { ...env, REDIS_URL: redisUrl, REDIS_PREFIX: prefix };
          const key = await t.inferenceKey('redis-op');
          const id = (await t.services.db.db.selectFrom('api_keys').select('id').where('user_id', '=', 'redis-op').executeTakeFirstOrThrow()).id;
          for (const args of [
            ['keys', 'disable', id],
            ['keys', 'enable', id],
            ['keys', 'limit', id, '--rpm', '5'],
            ['credits', 'grant', '--user', 'redis-op', '--amount', '1'],
            ['migrate'],
            ['migrate', '--dry-run'],
          ]) {
            const t0 = Date.now();
            const run = await portico(args, withRedis);
            const ms = Date.now() - t0;
            assert.equal(run.code, 0, `${args.join(' ')}: ${run.stderr}`);
            // a hung command would be killed by the 60 s timeout of portico(); a finished one is far quicker
            assert.ok(ms < 20_000, `${args.join(' ')} took ${ms} ms`);
          }
          const counts = await queue.getJobCounts('waiting', 'active', 'completed', 'failed');
          assert.deepEqual([counts.waiting, counts.active, counts.completed, counts.failed], [3, 0, 0, 0], `no command took a job: ${JSON.stringify(counts)}`);
          assert.ok(key.startsWith('sk-'));
        } finally {
          await queue.obliterate({ force: true }).catch(() => {});
          await queue.close();
          await dropInstallationKeys(redisUrl, prefix);
        }
      });
    }
  });
}
