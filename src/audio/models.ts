/**
 * The built-in audio models and the per-model rules of spec 4.3 / 4.4.
 *
 * Out of the box (no configuration file) Portico offers:
 * - tts-1, tts-1-hd, gpt-4o-mini-tts: the embedded speech engines; the voice decides which
 *   (src/audio/voices.ts); tts-1-hd renders at hd quality, the other two at standard quality;
 * - whisper-1, gpt-4o-transcribe, gpt-4o-mini-transcribe: the best recognizer available when the first
 *   request arrives, in the order the providers declare (src/audio/engines.ts), else 503 engine_unavailable
 *   saying what to install or configure.
 * Which providers these are is theirs to declare (`builtin` in src/engines/<provider>/provider.ts).
 * A configuration entry with one of these names replaces the built-in one.
 */
import type { BuiltinModel, ModelSpec } from '../models/spec.js';
import { sentencesOf } from '../engines/shared/tts.js';
import type { SpeechQuality } from '../engines/types.js';
import type { Provider } from '../engines/provider.js';
import { PROVIDERS } from '../engines/providers.js';
import type { ResponseFormat } from './transcript-format.js';
import { VOICE_PROVIDERS } from './voices.js';

export const DEFAULT_SPEECH_MODELS = ['tts-1', 'tts-1-hd', 'gpt-4o-mini-tts'] as const;
export const DEFAULT_TRANSCRIPTION_MODELS = ['whisper-1', 'gpt-4o-transcribe', 'gpt-4o-mini-transcribe'] as const;

export function builtinOf(spec: ModelSpec): BuiltinModel | undefined {
  return spec.builtin;
}

/** The recognizers that may serve the built-in transcription models, in the order they are tried. */
export function builtinRecognizers(): Provider[] {
  return [...PROVIDERS.values()].filter((p) => p.builtin?.recognizer).sort((a, b) => a.builtin!.recognizer!.order - b.builtin!.recognizer!.order);
}

/**
 * The built-in audio models (a configured model of the same name replaces one: see ModelRegistry.addDefaults). Their
 * provider is the first that declares the voices, and the first recognizer that needs no model of its own: what
 * serves them is decided at each request (src/audio/engines.ts).
 */
export function defaultAudioModels(): ModelSpec[] {
  const voices = VOICE_PROVIDERS[0]!.name;
  const recognizers = builtinRecognizers();
  const recognizer = (recognizers.find((p) => !p.builtin!.recognizer!.needsModel) ?? recognizers[0]!).name;
  return [
    ...DEFAULT_SPEECH_MODELS.map((name): ModelSpec => ({ name, provider: voices, type: 'speech', owned_by: 'portico', builtin: 'embedded-tts' })),
    ...DEFAULT_TRANSCRIPTION_MODELS.map((name): ModelSpec => ({ name, provider: recognizer, type: 'transcription', owned_by: 'portico', builtin: 'auto-recognizer' })),
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

/** Whether a speech model runs on the embedded engines (a provider that renders the OpenAI voices), built in or configured. */
export function isEmbeddedSpeech(spec: ModelSpec): boolean {
  return PROVIDERS.get(spec.provider)?.builtin?.voices !== undefined;
}

/**
 * The quality an embedded speech model renders at: hd for the built-in tts-1-hd and for a configured
 * embedded model with `quality: hd`; standard otherwise (tts-1 and gpt-4o-mini-tts favour latency).
 */
export function speechQualityOf(spec: ModelSpec): SpeechQuality {
  if (spec.quality) return spec.quality;
  return builtinOf(spec) === 'embedded-tts' && spec.name === 'tts-1-hd' ? 'hd' : 'standard';
}

/**
 * Whether a speech answer is sent whole instead of streamed, so that its WAV or FLAC header carries the real length
 * (docs/api.md, "Lengths in WAV and FLAC headers"): when streaming would gain nothing, i.e. the input is one
 * sentence, which the voices synthesize in one job (its audio is complete before its first byte could go anyway).
 * Longer inputs stream from their first sentence, and their header says "length unknown", as OpenAI's do.
 */
export function speechSentWhole(format: string, input: string, quality: SpeechQuality): boolean {
  return (format === 'wav' || format === 'flac') && sentencesOf(input, quality).length === 1;
}
