/**
 * Large values from a worker thread without a long stretch of the event loop. A message is copied out on the
 * receiving thread in one go: for 16 MiB of parsed items, 17-66 ms on this machine. Here a thread sends a large
 * array in batches on a port of its own (sendInBatches) and the main thread reads them a batch per turn of its
 * event loop (BatchReader). Used by the JSON parse worker (http/json-worker.ts) and the PGlite thread
 * (db/pglite-worker.ts). Only node's own modules: the PGlite thread loads nothing else.
 */
import { receiveMessageOnPort, type MessagePort } from 'node:worker_threads';

/** about this many characters of strings per batch (a batch costs the main thread ~1-3 ms to receive) */
export const BATCH_CHARS = 512 * 1024;

/** one piece of an array sent apart */
export interface Batch {
  id: number;
  key: string;
  items: unknown[];
}

/** the characters of the strings and keys of a value, with 2 per value: what copying it to another thread costs, roughly */
export function weight(v: unknown): number {
  if (typeof v === 'string') return v.length + 2;
  if (v === null || typeof v !== 'object') return 2;
  let n = 2;
  if (Array.isArray(v)) for (const x of v) n += weight(x);
  else for (const [k, x] of Object.entries(v)) n += k.length + weight(x);
  return n;
}

/** whether an array weighs at least `chars` (stops counting there) */
export function heavy(arr: readonly unknown[], chars = BATCH_CHARS): boolean {
  let n = 0;
  for (const x of arr) if ((n += weight(x)) >= chars) return true;
  return false;
}

/** Sends `arr` in batches of about BATCH_CHARS on `port`, tagged with `id` and `key`; how many. */
export function sendInBatches(port: MessagePort, id: number, key: string, arr: readonly unknown[]): number {
  let batches = 0;
  let from = 0;
  let chars = 0;
  for (let i = 0; i < arr.length; i++) {
    chars += weight(arr[i]);
    if (chars >= BATCH_CHARS || i === arr.length - 1) {
      port.postMessage({ id, key, items: arr.slice(from, i + 1) } satisfies Batch);
      batches++;
      from = i + 1;
      chars = 0;
    }
  }
  return batches;
}

const turn = () => new Promise<void>((r) => setImmediate(r));

/**
 * Reads the batches a thread sent on a port this side does not listen on, a batch per turn of the event loop.
 * Reads are done one after the other in the order they were asked for, which must be the order the thread sent
 * the arrays in (a thread sends each array whole before it says so). A batch of another id (one whose answer
 * was never asked for: its sender failed after sending part) is dropped.
 */
export class BatchReader {
  private queue: Promise<void> = Promise.resolve();

  constructor(private readonly port: MessagePort) {
    port.unref();
  }

  /** `each`: run on each batch's items as it comes (in the same turn), before they are added */
  read(id: number, key: string, batches: number, into: unknown[] = [], each?: (items: unknown[]) => void): Promise<unknown[]> {
    const done = this.queue.then(async () => {
      for (let got = 0; got < batches;) {
        await turn();
        const m = receiveMessageOnPort(this.port)?.message as Batch | undefined;
        if (!m) throw new Error('a thread lost part of a value it sent');
        if (m.id !== id || m.key !== key) continue;
        each?.(m.items);
        for (const x of m.items) into.push(x);
        got++;
      }
      return into;
    });
    this.queue = done.then(
      () => {},
      () => {},
    );
    return done;
  }

  close(): void {
    this.port.close();
  }
}
