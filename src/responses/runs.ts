import type { FastifyBaseLogger } from 'fastify';
import type { StreamEvent } from './builder.js';
import { AsyncChannel } from '../platform/async-channel.js';

/** A background response running (or queued) in this process. */
export class Run {
  readonly events: StreamEvent[] = [];
  readonly controller = new AbortController();
  private readonly listeners = new Set<(e: StreamEvent | null) => void>();
  done = false;
  cancelRequested = false;

  constructor(readonly id: string) {}

  push(e: StreamEvent) {
    this.events.push(e);
    for (const l of this.listeners) l(e);
  }

  end() {
    this.done = true;
    for (const l of this.listeners) l(null);
    this.listeners.clear();
  }

  /** Live events after `after` (already-made ones first), ending when the run ends or `signal` aborts. */
  async *follow(after: number, signal?: AbortSignal): AsyncIterable<StreamEvent> {
    const channel = new AsyncChannel<StreamEvent>({ signal });
    for (const e of this.events) if (e.sequence_number > after) channel.push(e);
    const listener = (e: StreamEvent | null) => (e ? e.sequence_number > after && channel.push(e) : channel.end());
    if (this.done) channel.end();
    else this.listeners.add(listener);
    try {
      for (;;) {
        let r: IteratorResult<StreamEvent>;
        try {
          r = await channel.next();
        } catch {
          return; // the channel fails only by the abort, which ends the following quietly
        }
        if (r.done) return;
        yield r.value;
      }
    } finally {
      this.listeners.delete(listener);
      void channel.return(); // off the signal
    }
  }
}

/** what a RunManager writes: one line per job that ends by throwing */
export type RunLog = Pick<FastifyBaseLogger, 'error' | 'info'>;

/**
 * Background work in this process: a bounded number of jobs run at once, the rest wait in line. Each job
 * has a Run that carries its events (for live replay) and its AbortController (for cancel and shutdown).
 * A job that throws is logged once with its response id: at error level, unless the job had been stopped
 * (cancel or shutdown), which is no failure and is logged at info.
 */
export class RunManager {
  private readonly runs = new Map<string, Run>();
  private readonly waiting: Array<() => void> = [];
  private active = 0;
  private closed = false;

  constructor(
    private readonly concurrency: number,
    private readonly log: RunLog,
  ) {}

  get(id: string): Run | undefined {
    return this.runs.get(id);
  }

  get size() {
    return this.runs.size;
  }

  ids(): string[] {
    return [...this.runs.keys()];
  }

  submit(id: string, job: (run: Run) => Promise<void>): Run {
    const run = new Run(id);
    this.runs.set(id, run);
    const start = () => {
      this.active++;
      job(run)
        .catch((e: unknown) => {
          // a job ends its response itself (failed, cancelled); what escapes it is a fault of its own
          if (run.controller.signal.aborted) {
            const err = e instanceof Error ? e.message : String(e);
            this.log.info({ id, err, reason: run.cancelRequested ? 'cancelled' : 'stopped' }, 'background job stopped');
          } else {
            // the error itself (pino writes its message and stack)
            this.log.error({ id, err: e }, 'background job failed outside its response');
          }
        })
        .finally(() => {
          this.active--;
          run.end();
          this.runs.delete(id);
          this.waiting.shift()?.();
        });
    };
    if (this.active < this.concurrency && !this.closed) start();
    else this.waiting.push(start);
    return run;
  }

  /**
   * Shutdown: takes no new jobs, lets running ones finish for `graceMs`, then stops the rest (their
   * responses are written as failed) and waits for them to be written.
   */
  async close(graceMs = 0): Promise<void> {
    this.closed = true;
    const waitEmpty = async (ms: number) => {
      const deadline = Date.now() + ms;
      while (this.runs.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    };
    await waitEmpty(graceMs);
    for (const r of this.runs.values()) r.controller.abort(new Error('shutdown'));
    this.waiting.splice(0).forEach((s) => s());
    await waitEmpty(5_000);
  }
}
