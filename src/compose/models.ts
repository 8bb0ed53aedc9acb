/**
 * The models a serving instance offers, kept true while it runs: model files checked at start (a missing file
 * marks the model unavailable, said in the log and /readyz, never with its path to clients), embedded models
 * loaded in the background at start rather than by the first request, and the models pulled with
 * `portico models pull` served at once and dropped at once on every instance that shares MODELS_DIR.
 */
import { existsSync } from 'node:fs';
import type { Logger } from '../platform/log.js';
import type { EngineRegistry } from '../engines/registry.js';
import type { ModelRegistry } from '../models/registry.js';
import { NO_TEXT_MODEL_HINT } from '../models/registry.js';
import type { ModelSpec } from '../models/spec.js';
// not ../models/pull/index.js: that brings the puller and node-llama-cpp (~0.4 s of start-up) into every start
import { ModelCatalogue, type CatalogueWatch, type PulledModel } from '../models/pull/catalogue.js';
import { pulledModelSpecs } from '../models/pull/specs.js';

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
  (spec.type === 'text' ? engines.text(spec) : engines.embeddings(spec)).then(
    (e) => {
      const info = e.info?.();
      log.info({ model: spec.name, device: info?.device, ms: Date.now() - t0 }, `model '${spec.name}' loaded on ${info?.device ?? 'CPU'}`);
    },
    (e) => log.error({ model: spec.name, err: (e as Error).message }, `model '${spec.name}' could not be loaded; requests for it get 503 until it can`),
  );
}

export interface ModelKeeping {
  close(): void;
}

export function keepModels(opts: { models: ModelRegistry; engines: EngineRegistry; log: Logger; modelsDir?: string; warmUp: boolean }): ModelKeeping {
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
  return { close: () => watch?.close() };
}
