import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { UsageService } from '../../src/portal/usage/service.js';
import { RefusedRecords, UsageJournal } from '../../src/portal/usage/journal.js';
import type { UsageInsert, UsageStore } from '../../src/portal/usage/store.js';
import { captureLog } from '../helpers/log.js';
import { stallWatch, waitFor } from '../helpers/wait.js';

/** A store that keeps rows in memory (unique by record_id, as the table is) and can be made to fail. */
function fakeStore() {
  const rows = new Map<string, UsageInsert>();
  const s = {
    down: false,
    calls: 0,
    /** when each insert began (performance.now()) */
    startedAt: [] as number[],
    rows,
    /** ms an insert takes */
    delayMs: 2,

    /** rows with this model are refused for their content, as PostgreSQL refuses a NUL in text */
    refuseModel: undefined as string | undefined,
    async insert(batch: UsageInsert[]) {
      s.calls++;
      s.startedAt.push(performance.now());
      await new Promise((r) => setTimeout(r, s.delayMs));
      if (s.down) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
      if (batch.some((r) => r.model === s.refuseModel)) throw Object.assign(new Error('invalid byte sequence for encoding "UTF8": 0x00'), { code: '22021' });
      for (const r of batch) if (!rows.has(r.record_id!)) rows.set(r.record_id!, r);
    },
  };
  return s;
}

const service = (store: ReturnType<typeof fakeStore>, dir: string, log = captureLog().log, refused = new RefusedRecords(dir), journal = new UsageJournal(dir)) =>
  new UsageService(store as unknown as UsageStore, journal, { log, refused });

const key = { keyId: 'key_1', userId: 'u', orgId: 'default' };

test('journaled records are shipped in batches, survive a database outage, and none is lost', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-journal-'));
  try {
    const store = fakeStore();
    const usage = service(store, dir);
    for (let i = 0; i < 50; i++) await usage.record({ requestId: `r${i}`, key, model: 'm', operation: 'responses', inputTokens: 1 });
    await waitFor(() => store.rows.size === 50, { what: 'the first 50 rows stored', timeoutMs: 5000 });
    assert.ok(store.calls < 50, `records were batched (${store.calls} inserts for 50 records)`);
    // the database goes away: requests keep being acknowledged, their records wait in the journal
    store.down = true;
    const callsBefore = store.calls;
    for (let i = 50; i < 120; i++) await usage.record({ requestId: `r${i}`, key, model: 'm', operation: 'responses', inputTokens: 1 });
    // a shipment was tried (and refused) while the database was away
    await waitFor(() => store.calls > callsBefore, { what: 'another write tried', timeoutMs: 5000 });
    assert.equal(store.rows.size, 50);
    const spooled = readFileSync(join(dir, 'usage-journal.ndjson'), 'utf8').trim().split('\n').length;
    assert.ok(spooled >= 70, `the journal holds the unshipped records (${spooled})`);
    await assert.rejects(usage.flush(), /ECONNREFUSED/);
    // it comes back: everything arrives by itself, with no new record to trigger it
    store.down = false;
    await waitFor(() => store.rows.size === 120, { what: 'all 120 rows stored', timeoutMs: 8000 });
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
    const first = service(store, dir);
    for (let i = 0; i < 5; i++) await first.record({ requestId: `a${i}`, key, model: 'm', operation: 'responses' });
    // the process dies here (no close): the records are only in the journal
    store.down = false;
    const second = service(store, dir);
    assert.equal(await second.recover(), 5);
    await second.flush();
    assert.equal(store.rows.size, 5);
    // a second recovery of the same records (a crash before the journal was emptied) adds nothing
    const third = service(store, dir);
    await third.recover();
    await third.flush();
    assert.equal(store.rows.size, 5);
    await Promise.all([second.close(), third.close()]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a record the database refuses is set aside in usage-refused.ndjson (0600), logged once at error level, and the rest is stored', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-journal-'));
  try {
    const store = fakeStore();
    store.refuseModel = 'bad';
    const { log, lines } = captureLog();
    const usage = service(store, dir, log);
    const refusedSeen: string[] = [];
    usage.onRefused((row) => refusedSeen.push(row.request_id));
    for (let i = 0; i < 10; i++) await usage.record({ requestId: `ok${i}`, key, model: 'm', operation: 'responses', costMicros: 5 });
    await usage.record({ requestId: 'refused', key, model: 'bad', operation: 'responses', inputTokens: 7, costMicros: 70 });
    await usage.flush();
    assert.equal(store.rows.size, 10, 'the good records of the batch are stored one by one');
    const file = join(dir, 'usage-refused.ndjson');
    assert.equal(statSync(file).mode & 0o777, 0o600);
    const set = new RefusedRecords(dir).read();
    assert.equal(set.length, 1);
    assert.equal(set[0]!.record.request_id, 'refused');
    assert.equal(set[0]!.record.cost_micros, 70);
    assert.equal(set[0]!.record.input_tokens, 7);
    assert.match(set[0]!.reason, /invalid byte sequence/);
    assert.ok(Number.isInteger(set[0]!.refused_at));
    // the journal is emptied only now that the record is safe elsewhere
    assert.equal(readFileSync(join(dir, 'usage-journal.ndjson'), 'utf8'), '');
    const errors = lines.filter((l) => l.level === 'error');
    assert.equal(errors.length, 1);
    assert.equal(errors[0]!.obj.request_id, 'refused');
    assert.equal(errors[0]!.obj.record_id, set[0]!.record.record_id);
    assert.equal(errors[0]!.obj.file, file);
    assert.deepEqual(refusedSeen, ['refused']);
    await usage.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a refused record that cannot be set aside stays in the journal and is tried again: never dropped', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-journal-'));
  try {
    const store = fakeStore();
    store.refuseModel = 'bad';
    const { log, lines } = captureLog();
    // the refused file cannot be written (a full disk): the record must not be dropped with the journal
    class FullDisk extends RefusedRecords {
      full = true;
      override append(row: UsageInsert, reason: string) {
        if (this.full) throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
        super.append(row, reason);
      }
    }
    const refused = new FullDisk(dir);
    const usage = service(store, dir, log, refused);
    await usage.record({ requestId: 'good', key, model: 'm', operation: 'responses' });
    await usage.record({ requestId: 'refused', key, model: 'bad', operation: 'responses', costMicros: 9 });
    await assert.rejects(usage.flush(), /ENOSPC/);
    const journal = () => readFileSync(join(dir, 'usage-journal.ndjson'), 'utf8');
    assert.match(journal(), /"request_id":"refused"/, 'the refused record is still in the journal');
    assert.ok(lines.some((l) => l.level === 'error' && l.obj.request_id === 'refused' && /not set aside/.test(l.msg)));
    // a process that stops now finds it in the journal at its next start
    assert.equal(new UsageJournal(dir).recover().filter((r) => r.request_id === 'refused').length, 1);
    // the disk has room again: the next attempt sets it aside and empties the journal
    refused.full = false;
    await usage.flush();
    assert.deepEqual(
      refused.read().map((l) => l.record.request_id),
      ['refused'],
    );
    assert.equal(journal(), '');
    assert.ok(store.rows.has([...store.rows.keys()][0]!));
    assert.deepEqual(
      [...store.rows.values()].map((r) => r.request_id),
      ['good'],
    );
    await usage.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('close() with the database away ends at once and leaves the records in the journal', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-journal-'));
  try {
    const store = fakeStore();
    store.down = true;
    const usage = service(store, dir);
    for (let i = 0; i < 3; i++) await usage.record({ requestId: `c${i}`, key, model: 'm', operation: 'responses' });
    const stalls = stallWatch();
    const t0 = Date.now();
    await usage.close();
    // at once: within 1 s plus what the event loop was stalled meanwhile
    assert.ok(Date.now() - t0 < 1000 + stalls.stop(), `close took ${Date.now() - t0} ms`);
    const calls = store.calls;
    // a short pause proving a negative: no shipment is tried after close
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(store.calls, calls, 'no shipment after close');
    assert.equal(new UsageJournal(dir).recover().length, 3);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('under a steady load: one INSERT per interval, and the journal holds only what is not in the database yet', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-journal-'));
  try {
    const store = fakeStore();
    store.delayMs = 40;
    // rewritten after every shipment (the default waits until it holds 1 MiB: the next test)
    const usage = service(store, dir, undefined, undefined, new UsageJournal(dir, { rewriteAt: 0 }));
    const journalIds = () =>
      readFileSync(join(dir, 'usage-journal.ndjson'), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l).request_id as string);
    // records keep coming, one every 2 ms for 1.2 s at least (until enough was seen, 10 s at most): never a
    // moment with nothing pending
    let checked = 0;
    let n = 0;
    const t0 = Date.now();
    const minEnd = t0 + 1200;
    const deadline = t0 + 10_000;
    while (Date.now() < minEnd || ((n <= 100 || checked === 0) && Date.now() < deadline)) {
      const id = `s${n++}`;
      await usage.record({ requestId: id, key, model: 'm', operation: 'responses' });
      await new Promise((r) => setTimeout(r, 2));
      // between shipments the journal is what is not stored yet: nothing shipped, everything unshipped
      const storedIds = new Set([...store.rows.values()].map((x) => x.request_id));
      const inJournal = journalIds();
      const stored = inJournal.filter((r) => storedIds.has(r));
      if (store.calls >= 2 && stored.length === 0) checked++;
      const unshipped = Array.from({ length: n }, (_, i) => `s${i}`).filter((r) => !storedIds.has(r));
      const unshippedIds = new Set(unshipped);
      assert.deepEqual(inJournal.filter((r) => unshippedIds.has(r)).sort(), unshipped.sort(), 'every record not in the database is in the journal');
    }
    const elapsed = Date.now() - t0;
    assert.ok(n > 100, `${n} records`);
    // one INSERT per interval (250 ms from one's start to the next's) or so, not one after the other (40 ms each:
    // six times as many), nor one 100 ms after the last ended (2.5 times as many)
    const maxCalls = Math.ceil(elapsed / 250) + 2;
    assert.ok(store.calls <= maxCalls, `${store.calls} inserts for ${n} records in ${elapsed} ms (at most ${maxCalls})`);
    assert.ok(checked > 0, 'the journal was seen holding only unshipped records while the load went on');
    assert.ok(journalIds().length < n / 2, `the journal did not keep everything (${journalIds().length} of ${n} lines)`);
    await usage.flush();
    assert.equal(store.rows.size, n);
    assert.equal(readFileSync(join(dir, 'usage-journal.ndjson'), 'utf8'), '');
    assert.equal(statSync(join(dir, 'usage-journal.ndjson')).mode & 0o777, 0o600, 'the rewritten journal stays private');
    await usage.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('shipments under a steady load start at least 250 ms apart; a record after a quiet spell goes 100 ms after it came', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-journal-'));
  try {
    const store = fakeStore();
    store.delayMs = 5;
    const usage = service(store, dir);
    // a record every 5 ms until four shipments have started (a timer never fires early: the gaps are at least
    // what the service asked for, however loaded the machine)
    let n = 0;
    const deadline = Date.now() + 20_000;
    while (store.startedAt.length < 4 && Date.now() < deadline) {
      await usage.record({ requestId: `s${n++}`, key, model: 'm', operation: 'responses' });
      await new Promise((r) => setTimeout(r, 5));
    }
    assert.ok(store.startedAt.length >= 4, `${store.startedAt.length} shipments`);
    const gaps = store.startedAt.slice(1).map((t, i) => t - store.startedAt[i]!);
    // a timer counts from the event loop's clock, read once per turn in whole milliseconds: up to ~2 ms of slack
    for (const g of gaps) assert.ok(g >= 247, `shipments ${g.toFixed(1)} ms apart: ${gaps.map((x) => x.toFixed(0)).join(', ')}`);
    await usage.flush();
    assert.equal(store.rows.size, n);
    // quiet for longer than the interval: the next record waits 100 ms, not 250, for companions
    const last = store.startedAt.at(-1)!;
    while (performance.now() - last < 300) await new Promise((r) => setTimeout(r, 300 - (performance.now() - last)));
    // the delay the service asks of its timer (an upper bound on the time itself would depend on the machine's load)
    const asked: number[] = [];
    const realSetTimeout = globalThis.setTimeout;
    globalThis.setTimeout = ((fn: () => void, ms?: number) => {
      asked.push(ms ?? 0);
      return realSetTimeout(fn, ms);
    }) as typeof setTimeout;
    try {
      await usage.record({ requestId: 'after', key, model: 'm', operation: 'responses' });
    } finally {
      globalThis.setTimeout = realSetTimeout;
    }
    assert.deepEqual(asked, [100]);
    await usage.flush();
    assert.equal(store.rows.size, n + 1);
    await usage.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('under a steady load the journal is not rewritten after every shipment, only once it reaches its bound', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-journal-'));
  try {
    const store = fakeStore();
    store.delayMs = 20;
    const file = join(dir, 'usage-journal.ndjson');
    const rewriteAt = 64 * 1024;
    const usage = service(store, dir, undefined, undefined, new UsageJournal(dir, { rewriteAt }));
    const seen: Array<{ calls: number; first: string; size: number }> = [];
    const firstId = (text: string) => (text ? (JSON.parse(text.slice(0, text.indexOf('\n'))) as { request_id: string }).request_id : '');
    // the same file grew across two shipments or more (shipped records stayed in it, no rename per shipment):
    // against the first look at each oldest record, a later look, two shipments on or more, at a larger file that
    // still starts with the same record
    const firstLook = new Map<string, { calls: number; size: number }>();
    const grewSince = (o: { calls: number; first: string; size: number }) => {
      if (o.first === '') return false;
      const a = firstLook.get(o.first);
      if (!a) firstLook.set(o.first, o);
      return !!a && o.calls >= a.calls + 2 && o.size > a.size;
    };
    // records keep coming until all three were seen (several shipments, the file growing across two of them,
    // a rewrite), 10 s at most
    const firsts = new Set<string>();
    let n = 0;
    const deadline = Date.now() + 10_000;
    let grew = false;
    while (!(store.calls >= 8 && firsts.size > 1 && grew) && Date.now() < deadline) {
      await usage.record({ requestId: `s${n++}`, key, model: 'm', operation: 'responses' });
      const text = readFileSync(file, 'utf8');
      const o = { calls: store.calls, first: firstId(text), size: text.length };
      seen.push(o);
      firsts.add(o.first);
      if (grewSince(o)) grew = true;
      await new Promise((r) => setTimeout(r, 1));
    }
    assert.ok(store.calls >= 8, `${store.calls} shipments`);
    assert.ok(grew, 'the journal was rewritten or emptied after every shipment');
    // a record line is ~200 characters, several hundred records pass the bound: the journal was rewritten (its
    // oldest record changed) and never grew far past its bound
    assert.ok(firsts.size > 1, `never rewritten after ${n} records`);
    const largest = Math.max(...seen.map((o) => o.size));
    assert.ok(largest < rewriteAt * 2, `the journal grew to ${largest} bytes (bound ${rewriteAt})`);
    await usage.flush();
    assert.equal(store.rows.size, n);
    assert.equal(readFileSync(file, 'utf8'), '', 'all shipped and nothing pending: emptied');
    assert.equal(statSync(file).mode & 0o777, 0o600);
    await usage.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
