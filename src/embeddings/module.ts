import type { FeatureModule } from '../platform/module.js';
import { EMBEDDINGS_OPERATION, EmbeddingsService, type EmbeddingsDeps } from './service.js';
import create from './routes/create.js';

/** The Embeddings API under {base_url}: POST /embeddings (scope `embeddings`, input tokens charged). */
export function createEmbeddingsModule(deps: EmbeddingsDeps): FeatureModule {
  const service = new EmbeddingsService(deps);
  return { name: 'embeddings', scope: 'embeddings', operations: [EMBEDDINGS_OPERATION], routes: { api: (app) => create(app, service) } };
}
