import type { FinishReason, GenerateEvent, Usage } from '../engines/types.js';
import { newId } from './ids.js';
import type { OutputItem, ResponseObject, ResponseUsage } from './object.js';

export type StreamEvent = { type: string; sequence_number: number; [k: string]: unknown };

/**
 * Folds engine events into the ResponseObject and, at the same time, into the Responses streaming events
 * (sequence numbers from 0, one item open at a time, every item finished before the final event), so the
 * stored object and the stream can never disagree. `emit` receives each event as it is made.
 */
export class ResponseBuilder {
  private seq = 0;
  private open: { item: OutputItem; index: number } | undefined;
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

  /** a deep copy, so later changes do not alter what an event already carried */
  snapshot(): ResponseObject {
    return structuredClone(this.response);
  }

  start(queued = false) {
    if (queued) {
      this.response.status = 'queued';
      this.send('response.created', () => ({ response: this.snapshot() }));
      this.send('response.queued', () => ({ response: this.snapshot() }));
      return;
    }
    this.response.status = 'in_progress';
    if (this.quiet) {
      this.seq += 2;
      return;
    }
    this.send('response.created', () => ({ response: this.snapshot() }));
    this.send('response.in_progress', () => ({ response: this.snapshot() }));
  }

  /** background: from queued to running */
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
        item.content[0].text += ev.delta;
        this.send('response.output_text.delta', () => ({ item_id: item.id, output_index: index, content_index: 0, delta: ev.delta, logprobs: [] }));
        return;
      }
      case 'reasoning_delta': {
        const { item, index } = this.ensure('reasoning');
        if (item.type !== 'reasoning') return;
        item.content[0].text += ev.delta;
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
        this.send('response.output_item.added', () => ({ output_index: index, item: structuredClone(item) }));
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
        this.closeOpen('completed');
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
    this.send('response.output_item.added', () => ({ output_index: index, item: structuredClone(item) }));
    if (item.type === 'message') {
      const part = { type: 'output_text' as const, text: '', annotations: [], logprobs: [] };
      item.content.push(part);
      this.send('response.content_part.added', () => ({ item_id: item.id, output_index: index, content_index: 0, part: structuredClone(part) }));
    } else if (item.type === 'reasoning') {
      const part = { type: 'reasoning_text' as const, text: '' };
      item.content.push(part);
      this.send('response.content_part.added', () => ({ item_id: item.id, output_index: index, content_index: 0, part: structuredClone(part) }));
    }
    return this.open;
  }

  private closeOpen(status: 'completed' | 'incomplete') {
    const o = this.open;
    if (!o) return;
    this.open = undefined;
    const { item, index } = o;
    if (item.type === 'message') {
      const part = item.content[0];
      this.send('response.output_text.done', () => ({ item_id: item.id, output_index: index, content_index: 0, text: part.text, logprobs: [] }));
      this.send('response.content_part.done', () => ({ item_id: item.id, output_index: index, content_index: 0, part: structuredClone(part) }));
      item.status = status;
    } else if (item.type === 'reasoning') {
      const part = item.content[0];
      this.send('response.reasoning_text.done', () => ({ item_id: item.id, output_index: index, content_index: 0, text: part.text }));
      this.send('response.content_part.done', () => ({ item_id: item.id, output_index: index, content_index: 0, part: structuredClone(part) }));
    } else {
      this.send('response.function_call_arguments.done', () => ({ item_id: item.id, output_index: index, name: item.name, arguments: item.arguments }));
      item.status = status;
    }
    this.send('response.output_item.done', () => ({ output_index: index, item: structuredClone(item) }));
  }

  /** Closes the open item and gives the final object: completed, or incomplete at the token cap. */
  finish(reason: FinishReason, usage: Usage, model?: string): ResponseObject {
    const r = this.response;
    this.closeOpen(reason === 'length' ? 'incomplete' : 'completed');
    if (model) r.model = model;
    r.usage = toUsage(usage);
    r.completed_at = Math.floor(Date.now() / 1000);
    if (reason === 'length') {
      r.status = 'incomplete';
      r.incomplete_details = { reason: 'max_output_tokens' };
      this.send('response.incomplete', () => ({ response: this.snapshot() }));
    } else {
      r.status = 'completed';
      this.send('response.completed', () => ({ response: this.snapshot() }));
    }
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

  /** Cancelled (background): the object says so; there is no cancel event in the protocol. */
  cancel(): ResponseObject {
    const r = this.response;
    if (this.open) {
      const { item } = this.open;
      if (item.type !== 'reasoning') item.status = 'incomplete';
      this.open = undefined;
    }
    r.status = 'cancelled';
    return r;
  }
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
