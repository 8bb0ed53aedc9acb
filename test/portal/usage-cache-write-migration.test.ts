/**
 * Migration 0017 (cache_write_tokens) on a database of the release before it, on the embedded database and on
 * PostgreSQL: the usage records already there get 0 (their cache writes were counted as plain input), new records
 * keep what they give, and the ledger's insert and sums take the column. On PostgreSQL the test works in a schema of
 * its own, dropped after.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import { sql, type Kysely } from 'kysely';
import pg from 'pg';
import { openDb, type OpenedDb } from '../../src/platform/db/index.js';
import { migrations } from '../../src/platform/db/migrations.js';
import { UsageStore } from '../../src/portal/usage/store.js';
import { testDatabases, TEST_PG_URL } from '../helpers/app.js';

const MIGRATION = '0017_cache_write_tokens';

/** a database as the release before 0017 left it: the migrations before it applied and logged */
async function before0017(opened: OpenedDb) {
  const db = opened.db;
  await sql`create table portico_migrations (name varchar(255) not null primary key, timestamp varchar(255) not null)`.execute(db);
  for (const name of Object.keys(migrations).sort()) {
    if (name >= MIGRATION) break;
    await migrations[name]!.up(db as never);
    await sql`insert into portico_migrations (name, timestamp) values (${name}, ${new Date().toISOString()})`.execute(db);
  }
}

for (const kind of testDatabases()) {
  describe(`migration ${MIGRATION} (${kind})`, () => {
    test('records of the release before get 0, new records keep theirs, the ledger inserts and sums the column', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'portico-0017-'));
      const schema = `t_cachewrite_${randomBytes(5).toString('hex')}`;
      const opened = await openDb(kind === 'postgres' ? { dataDir: dir, databaseUrl: TEST_PG_URL, schema, poolSize: 2 } : { dataDir: dir, inMemory: true });
      try {
        await before0017(opened);
        const db = opened.db as unknown as Kysely<any>;
        // what that release wrote: a record whose input included cache writes, priced as input
        await sql`insert into usage_records (record_id, request_id, key_id, user_id, org_id, model, operation, input_tokens, cached_tokens, cost_micros, created_at)
          values ('rec-old', 'req-old', 'key_m', 'mig', 'default', 'm', 'responses', 1000, 200, 10, 1790000000)`.execute(db);

        assert.deepEqual(
          await opened.migrate(),
          Object.keys(migrations)
            .sort()
            .filter((name) => name >= MIGRATION),
        );

        const col = await sql<{ type: string; nullable: string; def: string | null }>`
          select data_type as type, is_nullable as nullable, column_default as def from information_schema.columns
          where table_schema = current_schema() and table_name = 'usage_records' and column_name = 'cache_write_tokens'`.execute(db);
        assert.equal(col.rows.length, 1);
        assert.equal(col.rows[0]!.type, 'bigint');
        assert.equal(col.rows[0]!.nullable, 'NO');
        assert.match(String(col.rows[0]!.def), /^0/);
        const old = await sql<{ w: unknown }>`select cache_write_tokens as w from usage_records where record_id = 'rec-old'`.execute(db);
        assert.deepEqual(
          old.rows.map((r) => Number(r.w)),
          [0],
        );

        // this release's ledger: a record with cache writes is stored and summed beside the old one
        const store = new UsageStore(opened.db);
        await store.insert([
          {
            record_id: randomUUID(),
            request_id: 'req-new',
            key_id: 'key_m',
            user_id: 'mig',
            org_id: 'default',
            model: 'm',
            operation: 'responses',
            input_tokens: 1000,
            output_tokens: 0,
            cached_tokens: 200,
            cache_write_tokens: 300,
            characters: 0,
            audio_seconds: 0,
            output_audio_seconds: 0,
            cost_micros: 20,
            created_at: 1790000100,
            spend_epoch: null,
            deployment: null,
          },
        ]);
        const rows = await store.aggregate({ orgId: 'default', userId: 'mig' }, 0, 1790001000, ['model']);
        assert.deepEqual(
          rows.map((r) => [r.model, r.requests, r.input_tokens, r.cached_tokens, r.cache_write_tokens, r.cost_micros]),
          [['m', 2, 2000, 400, 300, 30]],
        );
        assert.deepEqual(await opened.migrate(), []);
      } finally {
        await opened.close();
        rmSync(dir, { recursive: true, force: true });
        if (kind === 'postgres') {
          const c = new pg.Client({ connectionString: TEST_PG_URL });
          await c.connect();
          try {
            await c.query(`drop schema if exists ${schema} cascade`);
          } finally {
            await c.end();
          }
        }
      }
    });
  });
}
