import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
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

/** what the template depends on: the compiled migrations and the PGlite it was made by */
export function templateKey(): string {
  const migrations = fileURLToPath(new URL('../../src/platform/db/migrations.js', import.meta.url));
  // the package's exports do not include its package.json: read it beside its entry (dist/index.*)
  const pglite = JSON.parse(readFileSync(join(dirname(createRequire(import.meta.url).resolve('@electric-sql/pglite')), '..', 'package.json'), 'utf8')) as { version: string };
  return createHash('sha256').update(readFileSync(migrations)).update(pglite.version).digest('hex').slice(0, 16);
}

/** creates and migrates an in-memory database and writes its dump to `path` (atomically: another process may read it) */
export async function makeTemplate(path: string): Promise<string> {
  if (existsSync(path)) return path;
  const db = await openDb({ dataDir: tmpdir(), inMemory: true });
  try {
    await db.migrate();
    const bytes = await db.dump!();
    const part = `${path}.${process.pid}.part`;
    writeFileSync(part, bytes);
    renameSync(part, path);
  } finally {
    await db.close();
  }
  return path;
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
