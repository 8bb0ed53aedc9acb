/**
 * A small pool of synthesis worker threads, shared by the flite and espeak engines (each engine owns
 * one pool of its own worker script). Each worker loads its engine once and is reused for every job;
 * a job is one sentence. Jobs wait in a FIFO queue while every worker is busy.
 *
 * Abort: a queued job is dropped at once; a running job is told to stop through a SharedArrayBuffer
 * flag the worker polls (espeak stops mid-sentence; flite finishes its current sentence, which is kept
 * short by the sentence splitter), and its promise rejects immediately. The worker becomes free again
 * as soon as it reports back.
 *
 * Worker protocol (see ../flite/worker.ts, ../espeak/worker.ts):
 *   main -> worker  { type: 'synth', id, text, voice, speed, pitch, gainDb, hd }
 *   worker -> main  { type: 'ready', sampleRate } once loaded | { type: 'fatal', message }
 *                   { type: 'pcm', id, samples: Int16Array, sampleRate } zero or more per job
 *                   { type: 'done', id } | { type: 'error', id, message, code? }
 */
import { Worker } from 'node:worker_threads';
import { EngineError, type PcmChunk } from '../types.js';
import { abortError, AsyncChannel } from '../../platform/async-channel.js';

export interface SynthJob {
  text: string;
  voice: string;
  speed: number;
  /** factor on the voice's own pitch (1: unchanged) */
  pitch: number;
  /** fixed gain in dB (ignored when hd) */
  gainDb: number;
  /** render the sentence whole and set its level exactly (src/engines/shared/loudness.ts) */
  hd: boolean;
}

/** A job without its text: what every sentence of one request shares. */
export type SynthParams = Omit<SynthJob, 'text'>;

export interface PoolOptions {
  /** URL of the compiled worker script */
  workerUrl: URL;
  /** number of worker threads (default 2) */
  size?: number;
  /** start one worker right away so the first request does not pay the engine load (default true) */
  preload?: boolean;
  /** engine name for error messages */
  name: string;
  /** more data for the worker script (beside the control block) */
  workerData?: Record<string, unknown>;
}

/** Layout of the shared control block: [0] = id of the job the main thread wants stopped. */
export const ABORT_SLOT = 0;

interface Pending {
  id: number;
  job: SynthJob;
  onPcm: (c: PcmChunk) => void;
  resolve: () => void;
  reject: (e: unknown) => void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

interface Slot {
  worker: Worker;
  control: Int32Array;
  ready: Promise<void>;
  current?: Pending;
  /** the current job was abandoned by its caller; ignore its messages until 'done' */
  abandoned?: boolean;
  dead?: boolean;
}

/** process.execArgv without the flags that only apply to a main script (-e code, --input-type...): a worker's. */
export function workerExecArgv(): string[] {
  const out: string[] = [];
  let skipCode = false;
  for (const a of process.execArgv) {
    if (skipCode) {
      skipCode = false;
      continue;
    }
    if (a === '-e' || a === '-p' || a === '--eval' || a === '--print') {
      skipCode = true; // and its code
      continue;
    }
    if (/^--(input-type|eval|print)(=|$)/.test(a) || /^--test(\b|-)/.test(a)) continue;
    out.push(a);
  }
  return out;
}

export class SynthWorkerPool {
  private readonly slots: Slot[] = [];
  private readonly queue: Pending[] = [];
  private readonly size: number;
  private nextId = 1;
  private closed = false;
  private firstReady?: Promise<void>;

  constructor(private readonly opts: PoolOptions) {
    this.size = Math.max(1, Math.floor(opts.size ?? 2));
    if (opts.preload ?? true) this.firstReady = this.spawn().ready;
  }

  /** Resolves when at least one worker has loaded its engine (spawns one if none yet). */
  ready(): Promise<void> {
    if (this.closed) return Promise.reject(new EngineError(`${this.opts.name} engine is closed`, 'engine_closed', 503));
    if (!this.firstReady) this.firstReady = (this.slots[0] ?? this.spawn()).ready;
    return this.firstReady;
  }

  get workerCount(): number {
    return this.slots.length;
  }

  /** Runs one job; `onPcm` receives its audio as the worker produces it. */
  run(job: SynthJob, onPcm: (c: PcmChunk) => void, signal?: AbortSignal): Promise<void> {
    if (this.closed) return Promise.reject(new EngineError(`${this.opts.name} engine is closed`, 'engine_closed', 503));
    if (signal?.aborted) return Promise.reject(abortError(signal));
    return new Promise<void>((resolve, reject) => {
      const p: Pending = { id: this.nextId++, job, onPcm, resolve, reject, signal };
      if (signal) {
        p.onAbort = () => this.abort(p);
        signal.addEventListener('abort', p.onAbort, { once: true });
      }
      this.queue.push(p);
      this.dispatch();
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const err = new EngineError(`${this.opts.name} engine is closed`, 'engine_closed', 503);
    for (const p of this.queue.splice(0)) this.settle(p, err);
    await Promise.all(
      this.slots.splice(0).map(async (s) => {
        if (s.current) this.settle(s.current, err);
        s.dead = true;
        await s.worker.terminate();
      }),
    );
  }

  private settle(p: Pending, err?: unknown): void {
    if (p.onAbort) p.signal?.removeEventListener('abort', p.onAbort);
    p.onAbort = undefined;
    if (err === undefined) p.resolve();
    else p.reject(err);
  }

  private abort(p: Pending): void {
    const qi = this.queue.indexOf(p);
    if (qi >= 0) {
      this.queue.splice(qi, 1);
      this.settle(p, abortError(p.signal));
      return;
    }
    const slot = this.slots.find((s) => s.current === p);
    if (slot && !slot.abandoned) {
      slot.abandoned = true;
      Atomics.store(slot.control, ABORT_SLOT, p.id);
      this.settle(p, abortError(p.signal));
    }
  }

  private dispatch(): void {
    while (this.queue.length > 0) {
      let slot = this.slots.find((s) => !s.current && !s.dead);
      if (!slot) {
        if (this.slots.length >= this.size) return;
        slot = this.spawn();
      }
      const p = this.queue.shift()!;
      slot.current = p;
      slot.abandoned = false;
      slot.worker.ref();
      slot.worker.postMessage({ type: 'synth', id: p.id, ...p.job });
    }
  }

  private spawn(): Slot {
    const control = new Int32Array(new SharedArrayBuffer(4 * 4));
    // the process's flags are inherited, except those that only make sense for a main script
    const execArgv = workerExecArgv();
    const worker = new Worker(this.opts.workerUrl, { workerData: { ...this.opts.workerData, control }, execArgv });
    let readyResolve!: () => void;
    let readyReject!: (e: unknown) => void;
    const ready = new Promise<void>((res, rej) => {
      readyResolve = res;
      readyReject = rej;
    });
    ready.catch(() => {});
    const slot: Slot = { worker, control, ready };
    this.slots.push(slot);
    worker.unref();

    const finish = (err?: unknown) => {
      const p = slot.current;
      slot.current = undefined;
      if (p && !slot.abandoned) this.settle(p, err);
      slot.abandoned = false;
      if (!slot.dead) worker.unref();
      this.dispatch();
    };

    worker.on('message', (m: WorkerMessage) => {
      switch (m.type) {
        case 'ready':
          readyResolve();
          return;
        case 'fatal':
          readyReject(new EngineError(`${this.opts.name} failed to load: ${m.message}`, 'engine_unavailable', 503));
          return;
        case 'pcm':
          if (slot.current?.id === m.id && !slot.abandoned) {
            slot.current.onPcm({ samples: m.samples, sampleRate: m.sampleRate });
          }
          return;
        case 'done':
          if (slot.current?.id === m.id) finish();
          return;
        case 'error':
          if (slot.current?.id === m.id) finish(new EngineError(m.message, m.code ?? 'engine_error', m.status ?? 502));
          return;
      }
    });
    const onDeath = (err: unknown) => {
      if (slot.dead) return;
      slot.dead = true;
      const i = this.slots.indexOf(slot);
      if (i >= 0) this.slots.splice(i, 1);
      const e = new EngineError(`${this.opts.name} worker failed: ${err instanceof Error ? err.message : String(err)}`);
      readyReject(e);
      if (this.firstReady === ready) this.firstReady = undefined;
      finish(e);
    };
    worker.on('error', onDeath);
    worker.on('exit', (code) => onDeath(new Error(`exited with code ${code}`)));
    return slot;
  }
}

type WorkerMessage =
  | { type: 'ready'; sampleRate: number }
  | { type: 'fatal'; message: string }
  | { type: 'pcm'; id: number; samples: Int16Array; sampleRate: number }
  | { type: 'done'; id: number }
  | { type: 'error'; id: number; message: string; code?: string; status?: number };

/**
 * The engine side of streaming synthesis: splits the text into sentences and runs them one after
 * another on the pool, yielding each piece of PCM as soon as the worker posts it. The next sentence
 * starts as soon as the previous one is done (the input is at most a few thousand characters, so
 * running ahead of a slow consumer costs little memory). Breaking out of the loop or aborting the
 * signal stops the remaining sentences.
 */
export async function* synthesizeOnPool(pool: SynthWorkerPool, sentences: readonly string[], params: SynthParams, signal?: AbortSignal): AsyncGenerator<PcmChunk> {
  if (signal?.aborted) throw abortError(signal);
  const stop = new AbortController();
  const onOuterAbort = () => stop.abort(signal?.reason);
  signal?.addEventListener('abort', onOuterAbort, { once: true });

  // a chunk waiting in the channel is dropped once the signal aborts (the abort error comes first)
  const channel = new AsyncChannel<PcmChunk>({ signal });
  const producer = (async () => {
    try {
      for (const text of sentences) {
        if (stop.signal.aborted) break;
        await pool.run({ ...params, text }, (c) => channel.push(c), stop.signal);
      }
      channel.end();
    } catch (e) {
      channel.fail(e);
    }
  })();

  try {
    for await (const c of channel) yield c;
  } finally {
    signal?.removeEventListener('abort', onOuterAbort);
    if (!stop.signal.aborted) stop.abort();
    await producer;
  }
}
