/**
 * The worker thread of ./json-body.ts: decodes and parses large JSON bodies off the event loop, and checks
 * their shape here too, so a body that breaks a limit is refused without being copied back. The large arrays of
 * a large body go back in batches (../batches.ts). A body whose route's schema came with it is validated here too
 * (./ajv.ts, the Ajv of the event loop's validators): the event loop then skips its own validation of it.
 */
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import { checkJsonShape, type ShapeProblem } from './json-shape.js';
import { sendInBatches } from '../batches.js';

/** a JSON \\u0000 escape that is not itself escaped (an odd number of backslashes before u0000) */
const NUL_ESCAPE = /(?<!\\)(?:\\\\)*\\u0000/;

export type JsonWorkerAnswer =
  | { id: number; ok: true; empty?: boolean; value?: unknown; split?: SplitArray[]; valid?: boolean }
  | { id: number; ok: false; kind: 'json' | 'nul' | 'shape'; message?: string; problem?: ShapeProblem };

/** a top-level array sent apart, in `batches` messages on the batch port (`[]` stands in its place in the value) */
export interface SplitArray {
  key: string;
  batches: number;
}

/** bodies of at least this many bytes have their large top-level arrays sent in batches */
export const SPLIT_BYTES = 2 * 1024 * 1024;

/**
 * Sends the large arrays of a parsed body (the items of `input`, the `messages`) apart, in batches on the batch
 * port: the main thread copies a 16 MiB value out of a message in one go (17-66 ms), a batch at a time it takes
 * a turn of its event loop for each. The value keeps its keys in their order, an empty array in each one sent.
 */
function sendSplit(id: number, value: Record<string, unknown>, port: MessagePort): SplitArray[] {
  const split: SplitArray[] = [];
  for (const key of Object.keys(value)) {
    const arr = value[key];
    if (!Array.isArray(arr) || arr.length < 2) continue;
    split.push({ key, batches: sendInBatches(port, id, key, arr) });
    value[key] = [];
  }
  return split;
}

/** a route's body validator, compiled here at the first large body of the route (./json-body.ts, prevalidated) */
type Validator = (data: unknown) => boolean;
const validators = new Map<number, Validator | null>();
let ajv: { compile(schema: object): Validator } | undefined;

/** the route's validator, compiled at its schema's first message; null when it does not compile (checked on the event loop then) */
async function validator(check: { id: number; schema?: object }): Promise<Validator | null> {
  let v = validators.get(check.id);
  if (v !== undefined) return v;
  if (!check.schema) return null;
  try {
    ajv ??= (await import('./ajv.js')).makeAjv(false);
    v = ajv.compile(check.schema);
  } catch {
    v = null;
  }
  validators.set(check.id, v);
  return v;
}

function answer(id: number, body: Uint8Array | Uint8Array[], validate?: Validator | null): JsonWorkerAnswer {
  // a body read in blocks (json-body.ts, readLargeJson) is joined here, off the event loop
  const bytes = Array.isArray(body) ? Buffer.concat(body) : body;
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
  if (!p) {
    // before the arrays leave: the validator may set defaults, as it would on the event loop
    let valid: boolean | undefined;
    try {
      valid = validate ? validate(value) === true : undefined;
    } catch {
      valid = undefined;
    }
    if (batchPort && bytes.byteLength >= SPLIT_BYTES && value !== null && typeof value === 'object' && !Array.isArray(value)) {
      const split = sendSplit(id, value as Record<string, unknown>, batchPort);
      if (split.length) return { id, ok: true, value, split, valid };
    }
    return { id, ok: true, value, valid };
  }
  if (p.poisoned) return { id, ok: false, kind: 'json' };
  return { id, ok: false, kind: 'shape', problem: p };
}

/** where split arrays go (./json-body.ts reads it a message at a time) */
const batchPort = (workerData as { batches?: MessagePort } | undefined)?.batches;

/** one message at a time, in order (a validator's first compile waits for Ajv to load) */
let queue: Promise<void> = Promise.resolve();

parentPort?.on('message', (m: { id: number; bytes: Uint8Array | Uint8Array[]; check?: { id: number; schema?: object } }) => {
  queue = queue.then(async () => {
    let a: JsonWorkerAnswer;
    try {
      a = answer(m.id, m.bytes, m.check ? await validator(m.check) : undefined);
    } catch (e) {
      a = { id: m.id, ok: false, kind: 'json', message: (e as Error).message };
    }
    parentPort!.postMessage(a);
  });
});
