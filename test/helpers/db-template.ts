import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { openDb } from '../../src/platform/db/index.js';
import { TEST_PG_URL } from './services.js';

/**
 * The embedded database every test app starts from: PGlite created (initdb) and migrated once, dumped as a tar file,
 * and loaded by each test's in-memory database instead of running initdb and the migrations again (2.7-5x faster to
 * boot: docs/performance.md, "The test suite").
 *
 * scripts/run-tests.mjs makes it once per run and names it in PORTICO_TEST_PGLITE_TEMPLATE (removed at the end). A test
 * file run alone makes its own in the system's temporary folder, named after the compiled migrations and PGlite's
 * version, so a changed migration gets a new template and an unchanged one is reused. PORTICO_TEST_PGLITE_TEMPLATE=off:
 * every test app creates its database as a first start does (initdb and the migrations; test/helpers/app.ts). Only migrations go into it: the
 * installation id, the key pepper's check and everything else a core writes are made by each test's own core.
 */
let made: Promise<string> | undefined;

export function pgliteTemplate(): Promise<string> {
  const given = process.env.PORTICO_TEST_PGLITE_TEMPLATE;
  if (given && existsSync(given)) return Promise.resolve(given);
  made ??= makeTemplate(join(tmpdir(), `portico-test-pglite-${templateKey()}.tar`));
  return made;
}

/** how makeTemplate makes it: a new way gets a new file rather than one an earlier way left in the temporary folder (2: compacted) */
const TEMPLATE_FORMAT = '2';

/** what the template depends on: the compiled migrations, the PGlite it was made by and how it was made */
export function templateKey(): string {
  const migrations = fileURLToPath(new URL('../../src/platform/db/migrations.js', import.meta.url));
  // the package's exports do not include its package.json: read it beside its entry (dist/index.*)
  const pglite = JSON.parse(readFileSync(join(dirname(createRequire(import.meta.url).resolve('@electric-sql/pglite')), '..', 'package.json'), 'utf8')) as { version: string };
  return createHash('sha256').update(readFileSync(migrations)).update(pglite.version).update(TEMPLATE_FORMAT).digest('hex').slice(0, 16);
}

/** creates and migrates an in-memory database and writes its dump to `path` (atomically: another process may read it) */
export async function makeTemplate(path: string): Promise<string> {
  if (existsSync(path)) return path;
  const db = await openDb({ dataDir: tmpdir(), inMemory: true });
  let bytes: Uint8Array;
  try {
    await db.migrate();
    bytes = await db.dump!();
  } finally {
    await db.close();
  }
  const part = `${path}.${process.pid}.part`;
  writeFileSync(part, await compact(bytes));
  renameSync(part, path);
  return path;
}

/**
 * The migrated database made smaller for every test app to load (each reads, unpacks and copies every byte of it:
 * docs/performance.md, "The test suite"): template0 and template1 dropped (they only serve CREATE DATABASE, which no
 * test runs on the embedded database), the WAL moved to a new segment and the database shut down cleanly, so that the
 * copy holds only the WAL segment with the shutdown checkpoint, cut after its last written page, and no test app's
 * database replays WAL when it opens. 41 MB before, ~9 MB after. Test-only: a production database (a DATA_DIR, the
 * build's packaged template) is made and dumped as before.
 */
async function compact(dump: Uint8Array): Promise<Uint8Array> {
  const { PGlite } = await import('@electric-sql/pglite');
  const dir = mkdtempSync(join(tmpdir(), 'portico-test-template-'));
  try {
    const pg = await PGlite.create(dir, { loadDataDir: new Blob([dump as Uint8Array<ArrayBuffer>]) });
    try {
      for (const name of ['template0', 'template1']) {
        await pg.exec(`alter database ${name} is_template false`);
        await pg.exec(`drop database ${name}`);
      }
      await pg.query('select pg_switch_wal()');
      await pg.exec('checkpoint');
    } finally {
      await pg.close();
    }
    return tarOf(dir, walKept(dir));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const WAL_PAGE = 8192;

/**
 * The WAL segment a cleanly shut down data directory needs (the one holding its last checkpoint, pg_control) and
 * where to cut it (after its last page with data); undefined, keep the WAL as it is, if the directory is not a clean
 * shutdown of the control file's layout this was written for (PostgreSQL 18's: version 1800).
 */
function walKept(dir: string): { name: string; bytes: number } | undefined {
  const control = readFileSync(join(dir, 'global', 'pg_control'));
  const SHUT_DOWN = 1;
  if (control.readUInt32LE(8) !== 1800 || control.readInt32LE(16) !== SHUT_DOWN) return undefined;
  const checkpoint = control.readBigUInt64LE(32);
  const timeline = control.readUInt32LE(48);
  const segmentBytes = 16n * 1024n * 1024n;
  const segment = checkpoint / segmentBytes;
  const perId = 0x100000000n / segmentBytes;
  const hex = (n: bigint | number) => n.toString(16).toUpperCase().padStart(8, '0');
  const name = `${hex(timeline)}${hex(segment / perId)}${hex(segment % perId)}`;
  const wal = readFileSync(join(dir, 'pg_wal', name));
  if (BigInt(wal.length) !== segmentBytes) return undefined;
  let end = 0;
  for (let at = 0; at < wal.length; at += WAL_PAGE) if (wal.subarray(at, at + WAL_PAGE).some((b) => b !== 0)) end = at + WAL_PAGE;
  // the checkpoint record is on a page with data: a cut before it would be a damaged copy
  if (BigInt(end) <= checkpoint % segmentBytes) return undefined;
  return { name, bytes: end };
}

/** A ustar archive of `dir` (what PGlite's loadDataDir reads), with only the WAL segment `wal` names, cut at its length. */
function tarOf(dir: string, wal: { name: string; bytes: number } | undefined): Uint8Array {
  const parts: Uint8Array[] = [];
  const header = (name: string, size: number, dirEntry: boolean) => {
    if (Buffer.byteLength(name) > 100) throw new Error(`a name too long for the template's archive: ${name}`);
    const h = Buffer.alloc(512);
    h.write(name, 0);
    h.write(dirEntry ? '0000750\0' : '0000600\0', 100);
    h.write('0000000\0', 108);
    h.write('0000000\0', 116);
    h.write(`${size.toString(8).padStart(11, '0')}\0`, 124);
    h.write(
      `${Math.floor(Date.now() / 1000)
        .toString(8)
        .padStart(11, '0')}\0`,
      136,
    );
    h.write(dirEntry ? '5' : '0', 156);
    h.write('ustar\0' + '00', 257);
    h.fill(' ', 148, 156);
    let sum = 0;
    for (const b of h) sum += b;
    h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
    parts.push(h);
  };
  const walk = (rel: string) => {
    for (const entry of readdirSync(join(dir, rel), { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const name = rel ? `${rel}/${entry.name}` : entry.name;
      if (entry.isDirectory()) {
        header(name, 0, true);
        walk(name);
        continue;
      }
      const isWal = rel === 'pg_wal' && /^[0-9A-F]{24}$/.test(entry.name);
      if (isWal && wal && entry.name !== wal.name) continue; // a segment before the checkpoint's, or one recycled for later
      let data: Uint8Array = readFileSync(join(dir, name));
      if (isWal && wal) data = data.subarray(0, wal.bytes);
      header(name, data.length, false);
      parts.push(data, new Uint8Array((512 - (data.length % 512)) % 512));
    }
  };
  walk('');
  parts.push(new Uint8Array(1024));
  return Buffer.concat(parts);
}

/**
 * PostgreSQL: the database every test app without a shared schema starts from, migrated once and copied by
 * `CREATE DATABASE ... TEMPLATE` (20-30 ms) instead of running the migrations in a new schema (170-230 ms). Named after
 * the migrations like the PGlite template (`portico_test_tpl_<key>`, which a test file run alone makes and leaves for
 * the next); made under a name of its own and renamed when complete, so no process copies a half-made one.
 * scripts/run-tests.mjs makes one for the run (PORTICO_TEST_PG_TEMPLATE) and drops it after, with every database
 * copied from it.
 */
let pgMade: Promise<string> | undefined;

export function pgTemplateName(): string {
  return process.env.PORTICO_TEST_PG_TEMPLATE || `portico_test_tpl_${templateKey()}`;
}

export function pgTemplateDatabase(): Promise<string> {
  pgMade ??= makePgTemplate();
  return pgMade;
}

function databaseUrl(name: string): string {
  const u = new URL(TEST_PG_URL);
  u.pathname = `/${name}`;
  return u.toString();
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  // loaded when PostgreSQL is used: a test file on the embedded database alone does without it
  const { Client } = (await import('pg')).default;
  const c = new Client({ connectionString: TEST_PG_URL });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** makes the template database (`name`, by default pgTemplateName()) unless it exists */
export async function makePgTemplate(name = pgTemplateName()): Promise<string> {
  const exists = await admin(async (c) => (await c.query('select 1 from pg_database where datname = $1', [name])).rowCount === 1);
  if (exists) return name;
  const part = `${name}_${process.pid}_${randomBytes(3).toString('hex')}`;
  await admin((c) => c.query(`create database "${part}"`));
  try {
    const db = await openDb({ dataDir: tmpdir(), databaseUrl: databaseUrl(part), poolSize: 1 });
    try {
      await db.migrate();
    } finally {
      await db.close();
    }
    await admin(async (c) => {
      try {
        await c.query(`alter database "${part}" rename to "${name}"`);
        await c.query(`alter database "${name}" with is_template true`);
      } catch (e) {
        // another process made it meanwhile: use theirs
        if ((e as { code?: string }).code !== '42P04') throw e;
        await c.query(`drop database if exists "${part}"`);
      }
    });
  } catch (e) {
    await admin((c) => c.query(`drop database if exists "${part}"`)).catch(() => {});
    throw e;
  }
  return name;
}

/** drops a template database and what is left of the databases copied from it (scripts/run-tests.mjs, after a run) */
export async function dropPgTemplate(name: string): Promise<void> {
  await admin(async (c) => {
    const left = await c.query<{ datname: string }>(`select datname from pg_database where starts_with(datname, $1)`, [`${name}_`]);
    for (const { datname } of left.rows) await c.query(`drop database if exists "${datname}" with (force)`);
    await c.query(`alter database "${name}" with is_template false`);
    await c.query(`drop database if exists "${name}" with (force)`);
  }).catch(() => {});
}

/**
 * a database of the test's own, copied from the template: its URL, and how to drop it; undefined when the server does
 * not let the test's user create databases (the app then uses a schema of its own in the test database)
 */
export async function databaseFromTemplate(): Promise<{ url: string; drop(): Promise<void> } | undefined> {
  let template: string;
  try {
    template = await pgTemplateDatabase();
  } catch (e) {
    if ((e as { code?: string }).code === '42501') return undefined; // insufficient_privilege: no CREATEDB
    throw e;
  }
  // a run's copies are named after its template, so that the run drops any a crashed test left (dropPgTemplate)
  const name = process.env.PORTICO_TEST_PG_TEMPLATE ? `${template}_${randomBytes(5).toString('hex')}` : `portico_test_${process.pid}_${randomBytes(5).toString('hex')}`;
  await admin(async (c) => {
    for (let attempt = 0; ; attempt++) {
      try {
        await c.query(`create database "${name}" template "${template}"`);
        return;
      } catch (e) {
        const code = (e as { code?: string }).code;
        // the template was dropped (another run ended, or it was removed by hand): made again
        if (code === '3D000' && attempt < 3) {
          pgMade = undefined;
          template = await pgTemplateDatabase();
          continue;
        }
        // "source database is being accessed by other users": another CREATE DATABASE copying it at this moment
        if (code !== '55006' || attempt >= 50) throw e;
        await new Promise((r) => setTimeout(r, 20 + Math.random() * 80));
      }
    }
  });
  return {
    url: databaseUrl(name),
    drop: () => admin((c) => c.query(`drop database if exists "${name}" with (force)`)).then(() => {}),
  };
}
