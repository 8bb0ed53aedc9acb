import { describe, test, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, TEST_JWT_SECRET } from '../helpers/app.js';
import { createCore } from '../../src/compose/core.js';
import { loadConfig } from '../../src/platform/config.js';
import { cleanTmp, portico, tmp } from '../cli/helpers.js';
import { pgliteTemplate } from '../helpers/db-template.js';
import { bearer } from './helpers.js';

/** add, list, rm and their refusals, against the environment of one installation; `check` reads it afterwards */
async function walk(env: Record<string, string>) {
  const add = await portico(['operators', 'add', 'rita'], env);
  assert.equal(add.code, 0, add.stderr);
  assert.match(add.stdout, /rita is an operator/);
  const again = await portico(['operators', 'add', 'rita'], env);
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout, /already an operator/);
  assert.equal((await portico(['operators', 'add', 'sam'], env)).code, 0);
  const list = await portico(['operators', 'list'], env);
  assert.equal(list.code, 0, list.stderr);
  assert.match(list.stdout, /^rita\tcli \(by cli\)\t\d{4}-/m);
  assert.match(list.stdout, /^sam\t/m);
  const rm = await portico(['operators', 'rm', 'sam'], env);
  assert.equal(rm.code, 0, rm.stderr);
  assert.match(rm.stdout, /sam is no longer an operator/);
  const rmAgain = await portico(['operators', 'rm', 'sam'], env);
  assert.equal(rmAgain.code, 2);
  assert.match(rmAgain.stderr, /sam is not a recorded operator/);
  const empty = await portico(['operators', 'add', ' '], env);
  assert.notEqual(empty.code, 0);
  assert.match(empty.stderr, /USER must be 1-256 printable characters/);
  const missing = await portico(['operators', 'add'], env);
  assert.notEqual(missing.code, 0);
  assert.match(missing.stderr, /missing required argument/);
}

for (const db of testDatabases()) {
  describe(`portico operators add|list|rm (${db})`, () => {
    after(() => cleanTmp());
    test('recorded in the database, audited, and the admin API agrees', async () => {
      if (db === 'pglite') {
        const dir = tmp();
        const env = { DATA_DIR: dir, JWT_SECRET: TEST_JWT_SECRET, PORTICO_PGLITE_TEMPLATE: await pgliteTemplate() };
        await walk(env);
        const core = await createCore(loadConfig(env), { role: 'command', models: [] });
        try {
          assert.deepEqual(
            (await core.operators.list()).map((o) => [o.user_id, o.source, o.added_by]),
            [['rita', 'cli', 'cli']],
          );
          const audit = await core.audit.list({ actor: 'cli', limit: 10, offset: 0 });
          assert.deepEqual(audit.rows.map((a) => [a.action, a.target]).reverse(), [
            ['operator.add', 'rita'],
            ['operator.add', 'sam'],
            ['operator.remove', 'sam'],
          ]);
          assert.equal((audit.rows[0]!.before as { user_id: string }).user_id, 'sam');
          assert.equal(audit.rows[0]!.after, null);
        } finally {
          await core.close();
        }
        return;
      }
      const t = await buildTestApp({ db });
      try {
        // an operator command reads no key digest: any pepper will do
        await walk({ DATA_DIR: tmp(), DATABASE_URL: t.databaseUrl!, JWT_SECRET: TEST_JWT_SECRET, KEY_PEPPER: 'command-pepper-0123456789abcdef0123456789' });
        const res = await t.app.inject({ method: 'GET', url: '/v1/admin/operators', headers: bearer(await t.token('rita')) });
        assert.equal(res.statusCode, 200, res.body);
        assert.deepEqual(
          res.json().data.list.map((o: any) => o.user_id),
          ['rita'],
        );
        const audit = (await t.app.inject({ method: 'GET', url: '/v1/admin/audit?actor=cli', headers: bearer(await t.token('rita')) })).json().data;
        assert.equal(audit.total, 3);
        assert.equal((await t.app.inject({ method: 'GET', url: '/v1/admin/whoami', headers: bearer(await t.token('sam')) })).statusCode, 403);
      } finally {
        await t.close();
      }
    });
  });
}
