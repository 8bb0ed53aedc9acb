/**
 * The main thread's side of the Silero worker (./worker.ts): one worker thread holds sherpa-onnx, the model and every
 * session's Silero detector. Here a session's detector cuts its audio into frames (clamped, as the worker would) and
 * sends each append's whole frames in one message (the array transferred); the worker answers with a byte per frame.
 * Answers come in order, so pushes resolve in the order they were made.
 *
 * The worker is unref'd while nothing waits on it (an idle worker never keeps the process alive) and ends with
 * `terminate()`. When it stops otherwise (an error, an exit), every detector it held falls back to the energy detector
 * at its threshold: the frames it had not answered are decided by that one (the detector keeps each batch until its
 * answer), then everything after; the process goes on, and the owner (./index.ts) starts a new worker for the next
 * detector.
 */
import { Worker } from 'node:worker_threads';
import type { VoiceActivityDetector } from '../../types.js';
import { workerExecArgv } from '../synth-pool.js';
import { createEnergyFrames } from './energy.js';
import { FrameBuffer, type FrameDetector } from './frames.js';
import { SILERO_FRAME_SAMPLES } from './silero.js';
import type { FromSileroWorker, SileroWorkerData, ToSileroWorker } from './worker.js';

/** Why the worker did not load: `permanent` when it said so (a missing package, an unknown model), else it stopped. */
export class SileroLoadError extends Error {
  constructor(
    message: string,
    readonly permanent: boolean,
  ) {
    super(message);
  }
}

export interface SileroReady {
  model: string;
  modelPath: string;
  /** the load, in the worker: sherpa-onnx, the model checked, a Vad made and run (ms) */
  loadMs: number;
}

interface Waiting {
  resolve: (v: FromSileroWorker) => void;
  reject: (e: Error) => void;
}

export class SileroThread {
  readonly ready: Promise<SileroReady>;
  /** why it stopped, once it has */
  stopped?: string;
  /** what the worker said of its load, once it has */
  outcome?: 'ready' | 'refused';
  private readonly worker: Worker;
  private readonly creating = new Map<number, Waiting>();
  /** the detectors that may still get answers (a closed one until its last batch is answered) */
  private readonly routes = new Map<number, WorkerDetector>();
  /** the detectors not closed */
  private readonly open = new Set<number>();
  private nextId = 1;
  /** requests not answered yet (the load counts as one): the worker is ref'd while there are any */
  private waiting = 0;
  private terminating = false;

  constructor(data: SileroWorkerData, onStop: (t: SileroThread) => void) {
    // the process's flags, less those of a main script (as the synthesis workers'), so that `node -e` can use it too
    this.worker = new Worker(new URL('./worker.js', import.meta.url), { workerData: data, execArgv: workerExecArgv() });
    this.worker.unref();
    this.hold();
    let loaded!: (r: SileroReady) => void;
    let refused!: (e: SileroLoadError) => void;
    this.ready = new Promise<SileroReady>((res, rej) => {
      loaded = res;
      refused = rej;
    });
    this.ready.catch(() => {});
    let settled = false;
    this.worker.on('message', (m: FromSileroWorker) => {
      this.release();
      switch (m.type) {
        case 'ready':
          settled = true;
          this.outcome = 'ready';
          loaded({ model: m.model, modelPath: m.modelPath, loadMs: m.loadMs });
          return;
        case 'fatal':
          settled = true;
          this.outcome = 'refused';
          refused(new SileroLoadError(m.message, true));
          return;
        case 'created':
          this.creating.get(m.id)?.resolve(m);
          return;
        case 'failed':
          if (m.seq === undefined) this.creating.get(m.id)?.resolve(m);
          else this.routes.get(m.id)?.answered(m.seq, undefined, m.message);
          return;
        case 'decided':
          this.routes.get(m.id)?.answered(m.seq, m.speech);
          return;
      }
    });
    const stop = (why: string) => {
      if (this.stopped !== undefined) return;
      this.stopped = why;
      this.waiting = 0;
      if (!settled) {
        settled = true;
        refused(new SileroLoadError(why, false));
      }
      for (const w of this.creating.values()) w.reject(new Error(why));
      this.creating.clear();
      const held = [...this.routes.values()];
      this.routes.clear();
      this.open.clear();
      for (const d of held) d.fallBack(why);
      onStop(this);
    };
    this.worker.on('error', (e) => stop(`the Silero worker thread failed: ${e.message}`));
    this.worker.on('exit', (code) => stop(this.terminating ? 'the Silero worker thread was closed' : `the Silero worker thread stopped (exit code ${code})`));
  }

  /** detectors made and not closed */
  get detectors(): number {
    return this.open.size;
  }

  /** a Silero detector at this threshold (made in the worker); rejects when the worker stops first */
  async create(threshold: number): Promise<VoiceActivityDetector> {
    await this.ready;
    if (this.stopped !== undefined) throw new Error(this.stopped);
    const id = this.nextId++;
    const answer = await new Promise<FromSileroWorker>((resolve, reject) => {
      this.creating.set(id, { resolve, reject });
      this.send({ type: 'create', id, threshold });
    }).finally(() => this.creating.delete(id));
    if (answer.type === 'failed') throw new Error(answer.message);
    // stopped between its answer and now: the detector would be no one's
    if (this.stopped !== undefined) throw new Error(this.stopped);
    const d = new WorkerDetector(this, id, threshold);
    this.routes.set(id, d);
    this.open.add(id);
    return d;
  }

  /** whether terminate() ended it (its owner closed it: not a failure) */
  get closedByOwner(): boolean {
    return this.terminating;
  }

  /** ends the worker: its detectors fall back to energy */
  async terminate(): Promise<void> {
    this.terminating = true;
    await this.worker.terminate();
  }

  /** a message to the worker (create and push wait for an answer: the worker is ref'd until it comes) */
  send(m: ToSileroWorker, transfer?: ArrayBuffer[]): void {
    if (this.stopped !== undefined) return;
    if (m.type === 'create' || m.type === 'push') this.hold();
    this.worker.postMessage(m, transfer);
  }

  private hold(): void {
    if (this.waiting++ === 0) this.worker.ref();
  }

  private release(): void {
    if (this.waiting > 0 && --this.waiting === 0) this.worker.unref();
  }

  /** a detector closed (or fallen back): the worker keeps its Vad for the next one */
  closed(id: number): void {
    if (this.open.delete(id)) this.send({ type: 'close', id });
  }

  /** a closed detector whose batches are all answered */
  forget(id: number): void {
    this.routes.delete(id);
  }
}

interface Batch {
  seq: number;
  frames: Float32Array;
  resolve: (ds: boolean[]) => void;
}

/** A session's Silero detector: its frames decided in the worker, or (once the worker stopped) by an energy detector. */
class WorkerDetector implements VoiceActivityDetector {
  readonly frameSamples = SILERO_FRAME_SAMPLES;
  fallbackReason?: string;
  private readonly frames = new FrameBuffer(SILERO_FRAME_SAMPLES);
  /** batches sent and not answered, oldest first (kept: a stopped worker's are decided by the fallback) */
  private readonly inFlight: Batch[] = [];
  private fallback?: FrameDetector;
  private seq = 0;
  private closed = false;

  constructor(
    private readonly thread: SileroThread,
    private readonly id: number,
    private readonly threshold: number,
  ) {}

  get name(): string {
    return this.fallback ? this.fallback.name : 'silero';
  }

  async push(samples: Float32Array): Promise<boolean[]> {
    if (this.closed) throw new Error('the voice activity detector is closed');
    if (this.thread.stopped !== undefined) this.fallBack(this.thread.stopped);
    const batch = this.frames.take(samples);
    if (this.fallback) return this.fallback.push(batch);
    if (batch.length === 0) return [];
    const seq = this.seq++;
    return new Promise<boolean[]>((resolve) => {
      this.inFlight.push({ seq, frames: batch, resolve });
      // the worker gets a copy it owns (transferred, not cloned); this one stays until the answer
      const wire = batch.slice();
      this.thread.send({ type: 'push', id: this.id, seq, frames: wire }, [wire.buffer]);
    });
  }

  /** the worker's answer to batch `seq`: its decisions, or why it could not decide (this detector then falls back) */
  answered(seq: number, speech: Uint8Array | undefined, failure?: string): void {
    const b = this.inFlight[0];
    if (!b || b.seq !== seq) return;
    if (!speech) return this.fallBack(`the Silero worker could not decide: ${failure ?? 'no answer'}`);
    this.inFlight.shift();
    const out = new Array<boolean>(speech.length);
    for (let i = 0; i < speech.length; i++) out[i] = speech[i] === 1;
    b.resolve(out);
    if (this.closed && this.inFlight.length === 0) this.thread.forget(this.id);
  }

  /** from now on, the energy detector at the same threshold; the batches not answered are decided by it, in order */
  fallBack(why: string): void {
    if (this.fallback) return;
    this.fallbackReason = why;
    this.fallback = createEnergyFrames(this.threshold);
    for (const b of this.inFlight.splice(0)) b.resolve(this.fallback.push(b.frames));
    this.thread.closed(this.id);
    this.thread.forget(this.id);
  }

  reset(): void {
    if (this.closed) return;
    this.frames.clear();
    if (this.fallback) this.fallback.reset();
    else this.thread.send({ type: 'reset', id: this.id });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.fallback) return this.fallback.close();
    // batches sent before are still answered (the worker decides them before the close)
    this.thread.closed(this.id);
    if (this.inFlight.length === 0) this.thread.forget(this.id);
  }
}
