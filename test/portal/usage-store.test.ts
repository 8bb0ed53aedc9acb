import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { UsageStore, type UsageInsert } from '../../src/portal/usage/store.js';

/** a usage record as the ledger makes it */
function record(requestId: string, over: Partial<UsageInsert> = {}): UsageInsert {
  return {
    record_id: randomUUID(),
    request_id: requestId,
    key_id: 'key_store',
    user_id: 'store-user',
    org_id: 'default',
    model: 'm',
    operation: 'responses',
    input_tokens: 12,
    output_tokens: 3,
    cached_tokens: 1,
    characters: 0,
    audio_seconds: 1.25,
    cost_micros: 4_500_000_000_000,
    created_at: 1_790_000_000,
    spend_epoch: null,
    deployment: null,
    ...over,
  };
}

for (const db of testDatabases()) {
  describe(`the usage ledger's batch insert (${db})`, () => {
    let t: TestApp;
    let store: UsageStore;
    before(async () => {
      t = await buildTestApp({ db });
      store = new UsageStore(t.services.db.db);
    });
    after(() => t.close());

    const stored = (prefix: string) => t.services.db.db.selectFrom('usage_records').selectAll().where('request_id', 'like', `${prefix}%`).orderBy('request_id').execute();

    test('a batch is stored with every column as given (numbers, nulls, text)', async () => {
      const rows = [record('all-1'), record('all-2', { spend_epoch: 'ep_1', deployment: 'fast#2', audio_seconds: 0, model: 'модель "q"\\n' })];
      await store.insert(rows);
      const got = await stored('all-');
      assert.equal(got.length, 2);
      for (const [i, r] of rows.entries()) {
        const { id, ...rest } = got[i]!;
        assert.ok(Number(id) > 0);
        assert.deepEqual(rest, r);
      }
    });

    test('a replayed batch (records already in the ledger, and new ones) stores each record once, without an error', async () => {
      const old = [record('replay-1'), record('replay-2')];
      await store.insert(old);
      // a journal replayed after a crash: its records may have reached the ledger already
      await store.insert([old[1]!, record('replay-3'), old[0]!]);
      await store.insert(old);
      assert.deepEqual(
        (await stored('replay-')).map((r) => r.request_id),
        ['replay-1', 'replay-2', 'replay-3'],
      );
    });

    test('a record the database refuses fails the batch with the database error (not a duplicate: no retry hides it)', async () => {
      await assert.rejects(store.insert([record('nul-1'), record('nul-2', { model: 'a\u0000b' })]), (e: { code?: string }) => e.code !== '23505');
      assert.equal((await stored('nul-')).length, 0, 'nothing of the refused batch is stored');
    });
  });
}
