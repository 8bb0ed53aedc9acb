import type { Capability, Provider, ProviderContext } from './provider.js';
import { EngineError, type EmbeddingsEngine, type SpeechEngine, type TextEngine, type TranscriptionEngine } from './types.js';

interface Engines {
  text: TextEngine;
  speech: SpeechEngine;
  transcription: TranscriptionEngine;
  embeddings: EmbeddingsEngine;
}

/** What the registry needs of a model entry: its name, type and provider, and the provider's own keys. */
export interface EngineSpec {
  name: string;
  provider: string;
  type: Capability;
}

/**
 * Where features get their text and embeddings engines: this registry, or the router over it
 * (src/models/router), which serves a model's several deployments behind the same interfaces.
 */
export interface TextEngineSource {
  text(spec: EngineSpec): Promise<TextEngine>;
  embeddings(spec: EngineSpec): Promise<EmbeddingsEngine>;
}

/**
 * The engines of the configured models, created on first use through their provider and shared by every
 * request for that model (or, for a `shared` provider such as a speech worker pool, by every model of that
 * provider). A failed creation is not kept: the next request tries again (the file may have appeared).
 */
export class EngineRegistry {
  private readonly engines = new Map<string, Promise<{ close(): Promise<void> }>>();
  private closed = false;

  constructor(
    private readonly providers: ReadonlyMap<string, Provider>,
    private readonly ctx: ProviderContext,
  ) {}

  text(spec: EngineSpec): Promise<TextEngine> {
    return this.get('text', spec);
  }

  speech(spec: EngineSpec): Promise<SpeechEngine> {
    return this.get('speech', spec);
  }

  transcription(spec: EngineSpec): Promise<TranscriptionEngine> {
    return this.get('transcription', spec);
  }

  embeddings(spec: EngineSpec): Promise<EmbeddingsEngine> {
    return this.get('embeddings', spec);
  }

  private get<C extends Capability>(capability: C, spec: EngineSpec): Promise<Engines[C]> {
    if (this.closed) return Promise.reject(new EngineError('the server is shutting down', 'engine_unavailable', 503));
    const provider = this.providers.get(spec.provider);
    const create = provider?.create[capability];
    if (!provider || !create) {
      return Promise.reject(new EngineError(`the model '${spec.name}' (provider ${spec.provider}) does not serve ${capability}`, 'engine_unavailable', 503));
    }
    const id = provider.shared ? `${capability}\u0000provider\u0000${provider.name}` : `${capability}\u0000${spec.name}`;
    let p = this.engines.get(id) as Promise<Engines[C]> | undefined;
    if (!p) {
      // the spec was checked against the provider's options when the model file was read
      p = (create as (s: unknown, c: ProviderContext) => Promise<Engines[C]>)(spec, this.ctx);
      this.engines.set(id, p);
      p.catch(() => this.engines.delete(id));
    }
    return p;
  }

  /**
   * Loads the code of the providers these models use (Provider.load), creating nothing; resolves when it is
   * loaded. A failure is left to the first request, which reports it as it always did.
   */
  async preload(specs: ReadonlyArray<EngineSpec & { deployments?: readonly EngineSpec[] }>): Promise<void> {
    const loads = new Map<string, () => Promise<unknown>>();
    for (const spec of specs) {
      for (const s of spec.deployments?.length ? spec.deployments : [spec]) {
        const load = this.providers.get(s.provider)?.load?.[s.type];
        if (load) loads.set(`${s.provider}\u0000${s.type}`, load);
      }
    }
    await Promise.all([...loads.values()].map((load) => load().catch(() => {})));
  }

  /** Closes the engines of a model that went away or changed (the next request creates them anew). */
  async release(name: string): Promise<void> {
    const gone: Array<Promise<{ close(): Promise<void> }>> = [];
    for (const [id, p] of this.engines) {
      if (id.endsWith(`\u0000${name}`) && !id.includes('\u0000provider\u0000')) {
        this.engines.delete(id);
        gone.push(p);
      }
    }
    await Promise.all(gone.map((p) => p.then((e) => e.close()).catch(() => {})));
  }

  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.engines.values()];
    this.engines.clear();
    await Promise.all(all.map((p) => p.then((e) => e.close()).catch(() => {})));
  }
}
