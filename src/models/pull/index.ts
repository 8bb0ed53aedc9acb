/**
 * Pulled models: download (`pullModel`), the catalogue of what was pulled (`ModelCatalogue`: list, remove,
 * watch), the settings they read, and the `portico models` command. See docs/models.md, "Pulling models".
 */
export { ModelCatalogue, CATALOGUE_FILE, type PulledModel, type StoredModel, type CatalogueChange, type CatalogueWatch, type ModelSource } from './catalogue.js';
export { pullModel, pickGguf, type PullOptions, type PullEvent, type PullResult } from './pull.js';
export { PullError, type PullErrorCode } from './errors.js';
export { pullSettings, type PullSettings, DEFAULT_HUB } from './settings.js';
export { parseModelRef, type ModelRef } from './refs.js';
export { defaultModelName, checkModelName } from './names.js';
export { modelsCommand, type ModelsCommand, type ModelsCommandIo } from './cli.js';
export type { ModelKind, ModelFormat } from './verify.js';
export { pulledModelSpecs, type PulledModelSpec } from './specs.js';
