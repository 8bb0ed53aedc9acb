/**
 * The one provider contract. A provider (openai-compatible, llama, flite, espeak, pocketsphinx, whisper) is a
 * folder under src/engines with a `provider.ts` that declares, in one object:
 * - which capabilities it serves (text, speech, transcription, embeddings),
 * - the model-file keys it takes (a TypeBox schema: the model file is checked against it, unknown keys are
 *   errors, and the engine factories receive them typed),
 * - one factory per capability, each importing the heavy engine code only when first called (or, where that code
 *   is light enough to hold, when the runtime starts: `load`).
 * - optionally, whether its engine is installed here (`available`) and the part it takes in serving the built-in
 *   audio models (`builtin`): the features ask these of every provider and name none.
 * src/engines/providers.ts lists them all; src/engines/registry.ts creates and shares the engines. A provider
 * imports nothing from another provider (what two share lives in src/engines/shared).
 */
import type { Static, TObject } from 'typebox';
import type { EmbeddingsEngine, RealtimeEngine, SpeechEngine, TextEngine, TranscriptionEngine } from './types.js';

export const CAPABILITIES = ['text', 'speech', 'transcription', 'embeddings', 'realtime'] as const;
export type Capability = (typeof CAPABILITIES)[number];

/** What a factory gets besides the model entry. */
export interface ProviderContext {
  /** the environment, for `api_key_env` and the like */
  env: Record<string, string | undefined>;
  /** worker threads of each embedded speech engine */
  ttsPoolSize: number;
  /** voices each embedded speech engine should have warm before it reports ready (the ones a deployment serves) */
  warmVoices?: Partial<Record<string, readonly string[]>>;
  /** the embedded llama engine: use a GPU when one is found ('auto'), or never ('cpu') */
  llamaGpu: 'auto' | 'cpu';
  /** the bound on one whisper job (WHISPER_TIMEOUT_MS, WHISPER_TIMEOUT_PER_AUDIO_SECOND_MS); unset: the engine's defaults */
  whisperTimeout?: { floorMs?: number; perAudioSecondMs?: number };
  log: { info(o: object, msg?: string): void; warn(o: object, msg?: string): void };
}

/** The part of a model entry every engine may read: its name, what it serves, and its provider's own keys. */
export type ProviderSpec<O extends TObject> = { name: string; type: Capability } & Static<O>;

export interface EngineFactories<S> {
  text?(spec: S, ctx: ProviderContext): Promise<TextEngine>;
  speech?(spec: S, ctx: ProviderContext): Promise<SpeechEngine>;
  transcription?(spec: S, ctx: ProviderContext): Promise<TranscriptionEngine>;
  embeddings?(spec: S, ctx: ProviderContext): Promise<EmbeddingsEngine>;
  realtime?(spec: S, ctx: ProviderContext): Promise<RealtimeEngine>;
}

/** One OpenAI voice (alloy, ash, ...) as an embedded speech engine renders it. */
export interface VoiceRendition {
  /** the engine's own voice id */
  voice: string;
  /** factor on the engine voice's pitch (default 1) */
  pitch?: number;
  /** gain that brings this voice to the common level (standard quality; hd measures each sentence) */
  gainDb: number;
  /** short description, for docs and listings */
  description: string;
}

/**
 * The part a provider takes in the built-in audio models, which no model entry configures (tts-1, tts-1-hd,
 * gpt-4o-mini-tts; whisper-1, gpt-4o-transcribe, gpt-4o-mini-transcribe). The audio feature reads these of every
 * provider (src/audio/voices.ts, src/audio/engines.ts) and names none.
 */
export interface BuiltinRole {
  /**
   * realtime: its entries are pipelines of the models Portico serves (RealtimeEngine.parts), which the realtime
   * feature runs; the built-in realtime models (gpt-realtime, ...) are its
   */
  pipeline?: boolean;
  /**
   * speech: its engine is embedded and speaks sentence lists (EmbeddedSpeechEngine, src/engines/shared/tts.ts);
   * the OpenAI voices it renders. Every OpenAI voice is rendered by exactly one provider; a model of such a provider
   * speaks all of them, each on the provider that renders it.
   */
  voices?: { engine: string; renders: Readonly<Record<string, VoiceRendition>> };
  /**
   * speech: a model of it (configured or pulled) speaks the OpenAI voices of the built-in speech models (tts-1,
   * tts-1-hd, gpt-4o-mini-tts) in place of the embedded voices: the first such model does, its engine an
   * EmbeddedSpeechEngine that takes the OpenAI voice names. Sentences in other scripts stay on `otherScripts`.
   */
  voiceModel?: boolean;
  /**
   * speech: it speaks the sentences written in other scripts (src/engines/shared/scripts.ts names its voice for each
   * language), in this variant for each OpenAI voice.
   */
  otherScripts?: Readonly<Record<string, string>>;
  /**
   * transcription: it may serve the built-in recognizer models. The recognizers are tried by `order` (lower first).
   * `needsModel`: only through a model entry of its own (configured or pulled), which then serves them even when its
   * engine is not installed (a clear 503, never a worse recognizer a client could not tell apart); otherwise with no
   * entry at all, when installed.
   */
  recognizer?: {
    order: number;
    needsModel: boolean;
    /** what to do to have it, for the answer saying that no recognizer is available */
    hint: string;
    /** what serves the built-in models, for GET /v1/models (`model`: its own entry, with needsModel) */
    describe(installed: boolean, model?: string): string;
    /**
     * How it falls short of a whisper-class recognizer, when it does (e.g. English only and far less accurate);
     * absent: it is one. Said where operators and clients look (the start-up log, GET /v1/models), and with
     * TRANSCRIPTION_REQUIRE=whisper it never serves the built-in models (they answer 503 saying what to install).
     */
    weaker?: string;
  };
}

export interface Provider<O extends TObject = TObject> {
  readonly name: string;
  /** one line for error messages and docs */
  readonly summary: string;
  /** what it serves; the first one is a model's type when the model file does not say */
  readonly serves: readonly [Capability, ...Capability[]];
  /** the model-file keys of this provider besides name, provider, type, owned_by, pricing */
  readonly options: O;
  /**
   * Rules across keys that the schema cannot say (e.g. a key that only one capability needs, a URL that must
   * parse): a message, or nothing. `env` is given when the model file is checked for serving (at start and on a
   * reload): the environment the engines will read, for keys that name a variable (never echo its value).
   */
  check?(spec: ProviderSpec<O>, env?: Readonly<Record<string, string | undefined>>): string | undefined;
  /** its engines call a server over the network: a deployment's `timeouts.connect_ms` applies to it */
  readonly remote?: boolean;
  /**
   * its entries may hold an upstream key typed into the admin API (`api_key`, stored sealed: src/models/stored.ts)
   * and handed to its engines on the entry (STORED_SECRET), when they name no `api_key_env`
   */
  readonly storesKey?: boolean;
  /**
   * the entry's key holding the upstream's address (default `base_url`): a stored key is bound to the origin of
   * its value, so a change that points the entry elsewhere does not take the key along (src/admin/models.ts)
   */
  readonly urlKey?: string;
  /** the capabilities whose engines can be probed by an active health check (TextEngine.probe) */
  readonly probes?: readonly Capability[];
  /**
   * text: whether the engine made for this entry forwards Chat Completions as the client sent them
   * (TextEngine.chatCompletions), told from the entry alone, without making the engine (the chat feature asks it
   * of every deployment and fallback of a model, some of which may never be made). Absent: it never does.
   */
  forwardsChatCompletions?(spec: ProviderSpec<O>): boolean;
  /**
   * text: whether the engine made for this entry forwards Anthropic's Messages API as the client sent it
   * (TextEngine.messages), told from the entry alone, as forwardsChatCompletions is. Absent: it never does.
   */
  forwardsMessages?(spec: ProviderSpec<O>): boolean;
  /** one engine for every model of this provider (worker pools), instead of one per model */
  readonly shared?: boolean;
  /**
   * What an engine of this entry holds, as a key: entries with the same key share one engine (two names for one
   * model file load it once: a pulled model under a second name, an alias in the model file). Absent: one engine
   * per entry. Only for engines that keep nothing of the entry but what the key covers.
   */
  engineKey?(spec: ProviderSpec<O>, capability: Capability): string;
  readonly create: EngineFactories<ProviderSpec<O>>;
  /**
   * Loads the code a factory imports, creating nothing (no engine, no connection, no model): the runtime calls it
   * at start for the capabilities its models use (EngineRegistry.preload), so no request pays for loading
   * modules on the event loop. Only for code that is cheap to hold (not an embedded model's runtime).
   */
  readonly load?: Partial<Record<Capability, () => Promise<unknown>>>;
  /**
   * Whether its engine can run here, told without making one or loading its code (files and modules looked up:
   * cheap enough to ask at each request). Absent: always.
   */
  available?(env: Readonly<Record<string, string | undefined>>): boolean;
  /** What serves this entry, for the `engine` field of GET /v1/models (e.g. a voice's speakers); absent: the provider's name. */
  describe?(spec: ProviderSpec<O>): string;
  readonly builtin?: BuiltinRole;
}

/** Declares a provider; the options schema types the factories' spec. */
export function defineProvider<O extends TObject>(p: Provider<O>): Provider<O> {
  return p;
}

/**
 * A secret a model added through the admin API carries to its engine (its upstream `api_key`, decrypted): neither
 * an environment variable nor a model-file key (the model file never takes a clear `api_key`). It rides on the
 * entry (or deployment) object under this symbol, so it survives the copies the router makes of an entry while
 * JSON (answers, logs, the audit log) never shows it. `error`: it could not be decrypted; the engine refuses to
 * start (503) rather than call the upstream without it. `version` changes whenever the secret does (a reload
 * compares it, src/models/reload.ts).
 */
export const STORED_SECRET = Symbol('portico.storedSecret');

export interface StoredSecret {
  apiKey?: string;
  error?: string;
  version: string;
}

export function storedSecretOf(spec: object): StoredSecret | undefined {
  return (spec as { [STORED_SECRET]?: StoredSecret })[STORED_SECRET];
}

/** Puts a stored secret on an entry or deployment object (enumerable: spreads of it carry it along). */
export function withStoredSecret<T extends object>(spec: T, secret: StoredSecret): T {
  Object.defineProperty(spec, STORED_SECRET, { value: secret, enumerable: true, writable: false, configurable: true });
  return spec;
}
