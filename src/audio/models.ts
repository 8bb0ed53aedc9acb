/**
 * The built-in audio models and the per-model rules of spec 4.3 / 4.4.
 *
 * Out of the box (no configuration file) Portico offers:
 * - tts-1, tts-1-hd, gpt-4o-mini-tts: the embedded speech engines; the voice decides flite or espeak-ng
 *   (src/audio/voices.ts); tts-1-hd renders at hd quality, the other two at standard quality;
 * - whisper-1, gpt-4o-transcribe, gpt-4o-mini-transcribe: the best recognizer available when the first
 *   request arrives: a configured `whisper` model, else pocketsphinx when installed, else 503
 *   engine_unavailable saying what to install or configure (src/audio/engines.ts).
 * A configuration entry with one of these names replaces the built-in one.
 */
import type { BuiltinModel, ModelSpec } from '../models/spec.js';
import type { SpeechQuality } from '../engines/types.js';
import type { ResponseFormat } from './transcript-format.js';

export const DEFAULT_SPEECH_MODELS = ['tts-1', 'tts-1-hd', 'gpt-4o-mini-tts'] as const;
export const DEFAULT_TRANSCRIPTION_MODELS = ['whisper-1', 'gpt-4o-transcribe', 'gpt-4o-mini-transcribe'] as const;

export function builtinOf(spec: ModelSpec): BuiltinModel | undefined {
  return spec.builtin;
}

/** The built-in audio models (a configured model of the same name replaces one: see ModelRegistry.addDefaults). */
export function defaultAudioModels(): ModelSpec[] {
  return [
    ...DEFAULT_SPEECH_MODELS.map((name): ModelSpec => ({ name, provider: 'flite', type: 'speech', owned_by: 'portico', builtin: 'embedded-tts' })),
    ...DEFAULT_TRANSCRIPTION_MODELS.map((name): ModelSpec => ({ name, provider: 'pocketsphinx', type: 'transcription', owned_by: 'portico', builtin: 'auto-recognizer' })),
  ];
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

/** Whether a speech model runs on the embedded engines (flite / espeak-ng), built in or configured. */
export function isEmbeddedSpeech(spec: ModelSpec): boolean {
  return spec.provider === 'flite' || spec.provider === 'espeak';
}

/**
 * The quality an embedded speech model renders at: hd for the built-in tts-1-hd and for a configured
 * flite/espeak model with `quality: hd`; standard otherwise (tts-1 and gpt-4o-mini-tts favour latency).
 */
export function speechQualityOf(spec: ModelSpec): SpeechQuality {
  if (spec.quality) return spec.quality;
  return builtinOf(spec) === 'embedded-tts' && spec.name === 'tts-1-hd' ? 'hd' : 'standard';
}
