/**
 * The worker thread of a large embeddings answer (./embeddings-decoder.ts): joins the blocks the answer was read
 * into, decodes, parses and checks it (./embeddings-answer.ts), and sends the vectors back packed in one
 * Float64Array, moved to the main thread (no copy). Tens of MiB of JSON numbers parse for seconds: here, not on
 * the event loop.
 */
import { parentPort } from 'node:worker_threads';
import { decodeAnswer } from './embeddings-answer.js';
import { largeWorkDone } from '../../platform/reclaim.js';

export type DecoderAnswer =
  { id: number; ok: true; flat: Float64Array; count: number; dims: number; reported: unknown; model?: string } | { id: number; ok: false; unreadable: string };

function answer(id: number, blocks: Uint8Array[], inputs: number): DecoderAnswer {
  const bytes = Buffer.concat(blocks);
  // the text, its parse and the vectors are this thread's garbage once sent: collected here, off the event loop
  largeWorkDone(bytes.length);
  const d = decodeAnswer(bytes.toString('utf8'), inputs);
  if ('unreadable' in d) return { id, ok: false, unreadable: d.unreadable };
  const count = d.vectors.length;
  const dims = d.vectors[0]!.length;
  const flat = new Float64Array(count * dims);
  for (let i = 0; i < count; i++) flat.set(d.vectors[i]!, i * dims);
  return { id, ok: true, flat, count, dims, reported: d.reported, model: d.model };
}

parentPort?.on('message', (m: { id: number; blocks: Uint8Array[]; inputs: number }) => {
  let a: DecoderAnswer;
  try {
    a = answer(m.id, m.blocks, m.inputs);
  } catch (e) {
    a = { id: m.id, ok: false, unreadable: (e as Error).message };
  }
  parentPort!.postMessage(a, a.ok ? [a.flat.buffer as ArrayBuffer] : []);
});
