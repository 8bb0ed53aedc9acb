/**
 * One WebSocket connection of the WebSocket mode (docs/api.md, "WebSocket mode"):
 *
 * - every `response.create` message is a turn; turns run one at a time, in the order they came, and each is
 *   answered in that order, by the response's events (the same objects as the SSE stream, from the same
 *   ResponseBuilder and Runner) or by one error frame;
 * - each turn is admitted as an HTTP request is (key still valid, scope, rate limit, budget) and recorded the same;
 * - the last response that finished (completed or incomplete) is kept in connection-local memory, so a chain
 *   continues with only its new items, store false included; a continuation that fails evicts the response it
 *   named;
 * - at most `maxQueuedTurns` messages wait behind the one in flight (more are refused at once); frames over
 *   `maxFrameBytes` are refused with an error frame;
 * - the connection ends after `maxAgeMs` (`websocket_connection_limit_reached`), after `idleMs` without a client
 *   message while no response is in progress or waiting (1000, `websocket_idle_timeout`), when the server shuts
 *   down, or when the client closes it, which stops the turn in flight as an HTTP disconnect does.
 */
import type { FastifyBaseLogger, FastifyRequest } from 'fastify';
import type { KeyPrincipal } from '../../platform/auth/principal.js';
import type { WsLimits } from '../../platform/config.js';
import { AppError } from '../../platform/errors.js';
import { toAppError } from '../../platform/http/errors.js';
import { idleClock } from '../../platform/idle-clock.js';
import type { StoredItem } from '../input.js';
import { outputAsItems, type OutputItem, type ResponseObject } from '../object.js';
import type { Prepared, ResponsesService } from '../service.js';
import { OPEN, errorFrame, frameBytes, readClientFrame, withEnvelope, type ClientMessage, type RawData, type WsSocket } from './protocol.js';

export interface WsDeps {
  svc: ResponsesService;
  /** admits one turn as the {base_url} gate admits a request: the key (verified again), scope, rate limit, budget */
  admit: (req: FastifyRequest) => Promise<KeyPrincipal>;
  limits: WsLimits;
  log: FastifyBaseLogger;
}

/** a message that came and waits for its turn */
interface Pending extends ClientMessage {
  n: number;
  bytes: number;
  /** when it came (performance.now()) */
  at: number;
}

/** the last response of the connection, and the conversation up to and including it */
interface Memory {
  id: string;
  history: StoredItem[];
  /** about how much memory the history takes (JSON characters) */
  bytes: number;
  /** the whole conversation is in storage (every response of it was stored), so a chain from storage has it all */
  stored: boolean;
}

/** close codes (RFC 6455): 1001 also tells the official SDK's ResponsesWS that reconnecting is worth it */
export const CLOSE_GOING_AWAY = 1001;
/**
 * the idle close: a normal closure (1000), not 1001, so that a client that reconnects on 1001 (the SDK's `reconnect`)
 * does not open a new idle socket at once; it opens one when it has something to send
 */
export const CLOSE_NORMAL = 1000;
export const IDLE_REASON = 'websocket_idle_timeout';
const CLOSE_POLICY = 1008;

const outputChars = (output: OutputItem[]) => JSON.stringify(output).length;

export class WsConnection {
  private readonly queue: Pending[] = [];
  private busy = false;
  private memory: Memory | undefined;
  /** a response that finished but was too large to keep in memory */
  private overflowed: string | undefined;
  private current: AbortController | undefined;
  private state: 'open' | 'expired' | 'draining' = 'open';
  private closing = false;
  private closed = false;
  private limitSent = false;
  private frames = 0;
  private turnsRun = 0;
  private alive = true;
  private readonly opened = Date.now();
  private readonly ageTimer: NodeJS.Timeout;
  private readonly pingTimer: NodeJS.Timeout | undefined;
  private drainTimer: NodeJS.Timeout | undefined;
  private stopIdle: (() => void) | undefined;
  /** the last client message, or the end of the work it brought (performance.now()): the idle spell starts there */
  private activeAt = performance.now();
  private resolveDone!: () => void;
  /** resolves when the socket has closed */
  readonly done = new Promise<void>((r) => (this.resolveDone = r));
  private readonly memoryCap: number;

  constructor(
    private readonly socket: WsSocket,
    private readonly req: FastifyRequest,
    private readonly d: WsDeps,
  ) {
    this.memoryCap = 4 * d.limits.maxFrameBytes;
    socket.on('message', (data, isBinary) => this.onMessage(data, isBinary));
    socket.on('close', (code) => this.onClose(code));
    socket.on('pong', () => (this.alive = true));
    this.ageTimer = setTimeout(() => this.expire(), d.limits.maxAgeMs);
    this.startIdleClock();
    if (d.limits.pingIntervalMs > 0) {
      this.pingTimer = setInterval(() => {
        // a peer that did not answer the last ping is gone (a dropped network does not close the socket)
        if (!this.alive) return this.socket.terminate();
        this.alive = false;
        this.socket.ping();
      }, d.limits.pingIntervalMs);
    }
  }

  get lang() {
    return this.req.headers['accept-language'];
  }

  // ------------------------------------------------------------------ frames in

  private onMessage(data: RawData, isBinary: boolean) {
    if (this.closing || this.closed) return;
    // a client message: the connection is not idle (the clock starts again when its answers are done)
    this.activeAt = performance.now();
    const n = ++this.frames;
    if (this.busy && this.queue.length >= this.d.limits.maxQueuedTurns) {
      // the one answer not given in order: a client that floods the connection learns it at once
      this.send(
        errorFrame(
          new AppError(
            'rate_limit_exceeded',
            `Too many messages waiting on this connection: at most ${this.d.limits.maxQueuedTurns} response.create messages may wait behind the response in progress. Wait for a response to finish, or open another connection for parallel work.`,
          ),
          this.lang,
        ),
      );
      return;
    }
    const bytes = frameBytes(data);
    this.queue.push({ n, bytes, at: performance.now(), ...readClientFrame(data, isBinary, this.d.limits.maxFrameBytes) });
    void this.pump();
  }

  private async pump() {
    if (this.busy) return;
    this.busy = true;
    try {
      for (let t = this.queue.shift(); t && !this.closed && !this.closing; t = this.queue.shift()) {
        if (this.state === 'expired') this.sendLimit();
        else if (this.state === 'draining') this.send(errorFrame(shuttingDown(), this.lang));
        else if (t.error) this.refuse(t.previous, t.error);
        else await this.turn(t);
      }
    } catch (e) {
      // a fault of this code, not of the client's request: say so and end the connection
      this.d.log.error({ err: e, reqId: this.req.id }, 'websocket turn failed outside its response');
      this.send(errorFrame(new AppError('internal_error'), this.lang));
      this.closeWith(1011, 'internal error');
    } finally {
      this.busy = false;
    }
    if (this.closed || this.closing) return;
    if (this.state === 'expired') {
      if (!this.limitSent) this.sendLimit();
      this.closeWith(CLOSE_GOING_AWAY, 'websocket_connection_limit_reached');
    } else if (this.state === 'draining') this.closeWith(CLOSE_GOING_AWAY, 'server shutting down');
    // the idle spell starts again now that every message so far is answered
    else this.activeAt = performance.now();
  }

  /**
   * The idle clock (WS_IDLE_MS, src/platform/idle-clock.ts): a connection whose last message has been answered, and
   * that gets no other for that long, is closed. Never while a response is in progress or a message waits: those
   * are not idle. The spell starts at the last message and again when the work it brought ends.
   */
  private startIdleClock() {
    this.stopIdle = idleClock(
      {
        lastActivity: () => this.activeAt,
        busy: () => this.busy || this.queue.length > 0 || this.state !== 'open' || this.closing || this.closed,
        onIdle: () => this.closeWith(CLOSE_NORMAL, IDLE_REASON),
      },
      this.d.limits.idleMs,
    );
  }

  // ------------------------------------------------------------------ one turn

  private async turn(t: Pending) {
    const body = t.body!;
    const prev = t.previous;
    const started = performance.now();
    const requestId = `${this.req.id}:${++this.turnsRun}`;
    let p: Prepared;
    let mem: Memory | undefined;
    try {
      const key = await this.d.admit(this.req);
      mem = prev !== undefined && this.memory?.id === prev ? this.memory : undefined;
      p = await this.d.svc.preparer.prepare(body, key, requestId, undefined, { history: mem?.history });
      if (mem && !mem.stored && p.store) {
        // a stored response that continues one that was not stored keeps the conversation as its input, so a
        // chain from it (over HTTP, on another connection or instance) still has all of it
        p.inputItems = [...p.history, ...p.inputItems];
        p.history = [];
      }
    } catch (e) {
      let err = toAppError(e, this.req);
      if (err.code === 'previous_response_not_found' && prev !== undefined && prev === this.overflowed) {
        err = new AppError(
          'previous_response_not_found',
          `Previous response with id '${prev}' not found: the conversation grew beyond what one connection keeps in memory (${this.memoryCap} bytes) and it was not stored. Continue with store: true, or compact the conversation (POST /v1/responses/compact).`,
          'previous_response_id',
        );
      }
      this.refuse(prev, err);
      this.logTurn(requestId, started, err.code, err.status);
      if (err.status === 401) this.closeWith(CLOSE_POLICY, 'the API key is no longer valid');
      return;
    }
    if (this.closed) {
      // the client left while the turn was being prepared: nothing is generated for nobody
      this.logTurn(requestId, started, 'client_closed', 499);
      return;
    }
    const ac = new AbortController();
    this.current = ac;
    this.req.server.metrics?.activeStreams.inc();
    let last = -1;
    let final: ResponseObject | undefined;
    try {
      for await (const ev of this.d.svc.stream(p, ac.signal)) {
        last = ev.sequence_number;
        if (ev.type === 'response.completed' || ev.type === 'response.incomplete' || ev.type === 'response.failed') final = ev.response as ResponseObject;
        this.send(ev.type === 'error' ? withEnvelope(ev) : ev);
      }
    } catch (e) {
      this.evict(prev);
      if (this.closed) {
        this.logTurn(requestId, started, 'client_closed', 499);
        return;
      }
      // stopped for shutdown, or a failure after the response started: an error frame, as the SSE stream ends
      const err = ac.signal.aborted && this.state === 'draining' ? shuttingDown() : toAppError(e, this.req);
      this.send(errorFrame(err, this.lang, last >= 0 ? last + 1 : undefined));
      this.logTurn(requestId, started, err.code, last >= 0 ? 200 : err.status);
      return;
    } finally {
      this.current = undefined;
      this.req.server.metrics?.activeStreams.dec();
    }
    if (final && (final.status === 'completed' || final.status === 'incomplete')) this.remember(p, final, t.bytes, mem);
    else this.evict(prev);
    this.logTurn(requestId, started, final?.status ?? 'ended', 200);
  }

  /** a turn refused before its response started: the continuation's previous response is evicted */
  private refuse(prev: string | undefined, e: AppError) {
    this.evict(prev);
    this.send(errorFrame(e, this.lang));
  }

  private evict(prev: string | undefined) {
    if (prev !== undefined && this.memory?.id === prev) this.memory = undefined;
  }

  /** `mem`: the memory the turn continued from, if it did */
  private remember(p: Prepared, final: ResponseObject, frame: number, mem: Memory | undefined) {
    const base = mem ? mem.bytes : p.history.length ? JSON.stringify(p.history).length : 0;
    const bytes = base + frame + outputChars(final.output);
    if (bytes > this.memoryCap) {
      this.memory = undefined;
      this.overflowed = final.id;
      return;
    }
    // a stored response has its whole conversation in storage: its history came from storage, from a stored
    // chain in memory, or was moved into its own input (above)
    this.memory = { id: final.id, history: [...p.history, ...p.inputItems, ...outputAsItems(final.output)], bytes, stored: p.store };
    this.overflowed = undefined;
  }

  // ------------------------------------------------------------------ ending

  private expire() {
    if (this.closed || this.closing || this.state !== 'open') return;
    this.state = 'expired';
    // the turn in flight finishes; what waits, and what comes, is answered with the limit error
    if (!this.busy) void this.pump();
  }

  private sendLimit() {
    this.limitSent = true;
    const minutes = Math.round((this.d.limits.maxAgeMs / 60_000) * 100) / 100;
    this.send(
      errorFrame(
        new AppError('websocket_connection_limit_reached', `Responses websocket connection limit reached (${minutes} minutes). Create a new websocket connection to continue.`),
        this.lang,
      ),
    );
  }

  /**
   * Shutdown: no new turns (waiting ones are answered with 503); the turn in flight gets `graceMs` to finish, then
   * is stopped (an error frame says so); then the connection closes with 1001. Resolves when it has closed.
   */
  drain(graceMs: number): Promise<void> {
    if (!this.closed && !this.closing) {
      this.state = 'draining';
      if (!this.busy) void this.pump();
      else this.drainTimer = setTimeout(() => this.current?.abort(shuttingDown()), graceMs);
    }
    return this.done;
  }

  /** cuts the connection without a closing handshake (a peer that does not answer it) */
  terminate() {
    this.socket.terminate();
  }

  private closeWith(code: number, reason: string) {
    if (this.closing || this.closed) return;
    this.closing = true;
    try {
      this.socket.close(code, reason);
    } catch {
      this.socket.terminate();
    }
  }

  private onClose(code: number) {
    this.closed = true;
    clearTimeout(this.ageTimer);
    clearTimeout(this.drainTimer);
    this.stopIdle?.();
    clearInterval(this.pingTimer);
    // the client left (or the connection ended): the turn in flight stops, as on an HTTP disconnect
    this.current?.abort(new Error('client disconnected'));
    // the turns still waiting were abandoned too: each has its line and count, as an HTTP request the client
    // closed (499, client_closed); malformed messages waiting for their error frame are not turns
    for (const t of this.queue) if (!t.error) this.logTurn(`${this.req.id}:${++this.turnsRun}`, t.at, 'client_closed', 499);
    this.queue.length = 0;
    this.memory = undefined;
    this.req.log.info(
      { method: 'GET', url: '/v1/responses', transport: 'websocket', status: 101, ms: Date.now() - this.opened, turns: this.turnsRun, close: code },
      'websocket closed',
    );
    this.resolveDone();
  }

  private send(frame: object) {
    if (this.socket.readyState !== OPEN) return;
    this.socket.send(JSON.stringify(frame));
  }

  /** one line and one count per turn, as the HTTP requests have (status: 200 once the response started) */
  private logTurn(requestId: string, started: number, outcome: string, status: number) {
    const ms = Math.round((performance.now() - started) * 100) / 100;
    this.req.server.metrics?.httpRequest('WS', '/v1/responses', status);
    this.req.log.info({ turn: requestId, method: 'WS', url: '/v1/responses', status, outcome, ms }, 'websocket turn');
  }
}

function shuttingDown() {
  return new AppError('service_unavailable', 'The server is shutting down: the response was not made (or was stopped). Open a new connection and send it again.');
}
