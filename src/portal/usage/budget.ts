import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { AppError, msg } from '../../platform/errors.js';
import { DEFAULT_ORG } from '../../platform/auth/jwt.js';
import type { ChangeFeed } from '../../platform/cluster/feed.js';
import { MICROS, type UsageBudget, type UsageService } from './service.js';
import type { UsageInsert, UsageScope } from './store.js';
import { MemorySpendStore, RedisSpendStore, createSpendStore, type SpendEntry, type SpendStore } from './spend.js';

export interface BudgetOptions {
  /** Redis shares the running spend between instances; without it this instance keeps it in memory */
  redisUrl?: string;
  /** REDIS_PREFIX when it is set (the entries' keys then start with it: ./spend.ts) */
  redisPrefix?: string;
  /** a store of its own (tests) instead of the one redisUrl chooses */
  store?: SpendStore;
  /** without Redis: how a grant made by another process (`portico credits grant`) reaches this one */
  feed?: ChangeFeed;
  log: Pick<FastifyBaseLogger, 'warn' | 'info'>;
}

/** what this instance read from the ledger for one payer, valid for one epoch and version of its entry */
interface LedgerPart {
  epoch: string;
  version: number;
  granted: number;
  /** the cost of the ledger's records not charged under `epoch` */
  other: number;
}

/** what to tell the store about one payer once records reached the ledger */
interface Settlement {
  /** forget the entry (a charge of unknown outcome, records of an earlier process) */
  reset: boolean;
  /** epochs of records that reached the ledger ('' = uncounted) */
  epochs: Set<string>;
  /** charges of refused records to take back: [epoch, micros] */
  refunds: Array<[string, number]>;
}

const RETRY_MS = 1000;

/**
 * With billing enabled, a request is refused (429 insufficient_quota) once the balance of its payer is spent.
 * The payer is the key's scope: its owner's personal credits in the default organization, else the
 * organization. The balance is kept running, without reading the ledger on each request:
 *
 *   balance = granted - (ledger records not of the current epoch) - used
 *
 * `used` lives in the spend store (Redis across instances, else memory): each charge adds the record's cost
 * to it at once, atomically, but only if the entry's epoch is the one the record was tagged with (the one this
 * instance saw last), and the tag is stored with the record. The ledger part (`granted` and the records of
 * other epochs) is read once per epoch and version. So every record counts exactly once: in `used` if its
 * charge counted, else in the ledger part, which reads it once it has arrived. When a record whose charge did
 * not count (the entry was lost or made anew in between, Redis was away) reaches the ledger, the version is
 * raised and every instance reads its ledger part again. A charge whose outcome is unknown (Redis failed while
 * it was sent), and records an earlier process left in its journal, reset the entry: a new epoch, read afresh.
 * A refused record's charge is taken back. The ledger is read only when a payer is first seen, after Redis
 * lost its entry, after a grant, and after such uncounted records.
 *
 * Grants raise the version: in Redis, by whoever grants (`portico credits grant` too), so every instance sees
 * them at its next request; without Redis (one instance) here, and through the change feed for a grant made by
 * another process (a feed that reconnects raises every version, since it may have lost one).
 */
export class BudgetGuard implements UsageBudget {
  private readonly store: SpendStore;
  private readonly log: BudgetOptions['log'];
  private readonly feed?: ChangeFeed;
  /** identifies this process's own messages on the feed */
  private readonly origin = randomUUID();
  private readonly ledger = new Map<string, LedgerPart>();
  private readonly loading = new Map<string, Promise<LedgerPart>>();
  /** the epoch of each payer's entry as this instance saw it last: the tag of its next records */
  private readonly epochs = new Map<string, string>();
  private readonly settlements = new Map<string, Settlement>();
  private settling: Promise<void> | undefined;
  private settleAgain = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly usage: UsageService,
    readonly enabled: boolean,
    opts: BudgetOptions,
  ) {
    this.store = opts.store ?? createSpendStore(opts.redisUrl, () => usage.ledgerId(), opts.redisPrefix);
    this.log = opts.log;
    this.feed = this.store.kind === 'memory' ? opts.feed : undefined;
    usage.attachBudget(this);
    const memory = this.store;
    if (enabled && this.feed && memory instanceof MemorySpendStore) {
      this.feed.subscribe('credits', (m) => {
        if (m.origin !== this.origin && typeof m.payer === 'string') void memory.bump(m.payer);
      });
      this.feed.onResync(() => memory.bumpAll());
    }
  }

  static scopeOf(k: { userId: string; orgId: string }): UsageScope {
    return k.orgId === DEFAULT_ORG ? { orgId: DEFAULT_ORG, userId: k.userId } : { orgId: k.orgId };
  }

  /** the store's name of a payer */
  static payerOf(s: UsageScope): string {
    return JSON.stringify(s.userId === undefined ? [s.orgId] : [s.orgId, s.userId]);
  }

  private static payerOfRow(r: UsageInsert): string {
    return BudgetGuard.payerOf(BudgetGuard.scopeOf({ userId: r.user_id, orgId: r.org_id }));
  }

  async check(k: { userId: string; orgId: string }): Promise<void> {
    if (!this.enabled) return;
    const scope = BudgetGuard.scopeOf(k);
    const balance = await this.balance(scope);
    if (balance <= 0) {
      const credits = balance / MICROS;
      throw new AppError(
        'insufficient_quota',
        scope.userId === undefined ? msg('quota_spent_org', { org: scope.orgId, balance: credits }) : msg('quota_spent_personal', { balance: credits }),
      );
    }
  }

  /**
   * Admission with a reservation: holds `micros` (the request's worst case) of the payer's balance until the
   * request's charge settles it (`charge` with the id, one atomic step) or `release`, or until `ttlMs` passes (a
   * crashed process's reservations expire). Refused (429 insufficient_quota, saying the reservation) when less
   * than that is left after the other requests' reservations, or nothing is left at all. One round trip to the
   * store, a second only when this instance's ledger part is out of date (first sight of the payer, a grant).
   * Gives the reservation's id (undefined when nothing is held: billing off, or a free request).
   */
  async reserve(k: { userId: string; orgId: string }, micros: number, ttlMs: number, what: { input: number; output: number }): Promise<string | undefined> {
    if (!this.enabled) return undefined;
    const scope = BudgetGuard.scopeOf(k);
    const payer = BudgetGuard.payerOf(scope);
    const id = randomUUID();
    micros = Math.max(0, Math.ceil(micros));
    let known: LedgerPart | undefined = this.ledger.get(payer);
    for (let tries = 0; ; tries++) {
      let res;
      try {
        res = await this.store.reserve(payer, {
          newEpoch: randomUUID(),
          epoch: known?.epoch ?? '',
          version: known?.version ?? -1,
          base: known ? known.granted - known.other : 0,
          id,
          micros,
          ttlMs,
        });
      } catch (e) {
        this.log.warn({ err: (e as Error)?.message ?? String(e) }, 'running spend unavailable: budgeted requests answered 503');
        throw new AppError('service_unavailable', msg('balance_unavailable'), null, { headers: { 'retry-after': '1' } });
      }
      this.epochs.set(payer, res.epoch);
      if (res.status === 'ok') return micros > 0 ? id : undefined;
      if (res.status === 'refused' || tries >= 3) {
        const base = known ? known.granted - known.other : 0;
        const balance = base - res.used;
        if (balance <= 0 || res.status !== 'refused') {
          const credits = balance / MICROS;
          throw new AppError(
            'insufficient_quota',
            scope.userId === undefined ? msg('quota_spent_org', { org: scope.orgId, balance: credits }) : msg('quota_spent_personal', { balance: credits }),
          );
        }
        const params = { cost: micros / MICROS, left: (balance - res.reserved) / MICROS, input: what.input, output: what.output };
        throw new AppError('insufficient_quota', scope.userId === undefined ? msg('quota_reserve_org', { ...params, org: scope.orgId }) : msg('quota_reserve_personal', params));
      }
      // this instance's ledger part is not for the entry's epoch and version: read it (once), then try again
      known = await this.ledgerPart(payer, scope, res);
    }
  }

  /** Drops a reservation of a request that ends with no charge (or whose charge did not take it); never throws. */
  release(k: { userId: string; orgId: string }, id: string): void {
    if (!this.enabled) return;
    const payer = BudgetGuard.payerOf(BudgetGuard.scopeOf(k));
    // a release that fails leaves the reservation to expire
    this.store.release(payer, id).catch((e) => this.log.warn({ payer, err: (e as Error).message }, 'reservation not released: it expires'));
  }

  /** The running balance of a payer, in micro-credits (equal to the ledger's once its records have arrived). */
  async balance(scope: UsageScope): Promise<number> {
    const payer = BudgetGuard.payerOf(scope);
    let entry: SpendEntry;
    try {
      entry = await this.store.read(payer, randomUUID());
    } catch (e) {
      // the client learns that it may retry; the cause (which may name hosts) goes to the log only
      this.log.warn({ err: (e as Error)?.message ?? String(e) }, 'running spend unavailable: budgeted requests answered 503');
      throw new AppError('service_unavailable', msg('balance_unavailable'), null, { headers: { 'retry-after': '1' } });
    }
    this.epochs.set(payer, entry.epoch);
    const part = await this.ledgerPart(payer, scope, entry);
    return part.granted - part.other - entry.used;
  }

  /** The ledger part for this epoch and version: kept, or read once (concurrent requests share the read). */
  private ledgerPart(payer: string, scope: UsageScope, entry: SpendEntry): LedgerPart | Promise<LedgerPart> {
    const known = this.ledger.get(payer);
    if (known && known.epoch === entry.epoch && known.version === entry.version) return known;
    const k = `${payer}\n${entry.epoch}\n${entry.version}`;
    let p = this.loading.get(k);
    if (!p) {
      p = this.usage
        .ledgerBalance(scope, entry.epoch)
        .then(({ granted, used }) => {
          const part: LedgerPart = { epoch: entry.epoch, version: entry.version, granted, other: used };
          const cur = this.ledger.get(payer);
          // a slower read of an older version never replaces a newer one
          if (!cur || cur.epoch !== part.epoch || cur.version <= part.version) this.ledger.set(payer, part);
          return part;
        })
        .finally(() => this.loading.delete(k));
      this.loading.set(k, p);
    }
    return p;
  }

  // ------------------------------------------------------------------ what the ledger tells

  tag(row: UsageInsert): string | null | Promise<string | null> {
    if (!this.enabled || !(row.cost_micros > 0)) return null;
    const payer = BudgetGuard.payerOfRow(row);
    const known = this.epochs.get(payer);
    if (known !== undefined) return known;
    // a payer this instance has not checked (a background job queued on another instance): learn its epoch
    return this.store.read(payer, randomUUID()).then(
      (entry) => {
        this.epochs.set(payer, entry.epoch);
        return entry.epoch;
      },
      // not counted: the ledger part counts it once it arrives (settled below)
      () => null,
    );
  }

  charge(row: UsageInsert, reservation?: string): void {
    if (!this.enabled) return;
    if (!row.spend_epoch || !(row.cost_micros > 0)) {
      if (reservation) this.release({ userId: row.user_id, orgId: row.org_id }, reservation);
      return;
    }
    const payer = BudgetGuard.payerOfRow(row);
    this.store.charge(payer, row.spend_epoch, row.cost_micros, reservation).then(
      () => {
        // counted, or not (another epoch by now): the record is settled when it reaches the ledger
      },
      () => this.resetLater(payer),
    );
  }

  settled(stored: UsageInsert[], refused: UsageInsert[]): void {
    if (!this.enabled) return;
    for (const r of stored) if (r.cost_micros > 0) this.settlement(BudgetGuard.payerOfRow(r)).epochs.add(r.spend_epoch ?? '');
    for (const r of refused) if (r.cost_micros > 0 && r.spend_epoch) this.settlement(BudgetGuard.payerOfRow(r)).refunds.push([r.spend_epoch, r.cost_micros]);
    void this.settle();
  }

  recovered(rows: UsageInsert[]): void {
    if (!this.enabled) return;
    for (const r of rows) if (r.cost_micros > 0) this.resetLater(BudgetGuard.payerOfRow(r));
  }

  async beforeGrant(): Promise<void> {
    try {
      await this.store.reachable();
    } catch (e) {
      throw new AppError('service_unavailable', msg('grant_spend_unreachable', { reason: (e as Error).message }));
    }
  }

  async granted(userId: string, orgId: string): Promise<void> {
    const payer = BudgetGuard.payerOf(userId ? { orgId, userId } : { orgId });
    try {
      await this.store.bump(payer);
      if (this.feed) await this.feed.publish('credits', { payer, origin: this.origin });
    } catch (e) {
      const fix = this.store instanceof RedisSpendStore ? msg('grant_fix_redis', { key: this.store.keyName(payer) }) : msg('grant_fix_restart');
      throw new AppError('service_unavailable', msg('grant_not_told', { reason: (e as Error).message, fix }));
    }
  }

  // ------------------------------------------------------------------ settling

  private settlement(payer: string): Settlement {
    let s = this.settlements.get(payer);
    if (!s) {
      s = { reset: false, epochs: new Set(), refunds: [] };
      this.settlements.set(payer, s);
    }
    return s;
  }

  private resetLater(payer: string) {
    this.settlement(payer).reset = true;
    void this.settle();
  }

  /** Tells the store what reached the ledger; one pass at a time, again while more comes, retried on failure. */
  private settle(): Promise<void> {
    if (this.settling) {
      this.settleAgain = true;
      return this.settling;
    }
    const run = (async () => {
      do {
        this.settleAgain = false;
        const batch = [...this.settlements];
        this.settlements.clear();
        await Promise.all(batch.map(([payer, s]) => this.settleOne(payer, s)));
      } while (this.settleAgain && this.settlements.size > 0);
    })();
    this.settling = run;
    void run.finally(() => {
      this.settling = undefined;
      if (this.settlements.size > 0 && !this.closed && !this.retryTimer) {
        this.retryTimer = setTimeout(() => {
          this.retryTimer = undefined;
          void this.settle();
        }, RETRY_MS);
        this.retryTimer.unref();
      }
    });
    return run;
  }

  private async settleOne(payer: string, s: Settlement) {
    try {
      if (s.reset) {
        await this.store.reset(payer);
        this.log.info({ payer }, 'running spend of a payer reset: it is read from the ledger again');
        return;
      }
      for (const [epoch, micros] of s.refunds) await this.store.refund(payer, epoch, micros);
      if (s.epochs.size > 0) await this.store.settle(payer, [...s.epochs]);
    } catch (e) {
      // the outcome is unknown (Redis away): start this payer afresh once Redis answers
      if (!this.settlements.has(payer)) this.log.warn({ payer, err: (e as Error).message }, 'running spend not updated; the payer is reset when Redis answers');
      this.settlement(payer).reset = true;
    }
  }

  /** Resolves once everything that reached the ledger so far has been told to the store (tests, close). */
  async idle(): Promise<void> {
    while (this.settling || (this.settlements.size > 0 && !this.retryTimer)) await (this.settling ?? this.settle());
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    await this.settling;
    await this.store.close();
  }
}
