/**
 * One spoken conversation with a realtime model (the playground's Talk tab), in the browser: the microphone through
 * an AudioWorklet to 24 kHz PCM16 appended to the input buffer, the model's audio deltas scheduled back to back on
 * the Web Audio clock, and the transcripts of both sides, over OpenAI's Realtime API on a WebSocket authenticated by
 * a client secret (ek_…) that the inference key buys from POST /v1/realtime/client_secrets: the key itself never
 * goes into the socket's subprotocol header.
 *
 * Barge-in: when the server hears speech (input_audio_buffer.speech_started) while an answer plays, the playback
 * stops at once and conversation.item.truncate tells the server how much of that answer was heard, so the
 * conversation it keeps holds only that much. Deltas of a cut answer that were already on their way are dropped.
 */
import { ApiError, v1 } from '../api.js';
import type { T } from '../i18n.js';
import { base64ToBytes, pcm16ToBase64, pcm16ToFloat, RATE } from './pcm.js';

export type TalkState = 'connecting' | 'listening' | 'hearing' | 'thinking' | 'speaking';

export interface TalkLine {
  /** the conversation item's id */
  id: string;
  role: 'user' | 'assistant';
  text: string;
  /** an answer cut short by the user speaking */
  interrupted?: boolean;
}

export interface TalkOptions {
  apiKey: string;
  model: string;
  voice: string;
  instructions: string;
  transcriptionModel: string;
}

export interface TalkEvents {
  state(s: TalkState): void;
  lines(lines: TalkLine[]): void;
  /** an error the session survives (the server's `error` event) */
  error(e: ApiError): void;
  /** the session ended: by stop() (no error), or by what the error says */
  ended(e?: ApiError): void;
}

/** from the socket's creation to session.created */
const CONNECT_TIMEOUT_MS = 15_000;
/** how far ahead of the clock the first chunk of an answer starts (a little slack against an early gap) */
const LEAD_S = 0.05;

interface Chunk {
  src: AudioBufferSourceNode;
  itemId: string;
  start: number;
  duration: number;
}

export class TalkSession {
  private readonly ctx: AudioContext;
  private stream?: MediaStream;
  private ws?: WebSocket;
  private source?: MediaStreamAudioSourceNode;
  private worklet?: AudioWorkletNode;
  private timer?: ReturnType<typeof setTimeout>;
  private done = false;
  private ready = false;
  private hearing = false;
  private responding = false;
  private state: TalkState = 'connecting';
  /** the answer's audio scheduled and not yet over, in order */
  private chunks: Chunk[] = [];
  /** where the next chunk starts on the audio clock */
  private next = 0;
  /** answers cut by barge-in: their late deltas are dropped */
  private readonly cut = new Set<string>();
  private readonly lines = new Map<string, TalkLine>();
  private frame = 0;
  /** the server's error event, while it is the last thing the server sent */
  private lastError?: ApiError;

  /** Made in the click's handler: the audio context is created (and allowed to play) inside the user's gesture. */
  constructor(
    private readonly opts: TalkOptions,
    private readonly on: TalkEvents,
    private readonly t: T,
  ) {
    this.ctx = new AudioContext();
    void this.ctx.resume();
  }

  async start(): Promise<void> {
    this.setState('connecting');
    try {
      if (!navigator.mediaDevices?.getUserMedia) throw new ApiError(0, 'microphone', this.t('talk.micUnavailable'));
      try {
        this.stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true } });
      } catch (e) {
        const name = (e as Error).name;
        throw new ApiError(
          0,
          'microphone',
          this.t(name === 'NotFoundError' || name === 'OverconstrainedError' ? 'talk.micMissing' : name === 'NotAllowedError' ? 'talk.micRefused' : 'err.microphone'),
        );
      }
      if (this.done) return this.release();
      const secret = await this.clientSecret();
      if (this.done) return this.release();
      await this.ctx.audioWorklet.addModule(PORTICO_CAPTURE_WORKLET);
      if (this.done) return this.release();
      this.connect(secret);
    } catch (e) {
      this.fail(e instanceof ApiError ? e : new ApiError(0, 'error', (e as Error).message));
    }
  }

  /** Ends the conversation: the microphone released, the socket closed, the playback stopped. */
  stop(): void {
    if (this.done) return;
    this.done = true;
    this.release();
    this.on.ended();
  }

  private async clientSecret(): Promise<string> {
    const res = await v1('/realtime/client_secrets', this.opts.apiKey, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        expires_after: { anchor: 'created_at', seconds: 600 },
        session: {
          type: 'realtime',
          model: this.opts.model,
          ...(this.opts.instructions.trim() ? { instructions: this.opts.instructions } : {}),
          audio: { output: { voice: this.opts.voice } },
        },
      }),
    });
    let value: unknown;
    try {
      value = ((await res.json()) as { value?: unknown }).value;
    } catch {
      value = undefined;
    }
    if (typeof value !== 'string' || !value) throw new ApiError(res.status, 'bad_response', `HTTP ${res.status}`, res.headers.get('x-request-id') ?? undefined);
    return value;
  }

  private connect(secret: string) {
    const origin = location.origin.replace(/^http/, 'ws');
    const ws = new WebSocket(`${origin}/v1/realtime?model=${encodeURIComponent(this.opts.model)}`, ['realtime', `openai-insecure-api-key.${secret}`]);
    this.ws = ws;
    this.timer = setTimeout(() => this.fail(new ApiError(0, 'timeout', this.t('talk.timeout'))), CONNECT_TIMEOUT_MS);
    ws.onopen = () => {
      const audio: Record<string, unknown> = {
        input: {
          format: { type: 'audio/pcm', rate: RATE },
          turn_detection: { type: 'server_vad' },
          transcription: { model: this.opts.transcriptionModel },
        },
        output: { voice: this.opts.voice },
      };
      this.send({ type: 'session.update', session: { type: 'realtime', ...(this.opts.instructions.trim() ? { instructions: this.opts.instructions } : {}), audio } });
    };
    ws.onmessage = (m) => {
      this.lastError = undefined;
      if (typeof m.data !== 'string') return;
      let ev: Record<string, any>;
      try {
        ev = JSON.parse(m.data);
      } catch {
        return;
      }
      if (ev && typeof ev === 'object') this.handle(ev);
    };
    ws.onclose = (e) => {
      if (this.done) return;
      // a server that refuses says why in an error event, then closes: that error is the reason shown
      if (this.lastError) return this.fail(this.lastError);
      const words = this.ready ? 'talk.closed' : 'talk.notOpened';
      // a browser sees no HTTP status of a refused upgrade (1006): only what a close frame carries
      const code = e.reason ? `${e.code}: ${e.reason.slice(0, 200)}` : String(e.code);
      this.fail(new ApiError(0, 'realtime_closed', this.t(words, { code })));
    };
  }

  private handle(ev: Record<string, any>) {
    switch (ev.type) {
      case 'session.created':
        if (!this.ready) {
          this.ready = true;
          clearTimeout(this.timer);
          this.capture();
          this.setState('listening');
        }
        break;
      case 'input_audio_buffer.speech_started':
        this.hearing = true;
        if (this.chunks.length) this.bargeIn();
        this.setState('hearing');
        break;
      case 'input_audio_buffer.speech_stopped':
        this.hearing = false;
        this.setState('listening');
        break;
      case 'conversation.item.added':
      case 'conversation.item.created':
      case 'conversation.item.done': {
        const item = ev.item;
        if (item?.type !== 'message' || (item.role !== 'user' && item.role !== 'assistant') || typeof item.id !== 'string') break;
        const line = this.line(item.id, item.role);
        const said = (item.content ?? []).map((c: any) => c?.transcript ?? c?.text ?? '').join('');
        if (said && !line.text) line.text = said;
        this.changed();
        break;
      }
      case 'conversation.item.input_audio_transcription.delta':
        if (typeof ev.delta === 'string') {
          this.line(ev.item_id, 'user').text += ev.delta;
          this.changed();
        }
        break;
      case 'conversation.item.input_audio_transcription.completed':
        if (typeof ev.transcript === 'string') {
          this.line(ev.item_id, 'user').text = ev.transcript;
          this.changed();
        }
        break;
      case 'response.created':
        this.responding = true;
        if (!this.hearing && !this.chunks.length) this.setState('thinking');
        break;
      case 'response.output_audio_transcript.delta':
      case 'response.output_text.delta':
        if (typeof ev.delta === 'string') {
          this.line(ev.item_id ?? ev.response_id, 'assistant').text += ev.delta;
          this.changed();
        }
        break;
      case 'response.output_audio_transcript.done':
      case 'response.output_text.done': {
        const text = ev.transcript ?? ev.text;
        const line = this.line(ev.item_id ?? ev.response_id, 'assistant');
        // a cut answer keeps what was said of it so far: the rest was not heard
        if (typeof text === 'string' && !line.interrupted) {
          line.text = text;
          this.changed();
        }
        break;
      }
      case 'response.output_audio.delta':
        if (typeof ev.delta === 'string' && !this.cut.has(ev.item_id)) this.play(ev.item_id, ev.delta);
        break;
      case 'response.done':
        this.responding = false;
        if (!this.hearing && !this.chunks.length) this.setState('listening');
        if (ev.response?.status === 'failed') {
          const e = ev.response.status_details?.error;
          this.on.error(new ApiError(0, e?.code ?? e?.type ?? 'response_failed', e?.message ?? this.t('talk.failed')));
        }
        break;
      case 'error': {
        const e = ev.error ?? {};
        this.lastError = new ApiError(0, e.code ?? e.type ?? 'error', typeof e.message === 'string' && e.message ? e.message : this.t('talk.failed'));
        this.on.error(this.lastError);
        break;
      }
    }
  }

  /** the microphone into the worklet, its chunks into input_audio_buffer.append */
  private capture() {
    if (!this.stream || this.done) return;
    this.source = this.ctx.createMediaStreamSource(this.stream);
    this.worklet = new AudioWorkletNode(this.ctx, 'portico-capture', { numberOfInputs: 1, numberOfOutputs: 0, channelCount: 1, channelCountMode: 'explicit' });
    this.worklet.port.onmessage = (m: MessageEvent<Int16Array>) => {
      if (this.ready && !this.done) this.send({ type: 'input_audio_buffer.append', audio: pcm16ToBase64(m.data) });
    };
    this.source.connect(this.worklet);
  }

  /** one delta of the answer, started where the previous one ends (or just ahead of now, after a gap) */
  private play(itemId: string, b64: string) {
    let samples: Float32Array<ArrayBuffer>;
    try {
      samples = pcm16ToFloat(base64ToBytes(b64));
    } catch {
      return;
    }
    if (!samples.length) return;
    const buf = this.ctx.createBuffer(1, samples.length, RATE);
    buf.copyToChannel(samples, 0);
    const src = this.ctx.createBufferSource();
    src.buffer = buf;
    src.connect(this.ctx.destination);
    const start = Math.max(this.next, this.ctx.currentTime + (this.chunks.length ? 0 : LEAD_S));
    src.start(start);
    this.next = start + buf.duration;
    const chunk: Chunk = { src, itemId, start, duration: buf.duration };
    this.chunks.push(chunk);
    src.onended = () => {
      const i = this.chunks.indexOf(chunk);
      if (i >= 0) this.chunks.splice(i, 1);
      this.playedBefore.set(itemId, (this.playedBefore.get(itemId) ?? 0) + chunk.duration);
      if (!this.chunks.length && !this.done) this.setState(this.hearing ? 'hearing' : this.responding ? 'thinking' : 'listening');
    };
    if (!this.hearing) this.setState('speaking');
  }

  /** the user speaks over the answer: silence at once, and tell the server how much of it was heard */
  private bargeIn() {
    const now = this.ctx.currentTime;
    const itemId = this.chunks[0].itemId;
    // what was heard of this item: its chunks' time on the clock so far (a gap between chunks is not audio)
    let heard = 0;
    for (const c of this.chunks) if (c.itemId === itemId) heard += Math.min(Math.max(now - c.start, 0), c.duration);
    const played = this.playedBefore.get(itemId) ?? 0;
    for (const c of this.chunks) {
      c.src.onended = null;
      try {
        c.src.stop();
      } catch {
        // not started: nothing to stop
      }
    }
    this.chunks = [];
    this.next = 0;
    this.cut.add(itemId);
    this.send({ type: 'conversation.item.truncate', item_id: itemId, content_index: 0, audio_end_ms: Math.round((played + heard) * 1000) });
    const line = this.lines.get(itemId);
    if (line) {
      line.interrupted = true;
      this.changed();
    }
  }

  /** seconds of an item's audio already played out by chunks that have ended (they leave `chunks` when they end) */
  private readonly playedBefore = new Map<string, number>();

  private line(id: string, role: TalkLine['role']): TalkLine {
    let l = this.lines.get(id);
    if (!l) this.lines.set(id, (l = { id, role, text: '' }));
    return l;
  }

  /** the transcript to the page, at most once a frame */
  private changed() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.on.lines([...this.lines.values()].filter((l) => l.text || l.interrupted).map((l) => ({ ...l })));
    });
  }

  private setState(s: TalkState) {
    if (this.state === s && s !== 'connecting') return;
    this.state = s;
    this.on.state(s);
  }

  private send(ev: Record<string, unknown>) {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(ev));
  }

  private fail(e: ApiError) {
    if (this.done) return;
    this.done = true;
    this.release();
    this.on.ended(e);
  }

  private release() {
    clearTimeout(this.timer);
    cancelAnimationFrame(this.frame);
    this.frame = 0;
    for (const c of this.chunks) {
      c.src.onended = null;
      try {
        c.src.stop();
      } catch {
        // not started
      }
    }
    this.chunks = [];
    this.worklet?.port.close();
    this.worklet?.disconnect();
    this.source?.disconnect();
    this.stream?.getTracks().forEach((tr) => tr.stop());
    const ws = this.ws;
    if (ws && (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING)) {
      ws.onclose = null;
      ws.close(1000);
    }
    void this.ctx.close().catch(() => {});
  }
}
