/**
 * The bytes of a large embeddings answer, made in a worker thread (./answer-worker.ts): the event loop hands it
 * the packed vectors (moved, not copied) and gets one Buffer back (moved too), which it only writes to the socket.
 * Made here, 2048 vectors of 1536 floats were ~64 MB of JSON strings and 3 million numbers in arrays on the main
 * thread's heap: made in slices, yet their collection held the event loop 100-170 ms (docs/performance.md,
 * "One large request and the rest of the instance"). One worker thread (../platform/job-worker.ts), started by
 * the first large answer and kept while the process runs.
 */
import { jobWorker } from '../platform/job-worker.js';
import type { PackedVectors } from '../engines/types.js';
import type { AnswerDone, AnswerJob } from './answer-worker.js';

const writer = jobWorker<Omit<AnswerJob, 'id'>, AnswerDone>(new URL('./answer-worker.js', import.meta.url), 'embeddings answer writer');

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
  const job = {
    flat: vectors.flat,
    count: vectors.count,
    dims: vectors.dims,
    base64,
    head: text.slice(0, at + '"data":['.length),
    tail: text.slice(at + '"data":['.length),
  };
  return writer.run(job, [vectors.flat.buffer as ArrayBuffer]).then((a) => {
    if (!a.ok) throw new Error(`the embeddings answer could not be written (${a.message})`);
    return Buffer.from(a.bytes.buffer, a.bytes.byteOffset, a.bytes.byteLength);
  });
}
