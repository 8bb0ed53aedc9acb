/**
 * Counts the turns of the event loop while code that should yield runs: one per turn (a self-scheduling
 * setImmediate), whatever the machine's speed. A 1 ms interval counts milliseconds, not turns: on a fast machine
 * it fired only 3 times while eight batches were read, each after a turn of its own.
 */
export function countTurns(): { readonly count: number; reset(): void; stop(): number } {
  let count = 0;
  let on = true;
  const tick = () => {
    if (!on) return;
    count++;
    setImmediate(tick);
  };
  setImmediate(tick);
  return {
    get count() {
      return count;
    },
    reset() {
      count = 0;
    },
    stop() {
      on = false;
      return count;
    },
  };
}
