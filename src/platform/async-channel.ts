/**
 * "Push values in, pull them out as an async iterable": a producer that is called back (worker messages,
 * listeners, a job running beside the reader) feeds a consumer that reads with `for await`.
 *
 *   const ch = new AsyncChannel<Chunk>({ signal, onReturn: () => stopProducing() });
 *   producer: ch.push(x) ... then ch.end() or ch.fail(err)
 *   consumer: for await (const x of ch) ...
 *
 * - Values come out in the order they were pushed; after end() the values still queued are delivered,
 *   then the iteration ends; after fail(err) they are delivered, then next() rejects with err.
 * - The signal: once it is aborted, next() rejects with abortError(signal) (a waiting next() at once); the
 *   abort wins over whatever the reader has not had yet (queued values are dropped, an end or an error not
 *   yet read is replaced), and later pushes are ignored.
 * - return() (a `break`, or an exception in the body of the for await) means the consumer left: the queue is
 *   dropped, later pushes are ignored (push returns false), and onReturn is called once.
 *
 * No backpressure: the queue grows as fast as the producer pushes (`size` tells how far ahead it is).
 * One consumer.
 */

/** The error an aborted operation throws: the signal's reason when it is an Error, else an AbortError. */
export function abortError(signal?: AbortSignal): unknown {
  const r = signal?.reason;
  if (r instanceof Error) return r;
  return new DOMException('This operation was aborted', 'AbortError');
}

export interface AsyncChannelOptions {
  /** aborting it ends the reading with abortError(signal) */
  signal?: AbortSignal;
  /** called once when the consumer leaves before the end (return()) */
  onReturn?: () => void;
}

interface Waiter<T> {
  resolve(r: IteratorResult<T>): void;
  reject(e: unknown): void;
}

const DONE: IteratorReturnResult<undefined> = Object.freeze({ value: undefined, done: true }) as IteratorReturnResult<undefined>;

export class AsyncChannel<T> implements AsyncIterableIterator<T> {
  private readonly queue: T[] = [];
  private readonly waiters: Waiter<T>[] = [];
  /** no more values: end(), fail(), the abort or return() */
  private closed = false;
  private failed = false;
  private error: unknown;
  private left = false;
  /** the reader has had the end, the error or the abort */
  private over = false;
  private readonly signal: AbortSignal | undefined;
  private readonly onReturn: (() => void) | undefined;

  constructor(opts: AsyncChannelOptions = {}) {
    this.signal = opts.signal;
    this.onReturn = opts.onReturn;
    if (this.signal?.aborted) this.onAbort();
    else this.signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  /** Values pushed and not read yet. */
  get size(): number {
    return this.queue.length;
  }

  /** Whether the consumer left (return()). */
  get consumerLeft(): boolean {
    return this.left;
  }

  /** Queues a value (or hands it to the waiting reader). False when it was dropped: the channel is closed. */
  push(value: T): boolean {
    if (this.closed) return false;
    const w = this.waiters.shift();
    if (w) w.resolve({ value, done: false });
    else this.queue.push(value);
    return true;
  }

  /** No more values: the reader gets the queued ones, then the end. */
  end(): void {
    if (this.closed) return;
    this.closed = true;
    this.wakeWaiters();
  }

  /** Ends with an error: the reader gets the queued values, then `error`. */
  fail(error: unknown): void {
    if (this.closed) return;
    this.closed = true;
    this.failed = true;
    this.error = error;
    this.wakeWaiters();
  }

  next(): Promise<IteratorResult<T>> {
    if (this.queue.length > 0) return Promise.resolve({ value: this.queue.shift() as T, done: false });
    if (this.closed) {
      this.settle();
      return this.failed ? Promise.reject(this.error) : Promise.resolve(DONE);
    }
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /**
   * The consumer leaves: drops the queue, ignores later pushes and, unless the reader has already had the end
   * (or the error), tells the producer (onReturn).
   */
  return(): Promise<IteratorResult<T>> {
    if (!this.left) {
      this.left = true;
      const told = this.over;
      this.queue.length = 0;
      this.closed = true;
      this.failed = false; // from now on, next() answers done
      this.wakeWaiters();
      this.settle();
      if (!told) this.onReturn?.();
    }
    return Promise.resolve(DONE);
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /** The abort wins over what the reader has not had yet (values, end, error). */
  private readonly onAbort = () => {
    if (this.over || this.left) return;
    this.queue.length = 0;
    this.closed = true;
    this.failed = true;
    this.error = abortError(this.signal);
    this.wakeWaiters();
  };

  /** Gives waiting readers (there are waiters only while the queue is empty) the end or the error. */
  private wakeWaiters() {
    if (this.waiters.length === 0) return;
    this.settle();
    for (const w of this.waiters.splice(0)) {
      if (this.failed) w.reject(this.error);
      else w.resolve(DONE);
    }
  }

  private settle() {
    this.over = true;
    this.signal?.removeEventListener('abort', this.onAbort);
  }
}
