/**
 * The bytes of a large embeddings answer, made in a worker thread (./answer-worker.ts): the event loop hands it
 * the packed vectors (moved, not copied) and gets one Buffer back (moved too), which it only writes to the socket.
 * Made here, 2048 vectors of 1536 floats were ~64 MB of JSON strings and 3 million numbers in arrays on the main
 * thread's heap: made in slices, yet their collection held the event loop 100-170 ms (docs/performance.md,
 * "One large request and the rest of the instance"). One worker thread, started by the first large answer and
 * kept (unreferenced while it has nothing to do); a worker that fails fails the answers it had, and the next one
 * starts another.
 */
import { Worker } from 'node:worker_threads';
import type { PackedVectors } from '../engines/types.js';
import type { AnswerDone, AnswerJob } from './answer-worker.js';

let worker: Worker | undefined;
let seq = 0;
const pending = new Map<number, { resolve: (b: Buffer) => void; reject: (e: unknown) => void }>();

function writer(): Worker {
  if (worker) return worker;
  const w = new Worker(new URL('./answer-worker.js', import.meta.url));
  w.on('message', (a: AnswerDone) => {
    const p = pending.get(a.id);
    if (!p) return;
    pending.delete(a.id);
    if (pending.size === 0) w.unref();
    if (a.ok) p.resolve(Buffer.from(a.bytes.buffer, a.bytes.byteOffset, a.bytes.byteLength));
    else p.reject(new Error(`the embeddings answer could not be written (${a.message})`));
  });
  const fail = (e: unknown) => {
    if (worker === w) worker = undefined;
    for (const p of pending.values()) p.reject(e instanceof Error ? e : new Error('the embeddings answer writer stopped'));
    pending.clear();
  };
  w.on('error', fail);
  w.on('exit', () => fail(new Error('the embeddings answer writer stopped')));
  w.unref();
  worker = w;
  return w;
}

/**
 * The UTF-8 bytes of JSON.stringify of `shell` with its `data` list made of `vectors` (`{object: 'embedding',
 * index, embedding}` each, the embedding its numbers or, with `base64`, the base64 of its float32 bytes). `shell`
 * is the answer without its items (`data: []`). The vectors' memory moves to the worker: `vectors.flat` is
 * unusable here after.
 */
export function answerBytes(shell: { data: unknown[] }, vectors: PackedVectors, base64: boolean): Promise<Buffer> {
  const text = JSON.stringify(shell);
  // the first `"data":[]` of the text is the list's (a string's quotes are escaped: `\"data\":[]`)
  const at = text.indexOf('"data":[]');
  if (at < 0 || shell.data.length) return Promise.reject(new Error('the answer has no empty data list'));
  const job: AnswerJob = {
    id: ++seq,
    flat: vectors.flat,
    count: vectors.count,
    dims: vectors.dims,
    base64,
    head: text.slice(0, at + '"data":['.length),
    tail: text.slice(at + '"data":['.length),
  };
  const w = writer();
  return new Promise((resolve, reject) => {
    pending.set(job.id, { resolve, reject });
    w.ref();
    w.postMessage(job, [vectors.flat.buffer as ArrayBuffer]);
  });
}
