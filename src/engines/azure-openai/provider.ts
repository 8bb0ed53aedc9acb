import { Type } from 'typebox';
import { defineProvider } from '../provider.js';
import { EngineError } from '../types.js';
import type { AzureOpenAIOptions } from './index.js';
import { redactingEngine, upstreamSecrets } from '../shared/redact.js';
import { apiKeyEnvProblem, apiKeyOf, baseUrlProblem, connectMs } from '../shared/upstream.js';

/** the variable the key is read from when the model file names none (the AzureOpenAI client reads it too) */
export const DEFAULT_KEY_ENV = 'AZURE_OPENAI_API_KEY';

/** The engines' code, undici's included: loaded at start (`load`), as openai-compatible's is. */
const code = () => import('./index.js');

/** Why `endpoint` cannot address a resource, or undefined (the shared base_url rules, named for this key). */
function endpointProblem(endpoint: string): string | undefined {
  const p = baseUrlProblem(endpoint);
  if (p) return p.replaceAll("'base_url'", "'endpoint'").replace('://host[:port]/v1', '://<resource>.openai.azure.com');
  // Portico appends /openai/...: an endpoint copied with it would double it
  if (/\/openai(\/|$)/i.test(new URL(endpoint).pathname)) return "'endpoint' is the resource's root (https://<resource>.openai.azure.com), without /openai/...";
  return undefined;
}

/** Azure OpenAI: OpenAI's wire with Azure's addressing and auth (docs/models.md, "azure-openai"). */
export const azureOpenAI = defineProvider({
  name: 'azure-openai',
  summary: 'Azure OpenAI (a deployment of an Azure OpenAI or AI Foundry resource)',
  serves: ['text', 'embeddings'],
  probes: ['text', 'embeddings'],
  options: Type.Object(
    {
      endpoint: Type.String({ minLength: 1, description: "the resource's root, e.g. https://my-resource.openai.azure.com" }),
      deployment: Type.Optional(
        Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9._-]+$', description: "the deployment's name (default: upstream_model, else name)" }),
      ),
      upstream_model: Type.Optional(Type.String({ minLength: 1, description: 'the default deployment name (default: name)' })),
      surface: Type.Optional(
        Type.Union([Type.Literal('deployments'), Type.Literal('v1')], { description: "'deployments' (default): /openai/deployments/{deployment}/...; 'v1': /openai/v1/..." }),
      ),
      api_version: Type.Optional(Type.String({ minLength: 1, pattern: '^[A-Za-z0-9.-]+$', description: 'the api-version query (default 2024-10-21 on deployments; none on v1)' })),
      api_key_env: Type.Optional(Type.String({ minLength: 1, description: 'the environment variable holding the key (default AZURE_OPENAI_API_KEY)' })),
      azure_ad_token_env: Type.Optional(Type.String({ minLength: 1, description: 'the environment variable holding an Entra ID access token (instead of a key)' })),
      context_window: Type.Optional(Type.Integer({ minimum: 16, description: 'text: tokens' })),
      timeout_ms: Type.Optional(Type.Integer({ minimum: 100, description: 'upstream header wait and longest silence mid-stream' })),
    },
    { additionalProperties: false },
  ),
  check: (s, env) => {
    if (s.context_window !== undefined && s.type !== 'text') return `context_window applies to text models only (this one is ${s.type})`;
    if (s.azure_ad_token_env !== undefined && s.api_key_env !== undefined) return "'api_key_env' and 'azure_ad_token_env' are exclusive: one credential per deployment";
    return (
      endpointProblem(s.endpoint) ??
      (s.api_key_env !== undefined ? apiKeyEnvProblem(s.api_key_env, env) : undefined) ??
      (s.azure_ad_token_env !== undefined ? apiKeyEnvProblem(s.azure_ad_token_env, env)?.replaceAll('api_key_env', 'azure_ad_token_env') : undefined)
    );
  },
  remote: true,
  storesKey: true,
  load: { text: code, embeddings: code },
  create: {
    async text(s, ctx) {
      const { createAzureOpenAIEngine } = await code();
      const o = options(s, ctx.env, apiKeyOf(s, ctx, s.azure_ad_token_env ? undefined : DEFAULT_KEY_ENV));
      return redactingEngine(createAzureOpenAIEngine({ ...o, contextWindow: s.context_window }), upstreamSecrets(s.endpoint, o.adToken ?? o.apiKey));
    },
    async embeddings(s, ctx) {
      const { createAzureOpenAIEmbeddingsEngine } = await code();
      const o = options(s, ctx.env, apiKeyOf(s, ctx, s.azure_ad_token_env ? undefined : DEFAULT_KEY_ENV));
      return redactingEngine(createAzureOpenAIEmbeddingsEngine(o), upstreamSecrets(s.endpoint, o.adToken ?? o.apiKey));
    },
  },
});

interface Entry {
  name: string;
  endpoint: string;
  deployment?: string;
  upstream_model?: string;
  surface?: 'deployments' | 'v1';
  api_version?: string;
  api_key_env?: string;
  azure_ad_token_env?: string;
  timeout_ms?: number;
}

/**
 * The engine options of an entry. The Entra token is read from Portico's environment, fixed at start: Portico does
 * not refresh it (they last about an hour; docs/models.md says what that means for an operator).
 */
function options(s: Entry, env: Readonly<Record<string, string | undefined>>, apiKey: string | undefined): AzureOpenAIOptions {
  const adToken = s.azure_ad_token_env ? env[s.azure_ad_token_env] || undefined : undefined;
  // Azure answers every request without a credential with a 401: said once here, not on each request
  if (adToken === undefined && apiKey === undefined) {
    const how = s.azure_ad_token_env
      ? `set ${s.azure_ad_token_env}`
      : `set ${s.api_key_env ?? DEFAULT_KEY_ENV}${s.api_key_env ? '' : ' (or api_key_env, or azure_ad_token_env)'}, or store its api_key through the admin API`;
    throw new EngineError(`the azure-openai model '${s.name}' has no credential: ${how}`, 'engine_unavailable', 503);
  }
  return {
    endpoint: s.endpoint,
    deployment: s.deployment ?? s.upstream_model ?? s.name,
    surface: s.surface,
    apiVersion: s.api_version,
    // a stored key (admin API) wins over the token variable: the operator typed it for this entry
    ...(adToken !== undefined && apiKey === undefined ? { adToken } : { apiKey }),
    timeoutMs: s.timeout_ms,
    connectTimeoutMs: connectMs(s),
  };
}
