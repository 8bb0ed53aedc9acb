/**
 * The idle bound of a long-lived connection (the Responses API's WebSocket mode, a realtime session): it ends the
 * connection once its peer has been silent for `idleMs` with nothing in progress. One rule for both:
 *
 * - It counts the peer's time only. A timer that fires late measures a stall of this process's own event loop (a
 *   busy machine, a long synchronous task), and timers run before sockets are read: the peer's message may be
 *   waiting unread behind this very timer. So a late timer (more than STALL_MS) gives the stall back to the peer
 *   (the bound moves by as much) and decides nothing.
 * - A timer on time decides after this turn's reads (setImmediate runs after the poll phase), not before them.
 * - While the owner is busy (a response in progress, a message waiting) nothing is idle; the spell starts again at
 *   the owner's last activity, which it moves when a message comes and when its work ends.
 *
 * The clock is read when its timer fires (`lastActivity`, `busy`): the owner only keeps them true. Times are
 * `performance.now()`.
 */
export interface Watched {
  /** when the idle spell began: the peer's last message or the end of the last work, whichever came last */
  lastActivity(): number;
  /** work in progress (or waiting): not idle however long the spell */
  busy(): boolean;
  /** the bound is reached: the owner closes */
  onIdle(): void;
}

/** a timer this much late (ms) says the event loop was held: the idle clock does not count that time */
export const STALL_MS = 25;

/** Starts the clock; gives what stops it. */
export function idleClock(w: Watched, idleMs: number): () => void {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let spell = w.lastActivity();
  /** the stalls given back in this spell */
  let given = 0;

  const arm = (ms: number) => {
    if (stopped) return;
    const armedAt = performance.now();
    // at most an hour at a time (a longer bound is looked at again then: setTimeout cannot count past ~24.8 days)
    ms = Math.min(Math.max(1, ms), 3_600_000);
    timer = setTimeout(() => fire(armedAt, ms), ms);
    timer.unref();
  };
  /** the bound of the spell under way, in ms from `now` (a new spell gives nothing back) */
  const left = (now: number) => {
    const from = w.lastActivity();
    if (from !== spell) {
      spell = from;
      given = 0;
    }
    return spell + idleMs + given - now;
  };
  const fire = (armedAt: number, ms: number) => {
    if (stopped) return;
    const now = performance.now();
    const rest = left(now);
    const late = now - armedAt - ms;
    if (late > STALL_MS) {
      // the stall is given back, and the reads it held up get at least as long before anything is decided
      given += late;
      return arm(Math.max(late, rest + late));
    }
    if (w.busy()) return arm(idleMs);
    if (rest > 0) return arm(rest);
    setImmediate(() => {
      if (stopped) return;
      const busy = w.busy();
      const after = left(performance.now());
      if (!busy && after <= 0) w.onIdle();
      else arm(busy ? idleMs : after);
    });
  };
  arm(idleMs);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
