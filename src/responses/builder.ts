import type { FinishReason, GenerateEvent, Usage } from '../engines/types.js';
import { newId } from './ids.js';
import type { OutputAudioPart, OutputItem, OutputTextPart, ResponseObject, ResponseUsage } from './object.js';

export type StreamEvent = { type: string; sequence_number: number; [k: string]: unknown };

type MessageItem = OutputItem & { type: 'message' };

/** The spoken part of the open message, while its audio is made. */
interface OpenAudio {
  item: MessageItem;
  index: number;
  part: OutputAudioPart;
}

/**
 * Folds engine events into the ResponseObject and, at the same time, into the Responses streaming events
 * (sequence numbers from 0, one item open at a time, every item finished before the final event), so the
 * stored object and the stream can never disagree. `emit` receives each event as it is made.
 */
export class ResponseBuilder {
  private seq = 0;
  private open: { item: OutputItem; index: number } | undefined;
  /** the open message's text part was closed (its text is finished; its audio may still be coming) */
  private textClosed = false;
  private audio: OpenAudio | undefined;
  private readonly argsByCall = new Map<string, OutputItem & { type: 'function_call' }>();
  private toolCalls = 0;

  constructor(
    readonly response: ResponseObject,
    private emit: (e: StreamEvent) => void,
    private readonly limits: { maxToolCalls?: number | null; startSeq?: number } = {},
  ) {
    this.seq = limits.startSeq ?? 0;
  }

  /** takes back the last `n` sequence numbers (events that were made but never sent) */
  rewind(n: number) {
    this.seq -= n;
  }

  /** sends later events elsewhere (a background job taking over a started response) */
  redirect(emit: (e: StreamEvent) => void) {
    this.emit = emit;
  }

  /** `fields` is built only when someone listens (a plain JSON answer needs no events) */
  private send(type: string, fields: () => Record<string, unknown>) {
    if (this.quiet) {
      this.seq++;
      return;
    }
    this.emit({ type, sequence_number: this.seq++, ...fields() });
  }

  /** no listener (a plain JSON answer): events are counted but not built */
  private quiet = false;

  static quiet(response: ResponseObject, limits: { maxToolCalls?: number | null } = {}): ResponseBuilder {
    const b = new ResponseBuilder(response, () => {}, limits);
    b.quiet = true;
    return b;
  }

  /**
   * A copy, so later changes do not alter what an event already carried. The builder only reassigns the
   * response's own fields (status, usage, error...) and fills the items of `output`: the top level is copied and
   * `output` deeply, while what never changes after the response is made (tools and their schemas, text, metadata,
   * reasoning...) is shared, not copied again for each of the three snapshots a stream carries.
   */
  snapshot(): ResponseObject {
    return { ...this.response, output: copy(this.response.output) };
  }

  /**
   * Opens the response: `in_progress` (the specification's status list has no `queued`), with response.created.
   * A foreground response is running already and says so at once (response.in_progress); a background one is
   * only stored and handed to a queue here, and says response.in_progress when a worker starts it (running()).
   */
  start(background = false) {
    this.response.status = 'in_progress';
    if (background) {
      this.send('response.created', () => ({ response: this.snapshot() }));
      return;
    }
    if (this.quiet) {
      this.seq += 2;
      return;
    }
    this.send('response.created', () => ({ response: this.snapshot() }));
    this.send('response.in_progress', () => ({ response: this.snapshot() }));
  }

  /** background: a worker starts the stored response */
  running() {
    this.response.status = 'in_progress';
    this.send('response.in_progress', () => ({ response: this.snapshot() }));
  }

  get sequence() {
    return this.seq;
  }

  handle(ev: GenerateEvent) {
    switch (ev.type) {
      case 'text_delta': {
        const { item, index } = this.ensure('message');
        if (item.type !== 'message') return;
        (item.content[0] as OutputTextPart).text += ev.delta;
        this.send('response.output_text.delta', () => ({ item_id: item.id, output_index: index, content_index: 0, delta: ev.delta, logprobs: [] }));
        return;
      }
      case 'reasoning_delta': {
        const { item, index } = this.ensure('reasoning');
        if (item.type !== 'reasoning') return;
        item.content[0]!.text += ev.delta; // a reasoning item is made with its one text part
        this.send('response.reasoning_text.delta', () => ({ item_id: item.id, output_index: index, content_index: 0, delta: ev.delta }));
        return;
      }
      case 'tool_call_start': {
        this.closeOpen('completed');
        if (this.limits.maxToolCalls && this.toolCalls >= this.limits.maxToolCalls) return;
        this.toolCalls++;
        const item: OutputItem = { id: newId('fc', 12), type: 'function_call', status: 'in_progress', call_id: ev.callId, name: ev.name, arguments: '' };
        this.response.output.push(item);
        const index = this.response.output.length - 1;
        this.open = { item, index };
        this.argsByCall.set(ev.callId, item);
        this.send('response.output_item.added', () => ({ output_index: index, item: copy(item) }));
        return;
      }
      case 'tool_call_delta': {
        const item = this.argsByCall.get(ev.callId);
        if (!item || this.open?.item !== item) return;
        item.arguments += ev.delta;
        const index = this.open.index;
        this.send('response.function_call_arguments.delta', () => ({ item_id: item.id, output_index: index, delta: ev.delta }));
        return;
      }
      case 'tool_call_end': {
        const item = this.argsByCall.get(ev.callId);
        if (!item || this.open?.item !== item) return;
        item.arguments = ev.arguments;
        // a call the token cap cut is incomplete, in its events and in the stored object, as a cut message is
        this.closeOpen(ev.incomplete ? 'incomplete' : 'completed');
        return;
      }
      case 'done':
        return;
    }
  }

  private ensure(kind: 'message' | 'reasoning'): { item: OutputItem; index: number } {
    if (this.open && this.open.item.type === kind) return this.open;
    this.closeOpen('completed');
    let item: OutputItem;
    if (kind === 'message') {
      item = { id: newId('msg', 12), type: 'message', status: 'in_progress', role: 'assistant', content: [] };
    } else {
      item = { id: newId('rs', 12), type: 'reasoning', summary: [], content: [], encrypted_content: null };
    }
    this.response.output.push(item);
    const index = this.response.output.length - 1;
    this.open = { item, index };
    this.textClosed = false;
    this.send('response.output_item.added', () => ({ output_index: index, item: copy(item) }));
    if (item.type === 'message') {
      const part = { type: 'output_text' as const, text: '', annotations: [], logprobs: [] };
      item.content.push(part);
      this.send('response.content_part.added', () => ({ item_id: item.id, output_index: index, content_index: 0, part: copy(part) }));
    } else if (item.type === 'reasoning') {
      const part = { type: 'reasoning_text' as const, text: '' };
      item.content.push(part);
      this.send('response.content_part.added', () => ({ item_id: item.id, output_index: index, content_index: 0, part: copy(part) }));
    }
    return this.open;
  }

  /** The open message, if the open item is one. */
  get openMessage(): { item: MessageItem; index: number } | undefined {
    const o = this.open;
    return o && o.item.type === 'message' ? { item: o.item, index: o.index } : undefined;
  }

  /**
   * Closes the text part of the open message (its text is finished) and leaves the message open: its spoken part
   * (content index 1) is still being made. The message closes at the next closeOpen.
   */
  closeText() {
    const m = this.openMessage;
    if (!m || this.textClosed) return;
    this.textClosed = true;
    const { item, index } = m;
    const part = item.content[0] as OutputTextPart;
    this.send('response.output_text.done', () => ({ item_id: item.id, output_index: index, content_index: 0, text: part.text, logprobs: [] }));
    this.send('response.content_part.done', () => ({ item_id: item.id, output_index: index, content_index: 0, part: copy(part) }));
  }

  // ---------------------------------------------------------------- the spoken part (modalities audio)
  // Events: response.content_part.added (output_audio, content_index 1), then response.audio.delta (base64 pieces
  // that decode when joined) and response.audio.transcript.delta as the audio is made, then response.audio.done,
  // response.audio.transcript.done and response.content_part.done with the whole part. The SDK's event types carry
  // `delta` only; item_id, output_index and content_index are added so a client can tell the part.

  /** The open message gets its spoken part (empty until audio comes). */
  audioStart() {
    const m = this.openMessage;
    if (!m || this.audio) return;
    const part: OutputAudioPart = { type: 'output_audio', data: '', transcript: '' };
    m.item.content.push(part);
    this.audio = { item: m.item, index: m.index, part };
    this.send('response.content_part.added', () => ({ item_id: m.item.id, output_index: m.index, content_index: 1, part: copy(part) }));
  }

  /** base64 of the next audio bytes (a multiple of 3 bytes, except the last piece, so the pieces join) */
  audioDelta(b64: string) {
    const a = this.audio;
    if (!a || !b64) return;
    a.part.data += b64;
    this.send('response.audio.delta', () => ({ item_id: a.item.id, output_index: a.index, content_index: 1, delta: b64 }));
  }

  /** the text the voice is speaking now */
  audioTranscriptDelta(text: string) {
    const a = this.audio;
    if (!a || !text) return;
    a.part.transcript += text;
    this.send('response.audio.transcript.delta', () => ({ item_id: a.item.id, output_index: a.index, content_index: 1, delta: text }));
  }

  /** Closes the spoken part; `data` replaces the joined pieces (a WAV header with its lengths filled in). */
  audioDone(data?: string) {
    const a = this.audio;
    if (!a) return;
    this.audio = undefined;
    if (data !== undefined) a.part.data = data;
    const ids = { item_id: a.item.id, output_index: a.index, content_index: 1 };
    this.send('response.audio.done', () => ({ ...ids }));
    this.send('response.audio.transcript.done', () => ({ ...ids, transcript: a.part.transcript }));
    this.send('response.content_part.done', () => ({ ...ids, part: copy(a.part) }));
  }

  private closeOpen(status: 'completed' | 'incomplete') {
    const o = this.open;
    if (!o) return;
    const { item, index } = o;
    if (item.type === 'message') {
      this.closeText();
      // a spoken part still open here was cut short (a failure, a cancel): closed with what was made
      this.audioDone();
      this.open = undefined;
      item.status = status;
    } else if (item.type === 'reasoning') {
      this.open = undefined;
      const part = item.content[0]!; // a reasoning item is made with its one text part
      this.send('response.reasoning_text.done', () => ({ item_id: item.id, output_index: index, content_index: 0, text: part.text }));
      this.send('response.content_part.done', () => ({ item_id: item.id, output_index: index, content_index: 0, part: copy(part) }));
    } else {
      this.open = undefined;
      this.send('response.function_call_arguments.done', () => ({ item_id: item.id, output_index: index, name: item.name, arguments: item.arguments }));
      item.status = status;
    }
    this.send('response.output_item.done', () => ({ output_index: index, item: copy(item) }));
  }

  /** Closes the open item and gives the final object: completed, or incomplete at the token cap. */
  finish(reason: FinishReason, usage: Usage, model?: string): ResponseObject {
    const r = this.response;
    // the token cap and a refusal on the upstream's safety grounds end an answer unfinished, as OpenAI says them
    const cut = reason === 'length' ? 'max_output_tokens' : reason === 'content_filter' ? 'content_filter' : undefined;
    this.closeOpen(cut ? 'incomplete' : 'completed');
    if (model) r.model = model;
    r.usage = toUsage(usage);
    if (usage.cacheWriteTokens !== undefined)
      cacheWrites.set(r, { cacheWriteTokens: usage.cacheWriteTokens, ...(usage.cacheWrite1hTokens !== undefined ? { cacheWrite1hTokens: usage.cacheWrite1hTokens } : {}) });
    r.completed_at = Math.floor(Date.now() / 1000);
    if (cut) {
      r.status = 'incomplete';
      r.incomplete_details = { reason: cut };
      this.send('response.incomplete', () => ({ response: this.snapshot() }));
    } else {
      r.status = 'completed';
      this.send('response.completed', () => ({ response: this.snapshot() }));
    }
    return r;
  }

  /**
   * Stopped by Portico before the model finished: its output passed what the request reserved (the most output it
   * may produce: max_output_tokens, or the default when it named none). Incomplete with OpenAI's reason for the
   * token cap; the usage is the estimate given (no count came from the engine).
   */
  stopAt(reason: 'max_output_tokens', usage: Usage): ResponseObject {
    const r = this.response;
    this.closeOpen('incomplete');
    r.usage = toUsage(usage);
    r.completed_at = Math.floor(Date.now() / 1000);
    r.status = 'incomplete';
    r.incomplete_details = { reason };
    this.send('response.incomplete', () => ({ response: this.snapshot() }));
    return r;
  }

  /** The engine failed after the response started: an `error` event, then `response.failed`. */
  fail(code: string, message: string, usage?: Usage): ResponseObject {
    const r = this.response;
    this.closeOpen('incomplete');
    r.status = 'failed';
    r.error = { code, type: 'server_error', message };
    r.usage = usage ? toUsage(usage) : null;
    this.send('error', () => ({ code, message, param: null }));
    this.send('response.failed', () => ({ response: this.snapshot() }));
    return r;
  }

  /**
   * Cancelled (background). The protocol has no cancel event, and a stream must not end with an item open: the
   * open item is closed as incomplete (its done events, as for a cut message), then `response.incomplete`
   * carries the object with status `cancelled`: the final event the SDKs' stream helpers know that says the
   * output stopped short (their final response is then the cancelled object).
   */
  cancel(): ResponseObject {
    const r = this.response;
    this.closeOpen('incomplete');
    r.status = 'cancelled';
    this.send('response.incomplete', () => ({ response: this.snapshot() }));
    return r;
  }
}

/**
 * The engine's prompt-cache writes of a finished response, which its usage (OpenAI's shape: input_tokens_details
 * has cached_tokens only) has no place for: the usage record prices them (ResponseRunner.recordUsage). Kept
 * beside the object, never in it, so it is neither stored nor shown.
 */
const cacheWrites = new WeakMap<ResponseObject, Pick<Usage, 'cacheWriteTokens' | 'cacheWrite1hTokens'>>();

/** the engine's prompt-cache writes of a response the builder finished (none: an empty object) */
export function cacheWritesOf(r: ResponseObject): Pick<Usage, 'cacheWriteTokens' | 'cacheWrite1hTokens'> {
  return cacheWrites.get(r) ?? {};
}

export function toUsage(u: Usage): ResponseUsage {
  return {
    input_tokens: u.inputTokens,
    input_tokens_details: { cached_tokens: u.cachedTokens ?? 0 },
    output_tokens: u.outputTokens,
    output_tokens_details: { reasoning_tokens: u.reasoningTokens ?? 0 },
    total_tokens: u.inputTokens + u.outputTokens,
  };
}

/**
 * A deep copy of a JSON value (what the Response object and its items are made of): plain objects and arrays are
 * copied in place, about five times faster than structuredClone, which a streamed response called for each of its
 * snapshots and items; anything else (never expected here) still goes through structuredClone.
 */
export function copy<T>(v: T): T {
  if (typeof v !== 'object' || v === null) return v;
  if (Array.isArray(v)) {
    const out = new Array(v.length);
    for (let i = 0; i < v.length; i++) out[i] = copy(v[i]);
    return out as T;
  }
  const proto = Object.getPrototypeOf(v);
  if (proto !== Object.prototype && proto !== null) return structuredClone(v);
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(v)) {
    const x = copy((v as Record<string, unknown>)[k]);
    // an own "__proto__" key (JSON can have one) must stay a key, not become the copy's prototype
    if (k === '__proto__') Object.defineProperty(out, k, { value: x, enumerable: true, writable: true, configurable: true });
    else out[k] = x;
  }
  return out as T;
}
