import { MessageChannel, Worker, type MessagePort } from 'node:worker_threads';
import { BATCH_CHARS, BatchReader } from '../batches.js';
import { largeWorkDone } from '../reclaim.js';
import type { WorkerOptions } from './pglite-worker.js';
import { JsonbText } from './jsonb.js';
import { JSONB_TEXT_KEY } from './pglite-message.js';

export interface PGliteQueryable {
  /** `before`: a statement without parameters run first (a transaction's begin), its result dropped */
  query<R>(sql: string, params?: unknown[], before?: string): Promise<{ rows: R[]; affectedRows?: number }>;
  close(): Promise<void>;
  readonly closed: boolean;
}

/**
 * Parameters with a large jsonb value (jsonb.ts): its bytes are moved to the thread rather than copied (the
 * structured clone of a 16 MiB string is a 16 MiB copy, and several while the message grows, on this thread),
 * and made text there. Undefined when there is none (every other query).
 */
function movedParams(params: unknown[]): { params: unknown[]; transfer: ArrayBuffer[] } | undefined {
  let out: unknown[] | undefined;
  const transfer: ArrayBuffer[] = [];
  for (let i = 0; i < params.length; i++) {
    const p = params[i];
    if (!(p instanceof JsonbText)) continue;
    out ??= [...params];
    transfer.push(p.json.buffer.buffer as ArrayBuffer);
    out[i] = { [JSONB_TEXT_KEY]: p.json.bytes };
  }
  return out && { params: out, transfer };
}

/** The JSON columns of rows from the thread parsed in place (they cross as text: pglite-worker.ts). */
function parseJson(rows: unknown[], columns: readonly string[] | undefined): void {
  if (!columns) return;
  for (const row of rows as Array<Record<string, unknown>>) {
    for (const c of columns) {
      const v = row[c];
      if (typeof v === 'string') row[c] = JSON.parse(v);
    }
  }
}

/** A database error as the worker sent it: same message, name, code, detail, constraint... as PGlite's own. */
function revive(fields: Record<string, unknown>): Error {
  const e = new Error(String(fields.message ?? 'database error'));
  for (const [k, v] of Object.entries(fields)) if (k !== 'message') (e as any)[k] = v;
  return e;
}

/**
 * PGlite on a worker thread (pglite-worker.ts), seen from the main thread: query() sends the SQL and its
 * parameters over the worker's MessagePort and resolves with the rows. The worker is referenced only while
 * queries are in flight, so an idle database never keeps the process alive, and a command awaiting a query
 * is never cut short. If the thread dies (a WebAssembly abort, out of memory, terminate()), every query in
 * flight and every later one fails at once with a clear error whose code (08006, connection failure) makes
 * routes answer 503 as for a lost PostgreSQL, never a hang.
 */
export class PGliteWorkerClient implements PGliteQueryable {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (r: any) => void; reject: (e: Error) => void }>();
  private dead: Error | undefined;
  private closing: Promise<void> | undefined;
  private refs = 0;

  private readonly batches: BatchReader;

  private constructor(
    readonly worker: Worker,
    batches: MessagePort,
  ) {
    worker.unref();
    this.batches = new BatchReader(batches);
    worker.on('message', (m: { id: number; rows?: unknown[]; parts?: number; affectedRows?: number; json?: string[]; error?: Record<string, unknown> }) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      this.unref();
      if (m.error) p.reject(revive(m.error));
      // a large result's rows came apart (pglite-worker.ts): read a batch per turn of the event loop, its JSON
      // parsed in the same turn
      else if (m.parts) {
        const each = m.json && ((items: unknown[]) => parseJson(items, m.json));
        largeWorkDone(m.parts * BATCH_CHARS);
        this.batches.read(m.id, 'rows', m.parts, [], each).then((rows) => p.resolve({ rows, affectedRows: m.affectedRows }), p.reject);
      } else {
        try {
          parseJson(m.rows!, m.json);
          p.resolve({ rows: m.rows, affectedRows: m.affectedRows });
        } catch (e) {
          p.reject(e as Error);
        }
      }
    });
    worker.on('error', (e) => this.fail(`the embedded database's thread failed: ${e.message}`));
    worker.on('exit', (code) => this.fail(`the embedded database's thread stopped (exit code ${code})`));
  }

  /**
   * PGlite's WebAssembly as the first thread compiled it: every later thread of the process (a first start's
   * initdb thread then the database's, the test suite's many databases) instantiates it instead of compiling its
   * 9 MB again (~100 ms of CPU each; docs/performance.md, "The test suite"). Compiled code is shared between
   * threads, not copied.
   */
  private static wasm: WebAssembly.Module | undefined;

  private static spawn(): { worker: Worker; exited: boolean; batches: MessagePort } {
    // the rows of a large result come on a port of their own, read a batch at a time (../batches.ts)
    const { port1, port2 } = new MessageChannel();
    const worker = new Worker(new URL('./pglite-worker.js', import.meta.url), {
      workerData: { batches: port2, ...(PGliteWorkerClient.wasm ? { wasm: PGliteWorkerClient.wasm } : {}) },
      transferList: [port2],
      stdout: false,
      stderr: false,
      // the thread's JavaScript is a thin loop around the WebAssembly: a small young generation keeps its idle
      // RSS 12-15 MiB lower (V8 grows it to 16 MiB per semi-space otherwise); large rows go to the large-object
      // space as before, and no limit is set on the old generation (a big result never kills the thread)
      resourceLimits: { maxYoungGenerationSizeMb: 4 },
    });
    const w = { worker, exited: false, batches: port1 };
    worker.unref();
    worker.on('error', () => {}); // reported by open()
    worker.once('exit', () => (w.exited = true));
    if (!PGliteWorkerClient.wasm) {
      const compiled = (m: { compiled?: WebAssembly.Module }) => {
        if (!m || !(m.compiled instanceof WebAssembly.Module)) return;
        PGliteWorkerClient.wasm ??= m.compiled;
        worker.off('message', compiled);
      };
      worker.on('message', compiled);
    }
    return w;
  }

  /**
   * Starts a thread now so that PGlite's WebAssembly compiles while the caller goes on (serve loads its modules
   * meanwhile); the next open() uses it. Nothing is opened or created on disk until open().
   */
  static prestart(): void {
    PGliteWorkerClient.early ??= PGliteWorkerClient.spawn();
  }
  private static early: { worker: Worker; exited: boolean; batches: MessagePort } | undefined;

  /** Starts the thread (or takes the prestarted one) and opens the database in it; rejects with the database's own error if it cannot. */
  static async open(opts: WorkerOptions): Promise<PGliteWorkerClient> {
    let w = PGliteWorkerClient.early;
    PGliteWorkerClient.early = undefined;
    if (!w || w.exited) w = PGliteWorkerClient.spawn();
    const worker = w.worker;
    worker.ref();
    worker.postMessage({ open: opts });
    await new Promise<void>((resolve, reject) => {
      const onMessage = (m: { ready?: true; failed?: Record<string, unknown>; compiled?: WebAssembly.Module }) => {
        if (m.compiled) return; // for spawn()
        cleanup();
        if (m.ready) resolve();
        else {
          void worker.terminate();
          reject(revive(m.failed ?? { message: 'the embedded database did not open' }));
        }
      };
      const onError = (e: Error) => {
        cleanup();
        reject(e);
      };
      const onExit = (code: number) => {
        cleanup();
        reject(new Error(`the embedded database's thread stopped while opening (exit code ${code})`));
      };
      const cleanup = () => {
        worker.off('message', onMessage);
        worker.off('error', onError);
        worker.off('exit', onExit);
      };
      worker.on('message', onMessage);
      worker.on('error', onError);
      worker.on('exit', onExit);
    });
    return new PGliteWorkerClient(worker, w.batches);
  }

  get closed() {
    return this.dead !== undefined;
  }

  query<R>(sql: string, params: unknown[] = [], before?: string): Promise<{ rows: R[]; affectedRows?: number }> {
    if (this.dead) return Promise.reject(this.dead);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      if (this.refs++ === 0) this.worker.ref();
      try {
        const moved = movedParams(params);
        if (moved) this.worker.postMessage({ id, sql, params: moved.params, before }, moved.transfer);
        else this.worker.postMessage({ id, sql, params, before });
      } catch (e) {
        // a parameter that cannot cross threads (a function, a symbol): the caller's bug, not the database's
        this.pending.delete(id);
        this.unref();
        reject(e as Error);
      }
    });
  }

  private unref() {
    if (--this.refs === 0) this.worker.unref();
  }

  private fail(message: string) {
    if (this.dead) return;
    this.dead = Object.assign(new Error(message), { code: '08006' });
    for (const p of this.pending.values()) p.reject(this.dead);
    this.pending.clear();
    this.refs = 0;
    this.worker.unref();
    this.batches.close();
  }

  /** The data directory as a tar file, for a template later databases start from (WorkerOptions.template). */
  dump(): Promise<Uint8Array> {
    if (this.dead) return Promise.reject(this.dead);
    return new Promise((resolve, reject) => {
      const onMessage = (m: { dumped?: Uint8Array | null; error?: Record<string, unknown> }) => {
        if (!('dumped' in m)) return;
        this.worker.off('message', onMessage);
        this.unref();
        if (m.dumped) resolve(m.dumped);
        else reject(revive(m.error ?? { message: 'the embedded database could not be dumped' }));
      };
      if (this.refs++ === 0) this.worker.ref();
      this.worker.on('message', onMessage);
      this.worker.postMessage({ dump: true });
    });
  }

  /** Closes the database (a clean shutdown, its files consistent) and ends the thread. */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    if (this.dead) return (this.closing = Promise.resolve());
    this.closing = new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.fail('the embedded database is closed');
        void this.worker.terminate().then(() => resolve());
      };
      this.worker.ref();
      this.worker.on('message', (m: { closed?: true }) => {
        if (m.closed) done();
      });
      this.worker.once('exit', done);
      // a thread that does not answer is ended rather than waited for forever
      const timer = setTimeout(done, 10_000);
      timer.unref();
      this.worker.postMessage({ close: true });
    });
    return this.closing;
  }
}
