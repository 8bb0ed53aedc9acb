/**
 * The HTTP client side of the upstream engines (openai-compatible, anthropic): an undici Pool per upstream origin
 * (keep-alive connections, reused in LIFO order by undici; no cap unless `connections` is set).
 *
 * Why undici's Pool.request and not node:http or global fetch: it costs about half of node:http's CPU per
 * request (no ClientRequest/Agent/IncomingMessage machinery; measured in docs/performance.md), and its
 * per-request `headersTimeout` / `bodyTimeout` / `signal` are exactly the limits a call needs (the wait for the
 * headers, the longest silence between two body chunks, while the body is not paused by its consumer, and the
 * client's abort), so a call holds no timer or listener of its own. fetch would wrap every body in WHATWG
 * streams and Response objects. Pipelining stays off (1): these are POSTs (not idempotent), and an answer that
 * streams for minutes would hold every request queued behind it on the same connection.
 */
import { Pool, buildConnector, errors as undiciErrors, type Dispatcher } from 'undici';
import { EventEmitter } from 'node:events';
import type { Readable } from 'node:stream';
import type { Socket } from 'node:net';
import { StringDecoder } from 'node:string_decoder';
import { EngineError } from '../types.js';
import { tracedCall, type UpstreamSpan } from '../../platform/ops/tracing.js';
import { jsonUtf8, largeJson } from '../../platform/json-text.js';
import { BodyBlocks } from '../../platform/http/json-body.js';
import { redactSecrets, upstreamSecrets } from '../shared/redact.js';

export interface UpstreamOptions {
  baseUrl: string;
  apiKey?: string;
  /** ms to wait for the response headers, and the longest silence allowed between two body chunks */
  timeoutMs?: number;
  headers?: Record<string, string>;
  /**
   * the header that carries `apiKey`: `authorization` (default: `Bearer <key>`, OpenAI's way) or another one that
   * takes the key as it is (Anthropic's `x-api-key`); the key is never sent in any other header
   */
  keyHeader?: string;
  /** the most connections open to this upstream at once (default: no limit, as many as requests in flight) */
  connections?: number;
  /** ms a new connection may take to open (TLS included), to the millisecond; unset: 10 s */
  connectTimeoutMs?: number;
  /**
   * signs each request (bedrock's AWS SigV4): given the method, the full path, the headers and the body's bytes,
   * gives the headers to send (the signature depends on the date and the body, so it cannot be a fixed header)
   */
  sign?: (method: string, path: string, headers: Record<string, string>, body: string | Buffer | undefined) => Record<string, string>;
}

/** a request body too large to serialize at once: post() makes its bytes (see jsonBody) */
export interface LargeJson {
  readonly value: object;
}

/**
 * A JSON request body for post(): the text of a small value (JSON.stringify, as always); a large value is kept
 * and post() makes its UTF-8 bytes in slices with turns of the event loop between them (platform/json-text.ts).
 * The largest accepted request makes a 16 MiB upstream body: JSON.stringify and undici's Buffer.from of it held
 * the event loop ~150 ms.
 */
export function jsonBody(v: object): string | LargeJson {
  return largeJson(v) ? { value: v } : JSON.stringify(v);
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

export const DEFAULT_TIMEOUT_MS = 300_000;

/**
 * undici's connector with a connect timeout of our own: undici's runs on its coarse timer wheel (a 300 ms timeout
 * fired after ~1 s, 2 s after 2.5 s), a plain timer fires on time. On expiry the socket is destroyed and the
 * request fails with undici's own ConnectTimeoutError (UND_ERR_CONNECT_TIMEOUT, mapped in Upstream.mapError).
 */
function preciseConnector(timeoutMs: number): buildConnector.connector {
  // 0: undici sets no timer of its own. Its connector returns the socket it opens, which its type does not say
  const connect = buildConnector({ timeout: 0 }) as unknown as (o: buildConnector.Options, cb: buildConnector.Callback) => { destroy(): void };
  return (options, callback) => {
    let settled = false;
    const timer = setTimeout(() => {
      if (settled) return;
      settled = true;
      socket.destroy();
      callback(new undiciErrors.ConnectTimeoutError(`Connect Timeout Error (${options.hostname}:${options.port}, ${timeoutMs} ms)`), null);
    }, timeoutMs);
    const socket = connect(options, (...args: [null, Socket] | [Error, null]) => {
      if (settled) {
        args[1]?.destroy();
        return;
      }
      settled = true;
      clearTimeout(timer);
      callback(...args);
    });
    return socket;
  };
}

/** an error event nobody else listens to (a body destroyed after its reader left) must not crash the process */
const ignore = () => {};

/** One upstream (base URL + credentials) with its connection pool. */
export class Upstream {
  readonly pool: Pool;
  private readonly basePath: string;
  private readonly baseHeaders: Record<string, string>;
  /** attributes of the client span of each call when tracing is on: host and port only (no credentials, no path) */
  private readonly spanAttributes: Record<string, string | number>;
  readonly timeoutMs: number;
  private readonly connectTimeoutMs?: number;
  private readonly sign?: UpstreamOptions['sign'];
  private readonly secret?: string;
  /** every form of the upstream's credentials (the key, the base_url's user and password, their Basic header) */
  private readonly secrets: string[];

  constructor(opts: UpstreamOptions) {
    let u: URL;
    try {
      u = new URL(opts.baseUrl);
    } catch {
      throw new Error(`upstream: invalid base_url ${JSON.stringify(opts.baseUrl)}`);
    }
    const tls = u.protocol === 'https:';
    if (!tls && u.protocol !== 'http:') throw new Error(`upstream: base_url must be http(s): ${opts.baseUrl}`);
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    // keep-alive: an idle connection is kept 60 s at most (less if the upstream's Keep-Alive header says so)
    this.pool = new Pool(u.origin, {
      connections: opts.connections ?? null,
      pipelining: 1,
      keepAliveTimeout: 4_000,
      keepAliveMaxTimeout: 60_000,
      connect: preciseConnector(opts.connectTimeoutMs ?? 10_000),
    });
    this.connectTimeoutMs = opts.connectTimeoutMs;
    this.sign = opts.sign;
    this.basePath = u.pathname.replace(/\/+$/, '');
    this.secret = opts.apiKey || undefined;
    this.secrets = upstreamSecrets(opts.baseUrl, this.secret);
    const h: Record<string, string> = { 'content-type': 'application/json', accept: 'text/event-stream, application/json' };
    if (u.username || u.password) {
      h.authorization = 'Basic ' + Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64');
    }
    if (opts.headers) for (const [k, v] of Object.entries(opts.headers)) h[k.toLowerCase()] = v;
    const keyHeader = opts.keyHeader?.toLowerCase() ?? 'authorization';
    if (this.secret) h[keyHeader] = keyHeader === 'authorization' ? `Bearer ${this.secret}` : this.secret;
    this.baseHeaders = h;
    this.spanAttributes = { 'http.request.method': 'POST', 'server.address': u.hostname, 'server.port': Number(u.port || (tls ? 443 : 80)) };
  }

  /**
   * Removes the upstream's credentials from any text that may leave the process: an error a client gets, a log
   * line, a trace span's status (every EngineError this transport makes goes through it before any of those).
   */
  redact(text: string): string {
    return this.secrets.length === 0 ? text : redactSecrets(text, this.secrets);
  }

  /** redact, for a trace span's failure messages (undefined: nothing to hide) */
  private get redactor(): ((text: string) => string) | undefined {
    return this.secrets.length === 0 ? undefined : (t) => redactSecrets(t, this.secrets);
  }

  /**
   * POSTs a JSON body (jsonBody: its text, or a large value made into bytes here); resolves with the call once the
   * response headers arrived and its status is 2xx (its body gives Buffers: undici's setEncoding does not decode
   * 'data', see Call.decoder). Non-2xx responses are read and turned into an EngineError.
   */
  post(path: string, body: string | LargeJson, signal: AbortSignal | undefined, headers?: Readonly<Record<string, string>>): Promise<Call> {
    return this.send('POST', path, body, signal, headers);
  }

  /** GETs a path (a health check's `GET /models`): as post, without a body. */
  get(path: string, signal: AbortSignal | undefined, headers?: Readonly<Record<string, string>>): Promise<Call> {
    return this.send('GET', path, undefined, signal, headers);
  }

  /** `extra`: headers of this call only, over the upstream's own (names in lower case; never the key's header) */
  private async send(
    method: 'GET' | 'POST',
    path: string,
    body: string | LargeJson | undefined,
    signal: AbortSignal | undefined,
    extra?: Readonly<Record<string, string>>,
  ): Promise<Call> {
    if (signal?.aborted) throw cancelled();
    let payload: string | Buffer | undefined;
    if (body === undefined || typeof body === 'string') payload = body;
    else {
      // made before the call's timeout starts; undici writes the Buffer as it is (no copy, no encoding)
      payload = (await jsonUtf8(body.value))!.bytes;
      if (signal?.aborted) throw cancelled();
    }
    const call = new Call(this.timeoutMs, signal);
    // one client span per upstream call (per try) when the request is traced; its traceparent goes upstream (the
    // headers are copied only then: without tracing every call shares the one header object)
    let headers = extra === undefined ? this.baseHeaders : { ...this.baseHeaders, ...extra };
    const traced = tracedCall(`${method} ${path}`, method === 'POST' ? this.spanAttributes : { ...this.spanAttributes, 'http.request.method': method }, headers, this.redactor);
    if (traced !== undefined) {
      headers = traced.headers;
      call.span = traced.span;
    }
    if (this.sign !== undefined) headers = this.sign(method, this.basePath + path, headers, payload);
    let data: Dispatcher.ResponseData;
    try {
      // undici's own timeouts are off: its fast timers tick every ~0.5 s, too coarse for a short timeout_ms
      data = await this.pool.request({
        method,
        path: this.basePath + path,
        headers,
        body: payload,
        signal: call,
        headersTimeout: 0,
        bodyTimeout: 0,
      });
    } catch (err) {
      const e = this.mapError(err, call);
      call.span?.fail(e);
      call.dispose();
      throw e;
    }
    const res = data.body;
    res.on('error', ignore);
    call.res = res;
    call.headers = data.headers;
    call.touch();
    const status = data.statusCode;
    call.span?.status(status);
    if (status >= 200 && status < 300) return call;
    // error status: read (a bounded amount of) the body for the upstream's message
    let text = '';
    let failure: EngineError;
    try {
      const utf8 = new StringDecoder('utf8');
      for await (const d of res as AsyncIterable<Buffer>) {
        call.touch();
        text += utf8.write(d);
        if (text.length >= 65536) {
          res.destroy();
          break;
        }
      }
      failure = this.statusError(status, text, data.headers['retry-after']);
    } catch (err) {
      failure = this.mapError(err, call);
    }
    call.span?.fail(failure);
    call.dispose();
    throw failure;
  }

  /**
   * Reads a 2xx answer's whole body as utf8 text (decoded once at the end, so code points split between
   * chunks are whole); the call is disposed of once it is read. Rejects with an EngineError past maxBytes, or with the transport's error (mapError
   * turns it into one) if the body breaks off.
   */
  readText(call: Call, maxBytes: number): Promise<string> {
    return this.readTextOrBlocks(call, maxBytes, Infinity) as Promise<string>;
  }

  /**
   * readText for an answer that may be large: under `largeBytes` the text, as readText gives it; from there on
   * the bytes, copied as they arrive into blocks of a mebibyte of their own memory (platform/http/json-body.ts,
   * BodyBlocks), neither joined nor decoded here: a worker thread takes them (moved, not copied). Decoding and
   * parsing tens of MiB on the event loop holds it for seconds (issue 23 §2: the largest embeddings answer).
   */
  readTextOrBlocks(call: Call, maxBytes: number, largeBytes: number): Promise<string | BodyBlocks> {
    const res = call.res!;
    return new Promise<string | BodyBlocks>((resolve, reject) => {
      let parts: Buffer[] = [];
      let blocks: BodyBlocks | undefined;
      let size = 0;
      let done = false;
      const fail = (err: unknown) => {
        if (done) return;
        done = true;
        reject(err);
      };
      res.on('data', (d: Buffer) => {
        call.touch();
        size += d.length;
        if (size > maxBytes) {
          fail(new EngineError('upstream answer is too large', 'upstream_error', 502));
          res.destroy();
          return;
        }
        if (blocks) blocks.add(d);
        else if (size >= largeBytes) {
          blocks = new BodyBlocks();
          for (const p of parts) blocks.add(p);
          blocks.add(d);
          parts = [];
        } else parts.push(d);
      });
      res.on('end', () => {
        if (done) return;
        done = true;
        call.dispose();
        if (blocks) resolve(blocks);
        else resolve(parts.length === 1 ? parts[0]!.toString('utf8') : Buffer.concat(parts, size).toString('utf8'));
      });
      res.on('error', fail);
      // (close follows every end: the error, and its stack trace, only when the body was cut)
      res.on('close', () => {
        if (!done) fail(new Error('premature close'));
      });
    });
  }

  /** Maps a transport failure (before the response, or during its body) to an EngineError. */
  mapError(err: unknown, call?: Call): EngineError {
    if (err instanceof EngineError) return err;
    if (call?.cancelled) return cancelled();
    if (call?.timedOut) return new EngineError(`upstream did not answer within ${this.timeoutMs} ms`, 'upstream_unavailable', 504, RETRY);
    const code = (err as NodeJS.ErrnoException)?.code;
    if (code === 'UND_ERR_CONNECT_TIMEOUT') {
      return new EngineError(`upstream did not accept a connection within ${this.connectTimeoutMs ?? 10_000} ms`, 'upstream_unavailable', 504, RETRY);
    }
    const what = code ?? (err as Error)?.message ?? String(err);
    // the upstream (or something between) closed the connection: said so, not in the HTTP client's own jargon
    const closed = code === 'UND_ERR_SOCKET' || code === 'ECONNRESET' || code === 'EPIPE' || /premature close|other side closed/i.test(String((err as Error)?.message));
    if (call?.res) {
      const why = closed ? 'the upstream closed the connection before the answer was complete' : this.redact(what);
      return new EngineError(`upstream connection broke mid-stream (${why})`, 'upstream_stream_broken', 502, RETRY);
    }
    if (closed && code !== 'ECONNRESET' && code !== 'EPIPE') {
      return new EngineError('upstream unreachable (the upstream closed the connection before answering)', 'upstream_unavailable', 502, RETRY);
    }
    return new EngineError(`upstream unreachable (${this.redact(what)})`, 'upstream_unavailable', code === 'ETIMEDOUT' ? 504 : 502, RETRY);
  }

  /** Status mapping: upstreamStatusError, with this upstream's credentials redacted from the message. */
  statusError(status: number, body: string, retryAfter?: string | string[]): EngineError {
    return upstreamStatusError(status, body, retryAfter, (t) => this.redact(t));
  }

  /**
   * An active health check (TextEngine.probe): `GET /models`, or the smallest request of `probePath` with
   * `probeBody`; healthy when the upstream answers 2xx with a JSON body. The call is bounded by `signal`.
   */
  async probe(kind: 'models' | 'completion', probePath: string, probeBody: object, signal: AbortSignal): Promise<void> {
    const call = kind === 'models' ? await this.get('/models', signal) : await this.post(probePath, JSON.stringify(probeBody), signal);
    let text: string;
    try {
      text = await this.readText(call, 4 * 1024 * 1024);
    } catch (e) {
      call.destroy();
      throw e instanceof EngineError ? e : this.mapError(e, call);
    }
    try {
      JSON.parse(text);
    } catch {
      throw new EngineError(`the upstream's ${kind === 'models' ? 'GET /models' : `POST ${probePath}`} answer is not JSON`, 'upstream_error', 502, { retryable: true });
    }
  }

  /** Stops now: calls in flight are cut (shutdown). */
  close(): void {
    this.pool.destroy().catch(ignore);
  }

  /**
   * Takes no new call and resolves once every call in flight has ended, its body read to the end (undici's
   * Pool.close: a stream still running on the old upstream of a reloaded deployment finishes whole).
   */
  retire(): Promise<void> {
    return this.pool.close().catch(ignore);
  }
}

/**
 * An upstream's HTTP refusal as an EngineError (the transport's, and the realtime link's refused upgrade), so a client
 * sees what it can act on (`redact` removes the upstream's credentials from its message):
 * - 400/404-for-a-route-that-exists/413/422: the request content was refused (context too long, bad schema...)
 *   -> 400 with the upstream's message and code (this is the client's request, re-expressed).
 * - 401/403: Portico's upstream credentials are wrong; that is an operator problem, not the client's key
 *   (a 401 would make SDKs report the client's Portico key as invalid) -> 502, generic message, never the body
 *   (OpenAI echoes part of the key in it). Retryable: another deployment may have good credentials.
 * - 404: usually the upstream model is not there (Ollama, vLLM, OpenAI all answer 404 for that) or a wrong
 *   base_url: an operator problem too -> 502 with the upstream's message; retryable, as 401.
 * - 429: rate limited upstream -> 429 so SDKs back off and retry (retry-after is kept in the message).
 * - 408 / 504 -> 504; other 5xx -> 502.
 */
export function upstreamStatusError(status: number, body: string, retryAfter: string | string[] | undefined, redact: (text: string) => string): EngineError {
  if (status === 401 || status === 403) {
    // the deployment's fault, not the request's: another deployment may take it (retryable)
    return new EngineError(`upstream refused Portico's credentials (HTTP ${status}); check the model's api key`, 'upstream_auth_failed', 502, {
      retryable: true,
      upstreamStatus: status,
    });
  }
  const { message, code } = parseErrorBody(body);
  const msg = redact(message || `HTTP ${status}`).slice(0, 2000);
  if (status === 429) {
    const ra = Array.isArray(retryAfter) ? retryAfter[0] : retryAfter;
    return new EngineError(`upstream rate limit: ${msg}${ra ? ` (retry after ${ra} s)` : ''}`, 'rate_limit_exceeded', 429, {
      retryable: true,
      retryAfterMs: retryAfterMs(ra),
      upstreamStatus: status,
    });
  }
  if (status === 404) return new EngineError(`upstream: ${msg}`, code || 'upstream_not_found', 502, { retryable: true, upstreamStatus: status });
  if (status === 408 || status === 504) return new EngineError(`upstream timeout: ${msg}`, 'upstream_unavailable', 504, { retryable: true, upstreamStatus: status });
  if (status >= 400 && status < 500) return new EngineError(msg, code || 'invalid_request', 400, { upstreamStatus: status });
  return new EngineError(`upstream error (HTTP ${status}): ${msg}`, code || 'upstream_error', 502, { retryable: status >= 500, upstreamStatus: status });
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

/**
 * One in-flight upstream request: its timeout (the wait for the headers, then the longest silence between two
 * body chunks: touch() on every chunk) and its abort wiring (the caller's signal aborts the request; the call
 * is the listener itself, no closure per request); then the body (Buffers) and what it needs to end it.
 *
 * The call is also the signal undici's request listens to: undici takes an EventEmitter with `aborted` and
 * `reason` as well as an AbortSignal, and an emitter costs a fraction of an AbortController and its EventTarget
 * listeners, which every upstream call would otherwise make and tear down.
 */
export class Call extends EventEmitter {
  res?: Readable;
  headers: Dispatcher.ResponseData['headers'] = {};
  /** utf8 text of the body's chunks as they come (a code point split between two chunks is held back) */
  readonly decoder = new StringDecoder('utf8');
  /** the request was aborted (the caller's signal, or the timeout): undici reads these two */
  aborted = false;
  reason: unknown = undefined;
  timedOut = false;
  /** the call's client span when the request is traced: ended with the call */
  span?: UpstreamSpan;
  private readonly timer: NodeJS.Timeout;

  constructor(
    timeoutMs: number,
    readonly signal: AbortSignal | undefined,
  ) {
    super();
    this.timer = setTimeout(onCallTimeout, timeoutMs, this);
    signal?.addEventListener('abort', this, { once: true });
  }

  /** aborts the upstream request (undici closes its connection) */
  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.emit('abort');
  }

  /** the caller's signal fired (EventListener interface) */
  handleEvent(): void {
    this.abort(cancelled());
  }

  get cancelled(): boolean {
    return this.signal?.aborted === true;
  }

  /** data arrived: the silence timer starts again */
  touch(): void {
    this.timer.refresh();
  }

  /** finished: no timeout, no abort any more */
  dispose(): void {
    clearTimeout(this.timer);
    this.signal?.removeEventListener('abort', this);
    if (this.span !== undefined) {
      this.span.end();
      this.span = undefined;
    }
  }

  /** the whole body was read */
  get complete(): boolean {
    return this.res?.readableEnded === true;
  }

  /** ended early (consumer stopped, error): close the upstream connection so the upstream stops generating */
  destroy(): void {
    if (this.span !== undefined && this.res?.readableEnded !== true) this.span.fail(this.cancelled ? new Error('cancelled') : new Error('the answer was cut before its end'));
    this.dispose();
    if (this.res && !this.res.readableEnded) this.res.destroy();
  }

  /**
   * The answer is complete ([DONE], response.completed) but the body may go on (usually just the chunked
   * encoding's terminator): it is read and dropped so the connection goes back to the pool. An upstream that
   * keeps the stream open after its final event would pin the connection: it is closed after 5 s.
   */
  release(): void {
    this.dispose();
    const res = this.res!;
    if (res.readableEnded || res.destroyed) return;
    res.resume();
    const t = setTimeout(() => res.destroy(), 5000);
    t.unref();
    res.once('close', () => clearTimeout(t));
  }
}

function onCallTimeout(call: Call): void {
  call.timedOut = true;
  call.abort(new Error('timeout'));
}
