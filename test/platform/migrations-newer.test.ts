import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { createCore } from '../../src/compose/core.js';
import { ConfigError, loadConfig } from '../../src/platform/config.js';
import { buildTestApp, testDatabases, TEST_JWT_SECRET, TEST_PG_URL } from '../helpers/app.js';
import { pgliteTemplate } from '../helpers/db-template.js';
import { testPgUrl } from '../helpers/services.js';
import { portico } from '../cli/helpers.js';
import pg from 'pg';

/** a migration no release of this code has: what a newer release leaves in the database */
const FUTURE = '9999_from_a_newer_release';

for (const db of testDatabases()) {
  describe(`a database migrated by a newer release (${db})`, () => {
    test('a running instance stays ready and says so on /readyz (a rolling upgrade replaces it)', async () => {
      const t = await buildTestApp({ db, models: [] });
      try {
        await sql`insert into portico_migrations (name, timestamp) values (${FUTURE}, ${new Date().toISOString()})`.execute(t.services.db.db);
        const r = await t.app.inject({ method: 'GET', url: '/readyz' });
        assert.equal(r.statusCode, 200, r.body);
        const body = r.json();
        assert.equal(body.status, 'ready');
        assert.match(body.checks.migrations, new RegExp(`^ok; 1 newer \\(${FUTURE}\\): a newer release migrated the database`));
      } finally {
        await t.close();
      }
    });

    test('this release refuses to start on it, naming the migrations it does not know; `portico migrate` too (exit 2, one line)', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'portico-newer-'));
      const schema = `t_newer_${randomBytes(5).toString('hex')}`;
      const env = {
        DATA_DIR: dir,
        JWT_SECRET: TEST_JWT_SECRET,
        LOG_LEVEL: 'silent',
        PORTICO_DB: '',
        DATABASE_URL: db === 'postgres' ? TEST_PG_URL : '',
        PORTICO_PGLITE_TEMPLATE: await pgliteTemplate(),
      };
      const open = () => createCore(loadConfig(env), { role: 'command', models: [], dbSchema: db === 'postgres' ? schema : undefined });
      try {
        const first = await open();
        await sql`insert into portico_migrations (name, timestamp) values (${FUTURE}, ${new Date().toISOString()})`.execute(first.db.db);
        await first.close();
        await assert.rejects(open(), (e: Error) => {
          assert.ok(e instanceof ConfigError, String(e));
          assert.match(e.message, /migrated by a newer Portico/);
          assert.match(e.message, new RegExp(FUTURE));
          assert.match(e.message, /restore the backup taken before the upgrade/);
          return true;
        });
        // the command says the same, without a stack, and changes nothing
        const cliEnv = db === 'postgres' ? { ...env, DATABASE_URL: testPgUrl({ searchPath: schema }) } : env;
        for (const args of [['migrate', '--dry-run'], ['migrate']]) {
          const r = await portico(args, cliEnv);
          assert.equal(r.code, 2, `${args.join(' ')}: ${r.stdout} ${r.stderr}`);
          assert.match(r.stderr, /migrated by a newer Portico.*9999_from_a_newer_release/);
          assert.ok(!/\n\s+at /.test(r.stderr), 'no stack');
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
        if (db === 'postgres') {
          const c = new pg.Client({ connectionString: TEST_PG_URL });
          await c.connect();
          await c.query(`drop schema if exists ${schema} cascade`);
          await c.end();
        }
      }
    });
  });
}
