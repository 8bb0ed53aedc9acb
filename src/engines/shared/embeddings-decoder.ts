/**
 * The main thread's side of ./embeddings-worker.ts: one worker thread (../../platform/job-worker.ts), started by
 * the first large answer and kept while the process runs.
 */
import type { BodyBlocks } from '../../platform/http/json-body.js';
import { jobWorker } from '../../platform/job-worker.js';
import type { DecoderAnswer } from './embeddings-worker.js';

type Answer = { ok: true; flat: Float64Array; count: number; dims: number; reported: unknown; model?: string } | { ok: false; unreadable: string };

const decoder = jobWorker<{ blocks: Uint8Array[]; inputs: number }, DecoderAnswer>(new URL('./embeddings-worker.js', import.meta.url), 'embeddings decoder');

/** Decodes an answer read in blocks in the worker thread; the blocks' memory moves there (they are unusable here after). */
export function decodeOffThread(blocks: BodyBlocks, inputs: number): Promise<Answer> {
  // moved: nothing of the answer stays on this thread's heap (the worker reclaims its own garbage, reclaim.ts)
  const views = blocks.views();
  return decoder.run(
    { blocks: views, inputs },
    views.map((v) => v.buffer as ArrayBuffer),
  );
}
