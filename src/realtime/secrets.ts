/**
 * Client secrets of the Realtime API: the session a browser may open, checked as session.update checks it, sealed
 * into a secret minted from the caller's key (src/portal/keys/client-secrets.ts holds the sealing).
 */
import type { FastifyRequest } from 'fastify';
import { AppError } from '../platform/errors.js';
import { ClientEventError, applySessionUpdate, defaultConfig, newId, sessionObject } from './protocol.js';
import { BUILTIN_REALTIME_MODELS, type RealtimeService } from './service.js';

export const DEFAULT_SECRET_SECONDS = 600;

export class RealtimeSecrets {
  constructor(private readonly svc: RealtimeService) {}

  async create(req: FastifyRequest, body: { expires_after?: { seconds?: number }; session?: Record<string, unknown> }) {
    const s = body.session ?? {};
    const type = s.type === 'transcription' ? 'transcription' : s.type === undefined || s.type === 'realtime' ? 'realtime' : undefined;
    if (!type) throw new AppError('validation_error', "Invalid 'session.type': use 'realtime' or 'transcription'.", 'session.type');
    if (s.model !== undefined && typeof s.model !== 'string') throw new AppError('validation_error', "'session.model' must be a string.", 'session.model');
    const model = (s.model as string | undefined) ?? BUILTIN_REALTIME_MODELS[0]!;
    const served = await this.svc.resolve(model, req.apiKey!);
    const transcriptionModel = served.kind === 'portico' ? served.transcription : 'whisper-1';
    let config;
    try {
      const { model: _m, type: _t, ...rest } = s;
      config = applySessionUpdate(defaultConfig(model, type, transcriptionModel), rest, {
        voices: served.kind === 'portico' ? this.svc.d.voice.voices(served.speech) : [...this.svc.d.voice.voices('tts-1')],
        voiceLocked: false,
        check: (c) => {
          if (c.transcription && served.kind === 'portico') this.svc.d.ears.spec(c.transcription.model);
        },
      });
    } catch (e) {
      if (e instanceof ClientEventError) throw new AppError('validation_error', e.message, e.param);
      throw e;
    }
    const seconds = body.expires_after?.seconds ?? DEFAULT_SECRET_SECONDS;
    const { value, expiresAt } = await this.svc.d.mint(req, { session: { ...s, type, model } }, seconds);
    return { value, expires_at: expiresAt, session: sessionObject(newId('sess_'), config, expiresAt) };
  }
}
