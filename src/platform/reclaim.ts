/**
 * Memory back soon after large work (issue 22 §6). A large request (a 16 MiB body, a stored chain read back) leaves
 * hundreds of MiB of garbage in the V8 heap of the thread that handled it; with the process then idle, nothing
 * allocates, so no collection runs until V8's memory reducer gets to it, 10-60 s later (docs/performance.md,
 * "Large requests and the embedded database's memory"): an idle instance held 1.1 GB 5 s after the load. Here
 * a thread that did large work (largeWorkDone) runs one full collection once it has done no more for QUIET_MS,
 * and only when at least WORTH_BYTES of it happened since the last one, so a steady stream of small requests
 * never pays for a collection, and a burst of large ones pays for one at its end.
 *
 * V8's collector is reached as `--expose-gc` gives it, set at run time and taken from a new context (node:vm);
 * where that is refused, nothing is done and V8 collects when it would have. Per thread: module state is.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** no large work for this long: collect */
export const QUIET_MS = 1500;
/** at least this much large work (bytes, roughly) since the last collection */
export const WORTH_BYTES = 32 * 1024 * 1024;

let owed = 0;
let timer: NodeJS.Timeout | undefined;
let collect: (() => void) | null | undefined;

function collector(): (() => void) | null {
  if (collect === undefined) {
    try {
      setFlagsFromString('--expose-gc');
      const gc = runInNewContext('gc') as unknown;
      collect = typeof gc === 'function' ? (gc as () => void) : null;
    } catch {
      collect = null;
    }
  }
  return collect;
}

/** Large work of about `bytes` is done on this thread (a large body parsed, a large result read). */
export function largeWorkDone(bytes: number): void {
  owed += bytes;
  if (owed < WORTH_BYTES) return;
  if (timer) timer.refresh();
  else {
    timer = setTimeout(run, QUIET_MS);
    timer.unref();
  }
}

function run(): void {
  timer = undefined;
  owed = 0;
  collector()?.();
}
