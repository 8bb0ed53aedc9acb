/**
 * The HTTP client side of the openai-compatible engine: node:http / node:https with a keep-alive Agent.
 *
 * Why not global fetch: undici's fetch wraps every body in WHATWG streams and Response objects; for many small
 * SSE chunks node:http's IncomingMessage (one 'data' per TCP read, setEncoding('utf8') for split code points)
 * costs less per chunk and per request. Connections are reused through the Agent (keepAlive, no socket cap).
 */
import http from 'node:http';
import https from 'node:https';
import type { IncomingMessage } from 'node:http';
import { EngineError } from '../types.js';
import { upstreamSpan, type UpstreamSpan } from '../../platform/ops/tracing.js';

export interface UpstreamOptions {
  baseUrl: string;
  apiKey?: string;
  /** ms to wait for the response headers, and the longest silence allowed between two body chunks */
  timeoutMs?: number;
  headers?: Record<string, string>;
  /** max idle keep-alive sockets per upstream host (default 64) */
  maxFreeSockets?: number;
}

export const DEFAULT_TIMEOUT_MS = 300_000;

/** One upstream (base URL + credentials) with its connection pool. */
export class Upstream {
  readonly agent: http.Agent;
  private readonly request: typeof http.request;
  private readonly host: string;
  private readonly port: number;
  private readonly basePath: string;
  private readonly baseHeaders: Record<string, string>;
  /** attributes of the client span of each call when tracing is on: host and port only (no credentials, no path) */
  private readonly spanAttributes: Record<string, string | number>;
  readonly timeoutMs: number;
  private readonly secret?: string;

  constructor(opts: UpstreamOptions) {
    let u: URL;
    try {
      u = new URL(opts.baseUrl);
    } catch {
      throw new Error(`openai-compatible: invalid base_url ${JSON.stringify(opts.baseUrl)}`);
    }
    const tls = u.protocol === 'https:';
    if (!tls && u.protocol !== 'http:') throw new Error(`openai-compatible: base_url must be http(s): ${opts.baseUrl}`);
    const agentOpts = { keepAlive: true, keepAliveMsecs: 1000, maxFreeSockets: opts.maxFreeSockets ?? 64, scheduling: 'lifo' as const };
    this.agent = tls ? new https.Agent(agentOpts) : new http.Agent(agentOpts);
    this.request = tls ? https.request : http.request;
    this.host = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
    this.port = u.port ? Number(u.port) : tls ? 443 : 80;
    this.basePath = u.pathname.replace(/\/+$/, '');
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.secret = opts.apiKey || undefined;
    const h: Record<string, string> = { 'content-type': 'application/json', accept: 'text/event-stream, application/json' };
    if (u.username || u.password) {
      h.authorization = 'Basic ' + Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64');
    }
    if (opts.headers) for (const k of Object.keys(opts.headers)) h[k.toLowerCase()] = opts.headers[k];
    if (this.secret) h.authorization = `Bearer ${this.secret}`;
    this.baseHeaders = h;
    this.spanAttributes = { 'http.request.method': 'POST', 'server.address': this.host, 'server.port': this.port };
  }

  /** Removes the api key from any text that may reach a client. */
  redact(text: string): string {
    if (!this.secret || text.indexOf(this.secret) === -1) return text;
    return text.split(this.secret).join('***');
  }

  /**
   * POSTs a JSON body; resolves with the response once its headers arrived and its status is 2xx, with
   * utf8 encoding set. Non-2xx responses are read and turned into an EngineError.
   */
  post(path: string, body: string, signal: AbortSignal | undefined): Promise<Call> {
    return new Promise<Call>((resolve, reject) => {
      if (signal?.aborted) return reject(cancelled());
      const headers: Record<string, string> = { ...this.baseHeaders, 'content-length': String(Buffer.byteLength(body)) };
      // one client span per upstream call (per try) when the request is traced; its traceparent goes upstream
      const span = upstreamSpan(`POST ${path}`, this.spanAttributes, headers);
      const req = this.request({
        host: this.host,
        port: this.port,
        method: 'POST',
        path: this.basePath + path,
        headers,
        agent: this.agent,
      });
      const call = new Call(req, this.timeoutMs, signal);
      if (span) call.span = span;
      let settled = false;
      const fail = (err: unknown) => {
        if (settled) return;
        settled = true;
        const e = this.mapError(err, call);
        call.span?.fail(e);
        call.dispose();
        reject(e);
      };
      call.onFail = fail;
      req.on('error', fail);
      req.on('response', (res) => {
        call.res = res;
        call.touch();
        res.setEncoding('utf8');
        const status = res.statusCode ?? 0;
        call.span?.status(status);
        if (status >= 200 && status < 300) {
          settled = true;
          call.onFail = undefined;
          req.removeListener('error', fail);
          req.on('error', () => {}); // late socket errors surface through the response
          resolve(call);
          return;
        }
        // error status: read (a bounded amount of) the body for the upstream's message
        let text = '';
        res.on('data', (d: string) => {
          call.touch();
          if (text.length < 65536) text += d;
        });
        res.on('end', () => {
          if (settled) return;
          settled = true;
          const e = this.statusError(status, text, res.headers['retry-after']);
          call.span?.fail(e);
          call.dispose();
          reject(e);
        });
        res.on('error', fail);
        res.on('aborted', () => fail(new Error('aborted')));
      });
      req.end(body);
    });
  }

  /** Maps a transport failure (before or during the response) to an EngineError. */
  mapError(err: unknown, call?: Call): EngineError {
    if (err instanceof EngineError) return err;
    if (call?.cancelled) return cancelled();
    if (call?.timedOut) {
      return new EngineError(`upstream did not answer within ${this.timeoutMs} ms`, 'upstream_unavailable', 504);
    }
    const code = (err as NodeJS.ErrnoException)?.code;
    const what = code ?? (err as Error)?.message ?? String(err);
    if (call?.res) return new EngineError(`upstream connection broke mid-stream (${what})`, 'upstream_stream_broken', 502);
    return new EngineError(`upstream unreachable (${this.redact(what)})`, 'upstream_unavailable', code === 'ETIMEDOUT' ? 504 : 502);
  }

  /**
   * Status mapping, so a client sees what it can act on:
   * - 400/404-for-a-route-that-exists/413/422: the request content was refused (context too long, bad schema...)
   *   -> 400 with the upstream's message and code (this is the client's request, re-expressed).
   * - 401/403: Portico's upstream credentials are wrong; that is an operator problem, not the client's key
   *   (a 401 would make SDKs report the client's Portico key as invalid) -> 502, generic message, never the body
   *   (OpenAI echoes part of the key in it).
   * - 404: usually the upstream model is not there (Ollama, vLLM, OpenAI all answer 404 for that) or a wrong
   *   base_url: an operator problem too -> 502 with the upstream's message.
   * - 429: rate limited upstream -> 429 so SDKs back off and retry (retry-after is kept in the message).
   * - 408 / 504 -> 504; other 5xx -> 502.
   */
  statusError(status: number, body: string, retryAfter?: string | string[]): EngineError {
    if (status === 401 || status === 403) {
      return new EngineError(`upstream refused Portico's credentials (HTTP ${status}); check the model's api key`, 'upstream_auth_failed', 502, status);
    }
    const { message, code } = parseErrorBody(body);
    const msg = this.redact(message || `HTTP ${status}`).slice(0, 2000);
    if (status === 429) {
      const ra = Array.isArray(retryAfter) ? retryAfter[0] : retryAfter;
      return new EngineError(`upstream rate limit: ${msg}${ra ? ` (retry after ${ra} s)` : ''}`, 'rate_limit_exceeded', 429, status);
    }
    if (status === 404) return new EngineError(`upstream: ${msg}`, code || 'upstream_not_found', 502, status);
    if (status === 408 || status === 504) return new EngineError(`upstream timeout: ${msg}`, 'upstream_unavailable', 504, status);
    if (status >= 400 && status < 500) return new EngineError(msg, code || 'invalid_request', 400, status);
    return new EngineError(`upstream error (HTTP ${status}): ${msg}`, code || 'upstream_error', 502, status);
  }

  close(): void {
    this.agent.destroy();
  }
}

function cancelled(): EngineError {
  return new EngineError('generation aborted', 'aborted', 499);
}

/** The error shapes seen in the wild: OpenAI {error:{message,code,type}}, {error:"..."} (Ollama, llama.cpp), {message}, {detail} (FastAPI). */
export function parseErrorBody(body: string): { message: string; code?: string } {
  const t = body.trim();
  if (!t) return { message: '' };
  try {
    const j = JSON.parse(t);
    const e = j?.error ?? j;
    if (typeof e === 'string') return { message: e };
    const message = typeof e?.message === 'string' ? e.message : typeof e?.detail === 'string' ? e.detail : typeof j?.detail === 'string' ? j.detail : t;
    const code = typeof e?.code === 'string' && /^[a-z0-9_.-]{1,64}$/i.test(e.code) ? e.code : undefined;
    return { message, code };
  } catch {
    return { message: t.slice(0, 500) };
  }
}

/** One in-flight upstream request: owns the timeout and the abort wiring; dispose() tears it down. */
export class Call {
  res?: IncomingMessage;
  timedOut = false;
  cancelled = false;
  onFail?: (err: unknown) => void;
  /** the call's client span when the request is traced: ended with the call */
  span?: UpstreamSpan;
  private timer: NodeJS.Timeout;
  private readonly onAbort?: () => void;

  constructor(
    readonly req: http.ClientRequest,
    timeoutMs: number,
    private readonly signal: AbortSignal | undefined,
  ) {
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.kill(new Error('timeout'));
    }, timeoutMs);
    if (signal) {
      this.onAbort = () => {
        this.cancelled = true;
        this.kill(new Error('aborted'));
      };
      signal.addEventListener('abort', this.onAbort, { once: true });
    }
  }

  /** data arrived: the silence timer starts again */
  touch(): void {
    this.timer.refresh();
  }

  private kill(err: Error): void {
    this.onFail?.(err);
    this.req.destroy(err);
    this.res?.destroy(err);
  }

  /** finished normally: the socket goes back to the pool */
  dispose(): void {
    clearTimeout(this.timer);
    if (this.onAbort) this.signal!.removeEventListener('abort', this.onAbort);
    if (this.span !== undefined) {
      this.span.end();
      this.span = undefined;
    }
  }

  /** ended early (consumer stopped, error): close the upstream request so the upstream stops generating */
  destroy(): void {
    if (this.span !== undefined && !this.res?.complete) this.span.fail(this.cancelled ? new Error('cancelled') : new Error('the answer was cut before its end'));
    this.dispose();
    if (!this.res?.complete) {
      this.req.destroy();
      this.res?.destroy();
    }
  }
}
