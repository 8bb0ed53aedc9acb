import { Type } from 'typebox';
import { defineProvider } from '../provider.js';
import { EngineError } from '../types.js';
import { redactingEngine, upstreamSecrets } from '../shared/redact.js';
import { apiKeyEnvProblem, apiKeyOf, baseUrlProblem, connectMs } from '../shared/upstream.js';

/** the variable the key is read from when the model file names none (Anthropic's SDKs read it too) */
export const DEFAULT_KEY_ENV = 'ANTHROPIC_API_KEY';

/** The engine's code, undici's included: loaded at start (`load`), as openai-compatible's is. */
const textCode = () => import('./index.js');

/** Anthropic's Messages API, spoken natively (docs/models.md, "anthropic"). */
export const anthropic = defineProvider({
  name: 'anthropic',
  summary: "Anthropic's Messages API (Claude)",
  serves: ['text'],
  probes: ['text'],
  options: Type.Object(
    {
      base_url: Type.Optional(Type.String({ minLength: 1, description: "the API's root, without /v1 (default https://api.anthropic.com)" })),
      api_key_env: Type.Optional(Type.String({ minLength: 1, description: 'the environment variable holding the key (default ANTHROPIC_API_KEY)' })),
      upstream_model: Type.Optional(Type.String({ minLength: 1, description: "the model's name at Anthropic, e.g. claude-sonnet-4-5 (default: name)" })),
      anthropic_version: Type.Optional(Type.String({ minLength: 1, description: 'the anthropic-version header (default 2023-06-01)' })),
      anthropic_beta: Type.Optional(Type.Array(Type.String({ minLength: 1, pattern: '^[A-Za-z0-9._-]+$' }), { description: 'anthropic-beta header values' })),
      max_tokens: Type.Optional(Type.Integer({ minimum: 1, description: 'max_tokens when a request names no cap (Anthropic requires one; default 4096)' })),
      cache_prompt: Type.Optional(Type.Boolean({ description: 'prompt caching: cache_control on the system prompt and the last turn (default false)' })),
      context_window: Type.Optional(Type.Integer({ minimum: 16, description: 'tokens' })),
      timeout_ms: Type.Optional(Type.Integer({ minimum: 100, description: 'upstream header wait and longest silence mid-stream' })),
    },
    { additionalProperties: false },
  ),
  check: (s, env) => (s.base_url !== undefined ? baseUrlProblem(s.base_url) : undefined) ?? (s.api_key_env !== undefined ? apiKeyEnvProblem(s.api_key_env, env) : undefined),
  remote: true,
  storesKey: true,
  // its text engine speaks Anthropic's Messages API: it forwards a Messages request as it is (TextEngine.messages)
  forwardsMessages: () => true,
  load: { text: textCode },
  create: {
    async text(s, ctx) {
      const { createAnthropicEngine, DEFAULT_BASE_URL } = await textCode();
      const apiKey = apiKeyOf(s, ctx, DEFAULT_KEY_ENV);
      // Anthropic answers every request without a key with a 401: said once here, not on each request
      if (apiKey === undefined) {
        throw new EngineError(
          `the anthropic model '${s.name}' has no key: set ${s.api_key_env ?? DEFAULT_KEY_ENV}${s.api_key_env ? '' : ' (or api_key_env)'}, or store its api_key through the admin API`,
          'engine_unavailable',
          503,
        );
      }
      const baseUrl = s.base_url ?? DEFAULT_BASE_URL;
      return redactingEngine(
        createAnthropicEngine({
          baseUrl,
          apiKey,
          version: s.anthropic_version,
          betas: s.anthropic_beta,
          maxTokens: s.max_tokens,
          cachePrompt: s.cache_prompt,
          contextWindow: s.context_window,
          timeoutMs: s.timeout_ms,
          connectTimeoutMs: connectMs(s),
        }),
        upstreamSecrets(baseUrl, apiKey),
      );
    },
  },
});
