/**
 * The `azure-openai` engines: Azure OpenAI speaks OpenAI's wire (the Chat Completions and embeddings code of
 * engines/shared) with its own addressing, auth and content filter:
 * - addressing: `{endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...` (surface
 *   `deployments`, the default), or the v1 surface `{endpoint}/openai/v1/chat/completions` with the deployment as
 *   the body's `model` and `api-version` only when the model file names one. These are the URLs the `openai` npm
 *   package's AzureOpenAI client builds (node_modules/openai/azure.js), the ground truth of the mock's wire.
 * - auth: the key in the `api-key` header, never in Authorization; or an Entra ID token as `Authorization: Bearer`:
 *   a fixed one, or one of an app's client credentials (entra.ts: fetched on first use, cached, refreshed before it
 *   expires, fetched again once when Azure refuses it with a 401, the request then sent again).
 * - content filter: a finish_reason `content_filter` is kept (a refusal: Chat Completions' finish_reason
 *   content_filter, Responses' incomplete/content_filter); a prompt the filter refuses (400, code
 *   `content_filter`) is a 400 `content_filter` naming the categories that tripped it.
 * The transport (keep-alive pool, timeouts, cancel) is the one every upstream provider shares (shared/http.ts).
 */
import { EngineError, type EmbeddingsEngine, type GenerateEvent, type GenerateRequest, type TextEngine } from '../types.js';
import { jsonBody, parseErrorBody, Upstream, type Call, type LargeJson, type UpstreamOptions } from '../shared/http.js';
import { run, whole } from '../shared/answer.js';
import { buildChatBody, ChatDecoder } from '../shared/chat.js';
import { openaiEmbeddingsEngine } from '../shared/embeddings.js';
import { estimateTokensInTurns } from '../shared/tokens.js';
import { acquireCredential, type EntraCredentialOptions } from './entra.js';

/** the latest GA data-plane API version (Azure OpenAI's API version lifecycle page) */
export const DEFAULT_API_VERSION = '2024-10-21';

export interface AzureOpenAIOptions {
  /** the resource's root, e.g. https://my-resource.openai.azure.com (no /openai) */
  endpoint: string;
  /** the deployment's name at the resource */
  deployment: string;
  /** 'deployments' (default): /openai/deployments/{deployment}/...; 'v1': /openai/v1/... */
  surface?: 'deployments' | 'v1';
  /** the api-version query (deployments: default DEFAULT_API_VERSION; v1: sent only when given) */
  apiVersion?: string;
  /** the resource's key, sent as `api-key` */
  apiKey?: string;
  /** an Entra ID access token, sent as `Authorization: Bearer` (instead of apiKey) */
  adToken?: string;
  /** an Entra ID app's client credentials: its tokens are sent as `Authorization: Bearer` (instead of apiKey) */
  entra?: EntraCredentialOptions;
  contextWindow?: number;
  /** the output cap's field (default: max_completion_tokens with a reasoning effort, else max_tokens); an o-series
   * deployment asked without an effort needs max_completion_tokens */
  outputCap?: 'max_tokens' | 'max_completion_tokens';
  timeoutMs?: number;
  connectTimeoutMs?: number;
}

/** The categories a content-filter result marks as filtered (Azure's content_filter_result / content_filter_results). */
export function filteredCategories(result: unknown): string[] {
  if (!result || typeof result !== 'object') return [];
  const out: string[] = [];
  for (const [k, v] of Object.entries(result as Record<string, unknown>)) if ((v as { filtered?: unknown })?.filtered === true) out.push(k);
  return out;
}

/** Where the bearer of each call comes from (an Entra credential's token cache, entra.ts). */
export interface BearerSource {
  /** the token to send now (fetched when none is held or it is due; `signal`: the request's abort) */
  token(signal: AbortSignal | undefined): Promise<string>;
  /** Azure refused this token (401): the next token() fetches a new one */
  refused(token: string): void;
  /** the text without the credential's secret and tokens */
  redact(text: string): string;
}

/**
 * Azure's transport: every path gets the api-version query, and Azure's refusals on top of the shared mapping: a
 * prompt the content filter refused (400 `content_filter`, innererror.content_filter_result) is a 400
 * `content_filter` naming the categories; Azure's "context_length_exceeded" keeps that code (the shared mapping
 * does, as it is OpenAI's). 401/403 stay an operator's problem (502), 429 keeps its retry-after.
 */
export class AzureUpstream extends Upstream {
  constructor(
    opts: UpstreamOptions,
    private readonly query: string,
    private readonly bearer?: BearerSource,
  ) {
    super(opts);
  }

  override post(path: string, body: string | LargeJson, signal: AbortSignal | undefined): Promise<Call> {
    if (this.bearer === undefined) return super.post(path + this.query, body, signal);
    return this.withBearer(this.bearer, (h) => super.post(path + this.query, body, signal, h), signal);
  }

  override get(path: string, signal: AbortSignal | undefined): Promise<Call> {
    if (this.bearer === undefined) return super.get(path + this.query, signal);
    return this.withBearer(this.bearer, (h) => super.get(path + this.query, signal, h), signal);
  }

  /**
   * A call with the credential's token; a 401 (the token expired early, or was revoked) drops that token and the
   * call is made once more with a fresh one (a 401 comes before any answer, so nothing was read yet).
   */
  private async withBearer(bearer: BearerSource, send: (headers: Record<string, string>) => Promise<Call>, signal: AbortSignal | undefined): Promise<Call> {
    const token = await bearer.token(signal);
    try {
      return await send({ authorization: `Bearer ${token}` });
    } catch (e) {
      if (!(e instanceof EngineError) || e.upstreamStatus !== 401) throw e;
      bearer.refused(token);
      return await send({ authorization: `Bearer ${await bearer.token(signal)}` });
    }
  }

  override statusError(status: number, body: string, retryAfter?: string | string[]): EngineError {
    const e = this.azureStatusError(status, body, retryAfter);
    if (this.bearer === undefined) return e;
    if (status === 401 || status === 403) {
      // a token Azure refuses: the app lacks a role on the resource (403), or the token is not for it (401)
      return new EngineError(
        `Azure OpenAI refused Portico's Entra ID token (HTTP ${status}); check that the app has a role on the resource (Cognitive Services OpenAI User) and the tenant is the resource's`,
        e.code,
        e.status,
        { retryable: e.retryable, upstreamStatus: status },
      );
    }
    const message = this.bearer.redact(e.message);
    return message === e.message ? e : new EngineError(message, e.code, e.status, { retryable: e.retryable, retryAfterMs: e.retryAfterMs, upstreamStatus: e.upstreamStatus });
  }

  private azureStatusError(status: number, body: string, retryAfter?: string | string[]): EngineError {
    if (status === 400) {
      const { code } = parseErrorBody(body);
      if (code === 'content_filter') {
        let categories: string[] = [];
        try {
          categories = filteredCategories(JSON.parse(body)?.error?.innererror?.content_filter_result);
        } catch {
          // the code alone says enough
        }
        const which = categories.length ? ` (${categories.join(', ')})` : '';
        return new EngineError(`the prompt was refused by Azure OpenAI's content filter${which}: change the prompt and try again`, 'content_filter', 400, {
          upstreamStatus: status,
        });
      }
    }
    return super.statusError(status, body, retryAfter);
  }
}

/** The Upstream of an Azure OpenAI deployment (its base URL, query and auth header). */
export function azureUpstream(opts: AzureOpenAIOptions, bearer?: BearerSource): AzureUpstream {
  const endpoint = opts.endpoint.replace(/\/+$/, '');
  const v1 = opts.surface === 'v1';
  const baseUrl = v1 ? `${endpoint}/openai/v1` : `${endpoint}/openai/deployments/${encodeURIComponent(opts.deployment)}`;
  const version = v1 ? opts.apiVersion : (opts.apiVersion ?? DEFAULT_API_VERSION);
  const query = version ? `?api-version=${encodeURIComponent(version)}` : '';
  // a key goes in api-key (as AzureOpenAI's authHeaders); an Entra token in Authorization (the shared default)
  // (with a bearer source, each call carries its token: no fixed credential header)
  const auth: Partial<UpstreamOptions> = bearer ? {} : opts.adToken ? { apiKey: opts.adToken } : { apiKey: opts.apiKey, keyHeader: 'api-key' };
  return new AzureUpstream({ baseUrl, ...auth, timeoutMs: opts.timeoutMs, connectTimeoutMs: opts.connectTimeoutMs }, query, bearer);
}

/**
 * The deployment's upstream, with its share of the Entra credential's token cache when it has one: close gives the
 * share back at once, retire once the retired upstream's calls have ended.
 */
function upstreamOf(opts: AzureOpenAIOptions): { upstream: AzureUpstream; close(): void; retire(): Promise<void> } {
  const cred = opts.entra ? acquireCredential(opts.entra) : undefined;
  const upstream = azureUpstream(opts, cred?.credential);
  return {
    upstream,
    close() {
      upstream.close();
      cred?.release();
    },
    retire: () => upstream.retire().finally(() => cred?.release()),
  };
}

// Azure 2024-10-21 knows `developer` only on newer models: sent as system, as openai-compatible does by default
// a reasoning deployment (o-series, gpt-5: the only ones that take reasoning_effort) refuses max_tokens; its cap is
// max_completion_tokens (api-version 2024-10-21 has it), which counts the reasoning too
const chatOptions = (cap: AzureOpenAIOptions['outputCap']) => ({ developerRole: 'system', outputCap: cap ?? 'reasoning' }) as const;

export function createAzureOpenAIEngine(opts: AzureOpenAIOptions): TextEngine {
  const up = upstreamOf(opts);
  const chatOpts = chatOptions(opts.outputCap);
  const upstream = up.upstream;
  const deployment = opts.deployment;
  // the deployment is the model Azure knows (v1 reads it from the body; the deployments surface ignores it)
  const body = (req: GenerateRequest) => {
    const b = buildChatBody(req, chatOpts);
    b.model = deployment;
    return b;
  };
  return {
    kind: 'azure-openai',
    contextWindow: opts.contextWindow,
    generate(req: GenerateRequest): AsyncIterable<GenerateEvent> {
      const decoder = new ChatDecoder(req);
      return req.stream === false ? whole(upstream, '/chat/completions', req, jsonBody(body(req)), decoder) : run(upstream, '/chat/completions', req, () => body(req), decoder);
    },
    // always the smallest completion: GET /models is not under a deployment's path
    probe(_kind, _model, signal) {
      return upstream.probe('completion', '/chat/completions', { model: deployment, messages: [{ role: 'user', content: 'ping' }], max_tokens: 1, stream: false }, signal);
    },
    /** estimate: Azure has no endpoint that counts tokens (see tokens.ts for the rule) */
    countTokens(req) {
      return estimateTokensInTurns(req.messages, req.tools);
    },
    close() {
      up.close();
      return Promise.resolve();
    },
    retire: () => up.retire(),
  };
}

export function createAzureOpenAIEmbeddingsEngine(opts: AzureOpenAIOptions): EmbeddingsEngine {
  const up = upstreamOf(opts);
  const inner = openaiEmbeddingsEngine(up.upstream, 'azure-openai');
  // the deployment is the model Azure knows
  return {
    ...inner,
    embed: (req) => inner.embed({ ...req, model: opts.deployment }),
    probe: (_kind, _m, signal) => inner.probe!('completion', opts.deployment, signal),
    close() {
      up.close();
      return Promise.resolve();
    },
    retire: () => up.retire(),
  };
}
