/**
 * JSON request bodies: parsed and shape-checked (./json-shape.ts) on the event loop when small, in a worker
 * thread when large. Parsing 16 MiB of JSON takes 100-400 ms of one core: on the event loop that is as long a
 * stall for every other request of the instance (/healthz included). Off it, the event loop only copies the
 * parsed value back, which the shape limits bound; for a body past 2 MiB the large top-level arrays (input
 * items, messages) come back in batches of ~512 Ki characters, one per turn of the event loop (copying 16 MiB
 * of parsed value at once took 17-66 ms).
 */
import { MessageChannel, Worker } from 'node:worker_threads';
import { Readable } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';
import { AppError, msg } from '../errors.js';
import { checkJsonShape, type ShapeProblem } from './json-shape.js';
import type { JsonWorkerAnswer, SplitArray } from './json-worker.js';
import { BatchReader } from '../batches.js';
import { largeWorkDone } from '../reclaim.js';

/** bodies of at least this many bytes are parsed in the worker thread */
export const OFF_THREAD_BYTES = 256 * 1024;

/** a JSON \\u0000 escape that is not itself escaped (an odd number of backslashes before u0000) */
const NUL_ESCAPE = /(?<!\\)(?:\\\\)*\\u0000/;

export const nulError = () => new AppError('validation_error', msg('body_nul'));
export const invalidJson = () => new AppError('invalid_json');
export function shapeError(p: ShapeProblem): AppError {
  if (p.poisoned) return invalidJson();
  const where = `${p.param ?? ''}${p.cut ? '...' : ''}`;
  return new AppError(
    'validation_error',
    p.rule === 'values' ? msg('json_too_many_values', { limit: p.limit, param: where }) : msg('json_too_deep', { limit: p.limit, param: where }),
    p.param,
    {
      detail: p.detail,
    },
  );
}

let worker: Worker | undefined;
let seq = 0;
const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: unknown) => void; schema?: object }>();
/** route body schemas by the number the worker knows them by; `sent`: the ones the current worker has */
const schemaIds = new WeakMap<object, number>();
let schemaSeq = 0;
let sent = new Set<number>();
/** large bodies the worker found valid against their route's body schema (taken by prevalidated()) */
const validated = new WeakMap<object, object>();

/**
 * Whether `value` is a body the JSON worker thread validated against `schema` (the same object the route's
 * validator was compiled from), once: Ajv over 4096 chat messages is 10-45 ms of the event loop in one call, so
 * a large body is validated where it was parsed, before it is sent back, by the same Ajv made the same way
 * (./ajv.ts). A body it found invalid, or could not check, is validated here as any other, for the same errors.
 * The mark is on the object the parser gave: a hook that replaces the body before validation gets it checked here;
 * one that changed it in place would not (no preValidation hook does: they only refuse).
 */
export function prevalidated(value: unknown, schema: object): boolean {
  if (value === null || typeof value !== 'object' || validated.get(value) !== schema) return false;
  validated.delete(value);
  return true;
}
/** The arrays a large body's answer left empty (json-worker.ts, sendSplit), filled in place from the batch port (the keys keep their order). */
async function assemble(id: number, value: Record<string, unknown>, split: SplitArray[], reader: BatchReader): Promise<unknown> {
  // every read asked for at once, in the order the worker sent them (another answer's reads come after)
  const arrays = await Promise.all(split.map(({ key, batches }) => reader.read(id, key, batches)));
  split.forEach(({ key }, i) => (value[key] = arrays[i]));
  return value;
}

function jsonWorker(): Worker {
  if (worker) return worker;
  // the split arrays of large bodies come on a port of their own, read a message at a time (no listener)
  const { port1, port2 } = new MessageChannel();
  const batches = new BatchReader(port1);
  const w = new Worker(new URL('./json-worker.js', import.meta.url), { workerData: { batches: port2 }, transferList: [port2] });
  w.on('message', (a: JsonWorkerAnswer) => {
    const p = pending.get(a.id);
    if (!p) return;
    pending.delete(a.id);
    // the worker keeps the process alive only while it has work
    if (pending.size === 0) w.unref();
    const valid = (v: unknown) => {
      if (a.ok && a.valid && p.schema && v !== null && typeof v === 'object') validated.set(v, p.schema);
      return v;
    };
    if (a.ok && a.split) assemble(a.id, a.value as Record<string, unknown>, a.split, batches).then((v) => p.resolve(valid(v)), p.reject);
    else if (a.ok) p.resolve(a.empty ? undefined : valid(a.value));
    else if (a.kind === 'nul') p.reject(nulError());
    else if (a.kind === 'shape' && a.problem) p.reject(shapeError(a.problem));
    else p.reject(invalidJson());
  });
  const fail = (e: unknown) => {
    if (worker === w) {
      worker = undefined;
      sent = new Set();
    }
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

function offThread(body: Buffer | BodyBlocks, schema?: object): Promise<unknown> {
  const w = jsonWorker();
  const id = ++seq;
  // the route's body schema, sent once per worker (a structured clone of it: plain JSON Schema)
  let check: { id: number; schema?: object } | undefined;
  if (schema) {
    let sid = schemaIds.get(schema);
    if (sid === undefined) schemaIds.set(schema, (sid = ++schemaSeq));
    check = sent.has(sid) ? { id: sid } : { id: sid, schema };
    sent.add(sid);
  }
  let bytes: Uint8Array | Uint8Array[];
  if (body instanceof BodyBlocks) bytes = body.views();
  else {
    // the bytes move to the worker (no copy) when the buffer is the whole of its memory, as a body this large is
    const whole = body.byteOffset === 0 && body.byteLength === body.buffer.byteLength && body.buffer instanceof ArrayBuffer;
    bytes = whole ? new Uint8Array(body.buffer, 0, body.byteLength) : new Uint8Array(body);
  }
  const transfer = Array.isArray(bytes) ? bytes.map((b) => b.buffer as ArrayBuffer) : [bytes.buffer as ArrayBuffer];
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject, schema });
    w.ref();
    w.postMessage({ id, bytes, check }, transfer);
  });
}

/** the blocks a large body is read into */
const BLOCK_BYTES = 1024 * 1024;

/**
 * A large body as it arrived, in blocks of a mebibyte of their own memory (they move to the worker thread, which
 * joins them). Memory grows with what the client sent, as with Fastify's own reading.
 */
export class BodyBlocks {
  private readonly blocks: Buffer[] = [];
  private at = BLOCK_BYTES;
  length = 0;

  add(chunk: Buffer): void {
    for (let from = 0; from < chunk.length;) {
      if (this.at === BLOCK_BYTES) {
        this.blocks.push(Buffer.allocUnsafeSlow(BLOCK_BYTES));
        this.at = 0;
      }
      const n = Math.min(chunk.length - from, BLOCK_BYTES - this.at);
      chunk.copy(this.blocks[this.blocks.length - 1]!, this.at, from, from + n);
      this.at += n;
      from += n;
    }
    this.length += chunk.length;
  }

  /** the bytes, block by block (the last one cut to what it holds) */
  views(): Uint8Array[] {
    return this.blocks.map((b, i) => new Uint8Array(b.buffer, 0, i === this.blocks.length - 1 ? this.at : BLOCK_BYTES));
  }
}

/** a request whose large JSON body readLargeJson took: its blocks, for the JSON parser */
const taken = new WeakMap<object, BodyBlocks>();

/** the media type of a JSON body, as the parser is registered for it */
const isJson = (contentType: string | undefined) => contentType !== undefined && /^\s*application\/json\s*(?:;|$)/i.test(contentType);

/**
 * For a preParsing hook: a JSON body of at least OFF_THREAD_BYTES (by its content-length, within the route's
 * body limit) is read here, a copy of each chunk into blocks as it arrives, and Fastify reads an empty stream
 * that reports the body's length (`receivedEncodedLength`, which Fastify's own checks use). Fastify kept the
 * chunks and joined them once the body was complete: a 16 MiB copy in one go (~20 ms of the event loop, fresh
 * memory). The parser takes the blocks with takeLargeJson. Anything else is left as it is.
 */
export function readLargeJson(req: { raw: object; headers: IncomingHttpHeaders; routeOptions: { bodyLimit: number } }, payload: Readable): Readable {
  const cl = req.headers['content-length'];
  if (cl === undefined || cl.length < 6) return payload;
  const length = Number(cl);
  if (!(length >= OFF_THREAD_BYTES && length <= req.routeOptions.bodyLimit) || !isJson(req.headers['content-type'])) return payload;
  const blocks = new BodyBlocks();
  const out = new Readable({ read() {} }) as Readable & { receivedEncodedLength: number };
  out.receivedEncodedLength = 0;
  payload.on('data', (chunk: Buffer) => {
    blocks.add(chunk);
    out.receivedEncodedLength = blocks.length;
  });
  payload.once('end', () => {
    taken.set(req.raw, blocks);
    out.push(null);
  });
  payload.once('error', (e) => out.destroy(e));
  return out;
}

/** The blocks readLargeJson read for this request, once. */
export function takeLargeJson(req: { raw: object }): BodyBlocks | undefined {
  const b = taken.get(req.raw);
  if (b) {
    taken.delete(req.raw);
    // its body, parsed items and what is made of them are garbage once it is answered (../reclaim.ts)
    largeWorkDone(b.length);
  }
  return b;
}

/**
 * A request body (bytes) as a JSON value; undefined when it is empty or blank ("no body"). Refuses (AppError)
 * invalid JSON, NUL escapes (PostgreSQL text cannot hold NUL) and bodies past the shape limits. `parse` is the
 * event-loop parser for small bodies (Fastify's, which refuses prototype poisoning). `schema`: the route's body
 * schema, which a body parsed in the worker thread is validated against there (see prevalidated).
 */
export async function parseJsonBody(buf: Buffer | BodyBlocks, parse: (text: string) => unknown, schema?: object): Promise<unknown> {
  if (buf instanceof BodyBlocks || buf.length >= OFF_THREAD_BYTES) return offThread(buf, schema);
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
