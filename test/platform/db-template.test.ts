/**
 * The embedded database every test app starts from (test/helpers/db-template.ts) is made smaller than a plain dump:
 * one database, and of the WAL only the segment with the shutdown checkpoint, cut after its last written page. A
 * database loaded from it must work as one loaded from the plain dump: write past the cut and into new segments,
 * dump and load again, and, on disk, recover after a crash.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, openAsBlob, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { migrations } from '../../src/platform/db/migrations.js';
import { pgliteTemplate } from '../helpers/db-template.js';

const CONF = { postgresqlconf: ['shared_buffers=8MB'] };
const SEGMENT = 16 * 1024 * 1024;
/** ~20 MB of rows: more WAL than a segment holds */
const FILL = `insert into big select g, repeat(md5(g::text), 20) from generate_series(1, 20000) g`;

test("the suite's template: the migrated database alone, with a WAL segment cut short; loaded, it writes past the cut into new segments and dumps and loads again", async () => {
  const db = await PGlite.create({ loadDataDir: await openAsBlob(await pgliteTemplate()), ...CONF });
  try {
    assert.deepEqual((await db.query('select datname from pg_database')).rows, [{ datname: 'postgres' }]);
    const done = await db.query<{ n: number }>('select count(*)::int as n from portico_migrations');
    assert.equal(done.rows[0]!.n, Object.keys(migrations).length);
    const wal = await db.query<{ size: number }>(`select size::int from pg_ls_waldir() where name ~ '^[0-9A-F]{24}$'`);
    assert.equal(wal.rows.length, 1);
    assert.ok(wal.rows[0]!.size < SEGMENT, `a WAL segment of ${wal.rows[0]!.size} bytes`);
    await db.exec('create table big (id int primary key, s text)');
    await db.exec(FILL);
    await db.exec('checkpoint');
    await db.exec(`insert into big values (0, 'after the checkpoint')`);
    const dump = await db.dumpDataDir('none');
    const again = await PGlite.create({ loadDataDir: dump, ...CONF });
    try {
      assert.deepEqual((await again.query('select count(*)::int as n from big')).rows, [{ n: 20001 }]);
    } finally {
      await again.close();
    }
  } finally {
    await db.close();
  }
});

test("the suite's template on disk: a database that was not closed (a crash) recovers its committed rows from the cut WAL segment", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-test-template-disk-'));
  try {
    const first = await PGlite.create(join(dir, 'a'), { loadDataDir: await openAsBlob(await pgliteTemplate()), ...CONF });
    try {
      await first.exec(`create table t (a int); insert into t values (1), (2)`);
      // its files while it is open: what a killed process leaves
      cpSync(join(dir, 'a'), join(dir, 'b'), { recursive: true });
    } finally {
      await first.close();
    }
    const db = await PGlite.create(join(dir, 'b'), CONF);
    try {
      assert.deepEqual((await db.query('select count(*)::int as n from t')).rows, [{ n: 2 }]);
      await db.exec('insert into t values (3)');
    } finally {
      await db.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
