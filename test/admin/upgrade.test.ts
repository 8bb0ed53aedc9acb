import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { openDb } from '../../src/platform/db/index.js';
import { migrations } from '../../src/platform/db/migrations.js';
import { OperatorStore } from '../../src/portal/operators/store.js';
import { Operators } from '../../src/portal/operators/service.js';

/** a database made by the release before operators (migrations up to 0011), holding `rows`, then upgraded */
async function upgraded(withUsers: boolean) {
  const dir = mkdtempSync(join(tmpdir(), 'portico-upgrade-'));
  const opened = await openDb({ dataDir: dir, inMemory: true });
  const db = opened.db;
  await sql`create table portico_migrations (name varchar(255) not null primary key, timestamp varchar(255) not null)`.execute(db);
  for (const name of Object.keys(migrations).sort()) {
    if (name >= '0012') break;
    await migrations[name]!.up(db as never);
    await sql`insert into portico_migrations (name, timestamp) values (${name}, ${new Date().toISOString()})`.execute(db);
  }
  if (withUsers) {
    await db.insertInto('credit_grants').values({ user_id: 'old', org_id: 'default', amount_micros: 1, note: '', created_at: 1 }).execute();
  }
  assert.deepEqual(
    await opened.migrate(),
    Object.keys(migrations)
      .filter((n) => n >= '0012')
      .sort(),
  );
  return { opened, done: () => opened.close().then(() => rmSync(dir, { recursive: true, force: true })) };
}

test('an installation that had users before operators existed is not fresh: its next user to sign in is no operator', async () => {
  const { opened, done } = await upgraded(true);
  try {
    const ops = new Operators(new OperatorStore(opened.db), true);
    await ops.seen({ userId: 'newcomer', orgRoles: {} });
    assert.deepEqual(await ops.list(), []);
  } finally {
    await done();
  }
});

test('an empty installation upgraded is fresh: its first user becomes the operator', async () => {
  const { opened, done } = await upgraded(false);
  try {
    const ops = new Operators(new OperatorStore(opened.db), true);
    await ops.seen({ userId: 'first', orgRoles: {} });
    await ops.seen({ userId: 'second', orgRoles: {} });
    assert.deepEqual(
      (await ops.list()).map((o) => [o.user_id, o.source]),
      [['first', 'first_user']],
    );
  } finally {
    await done();
  }
});
