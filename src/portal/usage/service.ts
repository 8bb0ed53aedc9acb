import type { UsageInsert, UsageScope, UsageStore, GroupBy, UsageSums } from './store.js';
import type { KeyPrincipal } from '../../platform/auth/principal.js';
import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import type { RefusedRecords, UsageJournal } from './journal.js';
import { isUnavailable } from '../../platform/http/errors.js';
import { MICROS } from './micros.js';
import { Pacer } from '../../platform/pacer.js';

export interface UsageEvent {
  requestId: string;
  key: Pick<KeyPrincipal, 'keyId' | 'userId' | 'orgId'> & Partial<Pick<KeyPrincipal, 'rpmLimit' | 'tpmLimit'>>;
  model: string;
  /** what was done: one of the operations the feature modules declare (stored as it is) */
  operation: string;
  inputTokens?: number;
  outputTokens?: number;
  cachedTokens?: number;
  /** the part of inputTokens written to a prompt cache */
  cacheWriteTokens?: number;
  characters?: number;
  /** seconds of audio taken in */
  audioSeconds?: number;
  /** seconds of audio produced */
  outputAudioSeconds?: number;
  costMicros?: number;
  /** the deployment that served it (src/models/router), when the model was routed */
  deployment?: string;
  /**
   * What the request reserved at admission (src/api/admission.ts): this record settles it (its tokens replace
   * the tokens reserved in the TPM window, its charge takes the balance's reservation in the same atomic step)
   * and it is charged at most what was reserved. Only one record of a request carries it.
   */
  hold?: UsageHold;
}

/** A request's reservations, as the ledger sees them (src/api/admission.ts makes them). */
export interface UsageHold {
  /**
   * Settles the reservations with the record's real tokens: the TPM window keeps `tokens` instead of what was
   * reserved. Gives the balance's reservation id (charged and dropped together) and the most the record may cost;
   * undefined once taken.
   */
  take(tokens: number): { reservation?: string; capMicros?: number } | undefined;
}

export { MICROS };

const count = (n: number | undefined) => (Number.isFinite(n) && n! > 0 ? Math.min(Math.round(n!), Number.MAX_SAFE_INTEGER) : 0);
/** seconds (a float column): finite and positive, else 0 */
const seconds = (n: number | undefined) => (Number.isFinite(n) && n! > 0 ? n! : 0);

/**
 * How long a journaled record may wait for companions before it is shipped, when none was shipped lately (an idle
 * instance's record reaches the ledger table within this). The query APIs flush before they read.
 */
const SHIP_DELAY_MS = 100;

/**
 * The least time from one shipment's start to the next one's, under a steady load: each INSERT costs the embedded
 * database ~1-1.5 ms of its thread besides its rows (docs/performance.md, "2026-11-29: the usage shipment and the
 * request path"), a fixed cost that the server pays per shipment rather than per request, and the larger the batch
 * the fewer of them. Four a second, as the request log's writer (src/platform/ops/request-log.ts); 500 records
 * pending are shipped at once all the same.
 */
const SHIP_INTERVAL_MS = 250;

/**
 * What the budget (BudgetGuard) needs to hear from the ledger to keep each payer's running spend exact. The
 * ledger knows no budget; one attaches itself.
 */
export interface UsageBudget {
  /** the running-spend epoch a record is charged under, stored with it (before it is journaled) */
  tag(row: UsageInsert): string | null | Promise<string | null>;
  /** counts the record in the running spend (right after it is journaled), dropping its reservation; never throws */
  charge(row: UsageInsert, reservation?: string): void;
  /** records reached the ledger, or were refused by it (set aside) */
  settled(stored: UsageInsert[], refused: UsageInsert[]): void;
  /** records of an earlier process found in the journal: whether they were counted is unknown */
  recovered(rows: UsageInsert[]): void;
  /** before credits are granted: throws if the grant could not be announced */
  beforeGrant(): Promise<void>;
  /** after credits are granted: every instance's budget must see them */
  granted(userId: string, orgId: string): Promise<void>;
}

export interface UsageServiceOptions {
  log: Pick<FastifyBaseLogger, 'error' | 'warn' | 'info'>;
  /** where records the database refuses for their content are kept (DATA_DIR/usage-refused.ndjson) */
  refused: RefusedRecords;
}

/**
 * The usage ledger. Engines' usage is written here by the services after each request; the query APIs
 * read it. Writes are awaited by the caller so an acknowledged request always has its record.
 */
export class UsageService {
  private readonly listeners: Array<(e: UsageEvent) => void> = [];
  private readonly refusedListeners: Array<(row: UsageInsert, err: unknown) => void> = [];
  private readonly log: UsageServiceOptions['log'];
  private readonly refused: RefusedRecords;

  constructor(
    private readonly store: UsageStore,
    private readonly journal: UsageJournal | undefined,
    opts: UsageServiceOptions,
  ) {
    this.log = opts.log;
    this.refused = opts.refused;
  }

  private operations: ReadonlySet<string> | undefined;
  /**
   * The operations records may carry: what the feature modules declare, collected by the runtime. A record of
   * another operation is refused (a feature that records what it did not declare is a bug its tests meet); before
   * this is called (a core without a runtime) every operation is taken.
   */
  useOperations(operations: readonly string[]) {
    this.operations = new Set(operations);
  }

  /** called after each record is written (metrics) */
  onRecord(l: (e: UsageEvent) => void) {
    this.listeners.push(l);
  }

  private budget?: UsageBudget;
  /** journal records recovered before a budget was attached */
  private recoveredRows: UsageInsert[] = [];

  /** The budget hears of every record, shipment and grant from now on. */
  attachBudget(b: UsageBudget) {
    this.budget = b;
    if (this.recoveredRows.length) b.recovered(this.recoveredRows.splice(0));
  }

  /**
   * The ledger's part of a balance (no flush: records on their way are the budget's concern): credits granted
   * and the cost of records, leaving out those charged under `exceptEpoch`. In micro-credits.
   */
  ledgerBalance(scope: UsageScope, exceptEpoch?: string): Promise<{ granted: number; used: number }> {
    return this.store.balance(scope, exceptEpoch);
  }

  private ledgerIdRead?: Promise<string>;
  /** the ledger's random id (kept in its database): names its entries in a store shared with other ledgers */
  ledgerId(): Promise<string> {
    this.ledgerIdRead ??= this.store.ledgerId().catch((e) => {
      this.ledgerIdRead = undefined;
      throw e;
    });
    return this.ledgerIdRead;
  }

  /** called for each record the database refused, once it is set aside (metrics) */
  onRefused(l: (row: UsageInsert, err: unknown) => void) {
    this.refusedListeners.push(l);
  }

  private pending: UsageInsert[] = [];
  private retryTimer: NodeJS.Timeout | undefined;
  private failures = 0;
  private closed = false;
  /** SHIP_DELAY_MS after the first record, no sooner than SHIP_INTERVAL_MS after the last shipment began, one at a time */
  private readonly pacer = new Pacer(() => this.shipAll(), {
    delayMs: SHIP_DELAY_MS,
    intervalMs: SHIP_INTERVAL_MS,
    // records that came after the last batch was taken go next (not while backing off, nor once closed)
    again: () => this.pending.length > 0 && !this.retryTimer && !this.closed,
  });

  /**
   * Records one request's usage. The record is appended to the local journal (synchronously, so it survives
   * a crash of this process) before this returns; it reaches the database in the next batch. Without a
   * journal (tests that ask for it) the record is committed before this resolves.
   */
  async record(e: UsageEvent): Promise<void> {
    if (this.operations && !this.operations.has(e.operation)) {
      throw new Error(`usage operation '${e.operation}' is not declared by any feature module (FeatureModule.operations); declared: ${[...this.operations].join(', ')}`);
    }
    const held = e.hold?.take(count(e.inputTokens) + count(e.outputTokens));
    let cost = count(e.costMicros);
    // a request is never charged more than it reserved (its stream is stopped there; an upstream that counted
    // more than the worst case, or an input estimate that fell short, is not charged past it)
    if (held?.capMicros !== undefined && cost > held.capMicros) cost = held.capMicros;
    const row: UsageInsert = {
      record_id: randomUUID(),
      request_id: e.requestId,
      key_id: e.key.keyId,
      user_id: e.key.userId,
      org_id: e.key.orgId,
      model: e.model,
      operation: e.operation,
      // counts from upstreams are not trusted to be whole, finite or positive
      input_tokens: count(e.inputTokens),
      output_tokens: count(e.outputTokens),
      cached_tokens: count(e.cachedTokens),
      cache_write_tokens: count(e.cacheWriteTokens),
      characters: count(e.characters),
      audio_seconds: seconds(e.audioSeconds),
      output_audio_seconds: seconds(e.outputAudioSeconds),
      cost_micros: cost,
      created_at: Math.floor(Date.now() / 1000),
      spend_epoch: null,
      deployment: e.deployment ?? null,
    };
    if (this.budget) {
      const tag = this.budget.tag(row);
      row.spend_epoch = tag === null || typeof tag === 'string' ? tag : await tag;
    }
    if (this.journal) {
      this.journal.append(row);
      this.pending.push(row);
      this.budget?.charge(row, held?.reservation);
      // shipped a moment later with whatever else arrives meanwhile: one INSERT per batch, off the request path
      if (this.pending.length >= 500) void this.ship();
      else this.schedule();
    } else {
      this.pending.push(row);
      this.budget?.charge(row, held?.reservation);
      await this.flush();
    }
    for (const l of this.listeners) l(e);
  }

  /** Makes sure a shipment will happen (unless one is running, which takes everything pending). */
  private schedule() {
    if (this.retryTimer || this.closed) return;
    this.pacer.schedule();
  }

  /** Starts shipping the pending records unless a shipment is under way (it takes whatever arrives meanwhile). */
  private ship(): Promise<void> {
    if (this.pacer.running) return this.pacer.running;
    if (this.retryTimer || this.pending.length === 0) return Promise.resolve();
    return this.pacer.now();
  }

  /**
   * Inserts what is pending when it starts, in batches. The only writer of the table (flush() goes through it
   * too), so two inserts never overlap; shipped rows are removed by identity. On an outage the records stay and are tried
   * again with backoff (one warning when it starts, one line when it ends); a row the database refuses for its
   * content (not an outage) is set aside in DATA_DIR/usage-refused.ndjson and logged, so one bad record cannot
   * block the ledger and none is lost. The journal is cut down to what is still pending only after that. Never rejects.
   */
  private async shipAll(): Promise<void> {
    try {
      // the records pending now; those that arrive meanwhile wait for the next shipment (SHIP_INTERVAL_MS after this
      // one began), so a busy instance sends one INSERT per interval rather than one after the other
      let left = this.pending.length;
      while (left > 0 && this.pending.length > 0) {
        const batch = this.pending.slice(0, Math.min(500, left));
        left -= batch.length;
        let refused: UsageInsert[] = [];
        try {
          await this.store.insert(batch);
        } catch (e) {
          if (isUnavailable(e)) throw e;
          refused = await this.shipOneByOne(batch);
        }
        const shipped = new Set(batch);
        this.pending = this.pending.filter((r) => !shipped.has(r));
        if (this.budget) {
          const out = new Set(refused);
          this.budget.settled(refused.length ? batch.filter((r) => !out.has(r)) : batch, refused);
        }
        if (this.failures > 0) this.log.info({ attempts: this.failures }, 'usage records reach the database again');
        this.failures = 0;
      }
      this.lastError = undefined;
      // the journal keeps only what is still pending (normally a few records that came during the shipment)
      this.journal?.keepOnly(this.pending);
    } catch (e) {
      // the database is away (or a refused record could not be set aside): the records stay (they are in the
      // journal) and are tried again
      this.lastError = e;
      this.failures++;
      if (this.failures === 1)
        this.log.warn({ err: (e as Error)?.message ?? String(e), pending: this.pending.length }, 'usage records not stored yet: kept in the journal and retried');
      if (!this.closed) {
        this.retryTimer = setTimeout(
          () => {
            this.retryTimer = undefined;
            void this.ship();
          },
          Math.min(100 * 2 ** Math.min(this.failures, 6), 5_000),
        );
        this.retryTimer.unref();
      }
    }
  }

  /** Inserts a batch row by row; returns the rows the database refused (set aside). */
  private async shipOneByOne(batch: UsageInsert[]): Promise<UsageInsert[]> {
    const refused: UsageInsert[] = [];
    for (const row of batch) {
      try {
        await this.store.insert([row]);
      } catch (e) {
        if (isUnavailable(e)) throw e;
        this.setAside(row, e);
        refused.push(row);
      }
    }
    return refused;
  }

  /** A record the database refused: written to the refused file (throws if it cannot be), logged, counted. */
  private setAside(row: UsageInsert, err: unknown) {
    const reason = err instanceof Error ? err.message : String(err);
    // what identifies the record and its charge; a record holds no secret (key id, not the key)
    const what = {
      record_id: row.record_id,
      request_id: row.request_id,
      key_id: row.key_id,
      user_id: row.user_id,
      org_id: row.org_id,
      model: row.model,
      operation: row.operation,
      cost_micros: row.cost_micros,
      reason,
    };
    try {
      this.refused.append(row, reason);
    } catch (e) {
      this.log.error(
        { ...what, err: (e as Error).message, file: this.refused.path },
        'usage record refused by the database and not set aside: it stays in the journal and is tried again',
      );
      throw e;
    }
    this.log.error({ ...what, file: this.refused.path }, 'usage record refused by the database: set aside for an operator');
    for (const l of this.refusedListeners) l(row, err);
  }

  private lastError: unknown;

  /** Waits until every record made so far is in the database (query APIs read after this); throws if it cannot. */
  async flush(): Promise<void> {
    this.pacer.cancel();
    while (this.pending.length > 0) {
      // skip the backoff: the caller wants the records in now, or the database's error
      if (this.retryTimer) {
        clearTimeout(this.retryTimer);
        this.retryTimer = undefined;
      }
      await this.ship();
      // records left after a failed shipment: the database's error (after close() no retry is scheduled, so
      // the error itself, not a retry timer, says the shipment failed; a loop here would never end)
      if (this.pending.length > 0 && this.lastError !== undefined) throw this.lastError;
    }
  }

  /** Ships what the last run left in the journal. */
  async recover(): Promise<number> {
    const rows = this.journal?.recover() ?? [];
    if (rows.length) {
      if (this.budget) this.budget.recovered(rows);
      else this.recoveredRows.push(...rows);
      this.pending = [...rows, ...this.pending];
      await this.ship();
    }
    return rows.length;
  }

  /** Shutdown: one last try to ship; whatever is left stays in the journal for the next start. */
  async close(): Promise<void> {
    this.closed = true;
    try {
      await this.flush();
    } catch {
      // kept in the journal
    }
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.pacer.cancel();
    this.journal?.close();
    this.refused.close();
  }

  async usage(scope: UsageScope, from: number, to: number, groupBy: GroupBy[]) {
    await this.flush();
    const rows = await this.store.aggregate(scope, from, to, groupBy);
    return { start_time: from, end_time: to, group_by: groupBy, ...usageReport(rows) };
  }

  async balance(scope: UsageScope) {
    await this.flush();
    const { granted, used } = await this.store.balance(scope);
    return { granted: granted / MICROS, used: used / MICROS, balance: (granted - used) / MICROS, currency: 'credits' };
  }

  /** Grants credits; every instance's budget sees them before this returns (see BudgetGuard.granted). */
  async grant(userId: string, orgId: string, amount: number, note = ''): Promise<void> {
    await this.budget?.beforeGrant();
    await this.store.grant(userId, orgId, Math.round(amount * MICROS), note, Math.floor(Date.now() / 1000));
    await this.budget?.granted(userId, orgId);
  }
}

/**
 * An aggregate's rows as a usage report gives them (credits and seconds instead of micro-units) and their total.
 * Costs are summed as whole micro-credits and divided once (a sum of divided figures shows float error: 0.024 +
 * 0.024 + 0.024 = 0.07200000000000001); audio seconds (in and out) are float columns, so their totals are rounded to the
 * microsecond the same way. The user's report and the operator's (src/admin) both give this.
 */
export function usageReport<R extends UsageSums>(rows: R[]) {
  const sum = rows.reduce(
    (t, r) => ({
      requests: t.requests + r.requests,
      input_tokens: t.input_tokens + r.input_tokens,
      output_tokens: t.output_tokens + r.output_tokens,
      cached_tokens: t.cached_tokens + r.cached_tokens,
      cache_write_tokens: t.cache_write_tokens + r.cache_write_tokens,
      characters: t.characters + r.characters,
      audio_micros: t.audio_micros + Math.round(r.audio_seconds * MICROS),
      output_audio_micros: t.output_audio_micros + Math.round(r.output_audio_seconds * MICROS),
      cost_micros: t.cost_micros + r.cost_micros,
    }),
    { requests: 0, input_tokens: 0, output_tokens: 0, cached_tokens: 0, cache_write_tokens: 0, characters: 0, audio_micros: 0, output_audio_micros: 0, cost_micros: 0 },
  );
  const { audio_micros, output_audio_micros, cost_micros, ...counts } = sum;
  const micro = (s: number) => Math.round(s * MICROS) / MICROS;
  return {
    list: rows.map(({ cost_micros, ...r }) => ({
      ...r,
      audio_seconds: micro(r.audio_seconds),
      output_audio_seconds: micro(r.output_audio_seconds),
      cost: cost_micros / MICROS,
    })),
    total: { ...counts, audio_seconds: audio_micros / MICROS, output_audio_seconds: output_audio_micros / MICROS, cost: cost_micros / MICROS },
  };
}
