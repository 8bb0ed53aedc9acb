import { Type } from 'typebox';
import { defineProvider } from '../provider.js';
import { EngineError } from '../types.js';
import { redactingEngine, upstreamSecrets } from '../shared/redact.js';
import { apiKeyEnvProblem, apiKeyOf, baseUrlProblem, connectMs } from '../shared/upstream.js';

/** the variable the key is read from when the model file names none (Google's SDKs read it too) */
export const DEFAULT_KEY_ENV = 'GEMINI_API_KEY';

/** The engines' code, undici's included: loaded at start (`load`), as openai-compatible's is. */
const textCode = () => import('./index.js');
const embeddingsCode = () => import('./embeddings.js');

type Spec = { name: string; base_url?: string; api_key_env?: string; api_version?: string; timeout_ms?: number };

function keyOf(s: Spec, ctx: Parameters<typeof apiKeyOf>[1]): string {
  const apiKey = apiKeyOf(s, ctx, DEFAULT_KEY_ENV);
  // Gemini refuses every request without a key: said once here, not on each request
  if (apiKey === undefined) {
    throw new EngineError(
      `the gemini model '${s.name}' has no key: set ${s.api_key_env ?? DEFAULT_KEY_ENV}${s.api_key_env ? '' : ' (or api_key_env)'}, or store its api_key through the admin API`,
      'engine_unavailable',
      503,
    );
  }
  return apiKey;
}

/** Gemini's own API (generateContent, batchEmbedContents), spoken natively (docs/models.md, "gemini"). */
export const gemini = defineProvider({
  name: 'gemini',
  summary: "Google's Gemini API (generateContent, embeddings)",
  serves: ['text', 'embeddings'],
  probes: ['text', 'embeddings'],
  options: Type.Object(
    {
      base_url: Type.Optional(Type.String({ minLength: 1, description: "the API's root, without /v1beta (default https://generativelanguage.googleapis.com)" })),
      api_key_env: Type.Optional(Type.String({ minLength: 1, description: 'the environment variable holding the key (default GEMINI_API_KEY)' })),
      upstream_model: Type.Optional(Type.String({ minLength: 1, description: "the model's name at Google, e.g. gemini-2.5-flash (default: name)" })),
      api_version: Type.Optional(Type.String({ pattern: '^v[0-9a-z]+$', description: 'the API version in the path (default v1beta)' })),
      context_window: Type.Optional(Type.Integer({ minimum: 16, description: 'tokens' })),
      timeout_ms: Type.Optional(Type.Integer({ minimum: 100, description: 'upstream header wait and longest silence mid-stream' })),
    },
    { additionalProperties: false },
  ),
  check: (s, env) => (s.base_url !== undefined ? baseUrlProblem(s.base_url) : undefined) ?? (s.api_key_env !== undefined ? apiKeyEnvProblem(s.api_key_env, env) : undefined),
  remote: true,
  storesKey: true,
  load: { text: textCode, embeddings: embeddingsCode },
  create: {
    async text(s, ctx) {
      const { createGeminiEngine, DEFAULT_BASE_URL } = await textCode();
      const apiKey = keyOf(s, ctx);
      const baseUrl = s.base_url ?? DEFAULT_BASE_URL;
      return redactingEngine(
        createGeminiEngine({ baseUrl, apiKey, apiVersion: s.api_version, contextWindow: s.context_window, timeoutMs: s.timeout_ms, connectTimeoutMs: connectMs(s) }),
        upstreamSecrets(baseUrl, apiKey),
      );
    },
    async embeddings(s, ctx) {
      const { createGeminiEmbeddingsEngine } = await embeddingsCode();
      const { DEFAULT_BASE_URL } = await textCode();
      const apiKey = keyOf(s, ctx);
      const baseUrl = s.base_url ?? DEFAULT_BASE_URL;
      return redactingEngine(
        createGeminiEmbeddingsEngine({ baseUrl, apiKey, apiVersion: s.api_version, timeoutMs: s.timeout_ms, connectTimeoutMs: connectMs(s) }),
        upstreamSecrets(baseUrl, apiKey),
      );
    },
  },
});
