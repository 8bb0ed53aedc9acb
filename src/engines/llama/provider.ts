import { Type } from 'typebox';
import { defineProvider } from '../provider.js';
import { EngineError } from '../types.js';

/** GGUF models run inside Portico by llama.cpp (node-llama-cpp): text generation, and embedding models. */
export const llama = defineProvider({
  name: 'llama',
  summary: 'GGUF models run inside Portico by llama.cpp (node-llama-cpp)',
  serves: ['text', 'embeddings'],
  options: Type.Object(
    {
      path: Type.String({ minLength: 1, description: 'the .gguf file' }),
      context_window: Type.Optional(Type.Integer({ minimum: 16, description: 'tokens per sequence (embeddings: of the longest input)' })),
      parallel: Type.Optional(Type.Integer({ minimum: 1, maximum: 64, description: 'text: sequences generating at once' })),
      matryoshka: Type.Optional(Type.Boolean({ description: 'embeddings: the model was trained so that a prefix of its vector is a vector (`dimensions` may ask for fewer)' })),
    },
    { additionalProperties: false },
  ),
  check: (s) => {
    if (s.parallel !== undefined && s.type !== 'text') return `parallel applies to text models only (this one is ${s.type})`;
    if (s.matryoshka !== undefined && s.type !== 'embeddings') return `matryoshka applies to embeddings models only (this one is ${s.type})`;
    return undefined;
  },
  // the file and what it is loaded with: names for the same file with the same options load it once (issue 24 §4:
  // `models pull ... --name qwen` made a second engine of the same 170 MB file, RSS 562 -> 860 MiB)
  engineKey: (s, capability) => JSON.stringify([capability, s.path, s.context_window ?? null, capability === 'text' ? (s.parallel ?? null) : (s.matryoshka ?? null)]),
  create: {
    async text(s, ctx) {
      const { createLlamaEngine } = await import('./index.js');
      try {
        // only the options the model file sets: an undefined one must not override the engine's default
        return await createLlamaEngine({
          path: s.path,
          gpu: ctx.llamaGpu === 'cpu' ? false : 'auto',
          ...(s.context_window !== undefined ? { contextSize: s.context_window } : {}),
          ...(s.parallel !== undefined ? { parallel: s.parallel } : {}),
        });
      } catch (e) {
        // the server's paths are for its log, not for clients
        ctx.log.warn({ model: s.name, path: s.path, err: (e as Error).message }, 'llama model could not be loaded');
        throw new EngineError(`the model '${s.name}' could not be loaded; the server log says why`, 'engine_unavailable', 503);
      }
    },
    async embeddings(s, ctx) {
      const { createLlamaEmbeddingsEngine } = await import('./embeddings.js');
      try {
        return await createLlamaEmbeddingsEngine({
          path: s.path,
          gpu: ctx.llamaGpu === 'cpu' ? false : 'auto',
          ...(s.context_window !== undefined ? { contextSize: s.context_window } : {}),
          ...(s.matryoshka !== undefined ? { matryoshka: s.matryoshka } : {}),
        });
      } catch (e) {
        ctx.log.warn({ model: s.name, path: s.path, err: (e as Error).message }, 'llama embedding model could not be loaded');
        throw new EngineError(`the model '${s.name}' could not be loaded; the server log says why`, 'engine_unavailable', 503);
      }
    },
  },
});
