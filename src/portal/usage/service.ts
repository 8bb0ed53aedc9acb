import type { UsageInsert, UsageScope, UsageStore, GroupBy, UsageRow } from './store.js';
import type { KeyPrincipal } from '../keys/verifier.js';
import { randomUUID } from 'node:crypto';
import type { UsageJournal } from './journal.js';
import { isUnavailable } from '../../platform/http/errors.js';

export interface UsageEvent {
  requestId: string;
  key: Pick<KeyPrincipal, 'keyId' | 'userId' | 'orgId'> & Partial<Pick<KeyPrincipal, 'rpmLimit' | 'tpmLimit'>>;
  model: string;
  operation: 'responses' | 'speech' | 'transcription' | 'translation';
  inputTokens?: number;
  outputTokens?: number;
  cachedTokens?: number;
  characters?: number;
  audioSeconds?: number;
  costMicros?: number;
}

export const MICROS = 1_000_000;

const count = (n: number | undefined) => (Number.isFinite(n) && n! > 0 ? Math.min(Math.round(n!), Number.MAX_SAFE_INTEGER) : 0);

/** how long a journaled record may wait for companions before it is shipped */
const SHIP_DELAY_MS = 25;

/**
 * The usage ledger. Engines' usage is written here by the services after each request; the query APIs
 * read it. Writes are awaited by the caller so an acknowledged request always has its record.
 */
export class UsageService {
  private readonly listeners: Array<(e: UsageEvent) => void> = [];

  constructor(
    private readonly store: UsageStore,
    private readonly journal?: UsageJournal,
  ) {}

  /** called after each record is written (metrics) */
  onRecord(l: (e: UsageEvent) => void) {
    this.listeners.push(l);
  }

  private pending: UsageInsert[] = [];
  private shipping: Promise<void> | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private shipTimer: NodeJS.Timeout | undefined;
  private failures = 0;
  private closed = false;

  /**
   * Records one request's usage. The record is appended to the local journal (synchronously, so it survives
   * a crash of this process) before this returns; it reaches the database in the next batch. Without a
   * journal (tests that ask for it) the record is committed before this resolves.
   */
  async record(e: UsageEvent): Promise<void> {
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
      characters: count(e.characters),
      audio_seconds: Number.isFinite(e.audioSeconds) && e.audioSeconds! > 0 ? e.audioSeconds! : 0,
      cost_micros: count(e.costMicros),
      created_at: Math.floor(Date.now() / 1000),
    };
    if (this.journal) {
      this.journal.append(row);
      this.pending.push(row);
      // shipped a moment later with whatever else arrives meanwhile: one INSERT per batch, off the request path
      if (this.pending.length >= 500) void this.ship();
      else this.schedule();
    } else {
      this.pending.push(row);
      await this.flush();
    }
    for (const l of this.listeners) l(e);
  }

  /** Makes sure a shipment will happen (unless one is running, which takes everything pending). */
  private schedule() {
    if (this.shipTimer || this.retryTimer || this.shipping || this.closed) return;
    this.shipTimer = setTimeout(() => {
      this.shipTimer = undefined;
      void this.ship();
    }, SHIP_DELAY_MS);
    this.shipTimer.unref();
  }

  /** Starts shipping the pending records unless a shipment is under way (it takes whatever arrives meanwhile). */
  private ship(): Promise<void> {
    if (this.shipping) return this.shipping;
    if (this.retryTimer || this.pending.length === 0) return Promise.resolve();
    const run = this.shipAll();
    this.shipping = run;
    // cleared once this shipment is done (never inside shipAll, which may finish before it is even stored)
    void run.then(() => {
      if (this.shipping === run) this.shipping = undefined;
      // records that came after the last batch was taken go next
      if (this.pending.length > 0) this.schedule();
    });
    return run;
  }

  /**
   * Inserts batches until nothing is pending. The only writer of the table (flush() goes through it too), so
   * two inserts never overlap; shipped rows are removed by identity. On an outage the records stay and are tried
   * again with backoff; a row the database refuses for its content (not an outage) is set aside, so one bad
   * record cannot block the ledger. Never rejects.
   */
  private async shipAll(): Promise<void> {
    try {
      while (this.pending.length > 0) {
        const batch = this.pending.slice(0, 500);
        try {
          await this.store.insert(batch);
        } catch (e) {
          if (isUnavailable(e)) throw e;
          await this.shipOneByOne(batch);
        }
        const shipped = new Set(batch);
        this.pending = this.pending.filter((r) => !shipped.has(r));
        this.failures = 0;
      }
      this.lastError = undefined;
      this.journal?.clear();
    } catch (e) {
      // the database is away: the records stay (they are in the journal) and are tried again
      this.lastError = e;
      this.failures++;
      if (!this.closed) {
        this.retryTimer = setTimeout(() => {
          this.retryTimer = undefined;
          void this.ship();
        }, Math.min(100 * 2 ** Math.min(this.failures, 6), 5_000));
        this.retryTimer.unref();
      }
    }
  }

  private async shipOneByOne(batch: UsageInsert[]) {
    for (const row of batch) {
      try {
        await this.store.insert([row]);
      } catch (e) {
        if (isUnavailable(e)) throw e;
        this.refused.push(row);
        this.onRefused?.(row, e);
      }
    }
  }

  /** rows the database refused for their content (kept for inspection; never retried) */
  readonly refused: UsageInsert[] = [];
  onRefused?: (row: UsageInsert, err: unknown) => void;
  private lastError: unknown;

  /** Waits until every record made so far is in the database (query APIs read after this); throws if it cannot. */
  async flush(): Promise<void> {
    if (this.shipTimer) {
      clearTimeout(this.shipTimer);
      this.shipTimer = undefined;
    }
    while (this.pending.length > 0) {
      // skip the backoff: the caller wants the records in now, or the database's error
      if (this.retryTimer) {
        clearTimeout(this.retryTimer);
        this.retryTimer = undefined;
      }
      await this.ship();
      if (this.pending.length > 0 && this.retryTimer) throw this.lastError ?? new Error('usage records could not be stored');
    }
  }

  /** Ships what the last run left in the journal. */
  async recover(): Promise<number> {
    const rows = this.journal?.recover() ?? [];
    if (rows.length) {
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
    if (this.shipTimer) clearTimeout(this.shipTimer);
    this.journal?.close();
  }

  async usage(scope: UsageScope, from: number, to: number, groupBy: GroupBy[]) {
    await this.flush();
    const rows = await this.store.aggregate(scope, from, to, groupBy);
    const total = rows.reduce(
      (t, r) => ({
        requests: t.requests + r.requests,
        input_tokens: t.input_tokens + r.input_tokens,
        output_tokens: t.output_tokens + r.output_tokens,
        cached_tokens: t.cached_tokens + r.cached_tokens,
        characters: t.characters + r.characters,
        audio_seconds: t.audio_seconds + r.audio_seconds,
        cost: t.cost + r.cost_micros / MICROS,
      }),
      { requests: 0, input_tokens: 0, output_tokens: 0, cached_tokens: 0, characters: 0, audio_seconds: 0, cost: 0 },
    );
    return {
      start_time: from,
      end_time: to,
      group_by: groupBy,
      list: rows.map(({ cost_micros, ...r }: UsageRow) => ({ ...r, cost: cost_micros / MICROS })),
      total,
    };
  }

  async balance(scope: UsageScope) {
    await this.flush();
    const { granted, used } = await this.store.balance(scope);
    return { granted: granted / MICROS, used: used / MICROS, balance: (granted - used) / MICROS, currency: 'credits' };
  }

  async grant(userId: string, orgId: string, amount: number, note = ''): Promise<void> {
    await this.store.grant(userId, orgId, Math.round(amount * MICROS), note, Math.floor(Date.now() / 1000));
  }
}
