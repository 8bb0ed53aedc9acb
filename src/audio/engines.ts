/**
 * Which engine speaks or recognizes for an audio model. The engines themselves come from the providers
 * (src/engines/<provider>/provider.ts) through the EngineRegistry, and so does what this file asks of them: which
 * render the OpenAI voices (`builtin.voices`), which may recognize for the built-in models and in what order
 * (`builtin.recognizer`), whether one is installed here (`available`). This file holds the audio feature's own
 * policy on top of them, naming no provider:
 *
 * Speech:
 * - models of a provider that renders the OpenAI voices (and the built-in tts-1, tts-1-hd, gpt-4o-mini-tts): one
 *   engine whose voices are the thirteen OpenAI voices; each voice (and each sentence in another script) is spoken
 *   by the provider that declares it, as src/audio/voices.ts says (today flite and espeak-ng; those providers are
 *   `shared`: one worker pool each per process, whatever the model).
 * - the built-in speech models, when a model of a provider that declares `builtin.voiceModel` is there (a neural
 *   voice, configured or pulled: `portico models pull piper:<voice>`): the first such model speaks their thirteen
 *   voices (its engine maps the names to its speakers), sentences in other scripts staying on the embedded voices.
 *   Without one, the embedded voices: they stay the default that needs nothing downloaded. A voice model that cannot
 *   be loaded is a 503 saying why, never a silent fall back to the formant voices.
 * - every other speech model: its provider's engine (e.g. forwarded upstream).
 *
 * Transcription:
 * - the built-in whisper-1, gpt-4o-transcribe, gpt-4o-mini-transcribe: the recognizers in the order their providers
 *   declare; one that needs a model of its own serves them when such a model (configured or pulled) is there,
 *   installed or not (a 503 saying what to install: never a fall back to a worse recognizer a client could not
 *   tell apart); one that needs none serves them when installed. Else 503 engine_unavailable naming what to
 *   install or configure. Looked for at each request until one is found (installing one needs no restart). Today:
 *   a whisper model if there is one, else pocketsphinx when installed.
 * - every other model: its provider's engine.
 *
 * Turns: the embedded engines (the voices, the embedded recognizers) run a few jobs at once for the whole instance;
 * each request takes its turns on them through the two fair schedulers here (./scheduler.ts: a queue per key,
 * served in turn, with caps). Forwarded models take none: their work runs on the upstream, which has its own
 * limits and answers 429/503 itself.
 */
import type { EngineRegistry } from '../engines/registry.js';
import type { ModelSpec } from '../models/spec.js';
import type { ModelRegistry } from '../models/registry.js';
import type { PcmChunk, SpeechEngine, SpeechRequest, TranscriptionEngine } from '../engines/types.js';
import type { EmbeddedSpeechEngine } from '../engines/shared/tts.js';
import { AppError } from '../platform/errors.js';
import type { AudioLimits } from '../platform/config.js';
import { FairScheduler } from './scheduler.js';
import type { Provider } from '../engines/provider.js';
import { PROVIDERS } from '../engines/providers.js';
import { OPENAI_VOICES, VOICE_PROVIDERS, speakEmbedded, type EmbeddedTtsKind } from './voices.js';
import { builtinOf, builtinRecognizers, isEmbeddedSpeech } from './models.js';

/** The speech engine of each provider that renders the OpenAI voices, shared by every voice and model. */
function embeddedEngine(engines: EngineRegistry, kind: EmbeddedTtsKind): Promise<EmbeddedSpeechEngine> {
  // these providers make embedded engines (src/engines/shared/tts.ts), which speak sentence lists
  return engines.speech({ name: kind, provider: kind, type: 'speech' }) as Promise<EmbeddedSpeechEngine>;
}

/** The built-in recognizers, those that need no model of their own first (for what to install or configure). */
function simplestFirst(): Provider[] {
  const all = builtinRecognizers();
  return [...all.filter((p) => !p.builtin!.recognizer!.needsModel), ...all.filter((p) => p.builtin!.recognizer!.needsModel)];
}

/**
 * One engine for every OpenAI voice: routes each to the provider that renders it, or to the voice model `voiceModel`
 * names (the built-in models: a neural voice when there is one).
 */
function embeddedVoices(engines: EngineRegistry, voiceModel?: () => ModelSpec | undefined): SpeechEngine {
  return {
    kind: 'embedded',
    voices: OPENAI_VOICES,
    synthesize(req: SpeechRequest): AsyncIterable<PcmChunk> {
      const model = voiceModel?.();
      // voice model providers make engines that speak sentence lists in the OpenAI voices (Provider.builtin.voiceModel)
      return speakEmbedded(req, (kind) => embeddedEngine(engines, kind), model ? async () => (await engines.speech(model)) as EmbeddedSpeechEngine : undefined);
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
  /** the built-in speech models: the embedded voices, or the first voice model (a neural voice) when there is one */
  private readonly builtinVoices: SpeechEngine;
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
    /** the environment the providers' `available` reads (PORTICO_WHISPER_BINDING and the like) */
    private readonly env: Readonly<Record<string, string | undefined>> = process.env,
  ) {
    this.embedded = embeddedVoices(engines);
    this.builtinVoices = embeddedVoices(engines, () => this.voiceModel());
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
    await Promise.all(VOICE_PROVIDERS.map((p) => embeddedEngine(this.engines, p.name)));
  }

  /** The first model of a recognizer's own (configured or pulled). */
  private ownModel(p: Provider): ModelSpec | undefined {
    return this.models.list().find((m) => m.provider === p.name && m.type === 'transcription');
  }

  /** The first model (configured or pulled) of a provider that speaks the built-in voices (a neural voice). */
  private voiceModel(): ModelSpec | undefined {
    return this.models.list().find((m) => m.type === 'speech' && PROVIDERS.get(m.provider)?.builtin?.voiceModel);
  }

  /** Which engine serves a model, for GET /v1/models (the built-in recognizer: what would serve it now). */
  engineOf(spec: ModelSpec): string {
    const voiceModel = builtinOf(spec) === 'embedded-tts' ? this.voiceModel() : undefined;
    if (voiceModel) {
      const own = (PROVIDERS.get(voiceModel.provider) as Provider<any>).describe?.(voiceModel as never) ?? voiceModel.provider;
      const other = [...PROVIDERS.values()].find((p) => p.builtin?.otherScripts);
      return `${own} (model ${voiceModel.name})${other ? `; other scripts: ${other.builtin!.voices?.engine ?? other.name}` : ''}`;
    }
    if (builtinOf(spec) === 'embedded-tts' || isEmbeddedSpeech(spec)) return `${VOICE_PROVIDERS.map((p) => p.builtin!.voices!.engine).join('/')} (embedded voices)`;
    if (builtinOf(spec) === 'auto-recognizer') {
      for (const p of builtinRecognizers()) {
        const r = p.builtin!.recognizer!;
        const installed = p.available?.(this.env) ?? true;
        if (r.needsModel) {
          // its model is there: it serves these models, or they answer 503 saying what to install
          const own = this.ownModel(p);
          if (own) return r.describe(installed, own.name);
        } else if (installed) return r.describe(true);
      }
      return `none installed (${simplestFirst()
        .map((p) => (p.builtin!.recognizer!.needsModel ? `a ${p.name} model` : p.name))
        .join(' or ')})`;
    }
    // a provider may say more of what serves the entry (the piper voices: which speaker says each voice name)
    return (PROVIDERS.get(spec.provider) as Provider<any> | undefined)?.describe?.(spec as never) ?? spec.provider;
  }

  async speech(spec: ModelSpec): Promise<SpeechEngine> {
    if (builtinOf(spec) === 'embedded-tts') return this.builtinVoices;
    if (isEmbeddedSpeech(spec)) return this.embedded;
    return this.engines.speech(spec);
  }

  async transcription(spec: ModelSpec): Promise<TranscriptionEngine> {
    if (builtinOf(spec) !== 'auto-recognizer') return this.engines.transcription(spec);
    let failure: unknown;
    for (const p of builtinRecognizers()) {
      if (p.builtin!.recognizer!.needsModel) {
        const own = this.ownModel(p);
        if (own) return this.engines.transcription(own);
        continue;
      }
      try {
        return await this.engines.transcription({ name: '(built-in recognizer)', provider: p.name, type: 'transcription' });
      } catch (e) {
        failure ??= e;
      }
    }
    // the providers that forward to a server of their own (a speech server)
    const forwarders = [...PROVIDERS.values()].filter((p) => p.remote && p.create.transcription).map((p) => p.name);
    throw new AppError(
      'engine_unavailable',
      `No speech recognition engine is available: ${failure ? (failure as Error).message : 'none is installed'}. ` +
        `${simplestFirst()
          .map((p) => p.builtin!.recognizer!.hint)
          .join(', or ')}, ` +
        `or configure this model with provider ${forwarders.join(' or ')} and type transcription to forward to a speech server.`,
      'model',
    );
  }
}
