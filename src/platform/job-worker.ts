/**
 * One worker thread for jobs of one kind, each a message answered by a message with the same `id`: started by the
 * first job and kept, unreferenced while it has nothing to do (it never holds the process open). A worker that fails
 * fails the jobs it had, and the next job starts another. The large embeddings answer's decoder
 * (engines/shared/embeddings-decoder.ts) and writer (embeddings/answer-bytes.ts) are two.
 */
import { Worker } from 'node:worker_threads';

export interface JobWorker<J, A> {
  /** sends the job (its `transfer` list moves, unusable here after) and gives the worker's answer */
  run(job: J, transfer: ArrayBuffer[]): Promise<A>;
}

/** `name`: how a stopped worker is told in the jobs' errors (`the <name> stopped`) */
export function jobWorker<J extends object, A extends { id: number }>(url: URL, name: string): JobWorker<J, A> {
  let worker: Worker | undefined;
  let seq = 0;
  const pending = new Map<number, { resolve: (a: A) => void; reject: (e: unknown) => void }>();
  const start = (): Worker => {
    if (worker) return worker;
    const w = new Worker(url);
    w.on('message', (a: A) => {
      const p = pending.get(a.id);
      if (!p) return;
      pending.delete(a.id);
      if (pending.size === 0) w.unref();
      p.resolve(a);
    });
    const fail = (e: unknown) => {
      if (worker === w) worker = undefined;
      for (const p of pending.values()) p.reject(e instanceof Error ? e : new Error(`the ${name} stopped`));
      pending.clear();
    };
    w.on('error', fail);
    w.on('exit', () => fail(new Error(`the ${name} stopped`)));
    w.unref();
    worker = w;
    return w;
  };
  return {
    run(job, transfer) {
      const w = start();
      const id = ++seq;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject });
        w.ref();
        w.postMessage({ ...job, id }, transfer);
      });
    },
  };
}
