/**
 * espeak-ng text-to-speech engine (@echogarden/espeak-ng-emscripten, GPL-3.0), run in worker threads.
 * 22.05 kHz. Speed maps to the rate in words per minute (175 x speed, within espeak's 80..450), with
 * time stretching for the part of 0.25..4.0 espeak cannot reach by itself. Pitch maps to espeak's pitch
 * parameter (see ./rate.ts); level: see ../shared/loudness.ts.
 */
import { type PcmChunk, type SpeechRequest } from '../types.js';
import { SynthWorkerPool, synthesizeOnPool } from '../shared/synth-pool.js';
import { checkRequest, sentencesOf, synthParams, type EmbeddedSpeechEngine, type TtsEngineOptions } from '../shared/tts.js';
import { SCRIPT_LANGUAGE_VOICES } from '../shared/scripts.js';

export const ESPEAK_SAMPLE_RATE = 22050;

const BASES = ['en-us', 'en', 'en-gb-scotland', 'en-gb-x-rp', 'en-029', 'en-us-nyc'];
const VARIANTS = ['', '+f1', '+f2', '+f3', '+f4', '+f5', '+m1', '+m2', '+m3', '+m4', '+m5', '+m6', '+m7', '+croak', '+whisper'];
/**
 * The voices this engine offers (other espeak voice ids are not accepted): the English voices and the
 * languages of the script table (../shared/scripts.ts), each with every variant.
 */
export const ESPEAK_VOICES: readonly string[] = [...BASES, ...SCRIPT_LANGUAGE_VOICES].flatMap((b) => VARIANTS.map((v) => b + v));

/** Voices warmed up in each worker before it reports ready, by default (see worker.ts). */
export const DEFAULT_WARM_VOICES: readonly string[] = ['en-us+f5', 'en-us+f3'];

export interface EspeakEngineOptions extends TtsEngineOptions {
  /**
   * Voices each worker speaks a few sentences with before it reports ready: the first synthesis with a voice
   * is several times slower (this build is wasm2js), so the voices a deployment serves should be warmed.
   */
  warmVoices?: readonly string[];
}

export function createEspeakEngine(opts: EspeakEngineOptions = {}): EmbeddedSpeechEngine {
  const warm = (opts.warmVoices ?? DEFAULT_WARM_VOICES).filter((v) => ESPEAK_VOICES.includes(v));
  const pool = new SynthWorkerPool({
    workerUrl: new URL('./worker.js', import.meta.url),
    size: opts.poolSize ?? 2,
    preload: opts.preload ?? true,
    name: 'espeak',
    workerData: { warmVoices: warm },
  });
  return {
    kind: 'espeak',
    voices: ESPEAK_VOICES,
    ready: () => pool.ready(),
    synthesize(req: SpeechRequest): AsyncIterable<PcmChunk> {
      checkRequest(req, ESPEAK_VOICES, 'espeak');
      return synthesizeOnPool(pool, sentencesOf(req.text, req.quality, opts.maxSentenceChars), synthParams(req), req.signal);
    },
    synthesizeSentences(sentences: readonly string[], req: SpeechRequest): AsyncIterable<PcmChunk> {
      checkRequest(req, ESPEAK_VOICES, 'espeak');
      return synthesizeOnPool(pool, sentences, synthParams(req), req.signal);
    },
    close: () => pool.close(),
  };
}
