/**
 * The worker thread of a large embeddings answer's bytes (./answer-bytes.ts): writes the JSON text of the answer
 * around vectors packed in one Float64Array (the same text as JSON.stringify of the answer object: each vector
 * written by JSON.stringify of its numbers, or as base64 of its float32 bytes) into one Buffer of its own memory,
 * moved to the main thread. The ~64 MB of text of 2048 vectors of 1536 floats is this thread's garbage, collected
 * here (reclaim.ts), never the event loop's.
 */
import { parentPort } from 'node:worker_threads';
import { largeWorkDone } from '../platform/reclaim.js';

export interface AnswerJob {
  id: number;
  flat: Float64Array;
  count: number;
  dims: number;
  base64: boolean;
  /** the answer's text before the items of its list, and after them */
  head: string;
  tail: string;
}

export type AnswerDone = { id: number; ok: true; bytes: Uint8Array } | { id: number; ok: false; message: string };

/** the JSON text of the answer's list items, in order */
function items(j: AnswerJob): string[] {
  const out: string[] = new Array(j.count);
  for (let i = 0; i < j.count; i++) {
    const v = j.flat.subarray(i * j.dims, (i + 1) * j.dims);
    // float32 little-endian bytes in base64, as toBase64 (../embeddings/service.ts) makes them; else the numbers as
    // JSON.stringify writes an array of them
    const embedding = j.base64 ? Buffer.from(Float32Array.from(v).buffer).toString('base64') : Array.from(v);
    out[i] = (i === 0 ? '' : ',') + JSON.stringify({ object: 'embedding', index: i, embedding });
  }
  return out;
}

function answer(j: AnswerJob): AnswerDone {
  const parts = items(j);
  let bytes = Buffer.byteLength(j.head) + Buffer.byteLength(j.tail);
  for (const p of parts) bytes += p.length; // ASCII: numbers, base64 and the fixed keys
  const out = Buffer.allocUnsafeSlow(bytes);
  let at = out.write(j.head, 0);
  for (const p of parts) at += out.write(p, at, 'latin1');
  at += out.write(j.tail, at);
  if (at !== bytes) throw new Error(`the answer is ${at} bytes, not ${bytes}`);
  largeWorkDone(bytes);
  return { id: j.id, ok: true, bytes: out };
}

parentPort?.on('message', (j: AnswerJob) => {
  let a: AnswerDone;
  try {
    a = answer(j);
  } catch (e) {
    a = { id: j.id, ok: false, message: (e as Error).message };
  }
  parentPort!.postMessage(a, a.ok ? [a.bytes.buffer as ArrayBuffer] : []);
});
