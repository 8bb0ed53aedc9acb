/**
 * The Silero detector: Silero VAD (v5, MIT) run by sherpa-onnx's `Vad` (ONNX Runtime in sherpa-onnx-node's
 * platform package). The model file comes from `@ricky0123/vad-web` (an optional dependency installed for its
 * model files only; its own runtime, onnxruntime-web, is replaced by a stub: docs/architecture.md, "Voice activity
 * detection").
 *
 * sherpa's Vad segments speech itself (minimum speech and silence durations, a speech buffer). Here it is made to
 * give the model's decision of each frame, since the Realtime session applies prefix_padding_ms and
 * silence_duration_ms on the frame decisions itself:
 * - the minimum durations are 1 ms (sherpa takes 0 as "its default": 0.25 s and 0.5 s), so a frame's decision
 *   is the model's, one frame late each way (sherpa confirms a change on the next frame): speech from the second
 *   frame over the threshold, silence from the second frame under the threshold minus 0.15 (Silero's own
 *   hysteresis);
 * - one frame (512 samples) is fed at a time and `isDetected()` read after it;
 * - the segment sherpa keeps is flushed and dropped after every frame: kept, it grows with the speech and is
 *   copied on every frame (measured: 240 ms of CPU per second of audio after 200 s of speech, against 4 ms);
 * - v5 reads 64 samples of context with each frame; sherpa takes them from after the frame, so 64 zeros are fed
 *   first: the model then sees the 64 samples before each frame, as Silero's reference code feeds it, and a
 *   frame's decision comes as soon as the frame is complete.
 *
 * sherpa-onnx ends the process (or quietly keeps a null detector) on a configuration or model it cannot use, so
 * only a model file whose SHA-256 is known is handed over, and every value is checked here first.
 * Creating a Vad takes ~120 ms of CPU on the calling thread (an ONNX Runtime session) and ~9 MB: a closed
 * detector's Vad is reset and kept for the next session with the same threshold (`IDLE_MAX`). The calling thread is
 * the Silero worker thread (./worker.ts, ./thread.ts): nothing here runs on the main thread but in a benchmark or a test.
 */
import { createHash } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { FrameBuffer, checkThreshold, type FrameDetector } from './frames.js';

/** The npm package whose files include the Silero model (an optional dependency). */
export const SILERO_MODEL_PACKAGE = '@ricky0123/vad-web';
/** The model used, in that package's dist/. */
export const SILERO_MODEL_FILE = 'silero_vad_v5.onnx';
/** The Silero models known to load in sherpa-onnx 1.13 (v5 and v6 have the same inputs), by SHA-256. */
const KNOWN_MODELS: ReadonlyMap<string, string> = new Map([
  ['2623a2953f6ff3d2c1e61740c6cdb7168133479b267dfef114a4a3cc5bdd788f', 'silero_vad_v5'],
  ['1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3', 'silero_vad_v6'],
]);

export const SILERO_FRAME_SAMPLES = 512;
/** the samples of context v5 reads with each frame */
const CONTEXT_SAMPLES = 64;
/** sherpa refuses a threshold under 0.01 or from 1 on (a null detector); OpenAI's 0..1 is clamped into this */
const MIN_THRESHOLD = 0.02;
const MAX_THRESHOLD = 0.98;
/** closed detectors' Vads kept for reuse, all thresholds together */
const IDLE_MAX = 4;

interface SherpaVad {
  acceptWaveform(samples: Float32Array): void;
  isDetected(): boolean;
  isEmpty(): boolean;
  pop(): void;
  flush(): void;
  reset(): void;
}

export interface SherpaVadModule {
  Vad: new (config: object, bufferSizeInSeconds: number) => SherpaVad;
}

/** The model file of the installed package (throws, saying so, when the package is not installed). */
export function installedSileroModel(): string {
  try {
    return join(dirname(createRequire(import.meta.url).resolve(`${SILERO_MODEL_PACKAGE}/package.json`)), 'dist', SILERO_MODEL_FILE);
  } catch {
    throw new Error(`${SILERO_MODEL_PACKAGE}, the optional dependency that holds the Silero model, is not installed`);
  }
}

/** Checks that `path` is a Silero model known to load; gives its name (silero_vad_v5). */
export async function verifySileroModel(path: string): Promise<string> {
  let bytes: Buffer;
  try {
    const s = await stat(path);
    if (!s.isFile() || s.size > 16 * 1024 * 1024) throw new Error('not a model file');
    bytes = await readFile(path);
  } catch (e) {
    throw new Error(`the Silero model ${path} cannot be read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  const sha = createHash('sha256').update(bytes).digest('hex');
  const name = KNOWN_MODELS.get(sha);
  if (!name) throw new Error(`${path} is not a Silero model known to load in sherpa-onnx (sha256 ${sha.slice(0, 12)}...)`);
  return name;
}

/** The loaded runtime: sherpa-onnx and a verified model; makes detectors. */
export class SileroRuntime {
  private readonly idle = new Map<number, SherpaVad[]>();
  private idleCount = 0;

  constructor(
    private readonly sherpa: SherpaVadModule,
    readonly modelPath: string,
    readonly modelName: string,
  ) {}

  private vadFor(threshold: number): SherpaVad {
    const kept = this.idle.get(threshold)?.pop();
    if (kept) {
      this.idleCount--;
      return kept;
    }
    return new this.sherpa.Vad(
      {
        sileroVad: {
          model: this.modelPath,
          threshold,
          minSilenceDuration: 0.001,
          minSpeechDuration: 0.001,
          // sherpa raises the threshold to 0.9 once its buffer holds this much speech; flushed every frame, it never does
          maxSpeechDuration: 3600,
          windowSize: SILERO_FRAME_SAMPLES,
        },
        sampleRate: 16000,
        numThreads: 1,
        provider: 'cpu',
        debug: 0,
      },
      // seconds of audio sherpa's buffer holds before it grows; flushed every frame, it holds about two frames
      1,
    );
  }

  private release(threshold: number, vad: SherpaVad): void {
    if (this.idleCount >= IDLE_MAX) return; // dropped: the garbage collector frees sherpa's detector
    vad.reset();
    const list = this.idle.get(threshold) ?? [];
    list.push(vad);
    this.idle.set(threshold, list);
    this.idleCount++;
  }

  /** A detector at OpenAI's threshold (0..1; clamped to what sherpa takes, 0.02..0.98). */
  create(threshold: number): FrameDetector {
    const t = Math.round(Math.min(MAX_THRESHOLD, Math.max(MIN_THRESHOLD, checkThreshold(threshold))) * 1000) / 1000;
    const vad = this.vadFor(t);
    return new SileroDetector(vad, () => this.release(t, vad));
  }
}

class SileroDetector implements FrameDetector {
  readonly name = 'silero';
  readonly frameSamples = SILERO_FRAME_SAMPLES;
  private readonly frames = new FrameBuffer(SILERO_FRAME_SAMPLES);
  private closed = false;
  private readonly decide: (frame: Float32Array) => boolean;

  constructor(
    private readonly vad: SherpaVad,
    private readonly release: () => void,
  ) {
    this.decide = (frame) => {
      vad.acceptWaveform(frame);
      const speech = vad.isDetected();
      vad.flush();
      while (!vad.isEmpty()) vad.pop();
      return speech;
    };
    this.prime();
  }

  /** the context before the first frame: silence */
  private prime(): void {
    this.vad.acceptWaveform(new Float32Array(CONTEXT_SAMPLES));
  }

  push(samples: Float32Array): boolean[] {
    if (this.closed) throw new Error('the voice activity detector is closed');
    return this.frames.push(samples, this.decide);
  }

  reset(): void {
    if (this.closed) return;
    this.frames.clear();
    this.vad.reset();
    this.prime();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.release();
  }
}

/**
 * Loads sherpa-onnx and the model, and proves them on a frame of silence (a Vad is made, run, and kept for the
 * first session). Throws an Error saying what is missing.
 */
export async function loadSileroRuntime(loadSherpa: () => SherpaVadModule | Promise<SherpaVadModule>, modelPath?: string): Promise<SileroRuntime> {
  const path = modelPath ?? installedSileroModel();
  const name = await verifySileroModel(path);
  let sherpa: SherpaVadModule;
  try {
    sherpa = await loadSherpa();
  } catch (e) {
    throw new Error(`sherpa-onnx-node, the optional dependency that runs the Silero model, could not be loaded (${(e as Error).message.split('\n')[0]})`);
  }
  if (typeof sherpa.Vad !== 'function') throw new Error('the installed sherpa-onnx-node has no Vad');
  const runtime = new SileroRuntime(sherpa, path, name);
  const probe = runtime.create(0.5);
  probe.push(new Float32Array(SILERO_FRAME_SAMPLES * 2));
  probe.close();
  return runtime;
}
