/**
 * Which engine speaks or recognizes for an audio model. The engines themselves come from the providers
 * (src/engines/<provider>/provider.ts) through the EngineRegistry; this file holds the audio feature's own
 * policy on top of them:
 *
 * Speech:
 * - flite / espeak models (and the built-in tts-1, tts-1-hd, gpt-4o-mini-tts): one engine whose voices are the
 *   thirteen OpenAI voices; each voice (and each sentence in another script) is spoken by flite or espeak-ng as
 *   src/audio/voices.ts says (both providers are `shared`: one worker pool each per process, whatever the model).
 * - openai-compatible models with type speech: the provider's engine (forwarded upstream).
 *
 * Transcription:
 * - the built-in whisper-1, gpt-4o-transcribe, gpt-4o-mini-transcribe: the first `whisper` model (configured or
 *   pulled) if there is one, else pocketsphinx when installed, else 503 engine_unavailable naming what to install or
 *   configure. Looked for at each request until one is found (installing pocketsphinx needs no restart). A whisper
 *   model whose binding is not installed answers 503 saying what to install: it never falls back to pocketsphinx,
 *   whose far worse transcripts a client could not tell from whisper's.
 * - every other model: its provider's engine.
 *
 * Turns: the embedded engines (the voices, pocketsphinx, whisper) run a few jobs at once for the whole instance;
 * each request takes its turns on them through the two fair schedulers here (./scheduler.ts: a queue per key,
 * served in turn, with caps). Forwarded models (openai-compatible) take none: their work runs on the upstream,
 * which has its own limits and answers 429/503 itself.
 */
import type { EngineRegistry } from '../engines/registry.js';
import type { ModelSpec } from '../models/spec.js';
import type { ModelRegistry } from '../models/registry.js';
import type { PcmChunk, SpeechEngine, SpeechRequest, TranscriptionEngine } from '../engines/types.js';
import type { EmbeddedSpeechEngine } from '../engines/shared/tts.js';
import { AppError } from '../platform/errors.js';
import type { AudioLimits } from '../platform/config.js';
import { FairScheduler } from './scheduler.js';
import { OPENAI_VOICES, speakEmbedded } from './voices.js';
import { builtinOf, isEmbeddedSpeech } from './models.js';
import { detectPocketsphinx } from '../engines/pocketsphinx/index.js';
import { detectWhisperBinding, whisperInstallCommand } from '../engines/whisper/index.js';

const POCKETSPHINX_INSTALL = 'apt-get install pocketsphinx pocketsphinx-en-us';
const WHISPER_HINT = `pull a whisper model (portico models pull whisper:base.en) and install the whisper binding (${whisperInstallCommand()}), see docs/models.md`;

/** The speech engine of each embedded engine kind, shared by every voice and model. */
function embeddedEngine(engines: EngineRegistry, kind: 'flite' | 'espeak'): Promise<EmbeddedSpeechEngine> {
  // the flite and espeak providers make embedded engines (src/engines/shared/tts.ts), which speak sentence lists
  return engines.speech({ name: kind, provider: kind, type: 'speech' }) as Promise<EmbeddedSpeechEngine>;
}

/** One engine for every OpenAI voice: routes each to flite or espeak-ng. */
function embeddedVoices(engines: EngineRegistry): SpeechEngine {
  return {
    kind: 'embedded',
    voices: OPENAI_VOICES,
    synthesize(req: SpeechRequest): AsyncIterable<PcmChunk> {
      return speakEmbedded(req, (kind) => embeddedEngine(engines, kind));
    },
    // the shared engines belong to the registry, which closes them
    async close() {},
  };
}

/**
 * Jobs the embedded engines run at once, for the whole instance: two pocketsphinx (or whisper) decoders, two
 * synthesis workers (each engine's own default: one a core of a small machine).
 */
export const TRANSCRIPTION_SLOTS = 2;
export const SPEECH_SLOTS = 2;
/**
 * Speeds assumed until turns have been measured (work per second of one slot), from this 2-core machine: pocketsphinx
 * 2.7 s of audio per second of CPU (less when the cores are shared), flite ~450 characters a second (espeak-ng more).
 */
const TRANSCRIPTION_SPEED = 2;
const SPEECH_SPEED = 400;

export class AudioEngines {
  private readonly embedded: SpeechEngine;
  /** turns on the embedded recognizers: seconds of audio */
  readonly transcriptionQueue: FairScheduler;
  /** turns on the embedded voices: characters */
  readonly speechQueue: FairScheduler;
  /** transcription pieces, at most this long (seconds) */
  readonly pieceSeconds: number;

  constructor(
    private readonly engines: EngineRegistry,
    private readonly models: ModelRegistry,
    limits: AudioLimits,
  ) {
    this.embedded = embeddedVoices(engines);
    this.pieceSeconds = limits.pieceSeconds;
    this.transcriptionQueue = new FairScheduler({
      what: 'transcription',
      unit: 'seconds of audio',
      slots: TRANSCRIPTION_SLOTS,
      maxQueuedPerKey: limits.maxQueuedSecondsPerKey,
      maxQueuedSetting: 'AUDIO_MAX_QUEUED_SECONDS_PER_KEY',
      maxWaitMs: limits.maxWaitMs,
      initialSpeed: TRANSCRIPTION_SPEED,
    });
    this.speechQueue = new FairScheduler({
      what: 'speech',
      unit: 'characters',
      slots: SPEECH_SLOTS,
      maxQueuedPerKey: limits.maxQueuedCharactersPerKey,
      maxQueuedSetting: 'AUDIO_MAX_QUEUED_CHARACTERS_PER_KEY',
      maxWaitMs: limits.maxWaitMs,
      initialSpeed: SPEECH_SPEED,
    });
  }

  /** Loads the embedded speech engines now (start-up, tests) rather than at the first request. */
  async warmUp(): Promise<void> {
    await Promise.all((['flite', 'espeak'] as const).map((k) => embeddedEngine(this.engines, k)));
  }

  /** Which engine serves a model, for GET /v1/models (the built-in recognizer: what would serve it now). */
  engineOf(spec: ModelSpec): string {
    if (builtinOf(spec) === 'embedded-tts' || spec.provider === 'flite' || spec.provider === 'espeak') return 'flite/espeak-ng (embedded voices)';
    if (builtinOf(spec) === 'auto-recognizer') {
      const whisper = this.models.list().find((m) => m.provider === 'whisper' && m.type === 'transcription');
      if (whisper) {
        // a whisper model is there: it serves these models, or they answer 503 saying what to install (never pocketsphinx instead)
        return detectWhisperBinding(process.env.PORTICO_WHISPER_BINDING || undefined)
          ? `whisper (${whisper.name})`
          : `whisper (${whisper.name}), not installed: transcriptions answer 503 until the whisper binding is (docs/models.md)`;
      }
      return detectPocketsphinx().available ? 'pocketsphinx (English; configure or pull a whisper model for better accuracy)' : 'none installed (pocketsphinx or a whisper model)';
    }
    return spec.provider;
  }

  async speech(spec: ModelSpec): Promise<SpeechEngine> {
    if (isEmbeddedSpeech(spec)) return this.embedded;
    return this.engines.speech(spec);
  }

  async transcription(spec: ModelSpec): Promise<TranscriptionEngine> {
    if (builtinOf(spec) !== 'auto-recognizer') return this.engines.transcription(spec);
    const whisper = this.models.list().find((m) => m.provider === 'whisper' && m.type === 'transcription');
    if (whisper) return this.engines.transcription(whisper);
    try {
      return await this.engines.transcription({ name: '(built-in recognizer)', provider: 'pocketsphinx', type: 'transcription' });
    } catch (e) {
      throw new AppError(
        'engine_unavailable',
        `No speech recognition engine is available: ${(e as Error).message}. Install pocketsphinx (${POCKETSPHINX_INSTALL}), ` +
          `or configure a whisper model (${WHISPER_HINT}), ` +
          `or configure this model with provider openai-compatible and type transcription to forward to a speech server.`,
        'model',
      );
    }
  }
}
