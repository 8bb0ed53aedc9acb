/**
 * One realtime session on Portico's own engines (docs/api.md, "Realtime"): OpenAI's GA Realtime protocol over a
 * WebSocket, served by a pipeline of the models Portico serves.
 *
 * - Input audio is decoded as it comes (./audio.ts) and given to the turn detector (./turns.ts) when server VAD is
 *   on; a pause inside a turn starts the recognizer on what was said so far, so that at the end of the turn only
 *   the rest is left to recognize (up to the end of the speech: the silence that ended the turn is not recognized).
 * - A committed turn becomes a user item; its transcript is made for the text model whether or not the client
 *   asked for transcription events (those are sent only when `audio.input.transcription` is set).
 * - A response runs the text model (streamed, with the session's tools), speaks each sentence as soon as it is
 *   complete (the speech model's PCM, encoded in the session's output format, goes out as it is made), and ends
 *   with response.done and its usage; each response is one usage record (the turn's audio seconds in and out, its
 *   text tokens, the characters spoken) and one log line.
 * - Speech that starts while a response is under way cancels it (interrupt_response); the client then truncates
 *   the assistant's item to what it played, and the transcript keeps only what was heard.
 * - One response at a time; client events are handled in order; a slow reader makes the response wait, and one
 *   that reads nothing at all is closed.
 */
import type { FastifyRequest } from 'fastify';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import { AppError } from '../platform/errors.js';
import { toAppError } from '../platform/http/errors.js';
import { fromEngineError } from '../api/engine-errors.js';
import { completeSentencesLength } from '../engines/shared/sentences.js';
import { EngineError, type ChatMessage, type ChatToolCall, type GenerateRequest, type TextEngine, type Usage } from '../engines/types.js';
import { upstreamName, type ModelSpec } from '../models/spec.js';
import type { WsSocket } from './socket.js';
import { InputDecoder, OutputEncoder, PCM_RATE, RECOGNIZER_RATE, bytesPerSecond, pcmBytes } from './audio.js';
import {
  ClientEventError,
  errType,
  applySessionUpdate,
  defaultConfig,
  isObj,
  newId,
  parseMaxTokens,
  parseModalities,
  parseToolChoice,
  parseTools,
  sessionObject,
  type FunctionToolDef,
  type Obj,
  type SessionConfig,
  type ToolChoiceValue,
} from './protocol.js';
import { TurnDetector, type TurnEvent } from './turns.js';
import { watch } from './clocks.js';
import { REALTIME_OPERATION, type RealtimeService, type Served, type SpokenPart, type TurnSpan } from './service.js';

type Pipeline = Extract<Served, { kind: 'portico' }>;

/** a conversation item as the session keeps it */
interface Item {
  id: string;
  type: 'message' | 'function_call' | 'function_call_output';
  role?: 'user' | 'assistant' | 'system';
  status: 'completed' | 'incomplete' | 'in_progress';
  content: Obj[];
  call_id?: string;
  name?: string;
  arguments?: string;
  output?: string;
  /** a user item's audio (24 kHz), while the session keeps it */
  audio?: Int16Array;
  /** a user item's transcript, once made (what the text model reads) */
  transcript?: Promise<string>;
  /** an assistant audio item: ms of audio made, and the span of each sentence spoken */
  audioMs?: number;
  spans?: Array<{ text: string; startMs: number; endMs: number }>;
}

interface ActiveResponse {
  id: string;
  abort: AbortController;
  reason?: 'turn_detected' | 'client_cancelled';
  /** the items it is making (so that a truncate of one during the response cancels it) */
  itemIds: Set<string>;
  done: Promise<void>;
}

const TOKENS_PER_AUDIO_SECOND_IN = 10;
const TOKENS_PER_AUDIO_SECOND_OUT = 20;
/** the recognizer hears this much of a VAD turn's audio after the end of its speech (the rest is the silence that ended it) */
const SPEECH_TAIL_MS = 100;
/** shortest commit (OpenAI: 100 ms) */
const MIN_COMMIT_MS = 100;

export interface SessionOptions {
  svc: RealtimeService;
  served: Pipeline;
  socket: WsSocket;
  req: FastifyRequest;
  key: KeyPrincipal;
  type: 'realtime' | 'transcription';
  /** what a client secret set, applied as a session.update before session.created */
  initial?: unknown;
  onClose: () => void;
}

export class PipelineSession {
  readonly id = newId('sess_');
  private config: SessionConfig;
  private readonly items: Item[] = [];
  private readonly byId = new Map<string, Item>();
  private readonly opened = Date.now();
  private decoder: InputDecoder;
  private turns?: TurnDetector;
  private turnsFor?: number;
  /** the detector fell back (its worker stopped): logged once */
  private vadFellBack = false;
  /** the uncommitted input: 24 kHz and 16 kHz, and where it starts (ms of the session's input audio) */
  private buf24: Int16Array[] = [];
  private buf16: Float32Array[] = [];
  private bufSamples24 = 0;
  private bufStartMs = 0;
  /** ms of input audio received in all */
  private inputMs = 0;
  /** 16 kHz samples of the current turn already given to the recognizer (its pieces) */
  private pieceFrom = 0;
  private pieces: Array<Promise<string>> = [];
  private pendingItemId: string | undefined;
  private active: ActiveResponse | undefined;
  private chain: Promise<void> = Promise.resolve();
  private closed = false;
  private voiceUsed = false;
  private keptAudioSamples = 0;
  /** the end of the last user turn (performance.now()), for the turn latency */
  private turnEndedAt: number | undefined;
  /** input audio seconds committed since the last response (what the next response is charged) */
  private pendingInputSeconds = 0;
  private stopClocks: () => void = () => {};
  private lastEventAt = performance.now();
  /** admissions in progress (a turn's key, rate limit and budget checked again): the session is not idle meanwhile */
  private admitting = 0;
  private readonly abort = new AbortController();

  constructor(private readonly o: SessionOptions) {
    this.config = defaultConfig(o.served.spec.name, o.type, o.served.transcription);
    this.decoder = new InputDecoder(this.config.input_format);
    if (o.initial !== undefined) this.config = this.update(o.initial);
  }

  get limits() {
    return this.o.svc.d.limits;
  }

  /** sends session.created and starts the session's clocks */
  async start(): Promise<void> {
    await this.ensureDetector();
    // closed while its detector was made (the first session waits for Silero's load): no clocks for it
    if (this.closed) return;
    this.send({ type: 'session.created', session: this.sessionObject() });
    this.stopClocks = watch(
      {
        fail: (code, message, closeCode, type) => void this.fail(code, message, closeCode, type),
        busy: () => this.active !== undefined || this.admitting > 0,
        lastEventAt: () => this.lastEventAt,
      },
      this.limits,
      this.o.svc.d.verify,
      this.o.req,
    );
  }

  private sessionObject(): Obj {
    return sessionObject(this.id, this.config, Math.floor((this.opened + this.limits.maxSessionMs) / 1000));
  }

  // ------------------------------------------------------------------ sending

  private send(ev: Obj, last = false): void {
    if (this.closed) return;
    const s = this.o.socket;
    if (s.readyState !== 1) return;
    // what the client left unread before this event (the event itself may be large: a long text's done events, a
    // retrieved item's audio): past 4x the bound, the client does not read, and it is closed
    if (!last && s.bufferedAmount > this.limits.maxBufferedBytes * 4) return void this.fail('slow_consumer', SLOW_CONSUMER, 1008);
    s.send(JSON.stringify({ event_id: newId('event_'), ...ev }));
  }

  /**
   * waits while the client has more than maxBufferedBytes unread (a response's audio waits for a slow reader); a
   * client that reads nothing of it for REALTIME_IDLE_MS is closed (a response in progress keeps the idle clock off)
   */
  private async drained(signal: AbortSignal): Promise<void> {
    let since = Date.now();
    let last = this.o.socket.bufferedAmount;
    while (!this.closed && !signal.aborted && this.o.socket.bufferedAmount > this.limits.maxBufferedBytes) {
      const now = this.o.socket.bufferedAmount;
      if (now < last) since = Date.now();
      last = now;
      if (Date.now() - since >= this.limits.idleMs) return void this.fail('slow_consumer', SLOW_CONSUMER, 1008);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  private sendError(e: unknown, eventId?: string): void {
    if (e instanceof ClientEventError) {
      this.send({ type: 'error', error: { type: e.type, code: e.code, message: e.message, param: e.param, event_id: eventId ?? null } });
      return;
    }
    const a = e instanceof AppError ? e : toAppError(e, this.o.req);
    this.send({ type: 'error', error: { type: errType(a), code: a.openaiCode, message: a.message, param: a.param ?? null, event_id: eventId ?? null } });
  }

  /** ends the session with an error event (and a close code) */
  async fail(code: string, message: string, closeCode = 1008, type = 'invalid_request_error'): Promise<void> {
    if (this.closed) return;
    this.send({ type: 'error', error: { type, code, message, param: null, event_id: null } }, true);
    this.close(closeCode, code);
  }

  close(code = 1000, reason = ''): void {
    if (this.closed) return;
    this.cancelActive('client_cancelled');
    this.closed = true;
    this.abort.abort();
    this.stopClocks();
    this.turns?.close();
    try {
      if (this.o.socket.readyState === 1) this.o.socket.close(code, reason.slice(0, 120));
    } catch {
      /* already gone */
    }
    this.o.onClose();
  }

  // ------------------------------------------------------------------ client events

  /** one client event, handled in order after the ones before it */
  receive(raw: string): void {
    this.lastEventAt = performance.now();
    this.chain = this.chain.then(() => this.handle(raw)).catch((e: unknown) => this.o.req.log.error({ err: (e as Error).message }, 'realtime event failed'));
  }

  private async handle(raw: string): Promise<void> {
    if (this.closed) return;
    let ev: unknown;
    try {
      ev = JSON.parse(raw);
    } catch {
      return this.sendError(new ClientEventError('invalid_json', 'The event is not valid JSON. Send one JSON object per message, such as {"type": "session.update", ...}.'));
    }
    if (!isObj(ev)) return this.sendError(new ClientEventError('invalid_event', 'An event must be a JSON object with a type.', 'type'));
    const eventId = typeof ev.event_id === 'string' ? ev.event_id.slice(0, 512) : undefined;
    try {
      await this.dispatch(ev, eventId);
    } catch (e) {
      this.sendError(e, eventId);
    }
  }

  private async dispatch(ev: Obj, eventId: string | undefined): Promise<void> {
    const realtime = this.config.type === 'realtime';
    switch (ev.type) {
      case 'session.update':
        this.config = this.update(ev.session);
        await this.ensureDetector();
        this.send({ type: 'session.updated', session: this.sessionObject() });
        return;
      case 'input_audio_buffer.append':
        return this.append(ev.audio);
      case 'input_audio_buffer.commit':
        return this.commit('client');
      case 'input_audio_buffer.clear':
        this.clearBuffer();
        this.send({ type: 'input_audio_buffer.cleared' });
        return;
      case 'conversation.item.create':
        if (!realtime) throw notInTranscription(ev.type);
        return this.createItem(ev);
      case 'conversation.item.retrieve':
        return this.retrieve(ev.item_id);
      case 'conversation.item.delete':
        return this.deleteItem(ev.item_id);
      case 'conversation.item.truncate':
        if (!realtime) throw notInTranscription(ev.type);
        return this.truncate(ev);
      case 'response.create':
        if (!realtime) throw notInTranscription(ev.type);
        return this.createResponse(ev.response, eventId);
      case 'response.cancel':
        if (!realtime) throw notInTranscription(ev.type);
        if (!this.active || (typeof ev.response_id === 'string' && ev.response_id !== this.active.id)) {
          throw new ClientEventError('response_cancel_not_active', 'Cancellation failed: no active response found.', 'response_id');
        }
        this.cancelActive('client_cancelled');
        return;
      case 'output_audio_buffer.clear':
        // WebRTC and SIP only: over a WebSocket the client holds the audio it has not played
        throw new ClientEventError(
          'unsupported_event',
          'output_audio_buffer.clear is for WebRTC and SIP sessions; over a WebSocket, stop playing and send conversation.item.truncate.',
          'type',
        );
      default:
        throw new ClientEventError(
          'invalid_value',
          `Invalid value: ${JSON.stringify(typeof ev.type === 'string' ? ev.type.slice(0, 100) : ev.type)}. Supported values are: 'session.update', 'input_audio_buffer.append', 'input_audio_buffer.commit', 'input_audio_buffer.clear', 'conversation.item.create', 'conversation.item.retrieve', 'conversation.item.truncate', 'conversation.item.delete', 'response.create', and 'response.cancel'.`,
          'type',
        );
    }
  }

  private update(session: unknown): SessionConfig {
    const svc = this.o.svc;
    const before = this.config ?? defaultConfig(this.o.served.spec.name, this.o.type, this.o.served.transcription);
    const next = applySessionUpdate(before, session, {
      voices: svc.d.voice.voices(this.o.served.speech),
      voiceLocked: this.voiceUsed,
      check: (c) => {
        if (c.transcription) svc.d.ears.spec(c.transcription.model);
      },
    });
    if (this.config && next.input_format !== this.config.input_format) {
      if (this.bufSamples24 > 0)
        throw new ClientEventError(
          'invalid_value',
          'The input audio format cannot change while the input audio buffer holds audio; commit or clear it first.',
          'session.audio.input.format',
        );
      this.decoder = new InputDecoder(next.input_format);
    }
    return next;
  }

  private async ensureDetector(): Promise<void> {
    const vad = this.config.turn_detection;
    if (!vad) {
      this.turns?.close();
      this.turns = undefined;
      return;
    }
    if (this.turns && this.turnsFor === vad.threshold) {
      this.turns.configure(vad);
      return;
    }
    this.turns?.close();
    const detector = await this.o.svc.d.vad.create(vad.threshold);
    // closed meanwhile: the detector goes back at once (Silero's Vad is kept for the next session)
    if (this.closed) return detector.close();
    this.turns = new TurnDetector(detector, vad);
    this.turns.syncTo(this.inputMs);
    this.turnsFor = vad.threshold;
  }

  // ------------------------------------------------------------------ input audio

  private async append(audio: unknown): Promise<void> {
    if (typeof audio !== 'string') throw new ClientEventError('invalid_type', "Invalid type for 'audio': expected a base64 string.", 'audio');
    if (audio.length === 0) return;
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(audio) || audio.length % 4 === 1) throw new ClientEventError('invalid_value', "Invalid 'audio': it is not base64.", 'audio');
    const bytes = Buffer.from(audio, 'base64');
    const { pcm24, pcm16 } = this.decoder.decode(bytes);
    const ms = (pcm24.length / PCM_RATE) * 1000;
    if ((this.bufSamples24 + pcm24.length) / PCM_RATE > this.limits.maxBufferSeconds) {
      throw new ClientEventError(
        'input_audio_buffer_full',
        `The input audio buffer holds at most ${this.limits.maxBufferSeconds} seconds; commit or clear it (server VAD commits at each pause).`,
        'audio',
      );
    }
    this.buf24.push(pcm24);
    this.buf16.push(pcm16);
    this.bufSamples24 += pcm24.length;
    const startMs = this.inputMs;
    this.inputMs += ms;
    const turns = this.turns;
    if (!turns) return;
    // Silero decides in its worker thread: the next event is handled once these frames are decided
    const events = await turns.push(pcm16);
    if (this.closed) return;
    if (turns.fallbackReason !== undefined && !this.vadFellBack) {
      this.vadFellBack = true;
      this.o.req.log.warn({ voice_activity: turns.name }, `realtime voice activity: ${turns.fallbackReason}; the session goes on with the ${turns.name} detector`);
    }
    for (const t of events) this.onTurn(t, startMs);
    // out of speech, the buffer keeps only the prefix padding: the audio before a turn is not the turn's
    if (!turns.inSpeech) this.keepTail(this.config.turn_detection!.prefix_padding_ms + 100);
  }

  private onTurn(t: TurnEvent, _chunkStartMs: number): void {
    switch (t.type) {
      case 'start': {
        this.dropBefore(t.audioStartMs);
        this.pendingItemId = newId('item_');
        this.pieceFrom = 0;
        this.pieces = [];
        this.send({ type: 'input_audio_buffer.speech_started', audio_start_ms: Math.round(t.audioStartMs), item_id: this.pendingItemId });
        if (this.active && this.config.turn_detection?.interrupt_response) this.cancelActive('turn_detected');
        return;
      }
      case 'pause': {
        // the recognizer starts on the turn so far (up to the pause), while the user goes on
        const upTo = Math.round(((t.atMs - this.bufStartMs) / 1000) * RECOGNIZER_RATE);
        if (upTo - this.pieceFrom >= RECOGNIZER_RATE * 0.3) {
          const piece = this.samples16().subarray(this.pieceFrom, upTo);
          this.pieceFrom = upTo;
          this.pieces.push(this.recognize(piece));
        }
        return;
      }
      case 'stop': {
        const itemId = this.pendingItemId ?? newId('item_');
        this.send({ type: 'input_audio_buffer.speech_stopped', audio_end_ms: t.atMs, item_id: itemId });
        this.turnEndedAt = performance.now();
        this.commit('vad', t.atMs, t.speechEndMs);
        return;
      }
    }
  }

  private samples16(): Float32Array {
    if (this.buf16.length !== 1) {
      const all = new Float32Array(this.buf16.reduce((n, b) => n + b.length, 0));
      let at = 0;
      for (const b of this.buf16) {
        all.set(b, at);
        at += b.length;
      }
      this.buf16 = [all];
    }
    return this.buf16[0] ?? new Float32Array(0);
  }

  private samples24(): Int16Array {
    if (this.buf24.length !== 1) {
      const all = new Int16Array(this.bufSamples24);
      let at = 0;
      for (const b of this.buf24) {
        all.set(b, at);
        at += b.length;
      }
      this.buf24 = [all];
    }
    return this.buf24[0] ?? new Int16Array(0);
  }

  /** drops the buffer's audio before `ms` (session input time) */
  private dropBefore(ms: number): void {
    const cut = Math.max(0, Math.round(((ms - this.bufStartMs) / 1000) * PCM_RATE));
    if (cut <= 0) return;
    const a = this.samples24().subarray(Math.min(cut, this.bufSamples24));
    const b = this.samples16().subarray(Math.min(Math.round((cut * RECOGNIZER_RATE) / PCM_RATE), this.samples16().length));
    this.buf24 = [a];
    this.buf16 = [b];
    this.bufSamples24 = a.length;
    this.bufStartMs += (cut / PCM_RATE) * 1000;
  }

  private keepTail(ms: number): void {
    const bufMs = (this.bufSamples24 / PCM_RATE) * 1000;
    if (bufMs > ms * 2) this.dropBefore(this.bufStartMs + bufMs - ms);
  }

  private clearBuffer(): void {
    this.buf24 = [];
    this.buf16 = [];
    this.bufSamples24 = 0;
    this.bufStartMs = this.inputMs;
    this.pieces = [];
    this.pieceFrom = 0;
    this.pendingItemId = undefined;
    this.turns?.reset();
    this.turns?.syncTo(this.inputMs);
  }

  private recognize(pcm16k: Float32Array, onText?: (d: string) => void): Promise<string> {
    const t = this.config.transcription;
    return this.o.svc.d.ears
      .transcribe({ model: t?.model ?? this.o.served.transcription, key: this.o.key.keyId, pcm16k, language: t?.language, prompt: t?.prompt, signal: this.abort.signal, onText })
      .then((r) => r.text.trim());
  }

  /**
   * the buffer becomes a user item (by the client, or by server VAD at the end of a turn, up to `endMs`; the
   * turn's speech ended at `speechEndMs`, the silence after it is in the item but not given to the recognizer)
   */
  private commit(by: 'client' | 'vad', endMs?: number, speechEndMs?: number): void {
    if (endMs !== undefined) {
      const keep = Math.round(((endMs - this.bufStartMs) / 1000) * PCM_RATE);
      if (keep < this.bufSamples24) {
        this.buf24 = [this.samples24().subarray(0, Math.max(0, keep))];
        this.buf16 = [this.samples16().subarray(0, Math.max(0, Math.round((keep * RECOGNIZER_RATE) / PCM_RATE)))];
        this.bufSamples24 = this.buf24[0]!.length;
      }
    }
    const ms = (this.bufSamples24 / PCM_RATE) * 1000;
    if (by === 'client' && ms < MIN_COMMIT_MS) {
      throw new ClientEventError(
        'input_audio_buffer_commit_empty',
        `Error committing input audio buffer: buffer too small. Expected at least ${MIN_COMMIT_MS}ms of audio, but buffer only has ${ms.toFixed(2)}ms of audio.`,
      );
    }
    const pcm24 = this.samples24().slice();
    const pcm16 = this.samples16();
    // the rest to recognize ends shortly after the speech: the silence that ended the turn (silence_duration_ms of
    // it) has no words, and a rest that is only that silence (a pause's piece already has the speech) is not run
    // at all, which saves a recognizer run (a pocketsphinx process) at the end of the turn
    let restEnd = pcm16.length;
    if (speechEndMs !== undefined) {
      const speechEnd = Math.round(((speechEndMs - this.bufStartMs) / 1000) * RECOGNIZER_RATE);
      restEnd = speechEnd <= this.pieceFrom ? this.pieceFrom : Math.min(restEnd, speechEnd + Math.round((SPEECH_TAIL_MS / 1000) * RECOGNIZER_RATE));
    }
    const rest = pcm16.subarray(this.pieceFrom, Math.max(this.pieceFrom, restEnd)).slice();
    const pieces = this.pieces;
    const itemId = this.pendingItemId ?? newId('item_');
    this.clearBuffer();
    this.bufStartMs = endMs ?? this.inputMs;
    if (by === 'client') this.turnEndedAt = performance.now();
    const previous = this.items.at(-1)?.id ?? null;
    const item: Item = { id: itemId, type: 'message', role: 'user', status: 'completed', content: [{ type: 'input_audio', transcript: null }], audio: pcm24 };
    this.keep(item);
    this.send({ type: 'input_audio_buffer.committed', previous_item_id: previous, item_id: item.id });
    this.send({ type: 'conversation.item.added', previous_item_id: previous, item: this.itemObject(item) });
    this.send({ type: 'conversation.item.done', previous_item_id: previous, item: this.itemObject(item) });
    const seconds = pcm24.length / PCM_RATE;
    this.pendingInputSeconds += seconds;
    if (this.config.type === 'transcription') {
      // a transcription session's turn is admitted as a request is (its key, rate limit, budget), and charged when its
      // transcript is made
      item.transcript = this.admitTurn(item).then((ok) => (ok ? this.transcribeItem(item, pieces, rest, seconds) : ''));
      void item.transcript.then(() => (typeof item.content[0]?.transcript === 'string' ? this.chargeTranscription(seconds) : undefined));
      return;
    }
    item.transcript = this.transcribeItem(item, pieces, rest, seconds);
    if (by === 'vad' && this.config.turn_detection?.create_response) void this.createResponse(undefined, undefined, true).catch((e: unknown) => this.sendError(e));
  }

  /**
   * A turn admitted as a request is. The time it takes (a busy database, a remote rate limiter) is the server's, not
   * the client's: no idleness while it runs, and the idle clock starts again when it ends.
   */
  private async admit(): Promise<KeyPrincipal> {
    this.admitting++;
    try {
      return await this.o.svc.d.admit(this.o.req);
    } finally {
      this.admitting--;
      this.lastEventAt = performance.now();
    }
  }

  /** a transcription session's turn, admitted as a request is; refused, its transcription fails with the reason */
  private async admitTurn(item: Item): Promise<boolean> {
    try {
      await this.admit();
      return true;
    } catch (e) {
      const a = e instanceof AppError ? e : toAppError(e, this.o.req);
      if (a.status === 401 || a.status === 403) await this.fail(a.openaiCode, a.message, 1008, errType(a));
      else
        this.send({
          type: 'conversation.item.input_audio_transcription.failed',
          item_id: item.id,
          content_index: 0,
          error: { type: errType(a), code: a.openaiCode, message: a.message, param: null },
        });
      return false;
    }
  }

  /** the item's transcript: its pieces already under way and the rest; the events when the client asked for them */
  private transcribeItem(item: Item, pieces: Array<Promise<string>>, rest: Float32Array, seconds: number): Promise<string> {
    const told = this.config.transcription !== null;
    const sendDelta = (delta: string) => {
      if (told && delta) this.send({ type: 'conversation.item.input_audio_transcription.delta', item_id: item.id, content_index: 0, delta });
    };
    const run = async () => {
      const parts: string[] = [];
      for (const p of pieces) {
        const t = await p;
        if (t) {
          sendDelta((parts.length ? ' ' : '') + t);
          parts.push(t);
        }
      }
      if (rest.length >= RECOGNIZER_RATE * 0.05) {
        let streamed = false;
        const prefix = parts.length ? ' ' : '';
        const t = await this.recognize(rest, (d) => {
          sendDelta((streamed ? '' : prefix) + (streamed ? d : d.trimStart()));
          streamed = true;
        });
        if (t) {
          if (!streamed) sendDelta(prefix + t);
          parts.push(t);
        }
      }
      return parts.join(' ');
    };
    return run().then(
      (text) => {
        item.content = [{ type: 'input_audio', transcript: text }];
        if (told)
          this.send({
            type: 'conversation.item.input_audio_transcription.completed',
            item_id: item.id,
            content_index: 0,
            transcript: text,
            usage: { type: 'duration', seconds: Math.round(seconds * 1000) / 1000 },
          });
        return text;
      },
      (e: unknown) => {
        if (this.closed) return '';
        const a = e instanceof EngineError ? fromEngineError(e, 'the transcription engine') : e instanceof AppError ? e : toAppError(e, this.o.req);
        this.send({
          type: 'conversation.item.input_audio_transcription.failed',
          item_id: item.id,
          content_index: 0,
          error: { type: errType(a), code: a.openaiCode, message: a.message, param: null },
        });
        return '';
      },
    );
  }

  // ------------------------------------------------------------------ conversation

  private keep(item: Item, after?: string | null): void {
    if (after === undefined) this.items.push(item);
    else if (after === null || after === 'root') this.items.unshift(item);
    else {
      const i = this.items.findIndex((x) => x.id === after);
      this.items.splice(i + 1, 0, item);
    }
    this.byId.set(item.id, item);
    if (item.audio) {
      this.keptAudioSamples += item.audio.length;
      // the oldest user audio is dropped past the session's bound (its transcript stays)
      for (const old of this.items) {
        if (this.keptAudioSamples / PCM_RATE <= this.limits.maxKeptAudioSeconds) break;
        if (old.audio && old !== item) {
          this.keptAudioSamples -= old.audio.length;
          old.audio = undefined;
        }
      }
    }
    while (this.items.length > this.limits.maxItems) {
      const gone = this.items.shift()!;
      this.byId.delete(gone.id);
      if (gone.audio) this.keptAudioSamples -= gone.audio.length;
    }
  }

  private itemObject(item: Item, withAudio = false): Obj {
    const base: Obj = { id: item.id, object: 'realtime.item', type: item.type, status: item.status };
    if (item.type === 'message') {
      base.role = item.role;
      base.content = item.content.map((c) => (withAudio && c.type === 'input_audio' && item.audio ? { ...c, audio: pcmBytes(item.audio).toString('base64') } : c));
    } else if (item.type === 'function_call') Object.assign(base, { call_id: item.call_id, name: item.name, arguments: item.arguments ?? '' });
    else Object.assign(base, { call_id: item.call_id, output: item.output ?? '' });
    return base;
  }

  private itemOf(id: unknown, param = 'item_id'): Item {
    if (typeof id !== 'string') throw new ClientEventError('invalid_type', `Invalid type for '${param}': expected a string.`, param);
    const item = this.byId.get(id);
    if (!item) throw new ClientEventError('item_not_found', `Item with item_id not found: ${id.slice(0, 100)}`, param);
    return item;
  }

  private createItem(ev: Obj): void {
    const prev = ev.previous_item_id;
    if (prev !== undefined && prev !== null && prev !== 'root') this.itemOf(prev, 'previous_item_id');
    const item = this.parseItem(ev.item);
    if (this.byId.has(item.id)) throw new ClientEventError('item_id_taken', `An item with id '${item.id}' already exists.`, 'item.id');
    const previous = prev === undefined ? (this.items.at(-1)?.id ?? null) : prev === 'root' ? null : (prev as string | null);
    this.keep(item, prev === undefined ? undefined : (prev as string | null));
    this.send({ type: 'conversation.item.added', previous_item_id: previous, item: this.itemObject(item) });
    this.send({ type: 'conversation.item.done', previous_item_id: previous, item: this.itemObject(item) });
    if (item.audio) {
      const pcm16 = new InputDecoder('audio/pcm').decode(pcmBytes(item.audio)).pcm16;
      item.transcript = this.transcribeItem(item, [], pcm16, item.audio.length / PCM_RATE);
      this.pendingInputSeconds += item.audio.length / PCM_RATE;
    }
  }

  private parseItem(v: unknown): Item {
    if (!isObj(v)) throw new ClientEventError('invalid_type', "Invalid type for 'item': expected an object.", 'item');
    let id = newId('item_');
    if (v.id !== undefined) {
      if (typeof v.id !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(v.id))
        throw new ClientEventError('invalid_value', "Invalid 'item.id': up to 64 letters, digits, _ and -.", 'item.id');
      id = v.id;
    }
    const str = (x: unknown, param: string, max = 1_000_000) => {
      if (typeof x !== 'string') throw new ClientEventError('invalid_type', `Invalid type for '${param}': expected a string.`, param);
      if (x.length > max) throw new ClientEventError('string_above_max_length', `'${param}' is too long.`, param);
      return x;
    };
    switch (v.type) {
      case 'message': {
        const role = v.role;
        if (role !== 'user' && role !== 'assistant' && role !== 'system')
          throw new ClientEventError('invalid_value', "Invalid 'item.role': use 'user', 'assistant' or 'system'.", 'item.role');
        if (!Array.isArray(v.content) || v.content.length === 0) throw new ClientEventError('invalid_value', "'item.content' must be a non-empty array.", 'item.content');
        const allowed = role === 'assistant' ? ['output_text', 'output_audio'] : role === 'system' ? ['input_text'] : ['input_text', 'input_audio'];
        let audio: Int16Array | undefined;
        const content = v.content.map((c, i): Obj => {
          const p = `item.content[${i}]`;
          if (!isObj(c) || !allowed.includes(c.type as string))
            throw new ClientEventError('invalid_value', `Invalid '${p}.type': a ${role} message takes ${allowed.join(', ')}.`, `${p}.type`);
          if (c.type === 'input_text' || c.type === 'output_text') return { type: c.type, text: str(c.text, `${p}.text`) };
          if (c.type === 'output_audio') return { type: 'output_audio', transcript: str(c.transcript ?? '', `${p}.transcript`) };
          // input_audio: audio in the session's input format (base64), a transcript, or both
          if (c.audio !== undefined) {
            const b64 = str(c.audio, `${p}.audio`, 20 * 1024 * 1024);
            if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64)) throw new ClientEventError('invalid_value', `Invalid '${p}.audio': it is not base64.`, `${p}.audio`);
            audio = new InputDecoder(this.config.input_format).decode(Buffer.from(b64, 'base64')).pcm24;
          }
          const transcript = c.transcript === undefined || c.transcript === null ? null : str(c.transcript, `${p}.transcript`);
          if (c.audio === undefined && transcript === null) throw new ClientEventError('invalid_value', `'${p}' needs audio or a transcript.`, p);
          return { type: 'input_audio', transcript };
        });
        const item: Item = { id, type: 'message', role, status: 'completed', content };
        if (audio) item.audio = audio;
        return item;
      }
      case 'function_call':
        return {
          id,
          type: 'function_call',
          status: 'completed',
          content: [],
          call_id: str(v.call_id, 'item.call_id', 200),
          name: str(v.name, 'item.name', 64),
          arguments: str(v.arguments ?? '', 'item.arguments'),
        };
      case 'function_call_output':
        return { id, type: 'function_call_output', status: 'completed', content: [], call_id: str(v.call_id, 'item.call_id', 200), output: str(v.output, 'item.output') };
      default:
        throw new ClientEventError('invalid_value', "Invalid 'item.type': use 'message', 'function_call' or 'function_call_output'.", 'item.type');
    }
  }

  private retrieve(id: unknown): void {
    const item = this.itemOf(id);
    this.send({ type: 'conversation.item.retrieved', item: this.itemObject(item, true) });
  }

  private deleteItem(id: unknown): void {
    const item = this.itemOf(id);
    if (this.active?.itemIds.has(item.id)) throw new ClientEventError('item_in_progress', 'The item is being made by the response in progress; cancel it first.', 'item_id');
    this.items.splice(this.items.indexOf(item), 1);
    this.byId.delete(item.id);
    if (item.audio) this.keptAudioSamples -= item.audio.length;
    this.send({ type: 'conversation.item.deleted', item_id: item.id });
  }

  private async truncate(ev: Obj): Promise<void> {
    const item = this.itemOf(ev.item_id);
    if (item.role !== 'assistant' || !item.content.some((c) => c.type === 'output_audio')) {
      throw new ClientEventError('invalid_value', 'Only an assistant message with audio can be truncated.', 'item_id');
    }
    if (ev.content_index !== 0) throw new ClientEventError('invalid_value', "Invalid 'content_index': the audio is content 0.", 'content_index');
    const end = ev.audio_end_ms;
    if (typeof end !== 'number' || !Number.isInteger(end) || end < 0)
      throw new ClientEventError('invalid_value', "Invalid 'audio_end_ms': a whole number of milliseconds, 0 or more.", 'audio_end_ms');
    // truncating what is still being spoken stops it first
    if (this.active?.itemIds.has(item.id)) {
      this.cancelActive('client_cancelled');
      await this.active?.done;
    }
    const total = item.audioMs ?? 0;
    if (end > Math.ceil(total)) {
      throw new ClientEventError('invalid_value', `Audio content of ${Math.round(total)}ms is already shorter than ${end}ms.`, 'audio_end_ms');
    }
    // what was heard: the sentences that ended before audio_end_ms, and the words of the one it cut in their share
    const heard: string[] = [];
    for (const s of item.spans ?? []) {
      if (s.endMs <= end) heard.push(s.text);
      else if (s.startMs < end) {
        const words = s.text.split(/\s+/).filter(Boolean);
        const n = Math.floor((words.length * (end - s.startMs)) / Math.max(1, s.endMs - s.startMs));
        if (n > 0) heard.push(words.slice(0, n).join(' '));
      }
    }
    item.audioMs = end;
    item.spans = (item.spans ?? []).filter((s) => s.startMs < end).map((s) => ({ ...s, endMs: Math.min(s.endMs, end) }));
    item.content = [{ type: 'output_audio', transcript: heard.join(' ').trim() }];
    this.send({ type: 'conversation.item.truncated', item_id: item.id, content_index: 0, audio_end_ms: end });
  }

  // ------------------------------------------------------------------ responses

  private cancelActive(reason: 'turn_detected' | 'client_cancelled'): void {
    const a = this.active;
    if (!a || a.abort.signal.aborted) return;
    a.reason = reason;
    a.abort.abort();
  }

  private async createResponse(params: unknown, eventId: string | undefined, auto = false): Promise<void> {
    // the turn that interrupted a response is answered once that response has ended
    if (this.active?.abort.signal.aborted) await this.active.done;
    if (this.active) {
      throw new ClientEventError(
        'conversation_already_has_active_response',
        `Conversation already has an active response in progress: ${this.active.id}. Wait until the response is finished before creating a new one.`,
      );
    }
    const c = this.config;
    const p = params === undefined || params === null ? {} : params;
    if (!isObj(p)) throw new ClientEventError('invalid_type', "Invalid type for 'response': expected an object.", 'response');
    const known = [
      'conversation',
      'input',
      'instructions',
      'max_output_tokens',
      'metadata',
      'output_modalities',
      'tools',
      'tool_choice',
      'audio',
      'temperature',
      'prompt',
      'parallel_tool_calls',
      'reasoning',
    ];
    for (const k of Object.keys(p)) if (!known.includes(k)) throw new ClientEventError('unknown_parameter', `Unknown parameter: 'response.${k}'.`, `response.${k}`);
    const inBand = p.conversation === undefined || p.conversation === 'auto';
    if (!inBand && p.conversation !== 'none') throw new ClientEventError('invalid_value', "Invalid 'response.conversation': use 'auto' or 'none'.", 'response.conversation');
    const instructions = p.instructions === undefined ? c.instructions : typeof p.instructions === 'string' ? p.instructions : badType('response.instructions', 'a string');
    const modalities = p.output_modalities === undefined ? c.output_modalities : parseModalities(p.output_modalities, 'response.output_modalities');
    const tools = p.tools === undefined ? c.tools : parseTools(p.tools, 'response.tools');
    const toolChoice = p.tool_choice === undefined ? c.tool_choice : parseToolChoice(p.tool_choice, 'response.tool_choice', tools);
    const maxTokens = p.max_output_tokens === undefined ? c.max_output_tokens : parseMaxTokens(p.max_output_tokens, 'response.max_output_tokens');
    const temperature =
      p.temperature === undefined
        ? c.temperature
        : typeof p.temperature === 'number' && p.temperature >= 0 && p.temperature <= 2
          ? p.temperature
          : badType('response.temperature', 'a number from 0 to 2');
    let voice = c.voice;
    let format = c.output_format;
    if (p.audio !== undefined) {
      const out = isObj(p.audio) && isObj(p.audio.output) ? p.audio.output : badType('response.audio.output', 'an object');
      const probe = applySessionUpdate(c, { audio: { output: out } }, { voices: this.o.svc.d.voice.voices(this.o.served.speech), voiceLocked: this.voiceUsed, check: () => {} });
      voice = probe.voice;
      format = probe.output_format;
    }
    let metadata: Obj | null = null;
    if (p.metadata !== undefined && p.metadata !== null) {
      if (!isObj(p.metadata) || Object.keys(p.metadata).length > 16 || Object.values(p.metadata).some((x) => typeof x !== 'string' || x.length > 512)) {
        throw new ClientEventError('invalid_value', "Invalid 'response.metadata': at most 16 string values of up to 512 characters.", 'response.metadata');
      }
      metadata = p.metadata;
    }
    let input: Item[] | undefined;
    if (p.input !== undefined) {
      if (!Array.isArray(p.input)) throw new ClientEventError('invalid_type', "Invalid type for 'response.input': expected an array of items.", 'response.input');
      input = p.input.map((x) => {
        // an item reference: an item of the conversation by id
        if (isObj(x) && x.type === 'item_reference') return this.itemOf(x.id, 'response.input[].id');
        const it = this.parseItem(x);
        if (it.audio) {
          const pcm16 = new InputDecoder('audio/pcm').decode(pcmBytes(it.audio)).pcm16;
          it.transcript = this.transcribeItem(it, [], pcm16, it.audio.length / PCM_RATE);
        }
        return it;
      });
    }
    // each response is admitted as a request is: the key again, its rate limit, its budget
    try {
      await this.admit();
    } catch (e) {
      const a = e instanceof AppError ? e : toAppError(e, this.o.req);
      if (a.status === 401 || a.status === 403) return this.fail(a.code, a.message, 1008, errType(a));
      throw a;
    }
    if (this.closed) return;
    if (this.active)
      throw new ClientEventError('conversation_already_has_active_response', `Conversation already has an active response in progress: ${(this.active as ActiveResponse).id}.`);
    const abort = new AbortController();
    const id = newId('resp_');
    let settle!: () => void;
    const active: ActiveResponse = { id, abort, itemIds: new Set(), done: new Promise<void>((r) => (settle = r)) };
    this.active = active;
    const span = this.o.svc.d.traceTurn?.(this.o.req);
    const run = () =>
      void this.runResponse(active, { inBand, instructions, modalities, tools, toolChoice, maxTokens, temperature, voice, format, metadata, input, eventId, auto, span })
        .catch((e: unknown) => this.o.req.log.error({ err: (e as Error).message }, 'realtime response failed'))
        .finally(() => {
          if (this.active === active) this.active = undefined;
          // the idle clock starts again when the response ends: a response longer than REALTIME_IDLE_MS is no idleness
          this.lastEventAt = performance.now();
          settle();
        });
    if (span) span.run(run);
    else run();
  }

  private async runResponse(
    a: ActiveResponse,
    r: {
      inBand: boolean;
      instructions: string;
      modalities: Array<'audio' | 'text'>;
      tools: FunctionToolDef[];
      toolChoice: ToolChoiceValue;
      maxTokens: number | 'inf';
      temperature: number | null;
      voice: string;
      format: SessionConfig['output_format'];
      metadata: Obj | null;
      input?: Item[];
      eventId?: string;
      auto: boolean;
      span?: TurnSpan;
    },
  ): Promise<void> {
    const started = performance.now();
    const turnEnd = this.turnEndedAt ?? started;
    this.turnEndedAt = undefined;
    const signal = AbortSignal.any([a.abort.signal, this.abort.signal]);
    const audio = r.modalities.includes('audio');
    const output: Item[] = [];
    const response = (status: string, extra: Obj = {}): Obj => ({
      object: 'realtime.response',
      id: a.id,
      status,
      status_details: null,
      output: output.map((i) => this.itemObject(i)),
      conversation_id: r.inBand ? 'conv_' + this.id.slice(5) : null,
      output_modalities: r.modalities,
      max_output_tokens: r.maxTokens,
      audio: { output: { format: { type: r.format, ...(r.format === 'audio/pcm' ? { rate: PCM_RATE } : {}) }, voice: r.voice } },
      usage: null,
      metadata: r.metadata,
      ...extra,
    });
    this.send({ type: 'response.created', response: response('in_progress') });
    this.sendRateLimits();
    const inputSeconds = r.inBand ? this.pendingInputSeconds : 0;
    if (r.inBand) this.pendingInputSeconds = 0;
    let usage: Usage | undefined;
    let outSamples = 0;
    let characters = 0;
    let failure: AppError | undefined;
    let firstOutputAt: number | undefined;
    let textSpec: ModelSpec | undefined;
    let finish: string | undefined;
    let voiceError: unknown;
    try {
      const { spec, engine: enginePromise } = this.o.served.text();
      textSpec = spec;
      const context = r.input ?? this.items.slice();
      const messages = await this.messages(context, r.instructions);
      if (signal.aborted) throw signal.reason;
      const engine: TextEngine = await enginePromise;
      const gen: GenerateRequest = {
        model: upstreamName(spec),
        messages,
        tools: r.tools.length && r.toolChoice !== 'none' ? r.tools.map((t) => ({ name: t.name, description: t.description, parameters: t.parameters })) : undefined,
        toolChoice: r.tools.length ? r.toolChoice : undefined,
        temperature: r.temperature ?? undefined,
        maxOutputTokens: r.maxTokens === 'inf' ? undefined : r.maxTokens,
        stream: true,
        signal,
      };
      // the message item, opened at the first text
      let msg: Item | undefined;
      let msgIndex = -1;
      let text = '';
      let spokenUpTo = 0;
      let speaker: SpokenPart | undefined;
      let speaking: Promise<void> | undefined;
      const encoder = new OutputEncoder(r.format);
      const openMessage = () => {
        msg = { id: newId('item_'), type: 'message', role: 'assistant', status: 'in_progress', content: [], audioMs: 0, spans: [] };
        a.itemIds.add(msg.id);
        output.push(msg);
        msgIndex = output.length - 1;
        const previous = this.items.at(-1)?.id ?? null;
        if (r.inBand) this.keep(msg);
        this.send({ type: 'response.output_item.added', response_id: a.id, output_index: msgIndex, item: this.itemObject(msg) });
        if (r.inBand) this.send({ type: 'conversation.item.added', previous_item_id: previous, item: this.itemObject(msg) });
        const part = audio ? { type: 'audio', transcript: '' } : { type: 'text', text: '' };
        this.send({ type: 'response.content_part.added', response_id: a.id, item_id: msg.id, output_index: msgIndex, content_index: 0, part });
        if (audio) {
          this.voiceUsed = true;
          speaker = this.o.svc.d.voice.open({ model: this.o.served.speech, voice: r.voice, speed: this.config.speed, signal });
          const m = msg;
          speaking = (async () => {
            let sentence: { text: string; startMs: number; endMs: number } | undefined;
            for await (const piece of speaker!) {
              if (piece.type === 'transcript') {
                sentence = { text: piece.text.trim(), startMs: m.audioMs!, endMs: m.audioMs! };
                m.spans!.push(sentence);
                characters += [...piece.text].length;
                this.send({ type: 'response.output_audio_transcript.delta', response_id: a.id, item_id: m.id, output_index: msgIndex, content_index: 0, delta: piece.text });
                continue;
              }
              const { bytes, samples24 } = encoder.encode(piece.bytes);
              if (bytes.length === 0) continue;
              firstOutputAt ??= performance.now();
              outSamples += samples24;
              m.audioMs! += (samples24 / PCM_RATE) * 1000;
              if (sentence) sentence.endMs = m.audioMs!;
              // ~100 ms per event at most, as OpenAI sends them
              const step = Math.max(2, Math.round(bytesPerSecond(r.format) / 10));
              for (let i = 0; i < bytes.length; i += step) {
                await this.drained(signal);
                if (signal.aborted) return;
                this.send({
                  type: 'response.output_audio.delta',
                  response_id: a.id,
                  item_id: m.id,
                  output_index: msgIndex,
                  content_index: 0,
                  delta: bytes.subarray(i, i + step).toString('base64'),
                });
              }
            }
          })();
          // a failure of the voice ends the response with it; the loop below sees the abort
          speaking.catch((e: unknown) => {
            voiceError ??= e;
            a.abort.abort();
          });
        }
      };
      const say = (final: boolean) => {
        if (!speaker) return;
        const rest = text.slice(spokenUpTo);
        const n = final ? rest.length : completeSentencesLength(rest);
        if (n > 0 && rest.slice(0, n).trim()) speaker.say(rest.slice(0, n));
        spokenUpTo += n;
      };
      // tool calls: callId -> the item
      const calls = new Map<string, { item: Item; index: number }>();
      for await (const e of engine.generate(gen)) {
        if (signal.aborted) break;
        switch (e.type) {
          case 'text_delta':
            if (!e.delta) break;
            if (!msg) openMessage();
            text += e.delta;
            if (audio) say(false);
            else {
              firstOutputAt ??= performance.now();
              await this.drained(signal);
              this.send({ type: 'response.output_text.delta', response_id: a.id, item_id: msg!.id, output_index: msgIndex, content_index: 0, delta: e.delta });
            }
            break;
          case 'tool_call_start': {
            const item: Item = { id: newId('item_'), type: 'function_call', status: 'in_progress', content: [], call_id: e.callId, name: e.name, arguments: '' };
            a.itemIds.add(item.id);
            output.push(item);
            calls.set(e.callId, { item, index: output.length - 1 });
            const previous = this.items.at(-1)?.id ?? null;
            if (r.inBand) this.keep(item);
            firstOutputAt ??= performance.now();
            this.send({ type: 'response.output_item.added', response_id: a.id, output_index: output.length - 1, item: this.itemObject(item) });
            if (r.inBand) this.send({ type: 'conversation.item.added', previous_item_id: previous, item: this.itemObject(item) });
            break;
          }
          case 'tool_call_delta': {
            const c = calls.get(e.callId);
            if (!c || !e.delta) break;
            c.item.arguments += e.delta;
            this.send({ type: 'response.function_call_arguments.delta', response_id: a.id, item_id: c.item.id, output_index: c.index, call_id: e.callId, delta: e.delta });
            break;
          }
          case 'tool_call_end': {
            const c = calls.get(e.callId);
            if (!c) break;
            if (e.arguments.startsWith(c.item.arguments!) && e.arguments.length > c.item.arguments!.length) {
              const delta = e.arguments.slice(c.item.arguments!.length);
              this.send({ type: 'response.function_call_arguments.delta', response_id: a.id, item_id: c.item.id, output_index: c.index, call_id: e.callId, delta });
            }
            c.item.arguments = e.arguments;
            c.item.status = 'completed';
            this.send({
              type: 'response.function_call_arguments.done',
              response_id: a.id,
              item_id: c.item.id,
              output_index: c.index,
              call_id: e.callId,
              name: c.item.name,
              arguments: e.arguments,
            });
            this.send({ type: 'response.output_item.done', response_id: a.id, output_index: c.index, item: this.itemObject(c.item) });
            if (r.inBand) this.send({ type: 'conversation.item.done', previous_item_id: this.previousOf(c.item), item: this.itemObject(c.item) });
            break;
          }
          case 'done':
            usage = e.usage;
            finish = e.finishReason;
            break;
          default:
            break;
        }
      }
      if (msg) {
        say(true);
        speaker?.end();
        if (speaking) await speaking.catch(() => {});
        if (voiceError !== undefined && !a.reason) throw voiceError;
        const m = msg;
        if (audio) {
          const spoken = (m.spans ?? []).map((s) => s.text).join(' ');
          m.content = [{ type: 'output_audio', transcript: spoken }];
          if (!signal.aborted) {
            this.send({ type: 'response.output_audio.done', response_id: a.id, item_id: m.id, output_index: msgIndex, content_index: 0 });
            this.send({ type: 'response.output_audio_transcript.done', response_id: a.id, item_id: m.id, output_index: msgIndex, content_index: 0, transcript: spoken });
            this.send({
              type: 'response.content_part.done',
              response_id: a.id,
              item_id: m.id,
              output_index: msgIndex,
              content_index: 0,
              part: { type: 'audio', transcript: spoken },
            });
          }
        } else {
          m.content = [{ type: 'output_text', text }];
          if (!signal.aborted) {
            this.send({ type: 'response.output_text.done', response_id: a.id, item_id: m.id, output_index: msgIndex, content_index: 0, text });
            this.send({ type: 'response.content_part.done', response_id: a.id, item_id: m.id, output_index: msgIndex, content_index: 0, part: { type: 'text', text } });
          }
        }
      }
      if (voiceError !== undefined && !a.reason) throw voiceError;
      if (signal.aborted && !a.reason) throw signal.reason;
    } catch (e) {
      if (!a.reason && !this.closed) {
        failure = e instanceof EngineError ? fromEngineError(e, 'the model engine') : e instanceof AppError ? e : toAppError(e, this.o.req);
      }
    }
    // the items it made: done, or incomplete when it was cancelled or failed
    const status = a.reason ? 'cancelled' : failure ? 'failed' : finish === 'length' ? 'incomplete' : 'completed';
    for (const item of output) {
      if (item.status === 'in_progress') item.status = status === 'completed' ? 'completed' : 'incomplete';
      if (item.type === 'message' && item.content.length === 0)
        item.content = [audio ? { type: 'output_audio', transcript: (item.spans ?? []).map((s) => s.text).join(' ') } : { type: 'output_text', text: '' }];
      if (item.type === 'message' || item.status === 'incomplete') {
        const index = output.indexOf(item);
        this.send({ type: 'response.output_item.done', response_id: a.id, output_index: index, item: this.itemObject(item) });
        if (r.inBand) this.send({ type: 'conversation.item.done', previous_item_id: this.previousOf(item), item: this.itemObject(item) });
      }
    }
    const outSeconds = outSamples / PCM_RATE;
    const inputTokens = (usage?.inputTokens ?? 0) + Math.round(inputSeconds * TOKENS_PER_AUDIO_SECOND_IN);
    const outputTokens = (usage?.outputTokens ?? 0) + Math.round(outSeconds * TOKENS_PER_AUDIO_SECOND_OUT);
    const usageObj = {
      total_tokens: inputTokens + outputTokens,
      input_tokens: inputTokens,
      output_tokens: outputTokens,
      input_token_details: {
        text_tokens: usage?.inputTokens ?? 0,
        audio_tokens: Math.round(inputSeconds * TOKENS_PER_AUDIO_SECOND_IN),
        image_tokens: 0,
        cached_tokens: usage?.cachedTokens ?? 0,
        cached_tokens_details: { text_tokens: usage?.cachedTokens ?? 0, audio_tokens: 0, image_tokens: 0 },
      },
      output_token_details: { text_tokens: usage?.outputTokens ?? 0, audio_tokens: Math.round(outSeconds * TOKENS_PER_AUDIO_SECOND_OUT) },
    };
    const details =
      status === 'cancelled'
        ? { type: 'cancelled', reason: a.reason }
        : status === 'failed'
          ? { type: 'failed', error: { type: errType(failure!), code: failure!.code, message: failure!.message } }
          : status === 'incomplete'
            ? { type: 'incomplete', reason: 'max_output_tokens' }
            : null;
    // the turn is charged before the client hears it is done
    await this.charge(textSpec, usage, inputSeconds, outSeconds, characters).catch((e: unknown) =>
      this.o.req.log.error({ err: (e as Error).message }, 'realtime usage not recorded'),
    );
    if (failure) this.sendError(failure, r.eventId);
    this.send({ type: 'response.done', response: response(status, { status_details: details, usage: usageObj }) });
    const latency = firstOutputAt !== undefined ? (firstOutputAt - turnEnd) / 1000 : undefined;
    r.span?.end(
      failure ? failure.status : 200,
      {
        'portico.realtime.session': this.id,
        'portico.realtime.response': a.id,
        'portico.realtime.status': status,
        'gen_ai.request.model': this.o.served.spec.name,
        'portico.audio_seconds_in': Math.round(inputSeconds * 1000) / 1000,
        'portico.audio_seconds_out': Math.round((outSamples / PCM_RATE) * 1000) / 1000,
        'gen_ai.usage.input_tokens': usage?.inputTokens,
        'gen_ai.usage.output_tokens': usage?.outputTokens,
      },
      failure?.code,
    );
    if (latency !== undefined) this.o.svc.d.metrics?.turnLatency(this.o.served.spec.name, latency);
    this.o.req.log.info(
      {
        realtime: 'turn',
        session: this.id,
        response: a.id,
        model: this.o.served.spec.name,
        text_model: textSpec?.name,
        key_id: this.o.key.keyId,
        status,
        audio_seconds_in: Math.round(inputSeconds * 1000) / 1000,
        audio_seconds_out: Math.round(outSeconds * 1000) / 1000,
        tokens_in: usage?.inputTokens,
        tokens_out: usage?.outputTokens,
        characters,
        first_output_ms: latency !== undefined ? Math.round(latency * 1000) : undefined,
        ms: Math.round(performance.now() - started),
        error: failure?.code,
      },
      'realtime turn',
    );
  }

  private previousOf(item: Item): string | null {
    const i = this.items.indexOf(item);
    return i > 0 ? this.items[i - 1]!.id : null;
  }

  /** the conversation as the text model reads it (user audio as its transcript, truncated answers as heard) */
  private async messages(items: readonly Item[], instructions: string): Promise<ChatMessage[]> {
    const out: ChatMessage[] = [];
    if (instructions) out.push({ role: 'system', content: instructions });
    for (const item of items) {
      if (item.type === 'function_call') {
        const call: ChatToolCall = { callId: item.call_id!, name: item.name!, arguments: item.arguments ?? '' };
        const last = out.at(-1);
        if (last?.role === 'assistant' && last.toolCalls) last.toolCalls.push(call);
        else out.push({ role: 'assistant', content: '', toolCalls: [call] });
        continue;
      }
      if (item.type === 'function_call_output') {
        out.push({ role: 'tool', content: item.output ?? '', toolCallId: item.call_id });
        continue;
      }
      const parts: string[] = [];
      for (const c of item.content) {
        if (c.type === 'input_text' || c.type === 'output_text') parts.push(c.text as string);
        else if (c.type === 'output_audio') parts.push((c.transcript as string) ?? '');
        else if (c.type === 'input_audio') parts.push(typeof c.transcript === 'string' ? c.transcript : item.transcript ? await item.transcript : '');
      }
      const text = parts.join('\n').trim();
      if (!text) continue;
      out.push({ role: item.role === 'system' ? 'system' : item.role === 'assistant' ? 'assistant' : 'user', content: text });
    }
    return out;
  }

  private sendRateLimits(): void {
    const k = this.o.key;
    const limits: Obj[] = [];
    if (k.rpmLimit) limits.push({ name: 'requests', limit: k.rpmLimit, remaining: null, reset_seconds: 60 });
    if (k.tpmLimit) limits.push({ name: 'tokens', limit: k.tpmLimit, remaining: null, reset_seconds: 60 });
    this.send({ type: 'rate_limits.updated', rate_limits: limits });
  }

  private async charge(text: ModelSpec | undefined, usage: Usage | undefined, inSec: number, outSec: number, characters: number): Promise<void> {
    const svc = this.o.svc;
    const spec = this.o.served.spec;
    const priced = svc.pricing(spec, {
      text,
      transcription: svc.d.ears.spec(this.config.transcription?.model ?? this.o.served.transcription),
      speech: svc.d.voice.spec(this.o.served.speech),
    });
    const units: Record<string, number> = {};
    if (inSec > 0) units.audio_seconds = Math.round(inSec * 1000) / 1000;
    if (outSec > 0) units.output_audio_seconds = Math.round(outSec * 1000) / 1000;
    if (characters > 0) units.characters = characters;
    if (inSec > 0) svc.d.metrics?.audioSeconds(spec.name, 'in', inSec);
    if (outSec > 0) svc.d.metrics?.audioSeconds(spec.name, 'out', outSec);
    await svc.d.metering.charge({
      requestId: this.o.req.id,
      key: this.o.key,
      spec: priced,
      operation: REALTIME_OPERATION,
      used: {
        inputTokens: usage?.inputTokens ?? 0,
        outputTokens: usage?.outputTokens ?? 0,
        cachedTokens: usage?.cachedTokens,
        cacheWriteTokens: usage?.cacheWriteTokens,
        cacheWrite1hTokens: usage?.cacheWrite1hTokens,
        units,
      },
      deployment: svc.deploymentOf(spec),
    });
  }

  private async chargeTranscription(seconds: number): Promise<void> {
    if (seconds <= 0) return;
    const svc = this.o.svc;
    const spec = this.o.served.spec;
    const t = svc.d.ears.spec(this.config.transcription?.model ?? this.o.served.transcription);
    svc.d.metrics?.audioSeconds(spec.name, 'in', seconds);
    await svc.d.metering
      .charge({
        requestId: this.o.req.id,
        key: this.o.key,
        spec: svc.pricing(spec, { transcription: t }),
        operation: REALTIME_OPERATION,
        used: { units: { audio_seconds: Math.round(seconds * 1000) / 1000 } },
        deployment: svc.deploymentOf(spec),
      })
      .catch((e: unknown) => this.o.req.log.error({ err: (e as Error).message }, 'realtime usage not recorded'));
  }
}

const SLOW_CONSUMER = 'The client does not read its events: the session is closed.';

const notInTranscription = (type: unknown) => new ClientEventError('invalid_value', `'${String(type)}' is not available in a transcription session.`, 'type');

function badType(param: string, what: string): never {
  throw new ClientEventError('invalid_type', `Invalid type for '${param}': expected ${what}.`, param);
}
