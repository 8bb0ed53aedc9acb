import { AppError, type Texts } from '../platform/errors.js';
import type { Capability } from '../engines/provider.js';
import type { ModelSpec } from './spec.js';

/** Where a model comes from; the first layer that has a name wins. */
export type ModelLayer = 'configured' | 'stored' | 'pulled' | 'builtin';
export const LAYERS: readonly ModelLayer[] = ['configured', 'stored', 'pulled', 'builtin'];
const ORDER = LAYERS;

/** What the hint of a `model_not_found` says when no text model exists at all. */
export const NO_TEXT_MODEL_HINT =
  'No text model is configured: get one with `portico models pull hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF` (served at once) or add one to the PORTICO_CONFIG model file (docs/models.md).';

/**
 * The models this Portico offers, by the names clients send, from four layers: the model file
 * (`configured`), the models operators added through the admin API (`stored`, in the database, the same on every
 * instance: models/stored.ts), the models pulled with `portico models pull` (`pulled`, replaced whenever the catalogue
 * changes, on every instance that shares MODELS_DIR) and the built-in audio models (`builtin`). A configured
 * model hides a pulled or built-in one of the same name.
 */
export class ModelRegistry {
  private readonly layers = new Map<ModelLayer, ModelSpec[]>();
  private byName = new Map<string, ModelSpec>();
  /**
   * models that cannot be served now (by name): listed, but answered 503 (a file that could not be found or read,
   * a stored secret that does not decrypt); `client`: what the 503 says (default: the model file is missing)
   */
  private readonly unavailable = new Map<string, { reason: string; client?: Texts }>();
  readonly createdAt = Math.floor(Date.now() / 1000);

  /** `specs` were checked by checkModelEntry (the model file) or built by code that knows them valid */
  constructor(specs: readonly ModelSpec[]) {
    this.layers.set('configured', [...specs]);
    this.rebuild();
  }

  /** Adds models whose names the configuration does not use (the built-in audio models). */
  addDefaults(specs: readonly ModelSpec[]): this {
    this.setLayer('builtin', [...(this.layers.get('builtin') ?? []), ...specs]);
    return this;
  }

  /** Replaces one layer (the pulled models, when the catalogue changes). Gives the names hidden by an earlier layer. */
  setLayer(layer: ModelLayer, specs: readonly ModelSpec[]): string[] {
    this.layers.set(layer, [...specs]);
    const hidden: string[] = [];
    const earlier = new Set(ORDER.slice(0, ORDER.indexOf(layer)).flatMap((l) => (this.layers.get(l) ?? []).map((s) => s.name)));
    for (const s of specs) if (earlier.has(s.name)) hidden.push(s.name);
    this.rebuild();
    return hidden;
  }

  /** The models of one layer as it was last set (the configured ones: what a reload compares the file with). */
  layer(layer: ModelLayer): readonly ModelSpec[] {
    return this.layers.get(layer) ?? [];
  }

  /** The layer a served model comes from (undefined: no such model). */
  layerOf(name: string): ModelLayer | undefined {
    const served = this.byName.get(name);
    return served ? ORDER.find((l) => this.layers.get(l)?.includes(served)) : undefined;
  }

  private rebuild() {
    const next = new Map<string, ModelSpec>();
    for (const layer of ORDER) for (const s of this.layers.get(layer) ?? []) if (!next.has(s.name)) next.set(s.name, s);
    this.byName = next;
  }

  /**
   * Marks a model as not servable now (its file is missing); `undefined` clears it. `client`: what a client's 503
   * says instead of the missing file's message (it must carry no server path nor secret).
   */
  setUnavailable(name: string, reason: string | undefined, client?: Texts) {
    if (reason === undefined) this.unavailable.delete(name);
    else this.unavailable.set(name, { reason, client });
  }

  /** Why a model cannot be served now, or undefined (for the operators' list; never a path sent to clients). */
  unavailableReason(name: string): string | undefined {
    return this.unavailable.get(name)?.reason;
  }

  /** Models that cannot be served now, with the reason (for /readyz and the start log; never sent to clients). */
  unavailableModels(): Array<{ name: string; reason: string }> {
    return [...this.unavailable].filter(([n]) => this.byName.has(n)).map(([name, u]) => ({ name, reason: u.reason }));
  }

  list(): ModelSpec[] {
    return [...this.byName.values()];
  }

  get(name: string): ModelSpec | undefined {
    return this.byName.get(name);
  }

  /** The model of that name and type, or 404 model_not_found naming the ones that exist (503 when its file is missing). */
  require(name: string, type: Capability): ModelSpec {
    const m = this.byName.get(name);
    if (m && m.type === type) {
      const u = this.unavailable.get(name);
      if (u)
        throw new AppError(
          'engine_unavailable',
          u.client ?? `The model '${name}' is configured but its model file is not available on this server; the server log says why.`,
          'model',
        );
      return m;
    }
    const known = this.list()
      .filter((x) => x.type === type)
      .map((x) => x.name);
    const hint = known.length === 0 && type === 'text' ? ` ${NO_TEXT_MODEL_HINT}` : '';
    throw new AppError(
      'model_not_found',
      `The model '${name}' does not exist or is not a ${type} model. Available: ${known.length ? known.join(', ') : '(none configured)'}.${hint}`,
      'model',
    );
  }
}

/** The models a request for `spec` may be served by: itself, then its fallbacks and context-window fallbacks. */
export function servingModels(spec: ModelSpec, models: Pick<ModelRegistry, 'get'>): ModelSpec[] {
  const names = [...(spec.fallbacks ?? []), ...(spec.context_window_fallbacks ?? [])];
  return [
    spec,
    ...names.flatMap((n) => {
      const m = models.get(n);
      return m ? [m] : [];
    }),
  ];
}
