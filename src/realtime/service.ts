/**
 * What the realtime feature needs, named here and given by the composition root (src/compose/runtime.ts): the
 * models and engines, the recognizer and the voices of the audio feature (`RealtimeEars`, `RealtimeVoice`: the two
 * features do not import each other), the voice activity detector, the gate (each turn admitted as a request is),
 * client secrets, metering, limits and metrics. The service resolves a realtime model into what serves it: a
 * pipeline of Portico's own models, or an upstream realtime server.
 */
import type { FastifyBaseLogger, FastifyRequest } from 'fastify';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { VoiceSessionLimits } from '../platform/config.js';
import { EngineError, type RealtimeEngine, type RealtimeLink, type TextEngine, type VoiceActivityDetector } from '../engines/types.js';
import type { EngineSpec, TextEngineSource } from '../engines/registry.js';
import type { ModelRegistry } from '../models/registry.js';
import { deploymentName, upstreamName, type ModelSpec, type Pricing } from '../models/spec.js';
import type { Metering } from '../api/metering.js';
import { assertModelScope } from '../api/scopes.js';
import { AppError } from '../platform/errors.js';
import { PROVIDERS } from '../engines/providers.js';

/** A piece of a spoken part: the text it starts speaking now, or 24 kHz 16-bit PCM. */
export type VoicePiece = { type: 'transcript'; text: string } | { type: 'audio'; bytes: Buffer };

/** One spoken answer: sentences in, pieces out (src/audio/answer-speaker.ts gives it). */
export interface SpokenPart extends AsyncIterable<VoicePiece> {
  say(text: string): void;
  end(): void;
}

/** The voices of the audio feature, as the realtime feature uses them. */
export interface RealtimeVoice {
  /** the voices `model` (a speech model) speaks; throws the client's error when it is no speech model */
  voices(model: string): readonly string[];
  /** speaks as 24 kHz PCM */
  open(o: { model: string; voice: string; speed: number; signal: AbortSignal }): SpokenPart;
  /** the model's spec (its pricing prices the characters) */
  spec(model: string): ModelSpec | undefined;
}

/** The recognizer of the audio feature, as the realtime feature uses it. */
export interface RealtimeEars {
  /** the transcription model of that name (404 model_not_found when there is none) */
  spec(model: string): ModelSpec;
  /** recognizes 16 kHz mono audio; `onText`: the text as the engine makes it, when it can tell */
  transcribe(o: {
    model: string;
    /** the key id: whose turn it is on a shared recognizer */ key: string;
    pcm16k: Float32Array;
    language?: string;
    prompt?: string;
    signal: AbortSignal;
    onText?: (delta: string) => void;
  }): Promise<{ text: string }>;
}

/** a session's limits (the REALTIME_* settings, src/platform/config.ts) */
export type RealtimeLimits = VoiceSessionLimits;

export interface RealtimeMetrics {
  sessionOpened(): void;
  sessionClosed(): void;
  /** end of the user's speech to the first audio (or text) of the answer, in seconds */
  turnLatency(model: string, seconds: number): void;
  audioSeconds(model: string, direction: 'in' | 'out', seconds: number): void;
}

/** One turn's span (a trace per response, linked to the session's upgrade request when it carried a traceparent). */
export interface TurnSpan {
  /** runs the turn with this span active: the upstream calls made in it are its children */
  run(fn: () => void): void;
  end(status: number, attributes: Record<string, string | number | undefined>, error?: string): void;
}

export interface RealtimeDeps {
  models: ModelRegistry;
  /** text engines (the router: a text model's deployments, retries and fallbacks) */
  engines: TextEngineSource;
  /** realtime engines: what serves a realtime model */
  realtime: (spec: EngineSpec) => Promise<RealtimeEngine>;
  metering: Metering;
  log: FastifyBaseLogger;
  ears: RealtimeEars;
  voice: RealtimeVoice;
  /** a detector per session; the name of what is active ('silero' or 'energy') */
  vad: { create(threshold: number): Promise<VoiceActivityDetector>; name(): Promise<string> };
  /** admits one turn as the {base_url} gate admits a request (key verified again, scope, rate limit, budget) */
  admit: (req: FastifyRequest) => Promise<KeyPrincipal>;
  /** verifies the request's key again, and only that (an open session's periodic check: no request is counted) */
  verify: (req: FastifyRequest) => Promise<KeyPrincipal>;
  /** mints a client secret from the request's key, holding `payload` */
  mint: (req: FastifyRequest, payload: Record<string, unknown>, seconds: number) => Promise<{ value: string; expiresAt: number }>;
  limits: RealtimeLimits;
  metrics?: RealtimeMetrics;
  /** a span per turn, when tracing is configured */
  traceTurn?: (req: FastifyRequest) => TurnSpan;
}

/** the usage operation of a realtime turn (declared by the module) */
export const REALTIME_OPERATION = 'realtime';

/** What serves one session: Portico's pipeline, or an upstream. */
export type Served =
  | { kind: 'portico'; spec: ModelSpec; transcription: string; text: () => { spec: ModelSpec; engine: Promise<TextEngine> }; speech: string }
  | {
      kind: 'upstream';
      spec: ModelSpec;
      /** opens a link to the first deployment that answers, in the model's order; the deployment that did */
      connect(signal: AbortSignal): Promise<{ link: RealtimeLink; deployment: string }>;
    };

/** the built-in models' parts when they name none */
export const DEFAULT_TRANSCRIPTION = 'whisper-1';
export const DEFAULT_SPEECH = 'tts-1';

/** The built-in realtime models: pipelines of the built-in audio models and the first text model. */
export const BUILTIN_REALTIME_MODELS = ['gpt-realtime', 'gpt-realtime-mini', 'gpt-4o-realtime-preview', 'gpt-4o-mini-realtime-preview'];

export function defaultRealtimeModels(): ModelSpec[] {
  const p = [...PROVIDERS.values()].find((x) => x.builtin?.pipeline);
  if (!p) return [];
  return BUILTIN_REALTIME_MODELS.map((name) => ({ name, provider: p.name, type: 'realtime', owned_by: 'portico' }) as ModelSpec);
}

export class RealtimeService {
  constructor(readonly d: RealtimeDeps) {}

  /** The first text model of the models served (what a pipeline that names none answers with). */
  firstTextModel(): ModelSpec | undefined {
    return this.d.models.list().find((m) => m.type === 'text');
  }

  /** The realtime model `name`, checked for the key, and what serves it. */
  async resolve(name: string, key: KeyPrincipal): Promise<Served> {
    const spec = this.d.models.require(name, 'realtime');
    assertModelScope(key, spec.name);
    let engine: RealtimeEngine;
    try {
      engine = await this.d.realtime(spec);
    } catch (e) {
      throw e instanceof AppError ? e : new AppError('engine_unavailable', `The realtime model '${name}' cannot be served now: ${(e as Error).message}`, 'model');
    }
    if (engine.connect) {
      // a model of several deployments: a session goes to the first that opens (a session is not moved once open)
      const deployments: Array<EngineSpec & { id?: string }> = spec.deployments && spec.deployments.length > 1 ? spec.deployments : [spec];
      const connect = async (signal: AbortSignal) => {
        let last: unknown;
        for (const [i, d] of deployments.entries()) {
          try {
            const e = i === 0 && deployments[0] === spec ? engine : await this.d.realtime(d);
            if (!e.connect) continue;
            const link = await e.connect({ model: upstreamName(d as ModelSpec), signal });
            return { link, deployment: deployments.length > 1 && d.id ? d.id : deploymentName(spec) };
          } catch (err) {
            last = err;
            // a refusal of the request itself (a 4xx other than 429) would be the same elsewhere
            if (signal.aborted || (err instanceof EngineError && err.status >= 400 && err.status < 500 && err.status !== 429)) throw err;
          }
        }
        throw last;
      };
      return { kind: 'upstream', spec, connect };
    }
    const parts = engine.parts ?? {};
    const transcription = parts.transcription ?? DEFAULT_TRANSCRIPTION;
    const speech = parts.speech ?? DEFAULT_SPEECH;
    // the parts are checked now, so a session of a model that cannot answer is refused at once, with the reason
    this.d.ears.spec(transcription);
    this.d.voice.voices(speech);
    const textName = parts.text;
    const text = () => {
      const t = textName ? this.d.models.require(textName, 'text') : this.firstTextModel();
      if (!t)
        throw new AppError(
          'engine_unavailable',
          `The realtime model '${name}' answers with the first text model, and none is served here: pull or configure one (docs/models.md).`,
          'model',
        );
      assertModelScope(key, t.name);
      return { spec: t, engine: this.d.engines.text(t) };
    };
    // a pipeline that names its text model checks it now too
    if (textName) text();
    return { kind: 'portico', spec, transcription, text, speech };
  }

  /** What a turn on `spec` is priced by: its own pricing, or (a pipeline's model without one) that of its parts. */
  pricing(spec: ModelSpec, parts: { text?: ModelSpec; transcription?: ModelSpec; speech?: ModelSpec }): Pick<ModelSpec, 'name' | 'pricing'> {
    if (spec.pricing) return spec;
    const p: Record<string, number | undefined> = {};
    const t = parts.text?.pricing;
    if (t) {
      Object.assign(p, {
        input_per_million: t.input_per_million,
        output_per_million: t.output_per_million,
        cached_input_per_million: t.cached_input_per_million,
        cache_write_input_per_million: t.cache_write_input_per_million,
        cache_write_1h_input_per_million: t.cache_write_1h_input_per_million,
      });
    }
    const a = parts.transcription?.pricing?.per_audio_second;
    if (a !== undefined) p.per_audio_second = a;
    const c = parts.speech?.pricing?.per_character;
    if (c !== undefined) p.per_character = c;
    return { name: spec.name, pricing: p as Pricing };
  }

  /** a pipeline's parts as /v1/models lists them (the text model as it would answer now), or undefined */
  partsOf(spec: ModelSpec): Record<string, string> | undefined {
    if (spec.type !== 'realtime' || !PROVIDERS.get(spec.provider)?.builtin?.pipeline) return undefined;
    const o = spec as ModelSpec & { transcription?: string; text?: string; speech?: string };
    const text = o.text ?? this.firstTextModel()?.name;
    return { transcription: o.transcription ?? DEFAULT_TRANSCRIPTION, ...(text ? { text } : {}), speech: o.speech ?? DEFAULT_SPEECH };
  }

  deploymentOf(spec: ModelSpec): string {
    return deploymentName(spec);
  }
}
