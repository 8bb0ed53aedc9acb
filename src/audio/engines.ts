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
 *   a whisper model if there is one, else pocketsphinx when installed. A recognizer its provider declares `weaker`
 *   than whisper (pocketsphinx) is said to be so (/v1/models, the start-up log), and with TRANSCRIPTION_REQUIRE=whisper
 *   never serves these models: they answer 503 saying what to install instead of its far worse transcripts.
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
import { FairScheduler, type Lane } from './scheduler.js';
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
 * Jobs the embedded engines run at once, for the whole instance: two recognitions, two synthesis workers (each
 * engine's own default: one a core of a small machine). A recognizer that runs fewer at once (whisper: one job on its
 * model's one context, TranscriptionEngine.concurrency) gets no more than that of them; the other slot stays free
 * for the others (laneOf).
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
  /** TRANSCRIPTION_REQUIRE=whisper: the recognizers declared weaker never serve the built-in models */
  private readonly requireWhisperClass: boolean;

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
    this.requireWhisperClass = limits.requireWhisperClass === true;
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

  /**
   * The lane of a recognizer's turns on the transcription scheduler: an engine that runs fewer jobs at once than
   * there are slots (its `concurrency`) is given that many turns at once at most, the rest waiting in the
   * scheduler (in the keys' fair order, holding no slot); undefined for an engine that runs as many as it is given.
   */
  laneOf(engine: TranscriptionEngine): Lane | undefined {
    const limit = engine.concurrency;
    return limit !== undefined && limit < TRANSCRIPTION_SLOTS ? { id: engine, limit: Math.max(1, Math.floor(limit)) } : undefined;
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

  /** Whether the operator refused this recognizer for the built-in models (TRANSCRIPTION_REQUIRE=whisper). */
  private refused(p: Provider): boolean {
    return this.requireWhisperClass && p.builtin!.recognizer!.weaker !== undefined;
  }

  /** The recognizers that may serve the built-in models here, simplest to have first (for what to install or configure). */
  private wanted(): Provider[] {
    return simplestFirst().filter((p) => !this.refused(p));
  }

  /**
   * What serves the built-in transcription models now: the first recognizer (in the providers' order) with its own
   * model there (installed or not) or, needing none, installed; none, and those the operator refused on the way.
   */
  private builtinRecognizer(): { p?: Provider; own?: ModelSpec; installed: boolean; refused: Provider[] } {
    const refused: Provider[] = [];
    for (const p of builtinRecognizers()) {
      const r = p.builtin!.recognizer!;
      const installed = p.available?.(this.env) ?? true;
      const own = r.needsModel ? this.ownModel(p) : undefined;
      // its model is there (it serves these models, or they answer 503 saying what to install), or it needs none
      if (r.needsModel ? !own : !installed) continue;
      if (this.refused(p)) refused.push(p);
      else return { p, own, installed, refused };
    }
    return { installed: false, refused };
  }

  /** The refusal of TRANSCRIPTION_REQUIRE=whisper, in words: which recognizers it keeps from the built-in models, and why. */
  private refusal(refused: Provider[]): string {
    return `TRANSCRIPTION_REQUIRE=whisper refuses ${refused.map((p) => `${p.name} (${p.builtin!.recognizer!.weaker})`).join(' and ')}`;
  }

  /** The neural voice model that speaks a built-in speech model's voices now, if any (for the x-portico-engine header). */
  voiceModelFor(spec: ModelSpec): ModelSpec | undefined {
    return builtinOf(spec) === 'embedded-tts' ? this.voiceModel() : undefined;
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
      const { p, own, installed, refused } = this.builtinRecognizer();
      if (p) return p.builtin!.recognizer!.describe(installed, own?.name);
      const wanted = this.wanted()
        .map((w) => (w.builtin!.recognizer!.needsModel ? `a ${w.name} model` : w.name))
        .join(' or ');
      if (refused.length > 0) return `none allowed: ${this.refusal(refused)}; transcriptions answer 503 until there is ${wanted}`;
      return `none installed (${wanted})`;
    }
    // a provider may say more of what serves the entry (the piper voices: which speaker says each voice name)
    return (PROVIDERS.get(spec.provider) as Provider<any> | undefined)?.describe?.(spec as never) ?? spec.provider;
  }

  /**
   * What serves the built-in transcription models at start, for the log: a warning when it is a recognizer declared
   * weaker than whisper, or when none will serve them. None when no built-in transcription model is served.
   */
  recognizerNotice(): { warn: boolean; fields: Record<string, unknown>; message: string } | undefined {
    const names = this.models
      .list()
      .filter((m) => builtinOf(m) === 'auto-recognizer')
      .map((m) => m.name);
    if (names.length === 0) return undefined;
    const models = names.join(', ');
    const { p, own, installed, refused } = this.builtinRecognizer();
    const hints = this.wanted()
      .filter((w) => w !== p)
      .map((w) => w.builtin!.recognizer!.hint)
      .join(', or ');
    if (!p) {
      const why = refused.length > 0 ? `${this.refusal(refused)}, and no other recognizer is here` : 'no recognizer is installed';
      return { warn: true, fields: { models: names, engine: null }, message: `speech recognition: ${models} answer 503 engine_unavailable: ${why}. To serve them: ${hints}` };
    }
    const r = p.builtin!.recognizer!;
    const fields = { models: names, engine: p.name, ...(own ? { model: own.name } : {}) };
    if (!installed) return { warn: true, fields, message: `speech recognition: ${models} are served by ${r.describe(false, own?.name)}` };
    if (r.weaker !== undefined) {
      return {
        warn: true,
        fields: { ...fields, weaker: r.weaker },
        message:
          `speech recognition: ${models} are served by ${p.name}, which is ${r.weaker}: clients asking for these models get its transcripts. ` +
          `For whisper-class transcripts: ${hints}; or set TRANSCRIPTION_REQUIRE=whisper to answer 503 instead`,
      };
    }
    return { warn: false, fields, message: `speech recognition: ${models} are served by ${r.describe(true, own?.name)}` };
  }

  async speech(spec: ModelSpec): Promise<SpeechEngine> {
    if (builtinOf(spec) === 'embedded-tts') return this.builtinVoices;
    if (isEmbeddedSpeech(spec)) return this.embedded;
    return this.engines.speech(spec);
  }

  async transcription(spec: ModelSpec): Promise<TranscriptionEngine> {
    if (builtinOf(spec) !== 'auto-recognizer') return this.engines.transcription(spec);
    let failure: unknown;
    const refused: Provider[] = [];
    for (const p of builtinRecognizers()) {
      if (this.refused(p)) {
        refused.push(p);
        continue;
      }
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
    // a refused recognizer is named whether or not it is installed: the operator's choice is why this answer is a 503
    const why = refused.length
      ? `'${spec.name}' is served here by a whisper-class recognizer only (${this.refusal(refused)}), and none is available${failure ? ` (${(failure as Error).message})` : ''}`
      : `No speech recognition engine is available: ${failure ? (failure as Error).message : 'none is installed'}`;
    throw new AppError(
      'engine_unavailable',
      `${why}. ` +
        `${this.wanted()
          .map((p) => p.builtin!.recognizer!.hint)
          .join(', or ')}, ` +
        `or configure this model with provider ${forwarders.join(' or ')} and type transcription to forward to a speech server.`,
      'model',
    );
  }
}
