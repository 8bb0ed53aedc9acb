/**
 * The realtime sessions of this instance: how many are open, per key and in all (refused at the upgrade past
 * either cap, 429 `session_limit_reached`), each made for what serves its model (./session.ts on Portico's
 * engines, ./forward.ts for an upstream), and all closed at shutdown (1001).
 */
import type { FastifyRequest } from 'fastify';
import { AppError } from '../platform/errors.js';
import { toAppError } from '../platform/http/errors.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import { PipelineSession } from './session.js';
import { ForwardedSession } from './forward.js';
import { errType, isObj, newId } from './protocol.js';
import { BUILTIN_REALTIME_MODELS, type RealtimeService } from './service.js';
import { frameText, type WsSocket } from './socket.js';

interface Open {
  close(code?: number, reason?: string): void;
}

export class RealtimeHub {
  private readonly open = new Set<Open>();
  private readonly perKey = new Map<string, number>();
  private places = 0;
  private closing = false;

  constructor(private readonly svc: RealtimeService) {}

  get size(): number {
    return this.places;
  }

  /** takes a place for a session of this key, or 429; `release` gives it back (once) */
  take(key: KeyPrincipal): () => void {
    const l = this.svc.d.limits;
    if (this.closing) throw new AppError('service_unavailable', 'The server is shutting down; open the session again.');
    const mine = this.perKey.get(key.keyId) ?? 0;
    if (l.perKey > 0 && mine >= l.perKey)
      throw new AppError('session_limit_reached', `This API key has ${mine} realtime sessions open on this server, the most it may (REALTIME_MAX_SESSIONS_PER_KEY).`);
    if (l.perInstance > 0 && this.places >= l.perInstance)
      throw new AppError('session_limit_reached', `This server has ${this.places} realtime sessions open, the most it takes (REALTIME_MAX_SESSIONS); try again later.`);
    this.perKey.set(key.keyId, mine + 1);
    this.places++;
    this.svc.d.metrics?.sessionOpened();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const n = (this.perKey.get(key.keyId) ?? 1) - 1;
      if (n <= 0) this.perKey.delete(key.keyId);
      else this.perKey.set(key.keyId, n);
      this.places--;
      this.svc.d.metrics?.sessionClosed();
    };
  }

  /** An upgraded socket: its session, or an error event and a close when its model cannot serve one. */
  async accept(socket: WsSocket, req: FastifyRequest, release: () => void): Promise<void> {
    const key = req.apiKey!;
    let session: (Open & { receive(raw: string): void }) | undefined;
    let started = false;
    const early: string[] = [];
    let gone = false;
    socket.on('message', (data, isBinary) => {
      const text = frameText(data, isBinary);
      if (text === undefined) {
        socket.send(
          JSON.stringify({
            event_id: newId('event_'),
            type: 'error',
            error: {
              type: 'invalid_request_error',
              code: 'invalid_event',
              message: 'Binary frames are not events: send JSON text frames (audio goes base64 in input_audio_buffer.append).',
              param: null,
              event_id: null,
            },
          }),
        );
        return;
      }
      // events that come before session.created is sent wait for it (the first session loads the detector)
      if (session && started) session.receive(text);
      else early.push(text);
    });
    socket.on('close', () => {
      gone = true;
      session?.close();
      release();
    });
    socket.on('error', () => socket.terminate());
    const failOpen = (e: unknown) => {
      const a = e instanceof AppError ? e : toAppError(e, req);
      if (socket.readyState === 1) {
        socket.send(
          JSON.stringify({ event_id: newId('event_'), type: 'error', error: { type: errType(a), code: a.openaiCode, message: a.message, param: a.param ?? null, event_id: null } }),
        );
        socket.close(1008, a.code);
      }
    };
    try {
      const q = (req.query ?? {}) as { model?: string; intent?: string };
      const secret = isObj(req.clientSecret?.session) ? req.clientSecret.session : undefined;
      const secretModel = typeof secret?.model === 'string' ? secret.model : undefined;
      const transcription = q.intent === 'transcription' || secret?.type === 'transcription';
      if (q.model !== undefined && secretModel !== undefined && q.model !== secretModel) {
        throw new AppError('validation_error', `The client secret was minted for the model '${secretModel}', not '${q.model}'.`, 'model');
      }
      const model = q.model ?? secretModel ?? BUILTIN_REALTIME_MODELS[0]!;
      const served = await this.svc.resolve(model, key);
      if (gone) return;
      // what a client secret set applies as the session's first update (its model and type are the session's own)
      let initial: Record<string, unknown> | undefined;
      if (secret) {
        const { model: _m, type: _t, ...rest } = secret;
        initial = rest;
      }
      const onClose = () => {
        this.open.delete(session!);
        release();
      };
      if (served.kind === 'upstream') {
        session = new ForwardedSession({ svc: this.svc, served, socket, req, key, initial: secret, onClose });
      } else {
        session = new PipelineSession({ svc: this.svc, served, socket, req, key, type: transcription ? 'transcription' : 'realtime', initial, onClose });
      }
      this.open.add(session);
      await (session as PipelineSession | ForwardedSession).start();
      for (const raw of early.splice(0)) session.receive(raw);
      started = true;
    } catch (e) {
      failOpen(e);
    }
  }

  /** shutdown: every session ends (1001: worth reconnecting, to another instance) */
  async close(): Promise<void> {
    this.closing = true;
    for (const s of [...this.open]) s.close(1001, 'server shutting down');
  }
}
