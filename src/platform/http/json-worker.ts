/**
 * The worker thread of ./json-body.ts: decodes and parses large JSON bodies off the event loop, and checks
 * their shape here too, so a body that breaks a limit is refused without being copied back.
 */
import { parentPort } from 'node:worker_threads';
import { checkJsonShape } from './json-shape.js';

/** a JSON \\u0000 escape that is not itself escaped (an odd number of backslashes before u0000) */
const NUL_ESCAPE = /(?<!\\)(?:\\\\)*\\u0000/;

export type JsonWorkerAnswer =
  { id: number; ok: true; empty?: boolean; value?: unknown } | { id: number; ok: false; kind: 'json' | 'nul' | 'shape'; message?: string; param?: string | null; detail?: string };

function answer(id: number, bytes: Uint8Array): JsonWorkerAnswer {
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
  if (text.trim() === '') return { id, ok: true, empty: true };
  if (NUL_ESCAPE.test(text)) return { id, ok: false, kind: 'nul' };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { id, ok: false, kind: 'json' };
  }
  const p = checkJsonShape(value);
  if (!p) return { id, ok: true, value };
  if (p.poisoned) return { id, ok: false, kind: 'json' };
  return { id, ok: false, kind: 'shape', message: p.message, param: p.param, detail: p.detail };
}

parentPort?.on('message', (m: { id: number; bytes: Uint8Array }) => {
  let a: JsonWorkerAnswer;
  try {
    a = answer(m.id, m.bytes);
  } catch (e) {
    a = { id: m.id, ok: false, kind: 'json', message: (e as Error).message };
  }
  parentPort!.postMessage(a);
});
