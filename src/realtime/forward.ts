/**
 * A realtime session forwarded to an upstream realtime server (a deployment of a realtime model with an upstream:
 * OpenAI, speaches, another Portico). Events go both ways unchanged, one JSON object per frame; Portico keeps what
 * it keeps of every session: the key (verified again, each response admitted as a request is), the session's
 * limits, a slow reader's bound, and the usage, read from each `response.done` (its tokens) and from the audio that
 * crossed (seconds in and out), recorded per response and priced by the model's pricing.
 */
import type { FastifyRequest } from 'fastify';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import { AppError } from '../platform/errors.js';
import { toAppError } from '../platform/http/errors.js';
import { fromEngineError } from '../api/engine-errors.js';
import { EngineError, type RealtimeLink } from '../engines/types.js';
import { AUDIO_FORMAT_TYPES, bytesPerSecond, type AudioFormatType } from './audio.js';
import { errType, isObj, newId, type Obj } from './protocol.js';
import { REALTIME_OPERATION, type RealtimeService, type Served } from './service.js';
import { watch } from './clocks.js';
import type { WsSocket } from './socket.js';

type Upstream = Extract<Served, { kind: 'upstream' }>;

export interface ForwardOptions {
  svc: RealtimeService;
  served: Upstream;
  socket: WsSocket;
  req: FastifyRequest;
  key: KeyPrincipal;
  initial?: unknown;
  onClose: () => void;
}

export class ForwardedSession {
  private link: RealtimeLink | undefined;
  /** the deployment the link went to (usage records name it) */
  private deployment: string | undefined;
  private closed = false;
  private lastEventAt = performance.now();
  /** admissions in progress (a response's key, rate limit and budget checked again): the server's time, not idleness */
  private admitting = 0;
  private stopClocks: () => void = () => {};
  private readonly abort = new AbortController();
  private inFormat: AudioFormatType = 'audio/pcm';
  private outFormat: AudioFormatType = 'audio/pcm';
  /** audio bytes appended since the last response ended (what the next one is charged as input) */
  private inBytes = 0;
  private outBytes = 0;
  private responding = false;
  /** client events held while the upstream link opens */
  private readonly early: string[] = [];

  constructor(private readonly o: ForwardOptions) {}

  async start(): Promise<void> {
    const { served, svc } = this.o;
    try {
      const opened = await served.connect(this.abort.signal);
      this.link = opened.link;
      this.deployment = opened.deployment;
    } catch (e) {
      const a = e instanceof EngineError ? fromEngineError(e, 'the upstream realtime server') : e instanceof AppError ? e : toAppError(e, this.o.req);
      this.fail(a.code, a.message, 1011, errType(a));
      return;
    }
    if (this.closed) {
      this.link.close(1000);
      return;
    }
    this.stopClocks = watch(
      { fail: (c, m, cc, t) => this.fail(c, m, cc, t), busy: () => this.responding || this.admitting > 0, lastEventAt: () => this.lastEventAt },
      svc.d.limits,
      svc.d.verify,
      this.o.req,
    );
    // what a client secret set is the session's first update
    if (isObj(this.o.initial)) this.link.send({ type: 'session.update', session: this.o.initial });
    for (const raw of this.early.splice(0)) await this.forward(raw);
    void this.pump();
  }

  private async pump(): Promise<void> {
    const link = this.link!;
    try {
      for await (const ev of link.events) {
        if (this.closed) break;
        await this.fromUpstream(ev);
      }
      if (!this.closed) this.close(1000, 'upstream closed');
    } catch (e) {
      const a = e instanceof EngineError ? fromEngineError(e, 'the upstream realtime server') : e instanceof AppError ? e : toAppError(e, this.o.req);
      this.fail(a.code, a.message, 1011, errType(a));
    }
  }

  private async fromUpstream(ev: Record<string, unknown>): Promise<void> {
    const s = this.o.socket;
    switch (ev.type) {
      case 'session.created':
      case 'session.updated': {
        const audio = isObj(ev.session) && isObj(ev.session.audio) ? ev.session.audio : undefined;
        const fmt = (x: unknown) => (isObj(x) && isObj(x.format) && AUDIO_FORMAT_TYPES.includes(x.format.type as AudioFormatType) ? (x.format.type as AudioFormatType) : undefined);
        this.inFormat = fmt(audio?.input) ?? this.inFormat;
        this.outFormat = fmt(audio?.output) ?? this.outFormat;
        break;
      }
      case 'response.created':
        this.responding = true;
        break;
      case 'response.output_audio.delta':
        if (typeof ev.delta === 'string') this.outBytes += Math.floor((ev.delta.length * 3) / 4);
        break;
      case 'response.done':
        this.responding = false;
        await this.charge(isObj(ev.response) ? ev.response : {});
        break;
    }
    // a slow reader makes the relay wait (the upstream's frames wait in the link); one that reads nothing is closed
    const l = this.o.svc.d.limits;
    let since = Date.now();
    let last = s.bufferedAmount;
    while (!this.closed && s.bufferedAmount > l.maxBufferedBytes) {
      if (s.bufferedAmount < last) since = Date.now();
      last = s.bufferedAmount;
      if (Date.now() - since >= l.idleMs) return this.fail('slow_consumer', 'The client does not read its events: the session is closed.', 1008);
      await new Promise((r) => setTimeout(r, 20));
    }
    if (this.closed || s.readyState !== 1) return;
    s.send(JSON.stringify(ev));
  }

  receive(raw: string): void {
    this.lastEventAt = performance.now();
    if (!this.link) {
      this.early.push(raw);
      return;
    }
    void this.forward(raw);
  }

  private async forward(raw: string): Promise<void> {
    let ev: unknown;
    try {
      ev = JSON.parse(raw);
    } catch {
      return this.error('invalid_json', 'The event is not valid JSON. Send one JSON object per message.');
    }
    if (!isObj(ev) || typeof ev.type !== 'string') return this.error('invalid_event', 'An event must be a JSON object with a type.', 'type');
    if (ev.type === 'input_audio_buffer.append' && typeof ev.audio === 'string') this.inBytes += Math.floor((ev.audio.length * 3) / 4);
    if (ev.type === 'response.create') {
      // each response is admitted as a request is (the key again, its rate limit, its budget)
      this.admitting++;
      try {
        await this.o.svc.d.admit(this.o.req);
      } catch (e) {
        const a = e instanceof AppError ? e : toAppError(e, this.o.req);
        if (a.status === 401 || a.status === 403) return this.fail(a.code, a.message, 1008, errType(a));
        return this.error(a.code, a.message, null, errType(a), typeof ev.event_id === 'string' ? ev.event_id : undefined);
      } finally {
        this.admitting--;
        this.lastEventAt = performance.now();
      }
    }
    if (!this.link!.send(ev as Obj)) this.close(1011, 'upstream gone');
  }

  private error(code: string, message: string, param: string | null = null, type = 'invalid_request_error', eventId?: string): void {
    if (this.o.socket.readyState !== 1) return;
    this.o.socket.send(JSON.stringify({ event_id: newId('event_'), type: 'error', error: { type, code, message, param, event_id: eventId ?? null } }));
  }

  private async charge(response: Obj): Promise<void> {
    const u = isObj(response.usage) ? response.usage : {};
    const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.floor(v) : 0);
    const inSec = this.inBytes / bytesPerSecond(this.inFormat);
    const outSec = this.outBytes / bytesPerSecond(this.outFormat);
    this.inBytes = 0;
    this.outBytes = 0;
    const { svc, served } = this.o;
    const units: Record<string, number> = {};
    if (inSec > 0) units.audio_seconds = Math.round(inSec * 1000) / 1000;
    if (outSec > 0) units.output_audio_seconds = Math.round(outSec * 1000) / 1000;
    if (inSec > 0) svc.d.metrics?.audioSeconds(served.spec.name, 'in', inSec);
    if (outSec > 0) svc.d.metrics?.audioSeconds(served.spec.name, 'out', outSec);
    const cached = isObj(u.input_token_details) ? n(u.input_token_details.cached_tokens) : 0;
    await svc.d.metering
      .charge({
        requestId: this.o.req.id,
        key: this.o.key,
        spec: served.spec,
        operation: REALTIME_OPERATION,
        used: { inputTokens: n(u.input_tokens), outputTokens: n(u.output_tokens), ...(cached ? { cachedTokens: cached } : {}), units },
        deployment: this.deployment ?? svc.deploymentOf(served.spec),
      })
      .catch((e: unknown) => this.o.req.log.error({ err: (e as Error).message }, 'realtime usage not recorded'));
    this.o.req.log.info(
      {
        realtime: 'turn',
        model: served.spec.name,
        upstream: true,
        key_id: this.o.key.keyId,
        response: typeof response.id === 'string' ? response.id : undefined,
        status: response.status,
        tokens_in: n(u.input_tokens),
        tokens_out: n(u.output_tokens),
        audio_seconds_in: Math.round(inSec * 1000) / 1000,
        audio_seconds_out: Math.round(outSec * 1000) / 1000,
      },
      'realtime turn',
    );
  }

  fail(code: string, message: string, closeCode = 1008, type = 'invalid_request_error'): void {
    if (this.closed) return;
    this.error(code, message, null, type);
    this.close(closeCode, code);
  }

  close(code = 1000, reason = ''): void {
    if (this.closed) return;
    this.closed = true;
    this.stopClocks();
    this.abort.abort();
    this.link?.close(1000);
    try {
      if (this.o.socket.readyState === 1) this.o.socket.close(code, reason.slice(0, 120));
    } catch {
      /* already gone */
    }
    this.o.onClose();
  }
}
