/**
 * When a batching writer writes (the usage shipment, the request log): one rule for both, so that a busy instance
 * sends one statement per interval, each with more rows, rather than one after the other with each its fixed cost.
 *
 * - A row after a quiet spell is written `delayMs` after it came, with whatever else comes meanwhile.
 * - A write starts no sooner than `intervalMs` after the last one began.
 * - One write at a time: rows that come during a write go with the next one, which is due when the write ends
 *   (`again()` says whether anything is left to write).
 * - `now()` starts a write at once (a full batch, a flush), or gives the one under way.
 */
export interface PacerOptions {
  delayMs: number;
  intervalMs: number;
  /** after a write: whether another is due (rows left, the writer not closed or backing off) */
  again(): boolean;
}

export class Pacer {
  private timer: NodeJS.Timeout | undefined;
  private current: Promise<void> | undefined;
  /** when the last write began (performance.now()) */
  private lastAt = -Infinity;

  constructor(
    private readonly write: () => Promise<void>,
    private readonly o: PacerOptions,
  ) {}

  /** the write under way, if any */
  get running(): Promise<void> | undefined {
    return this.current;
  }

  /** Rows are waiting: a write will start (unless one is already due or under way, which takes them). */
  schedule(): void {
    this.arm(this.o.delayMs);
  }

  /** Starts a write now, or gives the one under way. */
  now(): Promise<void> {
    if (this.current) return this.current;
    this.cancel();
    this.lastAt = performance.now();
    const run = this.write();
    this.current = run;
    // cleared once this write is done (never inside `write`, which may finish before it is even stored)
    void run.then(
      () => this.ended(run),
      () => this.ended(run),
    );
    return run;
  }

  /** Drops a write that is due but not started (a flush that writes now, a close). */
  cancel(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private ended(run: Promise<void>) {
    if (this.current === run) this.current = undefined;
    // what came during the write: no sooner than the interval after this one began, but without another delay
    if (this.o.again()) this.arm(0);
  }

  private arm(delayMs: number) {
    if (this.timer || this.current) return;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        void this.now();
      },
      Math.max(delayMs, this.lastAt + this.o.intervalMs - performance.now()),
    );
    this.timer.unref();
  }
}
