/**
 * Migration 0016 (output_audio_seconds) on a database of the release before it, on the embedded database and on
 * PostgreSQL: the rows already there get 0 (they produced no audio that was counted), new rows keep what they give,
 * and the ledger's insert and sums take the column. On PostgreSQL the test works in a schema of its own, dropped after.
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

const MIGRATION = '0016_output_audio_seconds';

/** a database as the release before 0016 left it: the migrations before it applied and logged */
async function before0016(opened: OpenedDb) {
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
    test('rows of the release before get 0, new rows keep theirs, the ledger inserts and sums the column', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'portico-0016-'));
      const schema = `t_outaudio_${randomBytes(5).toString('hex')}`;
      const opened = await openDb(kind === 'postgres' ? { dataDir: dir, databaseUrl: TEST_PG_URL, schema, poolSize: 2 } : { dataDir: dir, inMemory: true });
      try {
        await before0016(opened);
        const db = opened.db as unknown as Kysely<any>;
        // what that release wrote: a usage record (audio taken in) and a request-log row
        await sql`insert into usage_records (record_id, request_id, key_id, user_id, org_id, model, operation, audio_seconds, cost_micros, created_at)
          values ('rec-old', 'req-old', 'key_m', 'mig', 'default', 'm', 'transcription', 2.5, 10, 1790000000)`.execute(db);
        await sql`insert into request_log (request_id, created_at, received_at_ms, method, route, operation, status, latency_ms, audio_seconds)
          values ('req-old', 1790000000, 1790000000000, 'POST', '/v1/x', 'transcription', 200, 1, 2.5)`.execute(db);

        // this migration, then those after it
        assert.deepEqual(
          await opened.migrate(),
          Object.keys(migrations)
            .sort()
            .filter((name) => name >= MIGRATION),
        );

        const old = await sql<{ a: number; o: number }>`select audio_seconds as a, output_audio_seconds as o from usage_records where record_id = 'rec-old'`.execute(db);
        assert.deepEqual(
          old.rows.map((r) => [Number(r.a), Number(r.o)]),
          [[2.5, 0]],
        );
        const log = await sql<{ o: number }>`select output_audio_seconds as o from request_log where request_id = 'req-old'`.execute(db);
        assert.deepEqual(
          log.rows.map((r) => Number(r.o)),
          [0],
        );
        // the column as the migration made it, the same on both databases
        for (const table of ['usage_records', 'request_log']) {
          const col = await sql<{ type: string; nullable: string; def: string | null }>`
            select data_type as type, is_nullable as nullable, column_default as def from information_schema.columns
            where table_schema = current_schema() and table_name = ${table} and column_name = 'output_audio_seconds'`.execute(db);
          assert.equal(col.rows.length, 1, table);
          assert.equal(col.rows[0]!.type, 'double precision', table);
          assert.equal(col.rows[0]!.nullable, 'NO', table);
          assert.match(String(col.rows[0]!.def), /^0/, table);
        }

        // this release's ledger: a record with seconds produced is stored and summed beside the old one
        const store = new UsageStore(opened.db);
        await store.insert([
          {
            record_id: randomUUID(),
            request_id: 'req-new',
            key_id: 'key_m',
            user_id: 'mig',
            org_id: 'default',
            model: 'm',
            operation: 'speech',
            input_tokens: 0,
            output_tokens: 0,
            cached_tokens: 0,
            cache_write_tokens: 0,
            characters: 0,
            audio_seconds: 0,
            output_audio_seconds: 1.75,
            cost_micros: 20,
            created_at: 1790000100,
            spend_epoch: null,
            deployment: null,
          },
        ]);
        const rows = await store.aggregate({ orgId: 'default', userId: 'mig' }, 0, 1790001000, ['model']);
        assert.deepEqual(
          rows.map((r) => [r.model, r.requests, r.audio_seconds, r.output_audio_seconds, r.cost_micros]),
          [['m', 2, 2.5, 1.75, 30]],
        );
        // and again: nothing left to apply
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
