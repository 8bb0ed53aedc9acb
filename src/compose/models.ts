/**
 * The models a serving instance offers, kept true while it runs: model files checked at start (a missing file
 * marks the model unavailable, said in the log and /readyz, never with its path to clients), embedded models
 * loaded in the background at start rather than by the first request, and the models pulled with
 * `portico models pull` served at once and dropped at once on every instance that shares MODELS_DIR.
 */
import { existsSync, readFileSync, statSync, watch as fsWatch, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';
import type { Logger } from '../platform/log.js';
import type { EngineRegistry } from '../engines/registry.js';
import type { ModelRegistry } from '../models/registry.js';
import { NO_TEXT_MODEL_HINT } from '../models/registry.js';
import type { ModelSpec } from '../models/spec.js';
import { loadModelConfig, ModelConfigError, type ModelEnv } from '../models/config.js';
import type { MeteredUnit } from '../platform/module.js';
import { deploymentUnits, planReload, type ReloadPlan, type ReloadResult } from '../models/reload.js';
import { LAYERS } from '../models/registry.js';
import type { Router } from '../models/router/index.js';
// not ../models/pull/index.js: that brings the puller and node-llama-cpp (~0.4 s of start-up) into every start
import { ModelCatalogue, type CatalogueWatch, type PulledModel } from '../models/pull/catalogue.js';
import { pulledModelSpecs } from '../models/pull/specs.js';
import { withProgress } from '../platform/ops/progress.js';

/** Checks a model's file (embedded engines); marks it unavailable, with the reason, when it is not there. */
function checkFile(models: ModelRegistry, spec: ModelSpec, log: Logger): boolean {
  if ((spec.provider !== 'llama' && spec.provider !== 'whisper') || !spec.path) return true;
  if (existsSync(spec.path)) {
    models.setUnavailable(spec.name, undefined);
    return true;
  }
  models.setUnavailable(spec.name, 'model file not found (see the server log)');
  log.error(
    { model: spec.name, path: spec.path },
    `model file of '${spec.name}' not found: it is listed but answers 503 until the file is there (check the path in the model file, or pull it again)`,
  );
  return false;
}

/** Loads an embedded text or embeddings model now, in the background; says where it runs, or why it could not load. */
function warm(models: ModelRegistry, engines: EngineRegistry, spec: ModelSpec, log: Logger) {
  // a model with several deployments: each embedded one is loaded under its deployment id (the router's engine)
  if (spec.deployments && spec.deployments.length > 1) {
    for (const d of spec.deployments) {
      if (d.provider !== 'llama' || (d.type !== 'text' && d.type !== 'embeddings') || (d.path && !existsSync(d.path))) continue;
      (d.type === 'text' ? engines.text(d) : engines.embeddings(d)).catch((e) =>
        log.error({ model: spec.name, deployment: d.id, err: (e as Error).message }, `deployment '${d.id}' could not be loaded; the others serve`),
      );
    }
    return;
  }
  if (spec.provider !== 'llama' || (spec.type !== 'text' && spec.type !== 'embeddings') || !checkFile(models, spec, log)) return;
  const t0 = Date.now();
  // a large model takes a while to load: the log says it goes on (requests for it wait until it has)
  const loading: Promise<{ info?(): { device?: string } | undefined }> = spec.type === 'text' ? engines.text(spec) : engines.embeddings(spec);
  withProgress(log, `loading model '${spec.name}'`, loading).then(
    (e) => {
      const info = e.info?.();
      log.info({ model: spec.name, device: info?.device, ms: Date.now() - t0 }, `model '${spec.name}' loaded on ${info?.device ?? 'CPU'}`);
    },
    (e) => log.error({ model: spec.name, err: (e as Error).message }, `model '${spec.name}' could not be loaded; requests for it get 503 until it can`),
  );
}

export interface ModelKeeping {
  /**
   * Reads the model file again, checks all of it, and applies it at once to new requests (see reloadModels);
   * `reason` goes in the log line (SIGHUP, the command, the file watch). Reloads run one at a time.
   */
  reload(reason: string): Promise<ReloadResult>;
  /**
   * Serves these stored models (the enabled models operators added through the admin API, checked) in place of the
   * ones served so far, applied as a reload of the file is (applyLayer), in the same queue.
   */
  setStored(specs: ModelSpec[]): Promise<{ added: string[]; removed: string[]; changed: string[] }>;
  close(): void;
}

export interface KeepModelsOptions {
  models: ModelRegistry;
  engines: EngineRegistry;
  /** a changed or removed deployment's health is dropped there (breakers, counts) */
  router: Router;
  log: Logger;
  modelsDir?: string;
  warmUp: boolean;
  /** the model file (PORTICO_CONFIG) a reload reads, and the environment its api_key_env names are checked in */
  file?: string;
  env: ModelEnv;
  /** the units the features meter: a reloaded file's `pricing.per_<unit>` keys are checked against them */
  units?: () => readonly MeteredUnit[];
  /** told of each change applied to a layer (the core's copy of the configured models, the health checks) */
  onApplied?: (layer: 'configured' | 'stored', specs: readonly ModelSpec[]) => void;
  /** PORTICO_CONFIG_WATCH: reload when the file changes on disk */
  watchFile?: boolean;
}

export function keepModels(opts: KeepModelsOptions): ModelKeeping {
  const { models, engines, log } = opts;
  for (const spec of models.list()) {
    if (opts.warmUp) warm(models, engines, spec, log);
    else checkFile(models, spec, log);
  }

  const toSpecs = (pulled: PulledModel[]): ModelSpec[] =>
    pulledModelSpecs(pulled).map((p) => ({ name: p.name, provider: p.provider, type: p.type === 'embedding' ? 'embeddings' : p.type, path: p.path, owned_by: 'portico' }));
  const serve = (pulled: PulledModel[], fresh: Set<string>) => {
    const specs = toSpecs(pulled);
    const hidden = models.setLayer('pulled', specs);
    for (const name of hidden) log.warn({ model: name }, `the pulled model '${name}' has the name of a configured model; the configured one is served`);
    for (const spec of specs) {
      if (!fresh.has(spec.name) || hidden.includes(spec.name)) continue;
      if (opts.warmUp) warm(models, engines, spec, log);
      else checkFile(models, spec, log);
    }
  };
  let watch: CatalogueWatch | undefined;
  if (opts.modelsDir) {
    const catalogue = new ModelCatalogue(opts.modelsDir);
    try {
      const now = catalogue.listSync();
      serve(now, new Set(now.flatMap((m) => [m.name, ...m.aliases])));
    } catch (e) {
      log.error({ err: (e as Error).message }, 'the pulled models catalogue could not be read; no pulled model is served until it can');
    }
    watch = catalogue.watch(
      ({ models: pulled, added, removed, changed }) => {
        for (const m of [...removed, ...changed]) for (const name of [m.name, ...m.aliases]) void engines.release(name);
        serve(pulled, new Set([...added, ...changed].flatMap((m) => [m.name, ...m.aliases])));
        log.info({ added: added.map((m) => m.name), removed: removed.map((m) => m.name), changed: changed.map((m) => m.name) }, 'pulled models changed');
      },
      { initial: false, onError: (e) => log.error({ err: e.message }, 'the pulled models catalogue could not be read; the last good list stays served') },
    );
  }
  if (!models.list().some((m) => m.type === 'text')) log.info(NO_TEXT_MODEL_HINT);

  let queue: Promise<unknown> = Promise.resolve();
  const reload = (reason: string): Promise<ReloadResult> => {
    const run = queue.then(() => reloadModels(opts, reason));
    queue = run.catch(() => {});
    return run;
  };
  const fileWatch = opts.watchFile && opts.file ? watchModelFile(opts.file, () => void reload('file changed').catch(() => {})) : undefined;
  if (fileWatch) log.info({ file: opts.file }, 'watching the model file: a change is reloaded (PORTICO_CONFIG_WATCH)');
  const setStored = (specs: ModelSpec[]) => {
    const run = queue.then(() => applyLayer(opts, 'stored', specs));
    queue = run.catch(() => {});
    return run.then((p) => ({ added: p.added, removed: p.removed, changed: p.changed }));
  };
  return {
    reload,
    setStored,
    close: () => {
      watch?.close();
      fileWatch?.close();
    },
  };
}

/** a change is acted on once the file has been quiet this long (an editor's save is several writes) */
const SETTLE_MS = 300;
/** how often the file is looked at besides the events (network filesystems raise none for other hosts' writes) */
const POLL_MS = 2_000;

/**
 * Calls `onChange` when the model file's content changes: fs.watch on its directory (so a file an editor replaces
 * by renaming another over it is still followed, whatever its inode), and a look every 2 s for filesystems that
 * raise no event; debounced, and only when the text differs from what was last seen (a save that changed
 * nothing, or a touch, reloads nothing).
 */
function watchModelFile(file: string, onChange: () => void): { close(): void } {
  const read = () => {
    try {
      return readFileSync(file, 'utf8');
    } catch {
      return undefined;
    }
  };
  const stamp = () => {
    try {
      const s = statSync(file);
      return `${s.ino}:${s.size}:${s.mtimeMs}`;
    } catch {
      return '';
    }
  };
  let last = read();
  let lastStamp = stamp();
  let settle: NodeJS.Timeout | undefined;
  let closed = false;
  const check = () => {
    settle = undefined;
    if (closed) return;
    lastStamp = stamp();
    const text = read();
    // a file that is away for a moment (an editor's rename dance) is looked at again at its next event or poll
    if (text === undefined || text === last) return;
    last = text;
    onChange();
  };
  const soon = () => {
    if (closed) return;
    if (settle) clearTimeout(settle);
    settle = setTimeout(check, SETTLE_MS);
  };
  const name = basename(file);
  let watcher: FSWatcher | undefined;
  try {
    watcher = fsWatch(dirname(file), { persistent: false }, (_event, f) => {
      if (!f || f.toString() === name) soon();
    });
    watcher.on('error', () => {
      watcher?.close();
      watcher = undefined; // the poll carries on
    });
  } catch {
    watcher = undefined;
  }
  const poll = setInterval(() => {
    if (!settle && stamp() !== lastStamp) soon();
  }, POLL_MS);
  poll.unref();
  return {
    close() {
      closed = true;
      clearInterval(poll);
      if (settle) clearTimeout(settle);
      watcher?.close();
    },
  };
}

/**
 * One reload of the model file: read and check all of it (the environment included), and only then apply it
 * (applyLayer). A file that cannot be read or that the check refuses changes nothing: one error line names the
 * problem and the previous configuration keeps serving.
 */
async function reloadModels(opts: KeepModelsOptions, reason: string): Promise<ReloadResult> {
  const { log } = opts;
  const fail = (error: string): ReloadResult => {
    log.error({ file: opts.file, reason }, `model file not reloaded: ${error}; the previous configuration keeps serving`);
    return { ok: false, file: opts.file, error };
  };
  if (!opts.file) return fail('PORTICO_CONFIG is not set: there is no model file to reload');
  let next: ModelSpec[];
  try {
    next = loadModelConfig(opts.file, { env: opts.env, units: opts.units?.() }).models;
  } catch (e) {
    if (e instanceof ModelConfigError) return fail(e.message);
    throw e;
  }
  const plan = await applyLayer(opts, 'configured', next);
  const result: ReloadResult = { ok: true, file: opts.file, added: plan.added, removed: plan.removed, changed: plan.changed, unchanged: plan.unchanged };
  if (plan.added.length + plan.removed.length + plan.changed.length === 0) {
    log.info({ file: opts.file, reason, unchanged: plan.unchanged }, 'model file reloaded: nothing changed');
    return result;
  }
  log.info({ file: opts.file, reason, added: plan.added, removed: plan.removed, changed: plan.changed, unchanged: plan.unchanged }, 'model file reloaded');
  return result;
}

/**
 * Applies a new list of one layer's models (the model file's, or the stored ones an operator changed through the
 * admin API), in one synchronous step once the providers' code is loaded, so that a request sees the old models
 * or the new ones, never a mix:
 * - models added, changed or removed in the layer (an unchanged model keeps its spec object);
 * - a deployment whose id or any key changed (a stored api_key included), or that went away: its engine is retired
 *   (requests in flight finish on it, then it closes) and its health starts afresh; an unchanged deployment keeps both;
 * - spec objects of the replaced models are marked stale in the engine registry: a request that took one before
 *   the change and reaches for its engine after it gets a retryable 503, never an engine of the old keys;
 * - a name the layer now takes from a later layer (a pulled or built-in model) has that model's engine replaced too.
 * Callers run one at a time (keepModels' queue).
 */
async function applyLayer(opts: KeepModelsOptions, layer: 'configured' | 'stored', next: ModelSpec[]): Promise<ReloadPlan> {
  const { models, engines, router, log } = opts;
  const plan = planReload(models.layer(layer), next);
  if (plan.added.length + plan.removed.length + plan.changed.length === 0) return plan;
  // the code of providers the new models use, loaded before they are served (as at start)
  await engines.preload(plan.specs);

  // from here to the end, nothing awaits: the switch is atomic for every request
  // a name the layer now takes may be served by a later layer's model until now: its engine is replaced too
  const later = LAYERS.slice(LAYERS.indexOf(layer) + 1);
  const shadowed = plan.added.flatMap((n) => {
    const from = models.layerOf(n);
    return from && later.includes(from) ? [models.get(n)!] : [];
  });
  const retiredNames = new Set(plan.engines);
  const forget = new Set(plan.deployments);
  const stale: object[] = [];
  for (const s of [...plan.replaced, ...shadowed]) {
    // the router's deployments of a model without a list are its own objects: they are marked too
    for (const o of [s, ...(s.deployments ?? []), ...router.route(s).targets.map((t) => t.dep)]) if (retiredNames.has(o.name)) stale.push(o);
    for (const u of deploymentUnits(s)) if (retiredNames.has(u.engine)) forget.add(u.health);
  }
  if (retiredNames.size) {
    const names = [...retiredNames];
    void engines.retire(names, stale).then(() => log.info({ engines: names }, 'engines of the replaced deployments closed: their requests in flight have finished'));
  }
  router.forget(forget);
  for (const name of [...plan.removed, ...plan.changed]) models.setUnavailable(name, undefined);
  models.setLayer(layer, plan.specs);
  // a name the layer gave up that a later layer's model serves again: that model was marked stale when the name
  // was taken from it; it serves again, on an engine made afresh (the name's engine was retired just now)
  for (const name of plan.removed) {
    const back = models.get(name);
    if (back) engines.revive([back, ...(back.deployments ?? []), ...router.route(back).targets.map((t) => t.dep)]);
  }
  opts.onApplied?.(layer, plan.specs);
  const fresh = new Set([...plan.added, ...plan.changed]);
  for (const spec of plan.specs) {
    if (!fresh.has(spec.name)) continue;
    if (opts.warmUp) warm(models, engines, spec, log);
    else checkFile(models, spec, log);
  }
  return plan;
}
