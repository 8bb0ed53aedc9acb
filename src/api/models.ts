import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import type { ModelRegistry } from '../models/registry.js';
import type { ModelSpec } from '../models/spec.js';
import { modelAllowed } from './scopes.js';
import { AppError } from '../platform/errors.js';
import type { FeatureModule } from '../platform/module.js';

const ModelSchema = Type.Object({
  id: Type.String(),
  object: Type.Literal('model'),
  created: Type.Integer(),
  owned_by: Type.String(),
  type: Type.String({ description: 'Portico: text, speech, transcription or embeddings' }),
  engine: Type.String({ description: 'Portico: what serves it (llama, openai-compatible, flite/espeak-ng, pocketsphinx, whisper, ...)' }),
  parts: Type.Optional(Type.Record(Type.String(), Type.String(), { description: 'Portico: a model made of others (a realtime pipeline): the model of each part, by its role' })),
});

/** The models a model is made of, by role (a realtime pipeline's transcription, text and speech models), if it is. */
export type PartsOf = (spec: ModelSpec) => Record<string, string> | undefined;

/** Says which engine serves a model (the built-in audio models depend on what is installed and configured). */
export type EngineOf = (spec: ModelSpec) => string;

/**
 * GET /v1/models in the OpenAI list shape: the models this key may use. Every valid key may call it (clients
 * call it to check a key), whatever its endpoint scopes; `model:NAME` scopes filter what it lists.
 */
export function registerModelRoutes(app: FastifyInstance, registry: ModelRegistry, engineOf: EngineOf = (m) => m.provider, partsOf?: PartsOf) {
  const view = (m: ModelSpec) => {
    const parts = partsOf?.(m);
    return { id: m.name, object: 'model' as const, created: registry.createdAt, owned_by: m.owned_by ?? 'portico', type: m.type, engine: engineOf(m), ...(parts ? { parts } : {}) };
  };
  app.get(
    '/models',
    {
      config: {},
      schema: {
        tags: ['Models'],
        summary: 'List the models this key may use',
        response: { 200: Type.Object({ object: Type.Literal('list'), data: Type.Array(ModelSchema) }) },
      },
    },
    async (req) => ({
      object: 'list' as const,
      data: registry
        .list()
        .filter((m) => modelAllowed(req.apiKey!, m.name))
        .map(view),
    }),
  );
  app.get(
    '/models/:model',
    {
      config: {},
      schema: {
        tags: ['Models'],
        summary: 'One model',
        params: Type.Object({ model: Type.String({ maxLength: 200 }) }, { additionalProperties: false }),
        response: { 200: ModelSchema },
      },
    },
    async (req) => {
      const name = (req.params as { model: string }).model;
      const m = registry.get(name);
      if (!m || !modelAllowed(req.apiKey!, name)) throw new AppError('model_not_found', `The model '${name}' does not exist`, 'model');
      return view(m);
    },
  );
}

/** GET /v1/models and /v1/models/{model}. */
export function createModelsModule(deps: { models: ModelRegistry; engineOf?: EngineOf; partsOf?: PartsOf }): FeatureModule {
  return { name: 'models', routes: { api: (app) => registerModelRoutes(app, deps.models, deps.engineOf, deps.partsOf) } };
}
