/**
 * JSON request bodies: parsed and shape-checked (./json-shape.ts) on the event loop when small, in a worker
 * thread when large. Parsing 16 MiB of JSON takes 100-400 ms of one core: on the event loop that is as long a
 * stall for every other request of the instance (/healthz included). Off it, the event loop only copies the
 * parsed value back, which the shape limits bound; for a body past 2 MiB the large top-level arrays (input
 * items, messages) come back in batches of ~512 Ki characters, one per turn of the event loop (copying 16 MiB
 * of parsed value at once took 17-66 ms).
 */
import { MessageChannel, Worker, receiveMessageOnPort, type MessagePort } from 'node:worker_threads';
import { AppError } from '../errors.js';
import { checkJsonShape, type ShapeProblem } from './json-shape.js';
import type { JsonWorkerAnswer, JsonWorkerBatch, SplitArray } from './json-worker.js';

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
/** split answers are put together one after the other, in the order they came (their batches are in that order) */
let assembling: Promise<void> = Promise.resolve();

const turn = () => new Promise<void>((r) => setImmediate(r));

/**
 * The arrays a large body's answer left empty (json-worker.ts, sendSplit), filled from the batch port a batch per
 * turn of the event loop, in place (the keys keep their order). A batch of another answer (one that failed
 * after sending some) is dropped.
 */
async function assemble(id: number, value: Record<string, unknown>, split: SplitArray[], port: MessagePort): Promise<unknown> {
  for (const { key, batches } of split) {
    const arr: unknown[] = [];
    for (let got = 0; got < batches;) {
      await turn();
      const m = receiveMessageOnPort(port)?.message as JsonWorkerBatch | undefined;
      if (!m) throw new Error('the JSON worker lost part of a body');
      if (m.id !== id || m.key !== key) continue;
      for (const x of m.items) arr.push(x);
      got++;
    }
    value[key] = arr;
  }
  return value;
}

function jsonWorker(): Worker {
  if (worker) return worker;
  // the split arrays of large bodies come on a port of their own, read a message at a time (no listener)
  const { port1: batches, port2 } = new MessageChannel();
  batches.unref();
  const w = new Worker(new URL('./json-worker.js', import.meta.url), { workerData: { batches: port2 }, transferList: [port2] });
  w.on('message', (a: JsonWorkerAnswer) => {
    const p = pending.get(a.id);
    if (!p) return;
    pending.delete(a.id);
    // the worker keeps the process alive only while it has work
    if (pending.size === 0) w.unref();
    if (a.ok && a.split) {
      const done = assembling.then(() => assemble(a.id, a.value as Record<string, unknown>, a.split!, batches));
      assembling = done.then(
        () => {},
        () => {},
      );
      done.then(p.resolve, p.reject);
    } else if (a.ok) p.resolve(a.empty ? undefined : a.value);
    else if (a.kind === 'nul') p.reject(nulError());
    else if (a.kind === 'shape') p.reject(shapeError({ message: a.message!, param: a.param ?? null, detail: a.detail as ShapeProblem['detail'] }));
    else p.reject(invalidJson());
  });
  const fail = (e: unknown) => {
    if (worker === w) worker = undefined;
    batches.close();
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
  const text = buf.toString('utf8');
  if (text.trim() === '') return undefined;
  if (NUL_ESCAPE.test(text)) throw nulError();
  const value = parse(text);
  const p = checkJsonShape(value);
  if (p) throw shapeError(p);
  return value;
}
