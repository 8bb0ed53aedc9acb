/**
 * The `anthropic` text engine: an HTTP client of Anthropic's Messages API (POST {base_url}/v1/messages), spoken
 * natively: its request shape (request.ts), its streamed events and JSON answer (decoder.ts), its headers
 * (`x-api-key`, `anthropic-version`, and `anthropic-beta` when the model file names betas; never an
 * Authorization header with the key) and its errors (AnthropicUpstream below). The transport and the reading of
 * an answer are the ones every upstream provider shares (engines/shared/http.ts, answer.ts): keep-alive pool,
 * timeouts at connect, before the first byte and between two chunks, cancel on abort.
 */
import { EngineError, type GenerateEvent, type GenerateRequest, type MessagesForwardRequest, type TextEngine } from '../types.js';
import { jsonBody, Upstream, parseErrorBody, retryAfterMs, type UpstreamOptions } from '../shared/http.js';
import { run, whole } from '../shared/answer.js';
import { estimateTokensInTurns } from '../shared/tokens.js';
import { buildMessagesBody } from './request.js';
import { MessagesDecoder } from './decoder.js';
import { deferred } from '../shared/deferred.js';
import { messagesPassthrough } from './passthrough.js';

export const DEFAULT_BASE_URL = 'https://api.anthropic.com';
export const DEFAULT_VERSION = '2023-06-01';
export const DEFAULT_MAX_TOKENS = 4096;

export interface AnthropicEngineOptions {
  /** the API's root, without /v1 (default https://api.anthropic.com) */
  baseUrl?: string;
  apiKey?: string;
  /** the `anthropic-version` header (default 2023-06-01) */
  version?: string;
  /** `anthropic-beta` header values */
  betas?: string[];
  /** max_tokens when a request names none */
  maxTokens?: number;
  /** prompt caching: cache_control breakpoints on the system prompt and the last turn */
  cachePrompt?: boolean;
  contextWindow?: number;
  timeoutMs?: number;
  connectTimeoutMs?: number;
}

/**
 * Anthropic's error statuses (https://docs.anthropic.com/en/api/errors) on top of the shared mapping: 529
 * `overloaded_error` is a 503 to retry (elsewhere, or after its retry-after), 413 `request_too_large` a 413, and
 * a prompt longer than the model's window the context-length refusal it is. 401/403 stay an operator's problem
 * (502, never the upstream's body), 429 keeps its retry-after, 5xx are retryable 502s.
 */
export class AnthropicUpstream extends Upstream {
  override statusError(status: number, body: string, retryAfter?: string | string[]): EngineError {
    const ra = Array.isArray(retryAfter) ? retryAfter[0] : retryAfter;
    if (status === 529) {
      const msg = this.redact(parseErrorBody(body).message || 'Overloaded').slice(0, 2000);
      return new EngineError(`upstream overloaded: ${msg}${ra ? ` (retry after ${ra} s)` : ''}`, 'engine_unavailable', 503, {
        retryable: true,
        retryAfterMs: retryAfterMs(ra),
        upstreamStatus: status,
      });
    }
    if (status === 413) {
      const msg = this.redact(parseErrorBody(body).message || 'request too large').slice(0, 2000);
      return new EngineError(`upstream: ${msg}`, 'payload_too_large', 413, { upstreamStatus: status });
    }
    if (status === 400) {
      const msg = this.redact(parseErrorBody(body).message).slice(0, 2000);
      if (/prompt is too long|context window|too many tokens/i.test(msg)) return new EngineError(msg, 'context_length_exceeded', 400, { upstreamStatus: status });
    }
    return super.statusError(status, body, retryAfter);
  }
}

export function createAnthropicEngine(opts: AnthropicEngineOptions): TextEngine {
  const headers: Record<string, string> = { 'anthropic-version': opts.version ?? DEFAULT_VERSION };
  if (opts.betas?.length) headers['anthropic-beta'] = opts.betas.join(',');
  const base = (opts.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, '');
  const upOpts: UpstreamOptions = {
    // the API's paths are under /v1 (Anthropic's SDKs take the root as their base URL, as the model file does)
    baseUrl: base + '/v1',
    apiKey: opts.apiKey,
    keyHeader: 'x-api-key',
    headers,
    timeoutMs: opts.timeoutMs,
    connectTimeoutMs: opts.connectTimeoutMs,
  };
  const upstream = new AnthropicUpstream(upOpts);
  const bodyOpts = { maxTokens: opts.maxTokens ?? DEFAULT_MAX_TOKENS, cachePrompt: opts.cachePrompt ?? false };
  return {
    kind: 'anthropic',
    contextWindow: opts.contextWindow,
    generate(req: GenerateRequest): AsyncIterable<GenerateEvent> {
      return deferred(() => {
        const { body, formatTool } = buildMessagesBody(req, bodyOpts);
        const decoder = new MessagesDecoder(req, formatTool);
        return req.stream === false ? whole(upstream, '/messages', req, jsonBody(body), decoder) : run(upstream, '/messages', req, () => body, decoder);
      });
    },
    /** Anthropic's Messages API as the client sent it (./passthrough.ts): the client's betas join the deployment's */
    messages(req: MessagesForwardRequest): AsyncIterable<Record<string, unknown>> {
      return messagesPassthrough(upstream, req, opts.betas);
    },
    probe(kind, model, signal) {
      return upstream.probe(kind, '/messages', { model, max_tokens: 1, messages: [{ role: 'user', content: 'ping' }] }, signal);
    },
    /** an estimate (the rule of shared/tokens.ts): Anthropic's count_tokens is a call of its own per request */
    countTokens(req) {
      return estimateTokensInTurns(req.messages, req.tools);
    },
    close() {
      upstream.close();
      return Promise.resolve();
    },
    retire: () => upstream.retire(),
  };
}
