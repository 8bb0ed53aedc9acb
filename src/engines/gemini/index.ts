/**
 * The `gemini` text engine: an HTTP client of Gemini's API (POST {base_url}/v1beta/models/{model}:generateContent,
 * and :streamGenerateContent?alt=sse when streamed), spoken natively: its request shape (request.ts), its chunks
 * and JSON answer (decoder.ts), its key header (`x-goog-api-key`; never an Authorization header or a `key=` query,
 * which would land in logs) and its errors (GeminiUpstream below). The transport and the reading of an answer are
 * the ones every upstream provider shares (engines/shared/http.ts, answer.ts).
 */
import { EngineError, type GenerateEvent, type GenerateRequest, type TextEngine } from '../types.js';
import { jsonBody, Upstream, parseErrorBody, retryAfterMs, type UpstreamOptions } from '../shared/http.js';
import { run, whole } from '../shared/answer.js';
import { estimateTokensInTurns } from '../shared/tokens.js';
import { buildGenerateBody, modelPath } from './request.js';
import { GeminiDecoder } from './decoder.js';
import { deferred } from '../shared/deferred.js';

export const DEFAULT_BASE_URL = 'https://generativelanguage.googleapis.com';
export const DEFAULT_API_VERSION = 'v1beta';

/** the models that refuse a function call sent back without its thought signature (Gemini 3 and later) */
const NEEDS_SIGNATURE = /gemini-(?:[3-9]|\d\d)/i;

export interface GeminiEngineOptions {
  /** the API's root, without /v1beta (default https://generativelanguage.googleapis.com) */
  baseUrl?: string;
  apiKey?: string;
  /** the API version in the path (default v1beta) */
  apiVersion?: string;
  contextWindow?: number;
  timeoutMs?: number;
  connectTimeoutMs?: number;
}

/** Google's RetryInfo detail ({'@type': '...google.rpc.RetryInfo', retryDelay: '30s'}) in ms, when the body has one */
export function retryDelayMs(body: string): number | undefined {
  try {
    const details = JSON.parse(body)?.error?.details;
    if (!Array.isArray(details)) return undefined;
    for (const d of details) {
      const m = typeof d?.retryDelay === 'string' ? /^(\d+(?:\.\d+)?)s$/.exec(d.retryDelay) : null;
      if (m) return Math.round(Number(m[1]) * 1000);
    }
  } catch {
    // not JSON: no retry info
  }
  return undefined;
}

/**
 * Google's error statuses (https://ai.google.dev/gemini-api/docs/troubleshooting) on top of the shared mapping: a
 * 400 about the API key (Gemini answers a wrong key with 400 API_KEY_INVALID, not 401) is the operator's credentials
 * problem; a prompt over the model's window is the context-length refusal it is; 429 RESOURCE_EXHAUSTED keeps the
 * wait its RetryInfo gives when no retry-after header does; 503 UNAVAILABLE (overloaded) is a 503 to retry.
 */
export class GeminiUpstream extends Upstream {
  override statusError(status: number, body: string, retryAfter?: string | string[]): EngineError {
    const ra = Array.isArray(retryAfter) ? retryAfter[0] : retryAfter;
    const msg = this.redact(parseErrorBody(body).message || `HTTP ${status}`).slice(0, 2000);
    if (status === 400 && /API_KEY_INVALID|API key not valid|API key expired/i.test(body)) {
      return new EngineError("upstream refused Portico's credentials (HTTP 400, API key not valid); check the model's api key", 'upstream_auth_failed', 502, {
        retryable: true,
        upstreamStatus: status,
      });
    }
    if (status === 400 && /input token count|exceeds the maximum number of tokens|context window/i.test(msg)) {
      return new EngineError(msg, 'context_length_exceeded', 400, { upstreamStatus: status });
    }
    if (status === 429) {
      const wait = retryAfterMs(ra) ?? retryDelayMs(body);
      return new EngineError(`upstream rate limit: ${msg}${wait !== undefined ? ` (retry after ${Math.ceil(wait / 1000)} s)` : ''}`, 'rate_limit_exceeded', 429, {
        retryable: true,
        retryAfterMs: wait,
        upstreamStatus: status,
      });
    }
    if (status === 503) {
      return new EngineError(`upstream overloaded: ${msg}${ra ? ` (retry after ${ra} s)` : ''}`, 'engine_unavailable', 503, {
        retryable: true,
        retryAfterMs: retryAfterMs(ra),
        upstreamStatus: status,
      });
    }
    return super.statusError(status, body, retryAfter);
  }
}

export function upstreamOptions(opts: GeminiEngineOptions): UpstreamOptions {
  const base = (opts.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, '');
  return {
    baseUrl: `${base}/${opts.apiVersion ?? DEFAULT_API_VERSION}`,
    apiKey: opts.apiKey,
    keyHeader: 'x-goog-api-key',
    timeoutMs: opts.timeoutMs,
    connectTimeoutMs: opts.connectTimeoutMs,
  };
}

/** the most thought signatures kept (the oldest go first); a few hundred bytes to a few kB each */
const MAX_SIGNATURES = 4096;

export function createGeminiEngine(opts: GeminiEngineOptions): TextEngine {
  const upstream = new GeminiUpstream(upstreamOptions(opts));
  // the thought signatures of the calls this engine received, by call id: given back with the call when the client
  // sends it back (Portico's call items carry no signature); Map keeps insertion order, so the oldest is dropped
  const signatures = new Map<string, string>();
  const keep = (id: string, s: string) => {
    signatures.delete(id);
    signatures.set(id, s);
    if (signatures.size > MAX_SIGNATURES) signatures.delete(signatures.keys().next().value!);
  };
  const of = (id: string) => signatures.get(id);
  return {
    kind: 'gemini',
    contextWindow: opts.contextWindow,
    generate(req: GenerateRequest): AsyncIterable<GenerateEvent> {
      return deferred(() => {
        const body = buildGenerateBody(req, { of, sentinel: NEEDS_SIGNATURE.test(req.model) });
        const decoder = new GeminiDecoder(req, keep);
        const path = modelPath(req.model);
        return req.stream === false
          ? whole(upstream, `${path}:generateContent`, req, jsonBody(body), decoder)
          : run(upstream, `${path}:streamGenerateContent?alt=sse`, req, () => body, decoder);
      });
    },
    probe(kind, model, signal) {
      return upstream.probe(
        kind,
        `${modelPath(model)}:generateContent`,
        { contents: [{ role: 'user', parts: [{ text: 'ping' }] }], generationConfig: { maxOutputTokens: 1 } },
        signal,
      );
    },
    /** an estimate (the rule of shared/tokens.ts): Gemini's countTokens is a call of its own per request */
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
