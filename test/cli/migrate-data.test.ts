/**
 * `portico migrate-data --to postgres://...`: an installation on the embedded database moved to a PostgreSQL
 * database of the test's own (made on PORTICO_TEST_DATABASE_URL's server and dropped at the end), then served from
 * there (docs/deployment.md, "From the embedded database to PostgreSQL").
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { appendFileSync, existsSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import pg from 'pg';
import { sql } from 'kysely';
import { cleanTmp, portico, startServe, tmp, type Served } from './helpers.js';
import { TEST_PG_URL } from '../helpers/services.js';
import { pgliteTemplate } from '../helpers/db-template.js';
import { createCore } from '../../src/compose/core.js';
import { loadConfig } from '../../src/platform/config.js';
import { signToken } from '../../src/platform/auth/jwt.js';

after(cleanTmp);

const SECRET = 'migrate-data-test-jwt-secret-0123456789abcdef';
const PEPPER = 'migrate-data-test-key-pepper-0123456789abcdef';
const END = Math.floor(Date.now() / 1000) + 86_400;

/** runs `fn` on a connection to `url` (by default the test server's own database, to create and drop ours) */
async function withClient<T>(fn: (c: pg.Client) => Promise<T>, url = TEST_PG_URL): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

function urlOf(name: string): string {
  const u = new URL(TEST_PG_URL);
  u.pathname = `/${name}`;
  return u.toString();
}

async function rowsIn(url: string): Promise<Record<string, number>> {
  return withClient(async (c) => {
    const out: Record<string, number> = {};
    for (const t of ['api_keys', 'usage_records', 'credit_grants', 'responses', 'response_events', 'settings'])
      out[t] = Number((await c.query(`select count(*) as n from ${t}`)).rows[0].n);
    return out;
  }, url);
}

const input = [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'h\u00e9llo \u2603 "quoted" \\ back' }] }, [1, 2, [3, null]]];
const object = { id: 'resp_moved', object: 'response', status: 'completed', output: [], metadata: { k: 'v' }, usage: { input_tokens: 7 } };

test(
  'migrate-data copies keys, usage, grants and stored responses into an empty PostgreSQL database in one transaction; Portico serves them there',
  { timeout: 300_000 },
  async (t) => {
    const name = `portico_migrate_data_${process.pid}_${randomBytes(4).toString('hex')}`;
    try {
      await withClient((c) => c.query(`create database "${name}"`));
    } catch (e) {
      if ((e as { code?: string }).code === '42501') return t.skip('the test user may not create databases');
      throw e;
    }
    const url = urlOf(name);
    const src = tmp();
    const env = { DATA_DIR: src, JWT_SECRET: SECRET, KEY_PEPPER: PEPPER, PORTICO_PGLITE_TEMPLATE: await pgliteTemplate() };
    let server: Served | undefined;
    try {
      // the installation on the embedded database: a key, usage, a grant, a stored response and its event
      let key: string;
      let keyId: string;
      {
        const core = await createCore(loadConfig(env), { role: 'command', models: [] });
        try {
          const k = await core.keys.inference.create({ userId: 'alice', orgRoles: {} }, { name: 'moved' });
          key = k.api_key;
          keyId = k.id;
          for (let i = 0; i < 3; i++)
            await core.usage.record({
              requestId: `req_${i}`,
              key: { keyId, userId: 'alice', orgId: 'default' },
              model: 'up',
              operation: 'chat',
              inputTokens: 10 + i,
              outputTokens: 5,
              costMicros: 1500,
            });
          await core.usage.grant('alice', 'default', 12.5, 'welcome');
          await sql`insert into responses (id, user_id, org_id, key_id, model, status, object, input_items, created_at, updated_at)
          values ('resp_moved', 'alice', 'default', ${keyId}, 'up', 'completed', ${JSON.stringify(object)}::jsonb, ${JSON.stringify(input)}::jsonb, 1, 2)`.execute(core.db.db);
          await sql`insert into response_events (response_id, seq, event) values ('resp_moved', 0, ${JSON.stringify({ type: 'response.completed', list: [1, 'two'] })}::jsonb)`.execute(
            core.db.db,
          );
        } finally {
          await core.close();
        }
      }
      // a record a stopped server left in its journal, not in the database yet
      appendFileSync(
        join(src, 'usage-journal.ndjson'),
        JSON.stringify({
          record_id: randomUUID(),
          request_id: 'req_journal',
          key_id: keyId,
          user_id: 'alice',
          org_id: 'default',
          model: 'up',
          operation: 'chat',
          input_tokens: 1,
          output_tokens: 1,
          cached_tokens: 0,
          characters: 0,
          audio_seconds: 0,
          cost_micros: 100,
          created_at: Math.floor(Date.now() / 1000),
          spend_epoch: null,
          deployment: null,
        }) + '\n',
      );

      // a copy that fails half-way (the target refuses the usage rows) leaves nothing behind: one transaction
      const pgEnv = { DATABASE_URL: url, DATA_DIR: tmp(), JWT_SECRET: SECRET, KEY_PEPPER: PEPPER };
      assert.equal((await portico(['migrate'], pgEnv)).code, 0);
      await withClient((c) => c.query(`alter table usage_records add constraint refuse_journal check (request_id <> 'req_journal')`), url);
      const failed = await portico(['migrate-data', '--to', url], env);
      assert.equal(failed.code, 2, failed.stdout + failed.stderr);
      // the journal's record went into the embedded database first (as the next start would have shipped it)
      assert.match(failed.stdout, /^usage journal: 1 records not in the database yet were stored first\n/);
      assert.match(failed.stderr, /the copy failed and was rolled back \(the target holds no data of it\): .*refuse_journal/);
      assert.deepEqual(await rowsIn(url), { api_keys: 0, usage_records: 0, credit_grants: 0, responses: 0, response_events: 0, settings: 0 });
      await withClient((c) => c.query('alter table usage_records drop constraint refuse_journal'), url);

      // into the migrated, empty target: every table copied and counted
      const r = await portico(['migrate-data', '--to', url], env);
      assert.equal(r.code, 0, r.stderr);
      for (const line of ['api_keys: 1 = 1', 'usage_records: 4 = 4', 'credit_grants: 1 = 1', 'responses: 1 = 1', 'response_events: 1 = 1'])
        assert.ok(r.stdout.includes(`  ${line}\n`), `${line} in:\n${r.stdout}`);
      assert.match(r.stdout, /target .*: already at this release/);
      assert.match(r.stdout, /\n {2}KEY_PEPPER: the same value as now .*\n {2}JWT_SECRET: the same value as now/);
      assert.match(r.stdout, /The embedded database in .* is unchanged/);
      assert.equal(existsSync(join(src, 'pglite', 'PG_VERSION')), true);

      // jsonb (arrays, unicode, escapes) arrives as it was
      await withClient(async (c) => {
        const row = (await c.query(`select object, input_items from responses where id = 'resp_moved'`)).rows[0];
        assert.deepEqual(row.object, object);
        assert.deepEqual(row.input_items, input);
        const ev = (await c.query(`select event from response_events`)).rows[0];
        assert.deepEqual(ev.event, { type: 'response.completed', list: [1, 'two'] });
      }, url);

      // a target holding Portico data is refused, and left as it is
      const before = await rowsIn(url);
      const again = await portico(['migrate-data', '--to', url], env);
      assert.equal(again.code, 2);
      assert.match(again.stderr, /already holds Portico data \(.*api_keys: 1 rows.*\): migrate-data writes only into an empty database\. Nothing was written\.\n$/);
      assert.deepEqual(await rowsIn(url), before);

      // the usage as the embedded installation reports it
      let expected: unknown;
      {
        const core = await createCore(loadConfig(env), { role: 'command', models: [] });
        try {
          expected = JSON.parse(JSON.stringify(await core.usage.usage({ orgId: 'default', userId: 'alice' }, 0, END, ['model', 'key'])));
        } finally {
          await core.close();
        }
      }

      // Portico on PostgreSQL with the same settings: the key works, the usage and the balance are there, new rows get new ids
      server = await startServe({ ...pgEnv, DATA_DIR: tmp() });
      const jwt = await signToken(new TextEncoder().encode(SECRET), { userId: 'alice', ttlSeconds: 600 });
      const models = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
      assert.equal(models.status, 200, 'the key made on the embedded database authenticates on PostgreSQL');
      const usage = await fetch(`${server.url}/v1/portal/query/usage?group_by=model,key&start_time=0&end_time=${END}`, { headers: { authorization: `Bearer ${jwt}` } });
      assert.equal(usage.status, 200);
      const got = ((await usage.json()) as { data: { total: { requests: number } } }).data;
      assert.deepEqual(got, expected);
      assert.equal(got.total.requests, 4);
      const made = await fetch(`${server.url}/v1/portal/api-keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'new on postgres' }),
      });
      assert.equal(made.status, 200, await made.clone().text());
      const grant = await portico(['credits', 'grant', '--user', 'alice', '--amount', '1'], pgEnv);
      assert.equal(grant.code, 0, grant.stderr);
      assert.match(grant.stdout, /balance 13\.4954$/m, 'the grant made on the embedded database is counted (12.5 + 1 - 0.0046 used)');
    } finally {
      await server?.stop();
      await withClient((c) => c.query(`drop database if exists "${name}" with (force)`));
    }
  },
);

test('migrate-data refuses a bad URL and an unreachable server, naming them without the password', { timeout: 120_000 }, async () => {
  const src = tmp();
  const env = { DATA_DIR: src, PORTICO_PGLITE_TEMPLATE: await pgliteTemplate() };
  const none = await portico(['migrate-data', '--to', 'postgres://127.0.0.1:1/x'], env);
  assert.equal(none.code, 2);
  assert.match(none.stderr, /there is no embedded database in .*: nothing to copy/);
  assert.equal((await portico(['migrate'], env)).code, 0);
  const bad = await portico(['migrate-data', '--to', 'not a url'], env);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /^portico: --to must be a PostgreSQL URL: postgres:\/\/USER:PASSWORD@HOST:5432\/DATABASE\n$/);
  const mysql = await portico(['migrate-data', '--to', 'mysql://h/db'], env);
  assert.equal(mysql.code, 2);
  assert.match(mysql.stderr, /--to must start with postgres:\/\/ or postgresql:\/\//);
  // a port nothing listens on
  const port = await new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
  const down = await portico(['migrate-data', '--to', `postgres://portico:sekrit-password@127.0.0.1:${port}/portico`], env);
  assert.equal(down.code, 2);
  assert.match(
    down.stderr,
    new RegExp(`^portico: cannot use the PostgreSQL database at postgres://portico:\\*\\*\\*@127\\.0\\.0\\.1:${port}/portico: ECONNREFUSED.*Nothing was written\\.\\n$`),
  );
  assert.doesNotMatch(down.stdout + down.stderr, /sekrit/);
  const withUrl = await portico(['migrate-data', '--to', 'postgres://127.0.0.1:1/x'], { ...env, DATABASE_URL: 'postgres://127.0.0.1:1/y' });
  assert.equal(withUrl.code, 2);
  assert.match(withUrl.stderr, /DATABASE_URL is set: migrate-data copies the embedded database/);
});
