/**
 * JSON request bodies: parsed and shape-checked (./json-shape.ts) on the event loop when small, in a worker
 * thread when large. Parsing 16 MiB of JSON takes 100-400 ms of one core: on the event loop that is as long a
 * stall for every other request of the instance (/healthz included). Off it, the event loop only copies the
 * parsed value back, which the shape limits bound.
 */
import { Worker } from 'node:worker_threads';
import { AppError } from '../errors.js';
import { checkJsonShape, type ShapeProblem } from './json-shape.js';
import type { JsonWorkerAnswer } from './json-worker.js';

/** bodies of at least this many bytes are parsed in the worker thread */
export const OFF_THREAD_BYTES = 256 * 1024;

/** a JSON \\u0000 escape that is not itself escaped (an odd number of backslashes before u0000) */
const NUL_ESCAPE = /(?<!\\)(?:\\\\)*\\u0000/;

export const nulError = () => new AppError('validation_error', 'request body must not contain NUL characters (\\u0000)');
export const invalidJson = () => new AppError('invalid_json', 'request body is not valid JSON');
export const shapeError = (p: ShapeProblem) => (p.poisoned ? invalidJson() : new AppError('validation_error', p.message, p.param, { detail: p.detail }));

let worker: Worker | undefined;
let seq = 0;
const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: unknown) => void }>();

function jsonWorker(): Worker {
  if (worker) return worker;
  const w = new Worker(new URL('./json-worker.js', import.meta.url));
  w.on('message', (a: JsonWorkerAnswer) => {
    const p = pending.get(a.id);
    if (!p) return;
    pending.delete(a.id);
    // the worker keeps the process alive only while it has work
    if (pending.size === 0) w.unref();
    if (a.ok) p.resolve(a.empty ? undefined : a.value);
    else if (a.kind === 'nul') p.reject(nulError());
    else if (a.kind === 'shape') p.reject(shapeError({ message: a.message!, param: a.param ?? null, detail: a.detail as ShapeProblem['detail'] }));
    else p.reject(invalidJson());
  });
  const fail = (e: unknown) => {
    if (worker === w) worker = undefined;
    for (const p of pending.values()) p.reject(e instanceof Error ? e : new Error('the JSON worker stopped'));
    pending.clear();
  };
  w.on('error', fail);
  w.on('exit', () => fail(new Error('the JSON worker stopped')));
  w.unref();
  worker = w;
  return w;
}

function offThread(buf: Buffer): Promise<unknown> {
  const w = jsonWorker();
  const id = ++seq;
  // the bytes move to the worker (no copy) when the buffer is the whole of its memory, as a body this large is
  const whole = buf.byteOffset === 0 && buf.byteLength === buf.buffer.byteLength && buf.buffer instanceof ArrayBuffer;
  const bytes = whole ? new Uint8Array(buf.buffer, 0, buf.byteLength) : new Uint8Array(buf);
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject });
    w.ref();
    w.postMessage({ id, bytes }, [bytes.buffer as ArrayBuffer]);
  });
}

/**
 * A request body (bytes) as a JSON value; undefined when it is empty or blank ("no body"). Refuses (AppError)
 * invalid JSON, NUL escapes (PostgreSQL text cannot hold NUL) and bodies past the shape limits. `parse` is the
 * event-loop parser for small bodies (Fastify's, which refuses prototype poisoning).
 */
export async function parseJsonBody(buf: Buffer, parse: (text: string) => unknown): Promise<unknown> {
  if (buf.length >= OFF_THREAD_BYTES) return offThread(buf);
  return parseSmallJsonBody(buf, parse);
}

/**
 * parseJsonBody for a body under OFF_THREAD_BYTES, synchronously (no promise for the small requests that are
 * nearly all of them): the value, or an AppError thrown.
 */
export function parseSmallJsonBody(buf: Buffer, parse: (text: string) => unknown): unknown {
  const text = buf.toString('utf8');
  if (text.trim() === '') return undefined;
  if (NUL_ESCAPE.test(text)) throw nulError();
  const value = parse(text);
  const p = checkJsonShape(value);
  if (p) throw shapeError(p);
  return value;
}
