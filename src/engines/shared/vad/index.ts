/**
 * Voice activity detection for the Realtime API's server_vad turn detection: Silero VAD (./silero.ts) where its
 * model and sherpa-onnx are installed, else an energy detector (./energy.ts). Nothing is loaded at import: the
 * first `voiceActivityEngine()` or `createVoiceActivityDetector()` starts the Silero worker thread (./thread.ts,
 * ./worker.ts), which loads and proves the runtime once (a failure it reports is remembered with its reason,
 * `voiceActivityStatus()`, and energy is used); each session then gets a detector of its own (Silero keeps
 * per-session state in its LSTM), made and run in that worker: the main thread's event loop never waits for an ONNX
 * Runtime session. A worker that stops (crashes) takes nothing down: its detectors go on as energy detectors and the
 * next detector asked for starts a new worker.
 */
import type { VoiceActivityDetector, VoiceActivityOptions } from '../../types.js';
import { sherpaInstalled } from '../sherpa.js';
import { createEnergyDetector } from './energy.js';
import { checkThreshold } from './frames.js';
import { installedSileroModel, verifySileroModel } from './silero.js';
import { SileroThread, type SileroLoadError } from './thread.js';

export { ENERGY_FRAME_SAMPLES, energyLevels, frameLevelDbfs } from './energy.js';
export { SILERO_FRAME_SAMPLES, SILERO_MODEL_FILE, SILERO_MODEL_PACKAGE } from './silero.js';

export type VoiceActivityEngine = 'silero' | 'energy';

export interface VoiceActivityStatus {
  /** the detector sessions get on this machine */
  engine: VoiceActivityEngine;
  /** why it is not Silero (to log once): what is missing and how to install it */
  reason?: string;
  /** Silero's model (silero_vad_v5) and its file */
  model?: string;
  modelPath?: string;
  /** Silero's load in its worker thread (ms): sherpa-onnx, the model checked, a Vad made and run */
  loadMs?: number;
}

export interface VoiceActivitySetup {
  /** the Silero model file (default: the one the optional package ships) */
  sileroModelPath?: string;
  /**
   * a module (its URL) the worker loads instead of sherpa-onnx-node, whose default export or namespace has `Vad`
   * (tests: a stand-in that holds or ends the worker); the model is still checked before it is loaded
   */
  sherpaModule?: string;
  /** given to that module in the worker's workerData.sherpaData (structured-cloned: a SharedArrayBuffer is shared) */
  sherpaData?: unknown;
}

/** a worker that stops while loading this many times in a row is given up: energy, as for a load that failed */
const LOAD_STOPS_MAX = 3;

const energyReason = (why: string) => `${why}; the energy detector is used (npm ci without --omit=optional installs Silero)`;

/** One machine's voice activity detection: which detector, decided once, and the detectors it makes. */
export class VoiceActivity {
  private thread?: SileroThread;
  /** a load that failed for good (the worker said why), or a worker that kept stopping while loading */
  private refused?: VoiceActivityStatus;
  private loaded?: VoiceActivityStatus;
  private loadStops = 0;
  private started = 0;

  constructor(private readonly setup: VoiceActivitySetup = {}) {}

  /** Silero worker threads started so far (one, unless one stopped) */
  get workersStarted(): number {
    return this.started;
  }

  /** the worker, started at the first call (and again after one stopped), once loaded; or why Silero is not had */
  private async load(): Promise<{ status: VoiceActivityStatus; thread?: SileroThread }> {
    if (this.refused) return { status: this.refused };
    let t = this.thread;
    if (!t) {
      this.started++;
      const data = { modelPath: this.setup.sileroModelPath, sherpaModule: this.setup.sherpaModule, sherpaData: this.setup.sherpaData };
      try {
        t = this.thread = new SileroThread(data, (stopped) => {
          if (this.thread === stopped) this.thread = undefined;
          // stopped before it said whether it loads: tried again at the next detector, a few times
          if (stopped.outcome === undefined && !stopped.closedByOwner && ++this.loadStops >= LOAD_STOPS_MAX) {
            this.refused ??= { engine: 'energy', reason: energyReason(`the Silero worker thread stopped while loading ${LOAD_STOPS_MAX} times in a row (${stopped.stopped})`) };
          }
        });
      } catch (e) {
        // no thread to be had now (resources): energy for this one, a worker tried again for the next
        return { status: { engine: 'energy', reason: energyReason(`the Silero worker thread could not start (${(e as Error).message})`) } };
      }
    }
    try {
      const r = await t.ready;
      this.loadStops = 0;
      this.loaded = { engine: 'silero', model: r.model, modelPath: r.modelPath, loadMs: r.loadMs };
      return { status: { ...this.loaded }, thread: t };
    } catch (e) {
      const status: VoiceActivityStatus = { engine: 'energy', reason: energyReason((e as Error).message) };
      if ((e as SileroLoadError).permanent) this.refused ??= status;
      return { status };
    }
  }

  /** which detector sessions get; loads Silero if it is not loaded (in its worker thread) */
  async status(): Promise<VoiceActivityStatus> {
    return { ...(await this.load()).status };
  }

  /**
   * Which detector sessions will get, told from the files alone (the model known, sherpa-onnx installed), without
   * starting the worker (the start-up has no use for it; the first session starts it). Once loaded, what the load
   * found.
   */
  async expected(): Promise<VoiceActivityStatus> {
    if (this.refused) return { ...this.refused };
    if (this.loaded) return { ...this.loaded };
    try {
      const modelPath = this.setup.sileroModelPath ?? installedSileroModel();
      const model = await verifySileroModel(modelPath);
      if (!this.setup.sherpaModule && !sherpaInstalled()) throw new Error('sherpa-onnx-node, the optional dependency that runs the Silero model, is not installed');
      return { engine: 'silero', model, modelPath };
    } catch (e) {
      return { engine: 'energy', reason: energyReason((e as Error).message) };
    }
  }

  async engine(): Promise<VoiceActivityEngine> {
    return (await this.load()).status.engine;
  }

  /**
   * A detector for one session at OpenAI's threshold (0..1; a RangeError otherwise). `prefer: 'energy'` asks for
   * the energy detector even where Silero is installed; Silero is had only where it loaded (`status()` says why not),
   * and a worker that stops while the detector is made gives an energy detector too.
   */
  async create(opts: VoiceActivityOptions, prefer?: VoiceActivityEngine): Promise<VoiceActivityDetector> {
    const threshold = checkThreshold(opts?.threshold);
    if (prefer === 'energy') return createEnergyDetector(threshold);
    const { thread } = await this.load();
    if (!thread) return createEnergyDetector(threshold);
    try {
      return await thread.create(threshold);
    } catch {
      // the worker stopped meanwhile (the next detector gets a new one), or refused this one
      return createEnergyDetector(threshold);
    }
  }

  /**
   * Ends the worker thread when no detector is open (an open one is another app's, in the same process: the idle
   * worker is unref'd and keeps no process alive). A later detector starts a new worker.
   */
  async close(): Promise<void> {
    const t = this.thread;
    if (!t || t.detectors > 0) return;
    this.thread = undefined;
    await t.terminate();
  }
}

let machine: VoiceActivity | undefined;
const shared = (): VoiceActivity => (machine ??= new VoiceActivity());

/** A detector for one session: Silero where it is installed, else energy (see `voiceActivityStatus()` for why). */
export function createVoiceActivityDetector(opts: VoiceActivityOptions, prefer?: VoiceActivityEngine): Promise<VoiceActivityDetector> {
  return shared().create(opts, prefer);
}

/** Which detector sessions get on this machine (decided once, at the first call). */
export function voiceActivityEngine(): Promise<VoiceActivityEngine> {
  return shared().engine();
}

/** Which detector sessions will get, from the files alone (VoiceActivity.expected): nothing loaded. */
export function voiceActivityExpected(): Promise<VoiceActivityStatus> {
  return shared().expected();
}

/** The same, with the reason when it is the energy fallback (for the log). */
export function voiceActivityStatus(): Promise<VoiceActivityStatus> {
  return shared().status();
}

/** Ends the machine-wide worker thread if no detector is open (an app's close). */
export function closeVoiceActivity(): Promise<void> {
  return machine ? machine.close() : Promise.resolve();
}
