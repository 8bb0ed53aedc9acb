import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { UsageService } from '../../src/portal/usage/service.js';
import { UsageJournal } from '../../src/portal/usage/journal.js';
import type { UsageInsert, UsageStore } from '../../src/portal/usage/store.js';

/** A store that keeps rows in memory (unique by record_id, as the table is) and can be made to fail. */
function fakeStore() {
  const rows = new Map<string, UsageInsert>();
  const s = {
    down: false,
    calls: 0,
    rows,
    async insert(batch: UsageInsert[]) {
      s.calls++;
      await new Promise((r) => setTimeout(r, 2));
      if (s.down) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
      for (const r of batch) if (!rows.has(r.record_id!)) rows.set(r.record_id!, r);
    },
  };
  return s;
}

const key = { keyId: 'key_1', userId: 'u', orgId: 'default' };
const until = async (cond: () => boolean, ms = 5000) => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 10));
  }
};

test('journaled records are shipped in batches, survive a database outage, and none is lost', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-journal-'));
  try {
    const store = fakeStore();
    const usage = new UsageService(store as unknown as UsageStore, new UsageJournal(dir));
    for (let i = 0; i < 50; i++) await usage.record({ requestId: `r${i}`, key, model: 'm', operation: 'responses', inputTokens: 1 });
    await until(() => store.rows.size === 50);
    assert.ok(store.calls < 50, `records were batched (${store.calls} inserts for 50 records)`);
    // the database goes away: requests keep being acknowledged, their records wait in the journal
    store.down = true;
    for (let i = 50; i < 120; i++) await usage.record({ requestId: `r${i}`, key, model: 'm', operation: 'responses', inputTokens: 1 });
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(store.rows.size, 50);
    const spooled = readFileSync(join(dir, 'usage-journal.ndjson'), 'utf8').trim().split('\n').length;
    assert.ok(spooled >= 70, `the journal holds the unshipped records (${spooled})`);
    await assert.rejects(usage.flush(), /ECONNREFUSED/);
    // it comes back: everything arrives by itself, with no new record to trigger it
    store.down = false;
    await until(() => store.rows.size === 120, 8000);
    assert.deepEqual([...store.rows.values()].map((r) => r.request_id).sort(), Array.from({ length: 120 }, (_, i) => `r${i}`).sort());
    await usage.flush();
    assert.equal(readFileSync(join(dir, 'usage-journal.ndjson'), 'utf8'), '', 'the journal is emptied once everything is stored');
    await usage.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('records left in the journal by a stopped process are shipped at the next start, once', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-journal-'));
  try {
    const store = fakeStore();
    store.down = true;
    const first = new UsageService(store as unknown as UsageStore, new UsageJournal(dir));
    for (let i = 0; i < 5; i++) await first.record({ requestId: `a${i}`, key, model: 'm', operation: 'responses' });
    // the process dies here (no close): the records are only in the journal
    store.down = false;
    const second = new UsageService(store as unknown as UsageStore, new UsageJournal(dir));
    assert.equal(await second.recover(), 5);
    await second.flush();
    assert.equal(store.rows.size, 5);
    // a second recovery of the same records (a crash before the journal was emptied) adds nothing
    const third = new UsageService(store as unknown as UsageStore, new UsageJournal(dir));
    await third.recover();
    await third.flush();
    assert.equal(store.rows.size, 5);
    await Promise.all([second.close(), third.close()]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
