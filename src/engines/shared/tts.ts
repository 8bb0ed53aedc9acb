/** What the embedded speech engines (flite, espeak-ng) share: their options, their handle and request checks. */
import { EngineError, type PcmChunk, type SpeechRequest } from '../types.js';
import { splitSentences } from './sentences.js';
import type { SynthParams } from './synth-pool.js';
import type { SpeechEngine } from '../types.js';

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
  /**
   * Speaks sentences already split (by `sentencesOf`), one synthesis job each, in order. `req.text` is not
   * read. Used by callers that route the sentences of one text to different engines.
   */
  synthesizeSentences(sentences: readonly string[], req: SpeechRequest): AsyncIterable<PcmChunk>;
}

export function clampSpeed(speed: number): number {
  if (!Number.isFinite(speed)) return 1;
  return Math.min(4, Math.max(0.25, speed));
}

/** Pitch factors outside this range make the engines' voices unintelligible. */
export const MIN_PITCH = 0.5;
export const MAX_PITCH = 2;

export function checkRequest(req: SpeechRequest, voices: readonly string[], engine: string): void {
  if (!voices.includes(req.voice)) {
    throw new EngineError(`Unknown ${engine} voice '${req.voice}'. Known voices: ${voices.join(', ')}`, 'invalid_voice', 400);
  }
  const pitch = req.pitch ?? 1;
  if (!(pitch >= MIN_PITCH && pitch <= MAX_PITCH)) {
    throw new EngineError(`pitch must be between ${MIN_PITCH} and ${MAX_PITCH} (got ${pitch})`, 'invalid_request', 400);
  }
  if (req.gainDb !== undefined && !(Math.abs(req.gainDb) <= 40)) {
    throw new EngineError(`gainDb must be between -40 and 40 (got ${req.gainDb})`, 'invalid_request', 400);
  }
}

/** The parameters of every synthesis job of one request. */
export function synthParams(req: SpeechRequest): SynthParams {
  return { voice: req.voice, speed: clampSpeed(req.speed), pitch: req.pitch ?? 1, gainDb: req.gainDb ?? 0, hd: req.quality === 'hd' };
}

/**
 * The sentences one request is spoken in. Standard quality cuts a long first sentence at its first clause
 * so audio starts sooner; hd keeps every sentence whole (its intonation spans the whole sentence).
 */
export function sentencesOf(text: string, quality: SpeechRequest['quality'], maxChars?: number): string[] {
  return splitSentences(text, maxChars, quality === 'hd' ? Infinity : undefined);
}
