import { sql, type Insertable } from 'kysely';
import type { Db } from '../db/index.js';
import type { RequestLogTable } from '../db/schema.js';
import { Pacer } from '../pacer.js';

export type RequestLogRow = Insertable<RequestLogTable>;

/** the columns a row sets (seq is the table's) */
const COLUMNS = [
  'request_id',
  'created_at',
  'received_at_ms',
  'key_id',
  'user_id',
  'org_id',
  'method',
  'route',
  'operation',
  'model',
  'deployment',
  'status',
  'error_code',
  'error_message',
  'latency_ms',
  'ttft_ms',
  'engine_ms',
  'input_tokens',
  'output_tokens',
  'characters',
  'audio_seconds',
  'output_audio_seconds',
  'cost_micros',
  'response_id',
] as const satisfies ReadonlyArray<keyof RequestLogRow>;

/**
 * How long a row may wait for companions before its batch is written, and the least time from one write's start to the
 * next one's: one INSERT per interval when busy (each costs the embedded database's thread ~1-1.5 ms besides its rows)
 */
const WRITE_DELAY_MS = 250;
/** rows per INSERT */
const BATCH = 500;
/** the most rows held in memory by default (about 1-2 MB): past it, rows are dropped and counted */
export const REQUEST_LOG_MAX_BUFFERED = 10_000;

export interface RequestLogOptions {
  /** how long a row may wait for companions (default WRITE_DELAY_MS) */
  delayMs?: number;
  /** the most rows waiting in memory; more are dropped (and counted) rather than held */
  maxBuffered?: number;
  /** told of every row dropped (the buffer was full) and of rows a failed write lost */
  onDropped?: (n: number) => void;
  log?: { warn(o: object, m: string): void };
}

/**
 * The request log (table `request_log`): one row per {base_url} request whose key was known, written from the
 * request's facts when it ends (src/compose/http.ts). Adding a row is a push onto an array: rows are written in
 * batches by a timer, off the request path, like the usage ledger's. Unlike the ledger it is no record of
 * money: the buffer is bounded (a row that finds it full is dropped and counted, `portico_request_log_dropped_total`)
 * and a batch the database refuses is dropped after one warning rather than retried without end. `close()`
 * writes what is left (a graceful stop loses nothing).
 */
export class RequestLog {
  private pending: RequestLogRow[] = [];
  /** delayMs after the first row, no sooner than delayMs after the last write began, one at a time (platform/pacer.ts) */
  private readonly pacer: Pacer;
  private closed = false;
  private warned = false;
  readonly maxBuffered: number;
  /** rows dropped since start (the buffer was full, or their write failed) */
  dropped = 0;

  constructor(
    private readonly db: Db,
    private readonly opts: RequestLogOptions = {},
  ) {
    this.maxBuffered = opts.maxBuffered ?? REQUEST_LOG_MAX_BUFFERED;
    const delayMs = opts.delayMs ?? WRITE_DELAY_MS;
    this.pacer = new Pacer(() => this.writeBatches(), { delayMs, intervalMs: delayMs, again: () => this.pending.length > 0 && !this.closed });
  }

  /** Takes one row; it is written within WRITE_DELAY_MS. Never throws, never waits. */
  add(row: RequestLogRow): void {
    if (this.closed || this.pending.length >= this.maxBuffered) {
      this.drop(1);
      return;
    }
    this.pending.push(row);
    this.pacer.schedule();
  }

  private drop(n: number) {
    this.dropped += n;
    this.opts.onDropped?.(n);
  }

  /**
   * Writes what is pending when it starts (one writer at a time); what comes meanwhile goes with the next write,
   * delayMs after this one started (not right after it: under a steady load that was one INSERT after the other,
   * twice as many as the interval gives, each with its fixed cost).
   */
  private write(): Promise<void> {
    return this.pacer.running ?? (this.pending.length === 0 ? Promise.resolve() : this.pacer.now());
  }

  private async writeBatches(): Promise<void> {
    let left = this.pending.length;
    while (left > 0 && this.pending.length > 0) {
      const batch = this.pending.splice(0, Math.min(BATCH, left));
      left -= batch.length;
      try {
        // one parameter, the batch as JSON, rather than a parameter per value (12,500 for 500 rows)
        await sql`insert into request_log (${sql.join(COLUMNS.map((c) => sql.ref(c)))})
          select ${sql.join(COLUMNS.map((c) => sql.ref(`r.${c}`)))} from json_populate_recordset(null::request_log, ${JSON.stringify(batch)}) r`.execute(this.db);
        this.warned = false;
      } catch (e) {
        this.drop(batch.length);
        if (!this.warned) this.opts.log?.warn({ err: (e as Error).message, rows: batch.length }, 'request log rows not written: dropped');
        this.warned = true;
      }
    }
  }

  /** Writes every row taken so far (the admin API reads after this). */
  async flush(): Promise<void> {
    this.pacer.cancel();
    while (this.pacer.running || this.pending.length > 0) await this.write();
  }

  /** Removes the rows older than `days` days; how many. */
  async prune(days: number, now = Date.now()): Promise<number> {
    const before = Math.floor(now / 1000) - Math.round(days * 86400);
    const r = await this.db.deleteFrom('request_log').where('created_at', '<', before).executeTakeFirst();
    return Number(r.numDeletedRows ?? 0);
  }

  /** Shutdown: what is buffered is written; rows after this are dropped. */
  async close(): Promise<void> {
    await this.flush();
    this.closed = true;
  }
}
