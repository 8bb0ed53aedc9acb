import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { pgliteTemplate } from '../helpers/db-template.js';
import { createCore } from '../../src/compose/core.js';
import { ConfigError, loadConfig } from '../../src/platform/config.js';
import { TEST_JWT_SECRET, TEST_PG_URL, testDatabases } from '../helpers/app.js';

const PEPPER_A = 'pepper-a-0123456789abcdef0123456789abcdef';
const PEPPER_B = 'pepper-b-0123456789abcdef0123456789abcdef';

// Instances that share a database but not KEY_PEPPER would each refuse the keys the others made (401): the
// second one refuses to start instead, saying what to set.
for (const db of testDatabases()) {
  describe(`KEY_PEPPER must be the same for every instance of one database (${db})`, () => {
    test('an operator command does not pin its pepper on a new database', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'portico-pepper-cmd-'));
      try {
        const cmd = await createCore(
          loadConfig({ DATA_DIR: dir, JWT_SECRET: TEST_JWT_SECRET, LOG_LEVEL: 'silent', KEY_PEPPER: PEPPER_B, PORTICO_PGLITE_TEMPLATE: await pgliteTemplate() }),
          { role: 'command' },
        );
        assert.equal((await cmd.db.db.selectFrom('settings').selectAll().where('key', '=', 'key_pepper_fingerprint').execute()).length, 0);
        await cmd.close();
        const served = await createCore(loadConfig({ DATA_DIR: dir, JWT_SECRET: TEST_JWT_SECRET, LOG_LEVEL: 'silent', KEY_PEPPER: PEPPER_A }), { role: 'serve' });
        await served.close();
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    test('a second core with another pepper refuses to start naming KEY_PEPPER; the same pepper starts; the pepper is not stored', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'portico-pepper-'));
      const schema = `t_${randomBytes(6).toString('hex')}`;
      // a new data directory starts from the suite's migrated one (test/helpers/db-template.ts)
      const template = await pgliteTemplate();
      const config = (env: Record<string, string>) =>
        loadConfig({
          DATA_DIR: dir,
          PORTICO_DB: '',
          DATABASE_URL: db === 'postgres' ? TEST_PG_URL : '',
          JWT_SECRET: TEST_JWT_SECRET,
          LOG_LEVEL: 'silent',
          PORTICO_PGLITE_TEMPLATE: template,
          ...env,
        });
      const open = (env: Record<string, string>) => createCore(config(env), { role: 'serve', dbSchema: db === 'postgres' ? schema : undefined });
      try {
        const first = await open({ KEY_PEPPER: PEPPER_A });
        const stored = await first.db.db.selectFrom('settings').selectAll().execute();
        const fp = stored.find((r) => r.key === 'key_pepper_fingerprint');
        assert.ok(fp && /^[0-9a-f]{64}$/.test(fp.value));
        for (const r of stored) assert.ok(!r.value.includes(PEPPER_A) && !r.value.includes(Buffer.from(PEPPER_A).toString('hex')), 'the pepper itself is never stored');
        // PGlite keeps one process per data directory: the first closes before the others open
        if (db === 'pglite') await first.close();

        await assert.rejects(open({ KEY_PEPPER: PEPPER_B }), (e: Error) => {
          assert.ok(e instanceof ConfigError, String(e));
          assert.match(e.message, /^KEY_PEPPER differs from the one this database's keys were made with \(KEY_PEPPER is set, to another value\)/);
          assert.match(e.message, /Set KEY_PEPPER to the same value on every instance/);
          assert.ok(!e.message.includes(PEPPER_A) && !e.message.includes(PEPPER_B));
          return true;
        });
        // no KEY_PEPPER: the instance makes its own under DATA_DIR, which differs too
        // (PostgreSQL: another instance with its own DATA_DIR; PGlite: the same data directory)
        const ownDir = db === 'postgres' ? mkdtempSync(join(tmpdir(), 'portico-pepper-other-')) : dir;
        await assert.rejects(open({ DATA_DIR: ownDir }), /KEY_PEPPER is not set, so this instance made its own/);
        if (ownDir !== dir) rmSync(ownDir, { recursive: true, force: true });
        const same = await open({ KEY_PEPPER: PEPPER_A });
        await same.close();
        if (db === 'postgres') await first.close();
      } finally {
        if (db === 'postgres') {
          const c = new pg.Client({ connectionString: TEST_PG_URL });
          await c.connect();
          await c.query(`drop schema if exists ${schema} cascade`);
          await c.end();
        }
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
}
