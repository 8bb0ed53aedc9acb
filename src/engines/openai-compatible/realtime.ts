/**
 * The client side of an upstream realtime server (OpenAI's Realtime API over a WebSocket, or a server speaking it:
 * speaches, another Portico): `GET {base_url}/realtime?model=...` upgraded to a WebSocket, with `Authorization:
 * Bearer <key>`. A link carries OpenAI's events as they are, one JSON object per text frame, both ways; it does not
 * read them (the realtime feature does), only checks that each is a JSON object.
 *
 * Limits, each an EngineError as the HTTP transport (engines/shared/http.ts) gives for the same failure:
 * - connectMs: the TCP connect and the upgrade's answer together (a black-holed address, or a server that accepts
 *   and never answers the upgrade) -> 504 `upstream_unavailable`; refused or unresolvable -> 502 `upstream_unavailable`.
 * - a refused upgrade (an HTTP status instead of 101) -> upstreamStatusError, the mapping of every HTTP upstream
 *   (401/403 502 `upstream_auth_failed`, 429 429, 404 502, 5xx 502...), its message read from at most 64 KiB of the
 *   refusal's body.
 * - firstEventMs: from the upgrade to the first server event (session.created) -> 504 `upstream_unavailable`.
 * - maxFrameBytes: the largest frame read (ws's maxPayload; ws closes with 1009) -> 502 `upstream_error`.
 * - a binary frame, a text frame that is not a JSON object (or not UTF-8), a frame that breaks the WebSocket protocol
 *   -> 502 `upstream_error`, and the link is closed (1003 / 1007 / ws's code): the relay cannot know what the upstream
 *   meant, and events after it would be out of step.
 * - a reset, or a close other than 1000/1001 -> 502 `upstream_stream_broken` (the close code and its reason said).
 * Every message goes through the upstream's redaction (its key, its base_url's credentials): none reaches a client
 * or a log.
 *
 * Per-message deflate is not offered: what these sessions carry is mostly base64 audio, which it hardly shrinks,
 * at a CPU cost on every frame.
 */
import WebSocket from 'ws';
import net from 'node:net';
import tls from 'node:tls';
import type { ClientRequest, IncomingMessage } from 'node:http';
import { StringDecoder } from 'node:string_decoder';
import { EngineError, type RealtimeConnectRequest, type RealtimeEngine, type RealtimeLink } from '../types.js';
import { upstreamStatusError } from '../shared/http.js';
import { redactSecrets, upstreamSecrets } from '../shared/redact.js';

export interface RealtimeEngineOptions {
  /** e.g. https://api.openai.com/v1 (the link opens {baseUrl}/realtime, http -> ws, https -> wss) */
  baseUrl: string;
  apiKey?: string;
  /** extra headers of the upgrade request (e.g. OpenAI-Organization); the key goes in `apiKey` */
  headers?: Record<string, string>;
  /** ms for the TCP connect and the upgrade's answer together (default 10000) */
  connectMs?: number;
  /** ms from the upgrade to the first server event (default 15000) */
  firstEventMs?: number;
  /** the largest frame taken from the upstream, in bytes (default 16 MiB) */
  maxFrameBytes?: number;
}

export const REALTIME_DEFAULTS = { connectMs: 10_000, firstEventMs: 15_000, maxFrameBytes: 16 * 1024 * 1024 } as const;

/** the most of a refused upgrade's body read for its message */
const REFUSAL_BODY_BYTES = 64 * 1024;
/** events queued for a consumer that is behind: reading the socket pauses above HIGH and resumes at LOW */
const HIGH = 256;
const LOW = 64;
/** a close this side starts: the upstream has this long to answer the closing handshake before the socket is cut */
const CLOSE_GRACE_MS = 2_000;

const RETRY = { retryable: true } as const;

/** an upstream realtime server's engine: it always connects */
export type UpstreamRealtimeEngine = RealtimeEngine & { connect(req: RealtimeConnectRequest): Promise<RealtimeLink> };

export function createRealtimeEngine(o: RealtimeEngineOptions): UpstreamRealtimeEngine {
  let base: URL;
  try {
    base = new URL(o.baseUrl);
  } catch {
    throw new Error('realtime upstream: invalid base_url');
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:') throw new Error('realtime upstream: base_url must be http(s)');
  const secure = base.protocol === 'https:';
  const secrets = upstreamSecrets(o.baseUrl, o.apiKey);
  const redact = (t: string) => (secrets.length === 0 ? t : redactSecrets(t, secrets));
  const connectMs = o.connectMs ?? REALTIME_DEFAULTS.connectMs;
  const firstEventMs = o.firstEventMs ?? REALTIME_DEFAULTS.firstEventMs;
  const maxFrameBytes = o.maxFrameBytes ?? REALTIME_DEFAULTS.maxFrameBytes;

  // the URL without its credentials (they go in the Basic header, as the HTTP transport sends them)
  const headers: Record<string, string> = {};
  if (base.username || base.password) {
    headers.authorization = 'Basic ' + Buffer.from(`${decodeURIComponent(base.username)}:${decodeURIComponent(base.password)}`).toString('base64');
  }
  if (o.headers) for (const [k, v] of Object.entries(o.headers)) headers[k.toLowerCase()] = v;
  if (o.apiKey) headers.authorization = `Bearer ${o.apiKey}`;
  const target = new URL(base.href);
  target.username = '';
  target.password = '';
  target.protocol = secure ? 'wss:' : 'ws:';
  target.pathname = target.pathname.replace(/\/+$/, '') + '/realtime';

  const open = new Set<Link>();
  /** links being opened: failed with this on the engine's close */
  const opening = new Set<(e: EngineError) => void>();
  let closed = false;

  return {
    kind: 'openai-compatible',
    connect(req: RealtimeConnectRequest): Promise<RealtimeLink> {
      if (closed) return Promise.reject(closedError());
      if (req.signal?.aborted) return Promise.reject(aborted());
      const url = new URL(target.href);
      url.searchParams.set('model', req.model);
      return new Promise<RealtimeLink>((resolve, reject) => {
        const deadline = performance.now() + connectMs;
        let tcpUp = false;
        let settled = false;
        let refusal: ClientRequest | undefined;
        const ws = new WebSocket(url, {
          headers,
          perMessageDeflate: false,
          maxPayload: maxFrameBytes,
          followRedirects: false,
          // the socket is ours to watch: a connect that completed and an upgrade that did not are two failures
          createConnection: ((opts: net.NetConnectOpts & tls.ConnectionOptions) => {
            const s = secure
              ? tls.connect({ ...opts, path: undefined, servername: opts.servername ?? (net.isIP(String(opts.host)) ? '' : opts.host) } as tls.ConnectionOptions)
              : net.connect({ ...opts, path: undefined } as net.NetConnectOpts);
            s.once(secure ? 'secureConnect' : 'connect', () => (tcpUp = true));
            return s;
          }) as never,
        });
        const fail = (e: EngineError) => {
          if (settled) return;
          settled = true;
          finish();
          ws.terminate();
          reject(e);
        };
        const finish = () => {
          clearTimeout(timer);
          opening.delete(fail);
          req.signal?.removeEventListener('abort', onAbort);
        };
        const timer = setTimeout(() => {
          if (refusal !== undefined) return; // the refusal's body is being read: it ends the wait with what came
          fail(
            tcpUp
              ? new EngineError(`upstream did not answer the realtime upgrade within ${connectMs} ms`, 'upstream_unavailable', 504, RETRY)
              : new EngineError(`upstream did not accept a connection within ${connectMs} ms`, 'upstream_unavailable', 504, RETRY),
          );
        }, connectMs);
        opening.add(fail);
        const onAbort = () => fail(aborted());
        req.signal?.addEventListener('abort', onAbort, { once: true });
        ws.on('error', (err) => fail(transportError(err, redact)));
        ws.on('close', () => fail(new EngineError('upstream unreachable (the upstream closed the connection before answering)', 'upstream_unavailable', 502, RETRY)));
        ws.on('unexpected-response', (r: ClientRequest, res: IncomingMessage) => {
          refusal = r;
          readRefusal(res, deadline).then(
            (body) => fail(refused(res, body, redact)),
            () => fail(refused(res, '', redact)),
          );
        });
        ws.once('open', () => {
          if (settled) return;
          settled = true;
          finish();
          ws.removeAllListeners('error');
          ws.removeAllListeners('close');
          const link = new Link(ws, firstEventMs, maxFrameBytes, redact, () => open.delete(link), req.signal);
          open.add(link);
          resolve(link);
        });
      });
    },
    async close() {
      closed = true;
      for (const fail of [...opening]) fail(closedError());
      const links = [...open];
      for (const l of links) l.close(1001, 'going away');
      await Promise.all(links.map((l) => l.ended));
    },
  };
}

function closedError(): EngineError {
  return new EngineError('the realtime upstream engine is closed', 'engine_closed', 503, RETRY);
}

function aborted(): EngineError {
  return new EngineError('realtime session aborted', 'aborted', 499);
}

/** A failure of the transport before the upgrade: what the HTTP transport says for the same (Upstream.mapError). */
function transportError(err: Error, redact: (t: string) => string): EngineError {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ECONNRESET' || code === 'EPIPE' || /socket hang up/i.test(err.message)) {
    return new EngineError('upstream unreachable (the upstream closed the connection before answering)', 'upstream_unavailable', 502, RETRY);
  }
  const what = code ?? err.message;
  return new EngineError(`upstream unreachable (${redact(what)})`, 'upstream_unavailable', code === 'ETIMEDOUT' ? 504 : 502, RETRY);
}

/** reads at most REFUSAL_BODY_BYTES of a refused upgrade's body, until the connect's deadline at the latest */
function readRefusal(res: IncomingMessage, deadline: number): Promise<string> {
  return new Promise((resolve) => {
    const utf8 = new StringDecoder('utf8');
    let text = '';
    let size = 0;
    let done = false;
    const end = () => {
      if (done) return;
      done = true;
      clearTimeout(cut);
      resolve(text + utf8.end());
    };
    // the connect timer gave way to this read: it gets what is left of the connect's time
    const cut = setTimeout(end, Math.max(0, deadline - performance.now()));
    res.on('data', (d: Buffer) => {
      if (done) return;
      const room = REFUSAL_BODY_BYTES - size;
      text += utf8.write(d.length > room ? d.subarray(0, room) : d);
      size += Math.min(d.length, room);
      if (size >= REFUSAL_BODY_BYTES) end();
    });
    res.on('end', end);
    res.on('error', end);
    res.on('close', end);
  });
}

function refused(res: IncomingMessage, body: string, redact: (t: string) => string): EngineError {
  const status = res.statusCode ?? 0;
  if (status < 400) {
    return new EngineError(`upstream answered HTTP ${status} instead of a realtime WebSocket upgrade (is base_url a realtime server's /v1?)`, 'upstream_error', 502, {
      retryable: true,
      upstreamStatus: status,
    });
  }
  return upstreamStatusError(status, body, res.headers['retry-after'], redact);
}

type Next = { value: Record<string, unknown>; done: false } | { value: undefined; done: true };

/** One open WebSocket to the upstream (RealtimeLink). */
class Link implements RealtimeLink {
  private readonly queue: Array<Record<string, unknown>> = [];
  private head = 0;
  private waiter: { resolve: (n: Next) => void; reject: (e: unknown) => void } | undefined;
  /** the link's end: undefined while open; null ended normally (or by this side); an EngineError when it failed */
  private outcome: EngineError | null | undefined;
  /** closed by this side (close(), abort): the events end without an error, whatever the upstream does */
  private local = false;
  private paused = false;
  private sawEvent = false;
  private firstTimer: NodeJS.Timeout | undefined;
  private graceTimer: NodeJS.Timeout | undefined;
  /** resolves once the socket is closed */
  readonly ended: Promise<void>;
  readonly events: AsyncIterable<Record<string, unknown>>;

  constructor(
    private readonly ws: WebSocket,
    firstEventMs: number,
    private readonly maxFrameBytes: number,
    private readonly redact: (t: string) => string,
    private readonly onEnd: () => void,
    private readonly signal: AbortSignal | undefined,
  ) {
    this.firstTimer = setTimeout(() => {
      this.fail(new EngineError(`upstream sent no event within ${firstEventMs} ms of the realtime session opening`, 'upstream_unavailable', 504, RETRY), 1000);
    }, firstEventMs);
    ws.on('message', (data, binary) => this.onMessage(data as Buffer, binary));
    ws.on('error', (err) => this.onError(err));
    this.ended = new Promise((resolve) => ws.once('close', (code, reason) => (this.onClose(code, reason.toString()), resolve())));
    signal?.addEventListener('abort', this, { once: true });
    const self = this;
    this.events = {
      [Symbol.asyncIterator]: () => ({
        next: () => self.next(),
        return: () => {
          self.close(1000);
          return Promise.resolve({ value: undefined, done: true } as const);
        },
      }),
    };
  }

  get bufferedAmount(): number {
    return this.ws.bufferedAmount;
  }

  send(event: Record<string, unknown>): boolean {
    if (this.ws.readyState !== WebSocket.OPEN || this.outcome !== undefined) return false;
    this.ws.send(JSON.stringify(event));
    return true;
  }

  close(code = 1000, reason = ''): void {
    if (this.outcome === undefined) this.local = true;
    this.settle(null);
    this.shut(validCloseCode(code) ? code : 1000, reason);
  }

  /** the connect request's signal aborted (EventListener interface) */
  handleEvent(): void {
    this.close(1000);
  }

  private next(): Promise<Next> {
    if (this.head < this.queue.length && !this.local) {
      const value = this.queue[this.head]!;
      this.queue[this.head++] = undefined as never;
      if (this.head > 1024 && this.head * 2 > this.queue.length) {
        this.queue.splice(0, this.head);
        this.head = 0;
      }
      if (this.paused && this.queue.length - this.head <= LOW) {
        this.paused = false;
        this.ws.resume();
      }
      return Promise.resolve({ value, done: false });
    }
    if (this.outcome === null || this.local) return Promise.resolve({ value: undefined, done: true });
    if (this.outcome !== undefined) {
      const e = this.outcome;
      // thrown once: a second next() after the failure ends the iteration
      this.outcome = null;
      return Promise.reject(e);
    }
    return new Promise((resolve, reject) => (this.waiter = { resolve, reject }));
  }

  private onMessage(data: Buffer, binary: boolean): void {
    if (this.outcome !== undefined) return;
    if (!this.sawEvent) {
      this.sawEvent = true;
      clearTimeout(this.firstTimer);
    }
    if (binary) return this.fail(new EngineError('upstream sent a binary frame on the realtime session (it speaks JSON events)', 'upstream_error', 502, RETRY), 1003);
    let v: unknown;
    try {
      v = JSON.parse(data.toString('utf8'));
    } catch {
      return this.fail(new EngineError('upstream sent a realtime event that is not JSON', 'upstream_error', 502, RETRY), 1007);
    }
    if (v === null || typeof v !== 'object' || Array.isArray(v)) {
      return this.fail(new EngineError('upstream sent a realtime event that is not a JSON object', 'upstream_error', 502, RETRY), 1007);
    }
    const event = v as Record<string, unknown>;
    const w = this.waiter;
    if (w !== undefined) {
      this.waiter = undefined;
      w.resolve({ value: event, done: false });
      return;
    }
    this.queue.push(event);
    if (!this.paused && this.queue.length - this.head >= HIGH) {
      this.paused = true;
      this.ws.pause();
    }
  }

  private onError(err: Error): void {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') {
      this.fail(new EngineError(`upstream sent a realtime frame larger than ${this.maxFrameBytes} bytes`, 'upstream_error', 502, RETRY));
      return;
    }
    if (code?.startsWith('WS_ERR_')) {
      // a frame ws refused (text that is not UTF-8, a masked or unknown frame...): the upstream's answer, not the network
      this.fail(new EngineError(`upstream sent an invalid realtime frame (${code})`, 'upstream_error', 502, RETRY));
      return;
    }
    const what = code === 'ECONNRESET' || code === 'EPIPE' ? 'the upstream reset the connection' : this.redact(code ?? err.message);
    this.fail(new EngineError(`upstream realtime connection broke (${what})`, 'upstream_stream_broken', 502, RETRY));
  }

  private onClose(code: number, reason: string): void {
    clearTimeout(this.firstTimer);
    clearTimeout(this.graceTimer);
    this.signal?.removeEventListener('abort', this);
    this.onEnd();
    if (this.outcome !== undefined) return;
    if (code === 1000 || code === 1001) return this.settle(null);
    const why = reason ? `: ${this.redact(reason).slice(0, 200)}` : '';
    const msg =
      code === 1006
        ? 'upstream realtime connection broke (the upstream closed it without a closing handshake)'
        : code === 1005
          ? 'upstream closed the realtime session without a close code'
          : `upstream closed the realtime session with code ${code}${why}`;
    this.settle(new EngineError(msg, 'upstream_stream_broken', 502, RETRY));
  }

  /** the link failed: the events end with `e` (after what was already queued), the socket is closed */
  private fail(e: EngineError, closeCode?: number): void {
    if (this.outcome !== undefined) return;
    this.settle(e);
    this.shut(closeCode ?? 1011, '');
  }

  private settle(outcome: EngineError | null): void {
    if (this.outcome !== undefined) return;
    this.outcome = outcome;
    clearTimeout(this.firstTimer);
    if (this.paused) {
      this.paused = false;
      this.ws.resume();
    }
    const w = this.waiter;
    if (w === undefined) return;
    this.waiter = undefined;
    if (outcome === null) w.resolve({ value: undefined, done: true });
    else {
      this.outcome = null;
      w.reject(outcome);
    }
  }

  /** starts the closing handshake; a peer that does not answer it within CLOSE_GRACE_MS has its socket cut */
  private shut(code: number, reason: string): void {
    const ws = this.ws;
    if (ws.readyState === WebSocket.CLOSED) return;
    if (ws.readyState === WebSocket.OPEN) ws.close(code, truncateReason(reason));
    if (this.graceTimer === undefined) {
      this.graceTimer = setTimeout(() => ws.terminate(), CLOSE_GRACE_MS);
      this.graceTimer.unref();
    }
  }
}

/** the codes a WebSocket endpoint may send in a close frame */
function validCloseCode(code: number): boolean {
  return Number.isInteger(code) && (code === 1000 || (code >= 1001 && code <= 1014 && code !== 1004 && code !== 1005 && code !== 1006) || (code >= 3000 && code <= 4999));
}

/** a close frame's reason is at most 123 bytes of UTF-8 */
function truncateReason(reason: string): string {
  let r = reason;
  while (Buffer.byteLength(r) > 123) r = r.slice(0, -1);
  return r;
}
