/**
 * How many stored conversations one key may have loading at once (issue 22 §3). A continuation
 * (`previous_response_id`) reads its chain from the database: a heavy read, up to RESPONSES_MAX_CHAIN_BYTES. Without
 * a bound, one key's concurrent continuations took the database (PGlite's one connection, PostgreSQL's pool) and
 * every other key's requests waited behind them. Each key gets `perKey` loads at once on this instance; up to
 * `queuedPerKey` more wait for a turn, first come first served; past that a continuation is refused at once with
 * 429 and `retry-after`, before it reads anything. Other keys never wait on this key's queue.
 */
import { AppError, msg } from '../platform/errors.js';

interface KeyLoads {
  running: number;
  waiting: Array<() => void>;
}

export interface ChainLoadLimits {
  /** loads one key may have running at once */
  perKey: number;
  /** loads of one key that may wait for a turn; more are refused (429) */
  queuedPerKey: number;
}

export class ChainLoads {
  private readonly keys = new Map<string, KeyLoads>();
  /** a running mean of how long a load takes (ms), for retry-after */
  private meanMs = 100;

  constructor(readonly limits: ChainLoadLimits) {}

  /**
   * Runs `load` in one of the key's slots. `queue: 'bounded'` (a client waiting on the answer) is refused with 429
   * when the key's queue is full; `'unbounded'` (a background job, already bounded by BACKGROUND_CONCURRENCY) waits.
   */
  async run<T>(keyId: string, load: () => Promise<T>, queue: 'bounded' | 'unbounded' = 'bounded'): Promise<T> {
    let k = this.keys.get(keyId);
    if (!k) this.keys.set(keyId, (k = { running: 0, waiting: [] }));
    if (k.running >= this.limits.perKey) {
      if (queue === 'bounded' && k.waiting.length >= this.limits.queuedPerKey) {
        const wait = Math.max(1, Math.ceil((this.meanMs * (1 + k.waiting.length / this.limits.perKey)) / 1000));
        throw new AppError('rate_limit_exceeded', msg('chain_loads_busy', { max: this.limits.perKey, queued: this.limits.queuedPerKey, wait }), 'previous_response_id', {
          headers: { 'retry-after': String(wait) },
        });
      }
      // the slot is handed over by release(): running stays counted for this one
      await new Promise<void>((resolve) => k.waiting.push(resolve));
    } else k.running++;
    const started = performance.now();
    try {
      return await load();
    } finally {
      this.meanMs += (performance.now() - started - this.meanMs) / 8;
      this.release(keyId, k);
    }
  }

  /** loads running and waiting for a key (tests, metrics) */
  state(keyId: string): { running: number; waiting: number } {
    const k = this.keys.get(keyId);
    return { running: k?.running ?? 0, waiting: k?.waiting.length ?? 0 };
  }

  private release(keyId: string, k: KeyLoads) {
    const next = k.waiting.shift();
    if (next) return next();
    k.running--;
    if (k.running === 0) this.keys.delete(keyId);
  }
}
