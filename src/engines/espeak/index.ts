/**
 * espeak-ng text-to-speech engine (@echogarden/espeak-ng-emscripten, GPL-3.0), run in worker threads.
 * 22.05 kHz. Speed maps to the rate in words per minute (175 x speed, within espeak's 80..450), with
 * time stretching for the part of 0.25..4.0 espeak cannot reach by itself.
 */
import { type PcmChunk, type SpeechRequest } from '../types.js';
import { SynthWorkerPool, synthesizeOnPool } from '../flite/pool.js';
import { splitSentences } from '../flite/sentences.js';
import { checkRequest, clampSpeed, type EmbeddedSpeechEngine, type TtsEngineOptions } from '../flite/index.js';

export const ESPEAK_SAMPLE_RATE = 22050;

const BASES = ['en-us', 'en', 'en-gb-scotland', 'en-gb-x-rp', 'en-029', 'en-us-nyc'];
const VARIANTS = ['', '+f1', '+f2', '+f3', '+f4', '+f5', '+m1', '+m2', '+m3', '+m4', '+m5', '+m6', '+m7', '+croak', '+whisper'];
/** The English voices and variants this engine offers (other espeak voice ids are not accepted). */
export const ESPEAK_VOICES: readonly string[] = BASES.flatMap((b) => VARIANTS.map((v) => b + v));

export function createEspeakEngine(opts: TtsEngineOptions = {}): EmbeddedSpeechEngine {
  const pool = new SynthWorkerPool({
    workerUrl: new URL('./worker.js', import.meta.url),
    size: opts.poolSize ?? 2,
    preload: opts.preload ?? true,
    name: 'espeak',
  });
  return {
    kind: 'espeak',
    voices: ESPEAK_VOICES,
    ready: () => pool.ready(),
    synthesize(req: SpeechRequest): AsyncIterable<PcmChunk> {
      checkRequest(req, ESPEAK_VOICES, 'espeak');
      return synthesizeOnPool(pool, splitSentences(req.text, opts.maxSentenceChars), req.voice, clampSpeed(req.speed), req.signal);
    },
    close: () => pool.close(),
  };
}
