/**
 * The test suite's pool of in-memory PGlite databases (test/helpers/pglite-pool.ts): an app's database is emptied back
 * to the template before the next app of the file gets it, so nothing one test app wrote reaches another, and one the
 * reset cannot vouch for is closed instead of lent again.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { buildTestApp } from '../helpers/app.js';
import { poolCounts } from '../helpers/pglite-pool.js';

const pooled = process.env.PORTICO_TEST_PGLITE_POOL !== 'off' && process.env.PORTICO_TEST_PGLITE_TEMPLATE !== 'off';

/** the rows of every table of the app's database but the migrations', by table */
async function rowsOf(app: Awaited<ReturnType<typeof buildTestApp>>): Promise<Record<string, number>> {
  const tables = await sql<{
    t: string;
  }>`select relname as t from pg_class where relnamespace = current_schema()::regnamespace and relkind = 'r' and relname <> 'portico_migrations'`.execute(app.services.db.db);
  const out: Record<string, number> = {};
  for (const { t } of tables.rows) out[t] = (await sql.raw<{ n: number }>(`select count(*)::int as n from "${t}"`).execute(app.services.db.db)).rows[0]!.n;
  return out;
}

test('the next app gets the database emptied back to the template: no key, no user, no installation id of the last one', { skip: !pooled && 'the pool is off' }, async () => {
  const first = await buildTestApp({});
  const key = await first.inferenceKey('alice');
  const before = await rowsOf(first);
  assert.ok(before.api_keys! >= 1, 'the first app wrote its key');
  const firstSeq = (await sql<{ s: number }>`select min(seq)::int as s from api_keys`.execute(first.services.db.db)).rows[0]!.s;
  const counts = poolCounts();
  await first.close();

  const second = await buildTestApp({});
  try {
    assert.equal(poolCounts().reused, counts.reused + 1, 'the second app was lent the first one database');
    const keys = await sql<{ n: number }>`select count(*)::int as n from api_keys`.execute(second.services.db.db);
    assert.equal(keys.rows[0]!.n, 0);
    const res = await second.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${key}` } });
    assert.equal(res.statusCode, 401, "the first app's key is unknown to the second");
    // what the second app holds is what its own start wrote (its settings: installation, pepper check), nothing more
    const after = await rowsOf(second);
    for (const [table, n] of Object.entries(after)) if (table !== 'settings') assert.equal(n, 0, `${table} is empty`);
    // the sequences start again: the next key made gets the first sequence number, as on a new database
    await second.inferenceKey('bob');
    const seq = await sql<{ s: number }>`select min(seq)::int as s from api_keys`.execute(second.services.db.db);
    assert.equal(seq.rows[0]!.s, firstSeq);
  } finally {
    await second.close();
  }
});

test('an app that has closed cannot reach the database lent to the next app', { skip: !pooled && 'the pool is off' }, async () => {
  const first = await buildTestApp({});
  const db = first.services.db.db;
  await first.close();
  const second = await buildTestApp({});
  try {
    await assert.rejects(sql`select 1`.execute(db), /closed/);
    await assert.rejects(db.selectFrom('api_keys').selectAll().execute(), /closed/);
    assert.equal((await sql<{ n: number }>`select 1 as n`.execute(second.services.db.db)).rows[0]!.n, 1);
  } finally {
    await second.close();
  }
});

test('a database a test changed the shape of, or left inside a transaction, is closed, not lent again', { skip: !pooled && 'the pool is off' }, async () => {
  const shaped = await buildTestApp({});
  await sql`create table pool_test_extra (id int)`.execute(shaped.services.db.db);
  let counts = poolCounts();
  await shaped.close();
  assert.equal(poolCounts().closed, counts.closed + 1);

  const open = await buildTestApp({});
  await sql`begin`.execute(open.services.db.db);
  counts = poolCounts();
  await open.close();
  assert.equal(poolCounts().closed, counts.closed + 1);

  // neither came back: the next app's database has no such table, and is not inside a transaction
  const next = await buildTestApp({});
  try {
    const extra = await sql<{ t: string | null }>`select to_regclass('pool_test_extra')::text as t`.execute(next.services.db.db);
    assert.equal(extra.rows[0]!.t, null);
    await next.inferenceKey('carol');
  } finally {
    await next.close();
  }
});
