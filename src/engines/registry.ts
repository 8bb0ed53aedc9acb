import type { Capability, Provider, ProviderContext } from './provider.js';
import { EngineError, type EmbeddingsEngine, type RealtimeEngine, type SpeechEngine, type TextEngine, type TranscriptionEngine } from './types.js';

interface Engines {
  text: TextEngine;
  speech: SpeechEngine;
  transcription: TranscriptionEngine;
  embeddings: EmbeddingsEngine;
  realtime: RealtimeEngine;
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
/** What the registry holds of an engine: how to close it now, and (optionally) once its work in flight is done. */
interface Closable {
  close(): Promise<void>;
  retire?(): Promise<void>;
}

export class EngineRegistry {
  private readonly engines = new Map<string, Promise<Closable>>();
  /** the names an engine shared by key serves (Provider.engineKey): it closes when the last of them goes */
  private readonly users = new Map<string, Set<string>>();
  /** each entry's engine id per capability (the entries are the model file's objects: a reload makes new ones) */
  private readonly ids = new WeakMap<object, Partial<Record<Capability, string>>>();
  /** engines a reload retired, closing once their work in flight is done (shutdown closes them at once) */
  private readonly retiring = new Set<Promise<Closable>>();
  /**
   * Specs of a configuration a reload replaced (by object): a request that took one before the reload and asks
   * for its engine after it gets a retryable 503 rather than an engine made from the old keys under a name the
   * new configuration now owns.
   */
  private readonly stale = new WeakSet<object>();
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

  realtime(spec: EngineSpec): Promise<RealtimeEngine> {
    return this.get('realtime', spec);
  }

  embeddings(spec: EngineSpec): Promise<EmbeddingsEngine> {
    return this.get('embeddings', spec);
  }

  private get<C extends Capability>(capability: C, spec: EngineSpec): Promise<Engines[C]> {
    if (this.closed) return Promise.reject(new EngineError('the server is shutting down', 'engine_unavailable', 503));
    if (this.stale.has(spec)) {
      return Promise.reject(
        new EngineError(`the deployment '${spec.name}' changed with a reload of the model file while this request was under way; send it again`, 'engine_unavailable', 503, {
          retryable: true,
        }),
      );
    }
    const provider = this.providers.get(spec.provider);
    const create = provider?.create[capability];
    if (!provider || !create) {
      return Promise.reject(new EngineError(`the model '${spec.name}' (provider ${spec.provider}) does not serve ${capability}`, 'engine_unavailable', 503));
    }
    // an entry's engine id, worked out once per entry and capability: a keyed one (engineKey) is not remade on
    // every request
    let ids = this.ids.get(spec);
    if (!ids) this.ids.set(spec, (ids = {}));
    let id = ids[capability];
    if (id === undefined) {
      const key = provider.shared ? undefined : provider.engineKey?.(spec as never, capability);
      id = ids[capability] = provider.shared
        ? `${capability}\u0000provider\u0000${provider.name}`
        : key !== undefined
          ? `${capability}\u0000key\u0000${provider.name}\u0000${key}`
          : `${capability}\u0000${spec.name}`;
    }
    if (id.includes('\u0000key\u0000')) {
      let names = this.users.get(id);
      if (!names) this.users.set(id, (names = new Set()));
      names.add(spec.name);
    }
    let p = this.engines.get(id) as Promise<Engines[C]> | undefined;
    if (!p) {
      // the spec was checked against the provider's options when the model file was read
      p = (create as (s: unknown, c: ProviderContext) => Promise<Engines[C]>)(spec, this.ctx);
      this.engines.set(id, p);
      p.catch(() => {
        this.engines.delete(id);
        this.users.delete(id);
      });
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
    const gone = this.takeEngines([name]);
    await Promise.all(gone.map((p) => p.then((e) => e.close()).catch(() => {})));
  }

  /**
   * Takes out the engines these names alone use: an engine of its own name, and one shared by key (engineKey) once
   * none of the names it serves is left. The caller closes or retires them.
   */
  private takeEngines(names: Iterable<string>): Array<Promise<Closable>> {
    const gone: Array<Promise<Closable>> = [];
    for (const name of names) {
      for (const [id, p] of this.engines) {
        if (id.includes('\u0000provider\u0000')) continue;
        const users = this.users.get(id);
        if (users) {
          if (!users.delete(name) || users.size > 0) continue;
          this.users.delete(id);
        } else if (!id.endsWith(`\u0000${name}`)) continue;
        this.engines.delete(id);
        gone.push(p);
      }
    }
    return gone;
  }

  /**
   * A reload changed or removed what these engine names serve: new requests get engines made afresh from the new
   * keys, while the engines made so far finish the work they have (TextEngine.retire: an undici pool's close waits
   * for its calls, a stream included) and then close. `stale` are the spec objects of the replaced configuration
   * (see `stale` above). Resolves when every retired engine has closed.
   */
  retire(names: Iterable<string>, stale: Iterable<object> = []): Promise<void> {
    for (const s of stale) this.stale.add(s);
    const gone = this.takeEngines(names);
    return Promise.all(
      gone.map((p) => {
        this.retiring.add(p);
        return p
          .then((e) => (e.retire ? e.retire() : e.close()))
          .catch(() => {})
          .finally(() => this.retiring.delete(p));
      }),
    ).then(() => undefined);
  }

  /**
   * Entries marked stale when an earlier layer took their name (a model of the file hiding a stored or pulled one)
   * that are served again now that it gave the name up: their engines are made afresh (the name's were retired).
   */
  revive(specs: Iterable<object>): void {
    for (const s of specs) this.stale.delete(s);
  }

  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.engines.values(), ...this.retiring];
    this.engines.clear();
    this.users.clear();
    this.retiring.clear();
    await Promise.all(all.map((p) => p.then((e) => e.close()).catch(() => {})));
  }
}
