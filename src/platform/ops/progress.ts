import type { Logger } from '../log.js';

export interface ProgressOptions {
  /** the first line comes when the work has taken this long (default 2 s): quick work says nothing */
  firstAfterMs?: number;
  /** then one line this often while it goes on (default 3 s) */
  everyMs?: number;
  /** told the work's name while it runs, and undefined when it ends (the early server's phase) */
  onPhase?: (what: string | undefined) => void;
}

/**
 * Waits for `work`, saying on the log that it goes on when it takes long: one line after `firstAfterMs`
 * ("creating the database... (2 s)"), one every `everyMs` after ("still creating the database (5 s)"), and one
 * when it ends ("creating the database: done in 9.8 s"). Work that ends sooner writes nothing. A start that
 * builds, creates a database or loads a model is never silent for more than a few seconds.
 */
export async function withProgress<T>(log: Logger, what: string, work: Promise<T> | (() => Promise<T>), opts: ProgressOptions = {}): Promise<T> {
  const first = opts.firstAfterMs ?? 2_000;
  const every = opts.everyMs ?? 3_000;
  const t0 = Date.now();
  const secs = () => ((Date.now() - t0) / 1000).toFixed(0);
  let said = false;
  let timer: NodeJS.Timeout | undefined;
  const tick = (next: number) => {
    timer = setTimeout(() => {
      log.info({ phase: what, seconds: Number(secs()) }, said ? `still ${what} (${secs()} s)` : `${what}... (${secs()} s)`);
      said = true;
      tick(every);
    }, next);
    timer.unref();
  };
  tick(first);
  opts.onPhase?.(what);
  try {
    const r = await (typeof work === 'function' ? work() : work);
    if (said) log.info({ phase: what, ms: Date.now() - t0 }, `${what}: done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    return r;
  } finally {
    clearTimeout(timer);
    opts.onPhase?.(undefined);
  }
}
