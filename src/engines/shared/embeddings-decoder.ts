/**
 * The main thread's side of ./embeddings-worker.ts: one worker thread, started by the first large answer and kept
 * (unreferenced while it has nothing to do, so it never holds the process open). A worker that fails fails the
 * answers it had, and the next large answer starts another.
 */
import { Worker } from 'node:worker_threads';
import type { BodyBlocks } from '../../platform/http/json-body.js';
import type { DecoderAnswer } from './embeddings-worker.js';

type Answer = { ok: true; flat: Float64Array; count: number; dims: number; reported: unknown; model?: string } | { ok: false; unreadable: string };

let worker: Worker | undefined;
let seq = 0;
const pending = new Map<number, { resolve: (a: Answer) => void; reject: (e: unknown) => void }>();

function decoder(): Worker {
  if (worker) return worker;
  const w = new Worker(new URL('./embeddings-worker.js', import.meta.url));
  w.on('message', (a: DecoderAnswer) => {
    const p = pending.get(a.id);
    if (!p) return;
    pending.delete(a.id);
    if (pending.size === 0) w.unref();
    p.resolve(a);
  });
  const fail = (e: unknown) => {
    if (worker === w) worker = undefined;
    for (const p of pending.values()) p.reject(e instanceof Error ? e : new Error('the embeddings decoder stopped'));
    pending.clear();
  };
  w.on('error', fail);
  w.on('exit', () => fail(new Error('the embeddings decoder stopped')));
  w.unref();
  worker = w;
  return w;
}

/** Decodes an answer read in blocks in the worker thread; the blocks' memory moves there (they are unusable here after). */
export function decodeOffThread(blocks: BodyBlocks, inputs: number): Promise<Answer> {
  const w = decoder();
  const id = ++seq;
  // moved: nothing of the answer stays on this thread's heap (the worker reclaims its own garbage, reclaim.ts)
  const views = blocks.views();
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject });
    w.ref();
    w.postMessage(
      { id, blocks: views, inputs },
      views.map((v) => v.buffer as ArrayBuffer),
    );
  });
}
