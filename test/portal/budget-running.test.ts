/**
 * The running balance of BudgetGuard against the ledger, in every order of events that can happen: a fake
 * ledger (rows in memory, an insert that takes a moment, failures on demand) and a spend store that can fail
 * or lose its entries the way Redis can. Two guards sharing one store stand for two instances sharing Redis
 * (MemorySpendStore's operations are atomic, as the Lua scripts are). The same algorithm on real Redis and
 * real databases: budget.test.ts and budget-instances.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { UsageService, type UsageEvent } from '../../src/portal/usage/service.js';
import { RefusedRecords, UsageJournal } from '../../src/portal/usage/journal.js';
import { BudgetGuard } from '../../src/portal/usage/budget.js';
import { MemorySpendStore, type ReserveAsk, type SpendEntry, type SpendStore } from '../../src/portal/usage/spend.js';
import type { UsageInsert, UsageScope, UsageStore } from '../../src/portal/usage/store.js';
import { captureLog } from '../helpers/log.js';
import { waitFor } from '../helpers/wait.js';

/** The ledger: usage rows (unique by record_id) and grants, with the store's balance rules. */
function fakeLedger() {
  const l = {
    rows: new Map<string, UsageInsert>(),
    grants: [] as Array<{ user_id: string; org_id: string; amount_micros: number }>,
    reads: 0,
    down: false,
    refuse: (_r: UsageInsert) => false,
    async insert(batch: UsageInsert[]) {
      await new Promise((r) => setTimeout(r, 3));
      if (l.down) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
      if (batch.some((r) => l.refuse(r))) throw Object.assign(new Error('invalid byte sequence for encoding "UTF8": 0x00'), { code: '22021' });
      for (const r of batch) if (!l.rows.has(r.record_id!)) l.rows.set(r.record_id!, { ...r });
    },
    async grant(userId: string, orgId: string, amountMicros: number) {
      l.grants.push({ user_id: userId, org_id: orgId, amount_micros: amountMicros });
    },
    async balance(scope: UsageScope, exceptEpoch?: string) {
      l.reads++;
      await new Promise((r) => setTimeout(r, 2));
      const mine = (r: { user_id: string; org_id: string }) => r.org_id === scope.orgId && (scope.userId === undefined || r.user_id === scope.userId);
      const granted = l.grants.filter((g) => g.org_id === scope.orgId && g.user_id === (scope.userId ?? '')).reduce((s, g) => s + g.amount_micros, 0);
      const used = [...l.rows.values()].filter((r) => mine(r) && (exceptEpoch === undefined || r.spend_epoch !== exceptEpoch)).reduce((s, r) => s + r.cost_micros, 0);
      return { granted, used };
    },
  };
  return l;
}

/** A spend store over a shared MemorySpendStore (the "Redis") that fails on demand. */
class FlakyStore implements SpendStore {
  readonly kind = 'redis' as const;
  /** every call fails (Redis away) */
  down = false;
  /** the next charge is applied and then reported as failed (the reply was lost) */
  applyThenFailNext = false;
  /** resets that went through (a test waits on them rather than on a clock) */
  resets = 0;
  constructor(readonly shared: MemorySpendStore) {}
  private gate() {
    if (this.down) throw Object.assign(new Error("Stream isn't writeable and enableOfflineQueue options is false"), { code: 'ECONNREFUSED' });
  }
  async read(payer: string, newEpoch: string): Promise<SpendEntry> {
    this.gate();
    return this.shared.read(payer, newEpoch);
  }
  async reserve(payer: string, ask: ReserveAsk) {
    this.gate();
    return this.shared.reserve(payer, ask);
  }
  async release(payer: string, id: string) {
    this.gate();
    return this.shared.release(payer, id);
  }
  async charge(payer: string, epoch: string, micros: number, reservation?: string) {
    this.gate();
    const counted = await this.shared.charge(payer, epoch, micros, reservation);
    if (this.applyThenFailNext) {
      this.applyThenFailNext = false;
      throw new Error('Command timed out');
    }
    return counted;
  }
  async settle(payer: string, epochs: string[]) {
    this.gate();
    return this.shared.settle(payer, epochs);
  }
  async refund(payer: string, epoch: string, micros: number) {
    this.gate();
    return this.shared.refund(payer, epoch, micros);
  }
  async bump(payer: string) {
    this.gate();
    return this.shared.bump(payer);
  }
  async reset(payer: string) {
    this.gate();
    await this.shared.reset(payer);
    this.resets++;
  }
  async reachable() {
    this.gate();
  }
  async close() {}
}

interface Instance {
  usage: UsageService;
  budget: BudgetGuard;
  store: FlakyStore;
  dir: string;
}

const dirs: string[] = [];
function instance(ledger: ReturnType<typeof fakeLedger>, shared: MemorySpendStore, opts: { journal?: boolean } = {}): Instance {
  const dir = mkdtempSync(join(tmpdir(), 'portico-budget-'));
  dirs.push(dir);
  const { log } = captureLog();
  const usage = new UsageService(ledger as unknown as UsageStore, opts.journal === false ? undefined : new UsageJournal(dir), { log, refused: new RefusedRecords(dir) });
  const store = new FlakyStore(shared);
  const budget = new BudgetGuard(usage, true, { store, log });
  return { usage, budget, store, dir };
}

const alice = { keyId: 'key_a', userId: 'alice', orgId: 'default' };
const acme = { keyId: 'key_c', userId: 'carol', orgId: 'acme' };
const personal: UsageScope = { orgId: 'default', userId: 'alice' };
const org: UsageScope = { orgId: 'acme' };

let n = 0;
const event = (key: UsageEvent['key'], costMicros: number): UsageEvent => ({ requestId: `r${n++}`, key, model: 'm', operation: 'responses', inputTokens: 3, costMicros });
/** what a request does: the budget check, then the charge */
async function request(i: Instance, key: UsageEvent['key'], costMicros: number) {
  await i.budget.check(key);
  await i.usage.record(event(key, costMicros));
}
/** every record in the ledger and everything settled, on every instance */
async function quiesce(...xs: Instance[]) {
  for (const x of xs) await x.usage.flush();
  for (const x of xs) await x.budget.idle();
}
async function assertExact(ledger: ReturnType<typeof fakeLedger>, xs: Instance[], scope: UsageScope) {
  await quiesce(...xs);
  const truth = await ledger.balance(scope);
  for (const x of xs) assert.equal(await x.budget.balance(scope), truth.granted - truth.used, `running balance of ${JSON.stringify(scope)} = ledger's`);
}
/** odd amounts, so that a record counted twice or not at all always shows */
const cost = (i: number) => 1_000 + ((i * 7919) % 5003);

test.after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

test('sequential requests read the ledger once, then the running balance is exact after every request', async () => {
  const ledger = fakeLedger();
  const a = instance(ledger, new MemorySpendStore());
  await a.usage.grant('alice', 'default', 1000);
  for (let i = 0; i < 300; i++) await request(a, alice, cost(i));
  assert.equal(ledger.reads, 1, 'one ledger read, at the first check');
  await assertExact(ledger, [a], personal);
  // every charge is seen by the very next check, without a ledger read: spend down to zero and get refused
  await a.usage.grant('alice', 'default', 0); // a grant: one more read at the next check
  const before = ledger.reads;
  const left = await a.budget.balance(personal);
  assert.equal(ledger.reads, before + 1);
  await a.usage.record(event(alice, left));
  await assert.rejects(a.budget.check(alice), (e: any) => e.code === 'insufficient_quota');
  assert.equal(ledger.reads, before + 1);
  await assertExact(ledger, [a], personal);
});

test('concurrent requests on two instances sharing one store: exact, with records still on their way', async () => {
  const ledger = fakeLedger();
  const shared = new MemorySpendStore();
  const a = instance(ledger, shared);
  const b = instance(ledger, shared);
  await a.usage.grant('alice', 'default', 10_000);
  await b.usage.grant('', 'acme', 10_000);
  await Promise.all(
    Array.from({ length: 200 }, (_, i) => {
      const x = i % 2 ? a : b;
      return request(x, i % 3 ? alice : acme, cost(i));
    }),
  );
  await assertExact(ledger, [a, b], personal);
  await assertExact(ledger, [a, b], org);
  // each instance read the ledger once per payer (concurrent first checks share one read)
  assert.ok(ledger.reads <= 4 + 4, `ledger reads ${ledger.reads}`);
  // a charge on one instance is seen by the other's next check
  const seen = await b.budget.balance(personal);
  await a.usage.record(event(alice, 777));
  assert.equal(await b.budget.balance(personal), seen - 777);
});

test('the store loses its entries while records are on their way (Redis flushed): exact again once they arrive', async () => {
  const ledger = fakeLedger();
  const shared = new MemorySpendStore();
  const a = instance(ledger, shared);
  const b = instance(ledger, shared);
  await a.usage.grant('alice', 'default', 10_000);
  const payer = BudgetGuard.payerOf(personal);
  await Promise.all(
    Array.from({ length: 120 }, async (_, i) => {
      if (i === 40 || i === 80) await shared.reset(payer); // lost in the middle of the traffic
      await request(i % 2 ? a : b, alice, cost(i));
    }),
  );
  // the loss right after charges whose records are still in the journals (not in the ledger yet)
  for (let i = 0; i < 10; i++) await request(i % 2 ? a : b, alice, cost(i));
  await shared.reset(payer);
  const rebuilt = await a.budget.balance(personal); // read while records are on their way
  assert.ok(Number.isInteger(rebuilt));
  await assertExact(ledger, [a, b], personal);
});

test('Redis away: checks answer 503, charges of unknown outcome reset the payer, exact once it is back', async () => {
  const ledger = fakeLedger();
  const shared = new MemorySpendStore();
  const a = instance(ledger, shared);
  const b = instance(ledger, shared);
  await a.usage.grant('alice', 'default', 10_000);
  for (let i = 0; i < 20; i++) await request(i % 2 ? a : b, alice, cost(i));
  // a charge applied whose reply was lost: counted, but a believes it may not be
  await a.budget.check(alice);
  a.store.applyThenFailNext = true;
  await a.usage.record(event(alice, 4321));
  // Redis goes away with the request already past its check: the charge fails (not applied)
  await b.budget.check(alice);
  b.store.down = true;
  await b.usage.record(event(alice, 1234));
  await assert.rejects(b.budget.check(alice), (e: any) => e.code === 'service_unavailable' && e.status === 503);
  await quiesce(a, b);
  const resets = b.store.resets;
  b.store.down = false;
  // b retries its pending reset on its own (its retry timer, about a second): until it did, nothing calling it
  await waitFor(() => b.store.resets > resets, { what: "b's own retry of the reset" });
  await assertExact(ledger, [a, b], personal);
});

test('a refused record is not spent: its charge is taken back', async () => {
  const ledger = fakeLedger();
  const a = instance(ledger, new MemorySpendStore());
  await a.usage.grant('alice', 'default', 100);
  ledger.refuse = (r) => r.cost_micros === 5555;
  for (let i = 0; i < 10; i++) await request(a, alice, i === 4 ? 5555 : cost(i));
  await assertExact(ledger, [a], personal);
  assert.equal(new RefusedRecords(a.dir).read().length, 1);
});

test('records an earlier process left in its journal (charged or not, nobody knows) reset the payer', async () => {
  const ledger = fakeLedger();
  const shared = new MemorySpendStore();
  const a = instance(ledger, shared);
  const b = instance(ledger, shared);
  await a.usage.grant('alice', 'default', 100);
  for (let i = 0; i < 10; i++) await request(a, alice, cost(i));
  await quiesce(a);
  // a stops while the database is away, three records in its journal: two were charged, the third was
  // written to the journal but the process died before its charge was sent
  ledger.down = true;
  await request(a, alice, 1111);
  await request(a, alice, 2222);
  await a.usage.close(); // the records stay in the journal
  const left = new UsageJournal(a.dir);
  const last = left.recover().at(-1)!;
  assert.equal(last.cost_micros, 2222);
  left.append({ ...last, record_id: 'uncharged', request_id: 'uncharged', cost_micros: 3333 });
  left.close();
  ledger.down = false;
  // b went on meanwhile: its running balance counts the two charged records, which are not in the ledger
  await request(b, alice, 10);
  // a starts again on the same DATA_DIR and ships what its journal holds
  const { log } = captureLog();
  const usage = new UsageService(ledger as unknown as UsageStore, new UsageJournal(a.dir), { log, refused: new RefusedRecords(a.dir) });
  assert.equal(await usage.recover(), 3);
  const again: Instance = { usage, budget: new BudgetGuard(usage, true, { store: new FlakyStore(shared), log }), store: a.store, dir: a.dir };
  await assertExact(ledger, [again, b], personal);
  assert.ok(ledger.rows.has('uncharged'));
});

test('grants are seen at once; a record of a payer this instance never checked is still counted', async () => {
  const ledger = fakeLedger();
  const shared = new MemorySpendStore();
  const a = instance(ledger, shared);
  const b = instance(ledger, shared);
  await assert.rejects(a.budget.check(alice), (e: any) => e.code === 'insufficient_quota');
  await b.usage.grant('alice', 'default', 0.5); // another instance (or `portico credits grant` with Redis)
  await a.budget.check(alice);
  // b runs a background response of alice's without having checked her: it learns the epoch first
  await b.usage.record(event(alice, 400_000));
  assert.equal(await a.budget.balance(personal), 100_000);
  await assertExact(ledger, [a, b], personal);
});

test('without a journal (in-memory database) the running balance is exact too; billing off charges nothing', async () => {
  const ledger = fakeLedger();
  const a = instance(ledger, new MemorySpendStore(), { journal: false });
  await a.usage.grant('', 'acme', 1);
  await Promise.all(Array.from({ length: 50 }, (_, i) => request(a, acme, cost(i))));
  await assertExact(ledger, [a], org);
  const { log } = captureLog();
  const off = new UsageService(ledger as unknown as UsageStore, undefined, { log, refused: new RefusedRecords(a.dir) });
  const shared = new MemorySpendStore();
  const guard = new BudgetGuard(off, false, { store: shared, log });
  await guard.check(acme); // disabled: never refuses, never reads
  await off.record(event(acme, 99));
  assert.equal([...ledger.rows.values()].find((r) => r.cost_micros === 99)?.spend_epoch, null);
});
