/**
 * Memory back soon after large work (issue 22 §6). A large request (a 16 MiB body, a stored chain read back) leaves
 * hundreds of MiB of garbage in the V8 heap of the thread that handled it; with the process then idle, nothing
 * allocates, so no collection runs until V8's memory reducer gets to it, 10-60 s later (docs/performance.md,
 * "Large requests and the embedded database's memory"): an idle instance held 1.1 GB 5 s after the load. Here
 * a thread that did large work (largeWorkDone) runs one full collection once it has done no more for QUIET_MS,
 * and only when at least WORTH_BYTES of it happened since the last one, so a steady stream of small requests
 * never pays for a collection, and a burst of large ones pays for one at its end.
 *
 * The collection stops the thread for as long as it marks what is live (40-60 ms for the event loop's heap): it
 * never runs while work the thread has in hand is under way (workUnderWay: on the event loop, every request until
 * its answer is sent or its client has left), where it would be a pause in each of them. A collection due then
 * waits until the thread has had nothing in hand for SETTLE_MS (the last answer's bytes reach its client meanwhile,
 * and a request that follows at once is not caught), and only a request arriving in that moment waits for it. A
 * thread seldom without a request (steady traffic, a request held open) only puts it off: V8 still collects when it
 * would have.
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
/** a collection due runs once nothing has been in hand for this long */
export const SETTLE_MS = 250;

let owed = 0;
/** work in hand, begun and not yet ended (workUnderWay) */
let underWay = 0;
/** the quiet spell ended with work in hand: the collection runs once there is none */
let due = false;
let timer: NodeJS.Timeout | undefined;
/** counting SETTLE_MS with nothing in hand */
let settling: NodeJS.Timeout | undefined;
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
  // more large work: the spell counts again from here, whatever was due
  due = false;
  if (settling) {
    clearTimeout(settling);
    settling = undefined;
  }
  arm();
}

/**
 * Work begins on this thread that a collection must not pause, and goes on past this turn (a request, until its
 * answer is sent or its client has left): no collection while any is under way. The function returned ends it; a
 * second call does nothing.
 */
export function workUnderWay(): () => void {
  underWay++;
  if (settling) {
    clearTimeout(settling);
    settling = undefined;
  }
  let ended = false;
  return () => {
    if (ended) return;
    ended = true;
    if (--underWay === 0) settle();
  };
}

/** the quiet spell (re)starts now, when enough large work is owed (only large work restarts it) */
function arm(): void {
  if (owed < WORTH_BYTES) return;
  if (timer) timer.refresh();
  else {
    timer = setTimeout(spellEnded, QUIET_MS);
    timer.unref();
  }
}

let collections = 0;

function spellEnded(): void {
  timer = undefined;
  if (owed < WORTH_BYTES) return;
  due = true;
  settle();
}

/** a collection due, and nothing in hand: it runs after SETTLE_MS more of that */
function settle(): void {
  if (!due || underWay > 0 || settling) return;
  settling = setTimeout(collectIfFree, SETTLE_MS);
  settling.unref();
}

function collectIfFree(): void {
  settling = undefined;
  if (!due || underWay > 0) return;
  due = false;
  owed = 0;
  const gc = collector();
  if (!gc) return;
  gc();
  collections++;
}

/** this thread's state, for tests: large work owed, work in hand, a quiet spell counting, a collection due (settling: its last SETTLE_MS counting), collections run */
export function reclaimState(): { owed: number; underWay: number; armed: boolean; due: boolean; settling: boolean; collections: number } {
  return { owed, underWay, armed: timer !== undefined, due, settling: settling !== undefined, collections };
}
