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

export interface UpstreamOptions {
  baseUrl: string;
  apiKey?: string;
  /** ms to wait for the response headers, and the longest silence allowed between two body chunks */
  timeoutMs?: number;
  headers?: Record<string, string>;
  /** max idle keep-alive sockets per upstream host (default 64) */
  maxFreeSockets?: number;
  /** ms a new connection may take to open (the deployment's timeouts.connect_ms); unset: only timeoutMs applies */
  connectTimeoutMs?: number;
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
  readonly timeoutMs: number;
  private readonly connectTimeoutMs?: number;
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
    this.connectTimeoutMs = opts.connectTimeoutMs;
    this.secret = opts.apiKey || undefined;
    const h: Record<string, string> = { 'content-type': 'application/json', accept: 'text/event-stream, application/json' };
    if (u.username || u.password) {
      h.authorization = 'Basic ' + Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64');
    }
    if (opts.headers) for (const k of Object.keys(opts.headers)) h[k.toLowerCase()] = opts.headers[k];
    if (this.secret) h.authorization = `Bearer ${this.secret}`;
    this.baseHeaders = h;
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
      const headers = { ...this.baseHeaders, 'content-length': String(Buffer.byteLength(body)) };
      const req = this.request({
        host: this.host,
        port: this.port,
        method: 'POST',
        path: this.basePath + path,
        headers,
        agent: this.agent,
      });
      const call = new Call(req, this.timeoutMs, signal);
      let settled = false;
      const fail = (err: unknown) => {
        if (settled) return;
        settled = true;
        call.dispose();
        reject(this.mapError(err, call));
      };
      call.onFail = fail;
      req.on('error', fail);
      if (this.connectTimeoutMs) call.watchConnect(this.connectTimeoutMs);
      req.on('response', (res) => {
        call.res = res;
        call.touch();
        res.setEncoding('utf8');
        const status = res.statusCode ?? 0;
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
          call.dispose();
          reject(this.statusError(status, text, res.headers['retry-after']));
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
    if (call?.connectTimedOut) {
      return new EngineError(`upstream did not accept a connection within ${this.connectTimeoutMs} ms`, 'upstream_unavailable', 504, RETRY);
    }
    if (call?.timedOut) {
      return new EngineError(`upstream did not answer within ${this.timeoutMs} ms`, 'upstream_unavailable', 504, RETRY);
    }
    const code = (err as NodeJS.ErrnoException)?.code;
    const what = code ?? (err as Error)?.message ?? String(err);
    if (call?.res) return new EngineError(`upstream connection broke mid-stream (${what})`, 'upstream_stream_broken', 502, RETRY);
    return new EngineError(`upstream unreachable (${this.redact(what)})`, 'upstream_unavailable', code === 'ETIMEDOUT' ? 504 : 502, RETRY);
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
      return new EngineError(`upstream refused Portico's credentials (HTTP ${status}); check the model's api key`, 'upstream_auth_failed', 502);
    }
    const { message, code } = parseErrorBody(body);
    const msg = this.redact(message || `HTTP ${status}`).slice(0, 2000);
    if (status === 429) {
      const ra = Array.isArray(retryAfter) ? retryAfter[0] : retryAfter;
      return new EngineError(`upstream rate limit: ${msg}${ra ? ` (retry after ${ra} s)` : ''}`, 'rate_limit_exceeded', 429, { retryable: true, retryAfterMs: retryAfterMs(ra) });
    }
    if (status === 404) return new EngineError(`upstream: ${msg}`, code || 'upstream_not_found', 502);
    if (status === 408 || status === 504) return new EngineError(`upstream timeout: ${msg}`, 'upstream_unavailable', 504, RETRY);
    if (status >= 400 && status < 500) return new EngineError(msg, code || 'invalid_request', 400);
    return new EngineError(`upstream error (HTTP ${status}): ${msg}`, code || 'upstream_error', 502, { retryable: status >= 500 });
  }

  close(): void {
    this.agent.destroy();
  }
}

/** transport failures and timeouts: another try (elsewhere) may succeed */
const RETRY = { retryable: true } as const;

/** retry-after in seconds or as an HTTP date, in ms (undefined when absent or unreadable) */
export function retryAfterMs(ra: string | undefined): number | undefined {
  if (!ra) return undefined;
  const s = Number(ra);
  if (Number.isFinite(s) && s >= 0) return Math.round(s * 1000);
  const t = Date.parse(ra);
  return Number.isFinite(t) ? Math.max(0, t - Date.now()) : undefined;
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
  connectTimedOut = false;
  cancelled = false;
  onFail?: (err: unknown) => void;
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

  /** a socket that is still connecting after `ms` is given up (a reused keep-alive socket is not watched) */
  watchConnect(ms: number): void {
    this.req.once('socket', (s) => {
      if (!s.connecting) return;
      const t = setTimeout(() => {
        this.connectTimedOut = true;
        this.kill(new Error('connect timeout'));
      }, ms);
      s.once('connect', () => clearTimeout(t));
      s.once('close', () => clearTimeout(t));
    });
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
  }

  /** ended early (consumer stopped, error): close the upstream request so the upstream stops generating */
  destroy(): void {
    this.dispose();
    if (!this.res?.complete) {
      this.req.destroy();
      this.res?.destroy();
    }
  }
}
