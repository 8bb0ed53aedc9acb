import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { captureLog } from '../helpers/log.js';
import { UsageStore, type UsageInsert } from '../../src/portal/usage/store.js';
import { UsageService } from '../../src/portal/usage/service.js';
import { RefusedRecords, UsageJournal } from '../../src/portal/usage/journal.js';

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
    cache_write_tokens: 2,
    characters: 0,
    audio_seconds: 1.25,
    output_audio_seconds: 2.5,
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

    test('a journal line of an earlier release (no cache_write_tokens, output_audio_seconds, spend_epoch, deployment) replays: stored with their defaults, not refused', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'portico-old-journal-'));
      try {
        // a line as the release before 0016 wrote it (and, older still, before 0005 and 0007; newer, before 0017)
        const { cache_write_tokens: _w, output_audio_seconds: _o, spend_epoch: _s, deployment: _d, ...old } = record('old-1', { audio_seconds: 3 });
        const current = record('old-2', { output_audio_seconds: 4.5 });
        writeFileSync(join(dir, 'usage-journal.ndjson'), `${JSON.stringify(old)}\n${JSON.stringify(current)}\n`);
        // taken as it is, the line would be refused: the insert takes every column from it, a missing one as null
        await assert.rejects(store.insert([old as UsageInsert]));
        const { log, lines } = captureLog();
        const refused = new RefusedRecords(dir);
        const usage = new UsageService(store, new UsageJournal(dir), { log, refused });
        assert.equal(await usage.recover(), 2);
        await usage.flush();
        const got = await stored('old-');
        assert.deepEqual(
          got.map((r) => [r.request_id, r.audio_seconds, r.output_audio_seconds, r.cache_write_tokens, r.spend_epoch, r.deployment, r.cost_micros]),
          [
            ['old-1', 3, 0, 0, null, null, old.cost_micros],
            ['old-2', 1.25, 4.5, 2, null, null, current.cost_micros],
          ],
        );
        assert.deepEqual(refused.read(), [], 'nothing set aside');
        assert.equal(lines.filter((l) => l.level === 'error').length, 0);
        await usage.close();
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    test('a record the database refuses fails the batch with the database error (not a duplicate: no retry hides it)', async () => {
      await assert.rejects(store.insert([record('nul-1'), record('nul-2', { model: 'a\u0000b' })]), (e: { code?: string }) => e.code !== '23505');
      assert.equal((await stored('nul-')).length, 0, 'nothing of the refused batch is stored');
    });
  });
}
