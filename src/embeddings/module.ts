import type { FeatureModule } from '../platform/module.js';
import { EmbeddingsService, type EmbeddingsDeps } from './service.js';
import create from './routes/create.js';

/** The Embeddings API under {base_url}: POST /embeddings. */
export function createEmbeddingsModule(deps: EmbeddingsDeps): FeatureModule {
  const service = new EmbeddingsService(deps);
  return { name: 'embeddings', routes: { api: (app) => create(app, service) } };
}
