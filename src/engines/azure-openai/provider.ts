import { Type } from 'typebox';
import { defineProvider } from '../provider.js';
import { EngineError } from '../types.js';
import type { AzureOpenAIOptions } from './index.js';
import type { EntraCredentialOptions } from './entra.js';
import { redactingEngine, upstreamSecrets } from '../shared/redact.js';
import { apiKeyEnvProblem, apiKeyOf, baseUrlProblem, connectMs, ENV_NAME } from '../shared/upstream.js';

/** the variable the key is read from when the model file names none (the AzureOpenAI client reads it too) */
export const DEFAULT_KEY_ENV = 'AZURE_OPENAI_API_KEY';

/**
 * What `auth: entra` reads when the entry does not say, as the Azure SDK's EnvironmentCredential (and so
 * DefaultAzureCredential) reads them: the tenant, the app's client id and its secret; the authority host.
 */
export const ENTRA_ENV = {
  tenant: 'AZURE_TENANT_ID',
  client: 'AZURE_CLIENT_ID',
  secret: 'AZURE_CLIENT_SECRET',
  authority: 'AZURE_AUTHORITY_HOST',
} as const;

/** the public cloud's authority (as entra.ts's DEFAULT_AUTHORITY_HOST: this file does not load the engine's code) */
const PUBLIC_AUTHORITY = 'https://login.microsoftonline.com';
/** the longest a token call waits (entra.ts's TOKEN_TIMEOUT_MS); a shorter timeout_ms bounds it too */
const TOKEN_TIMEOUT_MS = 30_000;

/** a directory (tenant) id or domain, as the Azure SDK checks it: it goes in the token endpoint's path */
const TENANT = /^[0-9A-Za-z.-]+$/;
/** an app's application (client) id */
const GUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
/** the keys of `auth: entra` */
const ENTRA_KEYS = ['tenant_id', 'client_id', 'client_secret_env', 'authority_host'] as const;

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
      azure_ad_token_env: Type.Optional(
        Type.String({ minLength: 1, description: 'the environment variable holding a fixed Entra ID access token (instead of a key; not refreshed)' }),
      ),
      auth: Type.Optional(
        Type.Union([Type.Literal('api_key'), Type.Literal('entra')], {
          description: "'api_key' (default): the api-key header; 'entra': an Entra ID app's client credentials, its tokens fetched and refreshed by Portico",
        }),
      ),
      tenant_id: Type.Optional(Type.String({ minLength: 1, maxLength: 256, description: 'auth: entra: the directory (tenant) id or domain (default AZURE_TENANT_ID)' })),
      client_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: "auth: entra: the app's application (client) id (default AZURE_CLIENT_ID)" })),
      client_secret_env: Type.Optional(
        Type.String({ minLength: 1, description: "auth: entra: the environment variable holding the app's client secret (default AZURE_CLIENT_SECRET)" }),
      ),
      authority_host: Type.Optional(
        Type.String({ minLength: 1, description: 'auth: entra: the Entra ID authority (default AZURE_AUTHORITY_HOST, else https://login.microsoftonline.com)' }),
      ),
      context_window: Type.Optional(Type.Integer({ minimum: 16, description: 'text: tokens' })),
      timeout_ms: Type.Optional(Type.Integer({ minimum: 100, description: 'upstream header wait and longest silence mid-stream' })),
      max_tokens_field: Type.Optional(
        Type.Union([Type.Literal('max_tokens'), Type.Literal('max_completion_tokens')], {
          description: 'text: the field of the output cap (default: max_completion_tokens with a reasoning effort, else max_tokens)',
        }),
      ),
    },
    { additionalProperties: false },
  ),
  check: (s, env) => {
    if (s.context_window !== undefined && s.type !== 'text') return `context_window applies to text models only (this one is ${s.type})`;
    if (s.azure_ad_token_env !== undefined && s.api_key_env !== undefined) return "'api_key_env' and 'azure_ad_token_env' are exclusive: one credential per deployment";
    return (
      authProblem(s, env) ??
      endpointProblem(s.endpoint) ??
      (s.api_key_env !== undefined ? apiKeyEnvProblem(s.api_key_env, env) : undefined) ??
      (s.azure_ad_token_env !== undefined ? apiKeyEnvProblem(s.azure_ad_token_env, env)?.replaceAll('api_key_env', 'azure_ad_token_env') : undefined)
    );
  },
  remote: true,
  storesKey: true,
  // a stored key is bound to the resource it was typed for
  urlKey: 'endpoint',
  load: { text: code, embeddings: code },
  create: {
    async text(s, ctx) {
      const { createAzureOpenAIEngine } = await code();
      const o = options(s, ctx.env, apiKeyOf(s, ctx, defaultKeyEnv(s)));
      return redactingEngine(createAzureOpenAIEngine({ ...o, contextWindow: s.context_window }), secretsOf(o));
    },
    async embeddings(s, ctx) {
      const { createAzureOpenAIEmbeddingsEngine } = await code();
      const o = options(s, ctx.env, apiKeyOf(s, ctx, defaultKeyEnv(s)));
      return redactingEngine(createAzureOpenAIEmbeddingsEngine(o), secretsOf(o));
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
  auth?: 'api_key' | 'entra';
  tenant_id?: string;
  client_id?: string;
  client_secret_env?: string;
  authority_host?: string;
  timeout_ms?: number;
  max_tokens_field?: 'max_tokens' | 'max_completion_tokens';
}

/** the variable a key is read from by default: none when the entry names another credential */
const defaultKeyEnv = (s: Entry) => (s.azure_ad_token_env !== undefined || s.auth === 'entra' ? undefined : DEFAULT_KEY_ENV);

/** what the engine's errors must never show: the key or the fixed token, or the client secret */
const secretsOf = (o: AzureOpenAIOptions) => [...upstreamSecrets(o.endpoint, o.adToken ?? o.apiKey), ...(o.entra ? upstreamSecrets(o.endpoint, o.entra.clientSecret) : [])];

/**
 * Why the entry's credential keys do not fit together or cannot give an Entra credential, or undefined. `env`
 * (when serving) is checked for what `auth: entra` reads from it; its values are named only when they are not
 * secrets (a tenant or a client id, never the client secret).
 */
function authProblem(s: Entry, env: Readonly<Record<string, string | undefined>> | undefined): string | undefined {
  if (s.auth !== 'entra') {
    const stray = ENTRA_KEYS.find((k) => s[k] !== undefined);
    if (stray) return `'${stray}' is a key of auth: entra (an Entra ID app's client credentials): add auth: entra, or remove it`;
    if (s.auth === 'api_key' && s.azure_ad_token_env !== undefined) return "auth: api_key and 'azure_ad_token_env' contradict: remove one";
    return undefined;
  }
  if (s.api_key_env !== undefined) return "auth: entra and 'api_key_env' are exclusive: one credential per deployment";
  if (s.azure_ad_token_env !== undefined) return "auth: entra and 'azure_ad_token_env' are exclusive: auth: entra fetches and refreshes its own tokens";
  const tenant = s.tenant_id ?? env?.[ENTRA_ENV.tenant];
  const client = s.client_id ?? env?.[ENTRA_ENV.client];
  const from = (key: string, v: string) => (s[key as keyof Entry] !== undefined ? `'${key}'` : `${v} (read for auth: entra without '${key}')`);
  if (tenant !== undefined && !TENANT.test(tenant)) {
    return `${from('tenant_id', ENTRA_ENV.tenant)} must be the directory's id (a GUID) or its domain (contoso.onmicrosoft.com): letters, digits, '.' and '-'`;
  }
  if (client !== undefined && !GUID.test(client)) {
    return `${from('client_id', ENTRA_ENV.client)} must be the app's application (client) id, a GUID such as 00000000-1111-2222-3333-444444444444`;
  }
  if (s.client_secret_env !== undefined && !ENV_NAME.test(s.client_secret_env)) {
    return apiKeyEnvProblem(s.client_secret_env, undefined)?.replaceAll('api_key_env', 'client_secret_env').replace('not the key itself', 'not the secret itself');
  }
  const authority = s.authority_host ?? (env?.[ENTRA_ENV.authority] || undefined);
  const authorityProblem = authority !== undefined ? baseUrlProblem(authority) : undefined;
  if (authorityProblem) {
    const name = s.authority_host !== undefined ? "'authority_host'" : ENTRA_ENV.authority;
    return authorityProblem.replaceAll("'base_url'", name).replace('://host[:port]/v1', '://login.microsoftonline.com');
  }
  if (env === undefined) return undefined;
  if (!tenant) return `auth: entra needs the tenant: set 'tenant_id', or ${ENTRA_ENV.tenant} in Portico's environment`;
  if (!client) return `auth: entra needs the app's client id: set 'client_id', or ${ENTRA_ENV.client} in Portico's environment`;
  const secretEnv = s.client_secret_env ?? ENTRA_ENV.secret;
  if (env[secretEnv] === undefined) {
    return s.client_secret_env !== undefined
      ? `'client_secret_env' names ${secretEnv}, which is not set in Portico's environment: set it to the app's client secret`
      : `auth: entra needs the app's client secret: set ${ENTRA_ENV.secret} in Portico's environment, or name another variable with 'client_secret_env'`;
  }
  if (env[secretEnv]!.trim() === '')
    return `${s.client_secret_env !== undefined ? `'client_secret_env' names ${secretEnv}, which` : `${secretEnv}`} is set but empty: give it the app's client secret`;
  return undefined;
}

/**
 * The Entra credential of an `auth: entra` entry, read from the entry and the environment; what authProblem
 * finds missing or wrong (an entry not checked against this environment) is a 503 naming it, never the secret.
 */
function entraOf(s: Entry, env: Readonly<Record<string, string | undefined>>): EntraCredentialOptions {
  const problem = authProblem(s, env);
  if (problem) throw new EngineError(`the azure-openai model '${s.name}' has no Entra ID credential: ${problem}`, 'engine_unavailable', 503);
  const authority = s.authority_host ?? (env[ENTRA_ENV.authority] || undefined) ?? PUBLIC_AUTHORITY;
  return {
    authorityHost: authority.replace(/\/+$/, ''),
    tenantId: (s.tenant_id ?? env[ENTRA_ENV.tenant])!,
    clientId: (s.client_id ?? env[ENTRA_ENV.client])!,
    clientSecret: env[s.client_secret_env ?? ENTRA_ENV.secret]!,
    timeoutMs: Math.min(s.timeout_ms ?? TOKEN_TIMEOUT_MS, TOKEN_TIMEOUT_MS),
    connectTimeoutMs: connectMs(s),
  };
}

/**
 * The engine options of an entry. With `auth: entra` the engine fetches and refreshes its tokens (entra.ts); a
 * token of `azure_ad_token_env` is read from Portico's environment, fixed at start, and not refreshed (they last
 * about an hour; docs/models.md says what that means for an operator).
 */
function options(s: Entry, env: Readonly<Record<string, string | undefined>>, apiKey: string | undefined): AzureOpenAIOptions {
  const common = {
    endpoint: s.endpoint,
    deployment: s.deployment ?? s.upstream_model ?? s.name,
    surface: s.surface,
    apiVersion: s.api_version,
    timeoutMs: s.timeout_ms,
    connectTimeoutMs: connectMs(s),
    outputCap: s.max_tokens_field,
  };
  // a stored key (admin API) wins over the Entra credential, as over the token variable: the operator typed it for this entry
  if (s.auth === 'entra') return apiKey !== undefined ? { ...common, apiKey } : { ...common, entra: entraOf(s, env) };
  const adToken = s.azure_ad_token_env ? env[s.azure_ad_token_env] || undefined : undefined;
  // Azure answers every request without a credential with a 401: said once here, not on each request
  if (adToken === undefined && apiKey === undefined) {
    const how = s.azure_ad_token_env
      ? `set ${s.azure_ad_token_env}`
      : `set ${s.api_key_env ?? DEFAULT_KEY_ENV}${s.api_key_env ? '' : ' (or api_key_env, or auth: entra)'}, or store its api_key through the admin API`;
    throw new EngineError(`the azure-openai model '${s.name}' has no credential: ${how}`, 'engine_unavailable', 503);
  }
  return {
    ...common,
    // a stored key (admin API) wins over the token variable: the operator typed it for this entry
    ...(adToken !== undefined && apiKey === undefined ? { adToken } : { apiKey }),
  };
}
