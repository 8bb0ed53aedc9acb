/**
 * The built-in audio models and the per-model rules of spec 4.3 / 4.4.
 *
 * Out of the box (no configuration file) Portico offers:
 * - tts-1, tts-1-hd, gpt-4o-mini-tts: the embedded speech engines; the voice decides flite or espeak-ng
 *   (src/audio/voices.ts);
 * - whisper-1, gpt-4o-transcribe, gpt-4o-mini-transcribe: the best recognizer available when the first
 *   request arrives: a configured `whisper` model, else pocketsphinx when installed, else 503
 *   engine_unavailable saying what to install or configure (src/audio/engines.ts).
 * A configuration entry with one of these names replaces the built-in one.
 */
import type { ModelSpec } from '../models/config.js';
import type { ResponseFormat } from './transcript-format.js';

export const DEFAULT_SPEECH_MODELS = ['tts-1', 'tts-1-hd', 'gpt-4o-mini-tts'] as const;
export const DEFAULT_TRANSCRIPTION_MODELS = ['whisper-1', 'gpt-4o-transcribe', 'gpt-4o-mini-transcribe'] as const;

/** Marker in a built-in spec (ModelSpec allows extra properties). */
export type BuiltinAudio = 'embedded-tts' | 'auto-recognizer';

export function builtinOf(spec: ModelSpec): BuiltinAudio | undefined {
  const b = (spec as { builtin?: unknown }).builtin;
  return b === 'embedded-tts' || b === 'auto-recognizer' ? b : undefined;
}

/** The configured models plus the built-in audio models whose names the configuration does not use. */
export function withDefaultAudioModels(specs: ModelSpec[]): ModelSpec[] {
  const taken = new Set(specs.map((s) => s.name));
  const out = [...specs];
  for (const name of DEFAULT_SPEECH_MODELS) {
    if (!taken.has(name)) out.push({ name, provider: 'flite', type: 'speech', owned_by: 'portico', builtin: 'embedded-tts' } as ModelSpec);
  }
  for (const name of DEFAULT_TRANSCRIPTION_MODELS) {
    if (!taken.has(name)) out.push({ name, provider: 'pocketsphinx', type: 'transcription', owned_by: 'portico', builtin: 'auto-recognizer' } as ModelSpec);
  }
  return out;
}

export const ALL_RESPONSE_FORMATS: readonly ResponseFormat[] = ['json', 'text', 'srt', 'verbose_json', 'vtt'];
const NEW_MODEL_FORMATS: readonly ResponseFormat[] = ['json', 'text'];

/** Formats a transcription model answers (spec 4.3): the two newer models only json and text. */
export function formatsFor(model: string): readonly ResponseFormat[] {
  return model === 'gpt-4o-transcribe' || model === 'gpt-4o-mini-transcribe' ? NEW_MODEL_FORMATS : ALL_RESPONSE_FORMATS;
}

/** Whether the model may translate (spec 4.4): whisper-1 primary, gpt-4o-transcribe extended, not gpt-4o-mini-transcribe. */
export function translates(model: string): boolean {
  return model !== 'gpt-4o-mini-transcribe';
}
