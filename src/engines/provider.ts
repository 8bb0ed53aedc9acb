/**
 * The one provider contract. A provider (openai-compatible, llama, flite, espeak, pocketsphinx, whisper) is a
 * folder under src/engines with a `provider.ts` that declares, in one object:
 * - which capabilities it serves (text, speech, transcription, embeddings),
 * - the model-file keys it takes (a TypeBox schema: the model file is checked against it, unknown keys are
 *   errors, and the engine factories receive them typed),
 * - one factory per capability, each importing the heavy engine code only when first called (or, where that code
 *   is light enough to hold, when the runtime starts: `load`).
 * src/engines/providers.ts lists them all; src/engines/registry.ts creates and shares the engines. A provider
 * imports nothing from another provider (what two share lives in src/engines/shared).
 */
import type { Static, TObject } from 'typebox';
import type { EmbeddingsEngine, SpeechEngine, TextEngine, TranscriptionEngine } from './types.js';

export const CAPABILITIES = ['text', 'speech', 'transcription', 'embeddings'] as const;
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
  log: { info(o: object, msg?: string): void; warn(o: object, msg?: string): void };
}

/** The part of a model entry every engine may read: its name, what it serves, and its provider's own keys. */
export type ProviderSpec<O extends TObject> = { name: string; type: Capability } & Static<O>;

export interface EngineFactories<S> {
  text?(spec: S, ctx: ProviderContext): Promise<TextEngine>;
  speech?(spec: S, ctx: ProviderContext): Promise<SpeechEngine>;
  transcription?(spec: S, ctx: ProviderContext): Promise<TranscriptionEngine>;
  embeddings?(spec: S, ctx: ProviderContext): Promise<EmbeddingsEngine>;
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
  /** the capabilities whose engines can be probed by an active health check (TextEngine.probe) */
  readonly probes?: readonly Capability[];
  /**
   * text: whether the engine made for this entry forwards Chat Completions as the client sent them
   * (TextEngine.chatCompletions), told from the entry alone, without making the engine (the chat feature asks it
   * of every deployment and fallback of a model, some of which may never be made). Absent: it never does.
   */
  forwardsChatCompletions?(spec: ProviderSpec<O>): boolean;
  /** one engine for every model of this provider (worker pools), instead of one per model */
  readonly shared?: boolean;
  readonly create: EngineFactories<ProviderSpec<O>>;
  /**
   * Loads the code a factory imports, creating nothing (no engine, no connection, no model): the runtime calls it
   * at start for the capabilities its models use (EngineRegistry.preload), so no request pays for loading
   * modules on the event loop. Only for code that is cheap to hold (not an embedded model's runtime).
   */
  readonly load?: Partial<Record<Capability, () => Promise<unknown>>>;
}

/** Declares a provider; the options schema types the factories' spec. */
export function defineProvider<O extends TObject>(p: Provider<O>): Provider<O> {
  return p;
}
