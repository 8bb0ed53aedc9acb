/**
 * Voice activity detection for the Realtime API's server_vad turn detection: Silero VAD (./silero.ts) where its
 * model and sherpa-onnx are installed, else an energy detector (./energy.ts). Nothing is loaded at import: the
 * first `voiceActivityEngine()` or `createVoiceActivityDetector()` loads and proves the Silero runtime once (a
 * failure is remembered with its reason, `voiceActivityStatus()`, and energy is used); each session then gets a
 * detector of its own (Silero keeps per-session state in its LSTM), at the cost of a reused Vad or one new one.
 */
import type { VoiceActivityDetector, VoiceActivityOptions } from '../../types.js';
import { loadSherpa, sherpaInstalled } from '../sherpa.js';
import { createEnergyDetector } from './energy.js';
import { checkThreshold } from './frames.js';
import { installedSileroModel, loadSileroRuntime, verifySileroModel, type SherpaVadModule, type SileroRuntime } from './silero.js';

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
}

export interface VoiceActivitySetup {
  /** the Silero model file (default: the one the optional package ships) */
  sileroModelPath?: string;
  /** loads sherpa-onnx (default: ../sherpa.ts) */
  loadSherpa?: () => SherpaVadModule;
}

/** One machine's voice activity detection: which detector, decided once, and the detectors it makes. */
export class VoiceActivity {
  private loading?: Promise<{ status: VoiceActivityStatus; runtime?: SileroRuntime }>;

  constructor(private readonly setup: VoiceActivitySetup = {}) {}

  private load(): Promise<{ status: VoiceActivityStatus; runtime?: SileroRuntime }> {
    this.loading ??= loadSileroRuntime(this.setup.loadSherpa ?? (() => loadSherpa<SherpaVadModule>()), this.setup.sileroModelPath).then(
      (runtime) => ({ status: { engine: 'silero' as const, model: runtime.modelName, modelPath: runtime.modelPath }, runtime }),
      (e: unknown) => ({
        status: {
          engine: 'energy' as const,
          reason: `${(e as Error).message}; the energy detector is used (npm ci without --omit=optional installs Silero)`,
        },
      }),
    );
    return this.loading;
  }

  async status(): Promise<VoiceActivityStatus> {
    return { ...(await this.load()).status };
  }

  /**
   * Which detector sessions will get, told from the files alone (the model known, sherpa-onnx installed), without
   * loading the runtime: loading blocks the event loop ~0.1-0.3 s, which the first session pays, not the start-up
   * (a stall at a random moment of a serving instance). Once loaded, what the load found.
   */
  async expected(): Promise<VoiceActivityStatus> {
    if (this.loading) return this.status();
    try {
      const modelPath = this.setup.sileroModelPath ?? installedSileroModel();
      const model = await verifySileroModel(modelPath);
      if (!this.setup.loadSherpa && !sherpaInstalled()) throw new Error('sherpa-onnx-node, the optional dependency that runs the Silero model, is not installed');
      return { engine: 'silero', model, modelPath };
    } catch (e) {
      return { engine: 'energy', reason: `${(e as Error).message}; the energy detector is used (npm ci without --omit=optional installs Silero)` };
    }
  }

  async engine(): Promise<VoiceActivityEngine> {
    return (await this.load()).status.engine;
  }

  /**
   * A detector for one session at OpenAI's threshold (0..1; a RangeError otherwise). `prefer: 'energy'` asks for
   * the energy detector even where Silero is installed; Silero is had only where it loaded (`status()` says why not).
   */
  async create(opts: VoiceActivityOptions, prefer?: VoiceActivityEngine): Promise<VoiceActivityDetector> {
    const threshold = checkThreshold(opts?.threshold);
    if (prefer === 'energy') return createEnergyDetector(threshold);
    const { runtime } = await this.load();
    return runtime ? runtime.create(threshold) : createEnergyDetector(threshold);
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
