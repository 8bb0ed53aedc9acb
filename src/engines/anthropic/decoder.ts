/**
 * Anthropic's Messages answer -> GenerateEvents: the streamed events (message_start, content_block_start /
 * content_block_delta / content_block_stop, message_delta, message_stop, ping, error) or one JSON message.
 *
 * Text deltas are text; thinking deltas are reasoning (signatures and redacted thinking carry nothing a client can
 * read); a tool_use block is one tool call (start, its input_json_delta pieces, end), except the tool structured
 * output is asked through, whose input is the answer's text. Anthropic writes one content block at a time, so the
 * calls come whole, one after the other; the end of the last one waits for the stop reason, which says whether the
 * token cap cut it.
 */
import { EngineError, type FinishReason, type GenerateRequest, type Usage } from '../types.js';
import { BlockEmitter, type OpenCall } from '../shared/block-emitter.js';
import type { StreamDecoder } from '../shared/answer.js';
import { estimateTokens } from '../shared/tokens.js';
import { cacheCounts, copyCacheCounts } from '../shared/usage.js';
import type { FormatTool } from './request.js';

/** Anthropic's stop reasons as Portico's finish reasons (undefined: unknown, taken as a stop) */
const FINISH: Readonly<Record<string, FinishReason>> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  pause_turn: 'stop',
  max_tokens: 'length',
  model_context_window_exceeded: 'length',
  tool_use: 'tool_calls',
  refusal: 'content_filter',
};

const broken = (message: string) => new EngineError(message, 'upstream_stream_broken', 502, { retryable: true });

/**
 * Anthropic's usage: every input token (cache reads and writes included) is input; cache reads are the cached part,
 * cache writes (`cache_creation_input_tokens`) the written part, of which `cache_creation.ephemeral_1h_input_tokens`
 * went to the one-hour cache. message_delta repeats the counts it knows (input_tokens may be null there): the
 * latest known of each wins, and the input's counts go together (an event without any keeps the ones before).
 */
export function anthropicUsage(u: any, prev?: Usage): Usage | undefined {
  if (!u || typeof u !== 'object') return prev;
  const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined);
  const read = num(u.cache_read_input_tokens);
  const write = num(u.cache_creation_input_tokens);
  const input = num(u.input_tokens);
  const output = num(u.output_tokens);
  const thinking = num(u.output_tokens_details?.thinking_tokens);
  const anyInput = input !== undefined || read !== undefined || write !== undefined;
  const usage: Usage = {
    inputTokens: anyInput ? (input ?? 0) + (read ?? 0) + (write ?? 0) : (prev?.inputTokens ?? 0),
    outputTokens: output ?? prev?.outputTokens ?? 0,
  };
  // message_delta repeats the writes without their split (`cache_creation`): the split known before stays
  if (anyInput) Object.assign(usage, cacheCounts(read, write, num(u.cache_creation?.ephemeral_1h_input_tokens) ?? prev?.cacheWrite1hTokens));
  else copyCacheCounts(prev, usage);
  const reasoning = thinking ?? prev?.reasoningTokens;
  if (reasoning !== undefined) usage.reasoningTokens = reasoning;
  return usage;
}

export class MessagesDecoder extends BlockEmitter implements StreamDecoder {
  terminal = false;
  private model: string | undefined;
  private usage: Usage | undefined;
  private stopReason: string | undefined;
  /** the content blocks by index: what each one is */
  private readonly blocks = new Map<number, { kind: 'text' | 'thinking' | 'call' | 'format' | 'other'; call?: OpenCall }>();
  private started = false;

  constructor(
    req: GenerateRequest,
    private readonly formatTool?: FormatTool,
  ) {
    super(req);
  }

  onSse(data: string): void {
    if (this.terminal) return;
    let ev: any;
    try {
      ev = JSON.parse(data);
    } catch {
      throw broken('upstream sent an unreadable stream event');
    }
    if (ev == null || typeof ev !== 'object') throw broken('upstream sent an unreadable stream event');
    switch (ev.type) {
      case 'message_start':
        this.started = true;
        this.setModel(ev.message?.model);
        this.usage = anthropicUsage(ev.message?.usage, this.usage);
        return;
      case 'content_block_start':
        return this.blockStart(ev.index, ev.content_block ?? {});
      case 'content_block_delta':
        return this.blockDelta(ev.index, ev.delta ?? {});
      case 'content_block_stop':
        return this.blockStop(ev.index);
      case 'message_delta':
        if (typeof ev.delta?.stop_reason === 'string') this.stopReason = ev.delta.stop_reason;
        this.usage = anthropicUsage(ev.usage, this.usage);
        return;
      case 'message_stop':
        return this.finish();
      case 'error':
        throw midStreamError(ev.error);
      default:
        // ping, and event types Anthropic may add: nothing to say
        return;
    }
  }

  private setModel(m: unknown): void {
    if (!this.model && typeof m === 'string' && m) this.model = m;
  }

  private blockStart(index: number, b: any): void {
    this.endPending(false);
    switch (b.type) {
      case 'text':
        this.blocks.set(index, { kind: 'text' });
        if (typeof b.text === 'string' && b.text) this.text(b.text);
        return;
      case 'thinking':
        this.blocks.set(index, { kind: 'thinking' });
        if (typeof b.thinking === 'string' && b.thinking) this.reasoning(b.thinking);
        return;
      case 'tool_use': {
        const name = typeof b.name === 'string' ? b.name : '';
        // the input given whole at the start (a JSON answer's block): anything but the empty object streamed as `{}`
        const given = b.input && typeof b.input === 'object' && Object.keys(b.input).length > 0 ? JSON.stringify(b.input) : '';
        if (this.formatTool && name === this.formatTool.name) {
          this.blocks.set(index, { kind: 'format' });
          if (given) this.text(given);
          return;
        }
        const id = typeof b.id === 'string' && b.id ? b.id : `toolu_${index}`;
        const call: OpenCall = { id, args: '', ignored: this.calls >= this.maxCalls };
        if (!call.ignored) {
          this.calls++;
          this.out.push({ type: 'tool_call_start', callId: id, name });
        }
        this.blocks.set(index, { kind: 'call', call });
        if (given) this.callPiece(call, given);
        return;
      }
      default:
        // redacted_thinking (opaque), server tools' blocks (Portico asks for none)
        this.blocks.set(index, { kind: 'other' });
    }
  }

  private blockDelta(index: number, d: any): void {
    const b = this.blocks.get(index);
    if (!b) throw broken('upstream sent a content delta for a block it never started');
    switch (d.type) {
      case 'text_delta':
        if (typeof d.text === 'string' && d.text) this.text(d.text);
        return;
      case 'thinking_delta':
        if (typeof d.thinking === 'string' && d.thinking) this.reasoning(d.thinking);
        return;
      case 'input_json_delta':
        if (typeof d.partial_json !== 'string' || !d.partial_json) return;
        if (b.kind === 'format') this.text(d.partial_json);
        else if (b.call) this.callPiece(b.call, d.partial_json);
        return;
      default:
        // signature_delta (the thinking block's signature: nothing a client reads), citations_delta
        return;
    }
  }

  private blockStop(index: number): void {
    const b = this.blocks.get(index);
    if (b?.call && !b.call.ignored) this.pending = b.call;
  }

  onJson(m: any): void {
    if (m?.type === 'error') throw midStreamError(m.error);
    if (m == null || typeof m !== 'object' || !Array.isArray(m.content)) throw new EngineError('upstream sent an unreadable answer', 'upstream_error', 502, { retryable: true });
    this.started = true;
    this.setModel(m.model);
    this.usage = anthropicUsage(m.usage, this.usage);
    m.content.forEach((b: any, i: number) => {
      this.blockStart(i, b ?? {});
      this.blockStop(i);
    });
    if (typeof m.stop_reason === 'string') this.stopReason = m.stop_reason;
    this.finish();
  }

  finish(): void {
    if (this.terminal) return;
    if (!this.started || this.stopReason === undefined) throw broken('upstream stream ended before the answer was finished');
    this.terminal = true;
    let reason: FinishReason = FINISH[this.stopReason] ?? 'stop';
    this.endPending(reason === 'length');
    // the call of the structured-output tool is the answer, not a call the client makes
    if (reason === 'tool_calls' && this.calls === 0) reason = 'stop';
    if (reason === 'stop' && this.calls > 0) reason = 'tool_calls';
    const usage = this.usage ?? { inputTokens: estimateTokens(this.req.messages, this.req.tools), outputTokens: Math.ceil(this.outChars / 4) };
    this.out.push(this.model ? { type: 'done', finishReason: reason, usage, model: this.model } : { type: 'done', finishReason: reason, usage });
  }
}

/** An `error` event in the stream (Anthropic: `{type:'error', error:{type, message}}`): the answer failed there. */
function midStreamError(e: any): EngineError {
  const type = typeof e?.type === 'string' ? e.type : 'api_error';
  const msg = typeof e?.message === 'string' && e.message ? e.message : type;
  const overloaded = type === 'overloaded_error';
  return new EngineError(`upstream failed mid-stream (${type}): ${msg}`.slice(0, 2000), overloaded ? 'engine_unavailable' : 'upstream_error', overloaded ? 503 : 502, {
    retryable: true,
  });
}
