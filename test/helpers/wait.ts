/**
 * Waiting on conditions, not on the machine's speed: `npm test` must pass on a busy machine.
 *
 * - waitFor(cond): polls until `cond` gives a truthy value (first on setImmediate, then every few ms), and fails
 *   only after a generous timeout: a wait that ends when the thing happened, not after a guess at how long it takes.
 * - stallWatch(): the longest event-loop stall (ms) since it started. A test that times behaviour (a timeout firing)
 *   bounds it by the expected time plus a margin plus what was stalled meanwhile: a busy machine delays every timer
 *   by its stalls, and the bound still fails when the code waits for something it should not.
 * - quietFor(ms): a short pause that proves a negative ("nothing more happens"); its callers say so.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';

export interface WaitOptions {
  /** fail after this long (default 10 s: far past what the condition takes, but no test hangs for ever) */
  timeoutMs?: number;
  /** the pause between polls once the first few checks failed (default 10 ms) */
  everyMs?: number;
  /** named in the failure */
  what?: string;
}

/** what waitFor gives: the condition's value once it is truthy (`x.length > 0 && x` gives `x`) */
export type Truthy<T> = Exclude<NonNullable<T>, false | 0 | ''>;

/** Polls `cond` until it gives a truthy value, which it returns; throws after `timeoutMs`. */
export async function waitFor<T>(cond: () => T | Promise<T>, o: WaitOptions = {}): Promise<Truthy<T>> {
  const timeoutMs = o.timeoutMs ?? 10_000;
  const everyMs = o.everyMs ?? 10;
  const end = performance.now() + timeoutMs;
  for (let i = 0; ; i++) {
    const v = await cond();
    if (v) return v as Truthy<T>;
    if (performance.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${o.what ?? 'the condition'}`);
    // a few turns of the event loop first (what a promise or an I/O callback settles), then short pauses
    await new Promise<void>((r) => (i < 5 ? setImmediate(r) : setTimeout(r, everyMs)));
  }
}

export interface StallWatch {
  /** the longest event-loop stall seen so far (ms) */
  maxMs(): number;
  /** stops measuring; gives the longest stall (ms) */
  stop(): number;
}

/** Measures event-loop stalls of this process from now on (resolution 5 ms; its first tick records nothing, so a stall that begins in this very turn is missed: start it a timer turn before). */
export function stallWatch(): StallWatch {
  const h = monitorEventLoopDelay({ resolution: 5 });
  h.enable();
  let last = 0;
  let on = true;
  const maxMs = () => (on ? h.max / 1e6 : last);
  return {
    maxMs,
    stop() {
      if (on) {
        last = h.max / 1e6;
        on = false;
        h.disable();
      }
      return last;
    },
  };
}

/** Runs `f`, giving how long it took (ms) and the longest event-loop stall while it ran. */
export async function timed<T>(f: () => Promise<T>): Promise<{ value: T; ms: number; stallMs: number }> {
  const w = stallWatch();
  // the monitor's first tick records nothing: a stall that began at once (f's synchronous start) would be missed
  await new Promise((r) => setTimeout(r, 6));
  const t0 = performance.now();
  try {
    const value = await f();
    const ms = performance.now() - t0;
    // a stall is recorded when the monitor's timer fires after it: one that ended f (synchronous work, then the
    // promise settled) is seen only after a timer turn
    await new Promise((r) => setTimeout(r, 6));
    return { value, ms, stallMs: w.maxMs() };
  } finally {
    w.stop();
  }
}

/** A pause that proves a negative (something does NOT happen meanwhile). Keep it short; say why at the call. */
export function quietFor(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
