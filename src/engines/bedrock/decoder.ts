/**
 * Bedrock's Converse answer -> GenerateEvents: the events of ConverseStream (messageStart, contentBlockStart,
 * contentBlockDelta, contentBlockStop, messageStop, metadata, and the exception messages), or one ConverseResponse.
 * Shapes: @aws-sdk/client-bedrock-runtime's ConverseStreamOutput and ConverseResponse.
 *
 * Text deltas are text; reasoningContent text is reasoning (its signature and redacted content carry nothing a
 * client reads); a toolUse block is one tool call (its start names it, its deltas are pieces of its input's JSON),
 * except the tool structured output is asked through, whose input is the answer's text. The usage comes in the
 * `metadata` event, after messageStop: `done` is given at the end of the stream.
 */
import { EngineError, type FinishReason, type GenerateRequest, type Usage } from '../types.js';
import { BlockEmitter, type OpenCall } from '../shared/block-emitter.js';
import type { StreamDecoder } from '../shared/answer.js';
import { estimateTokens } from '../shared/tokens.js';
import { cacheCounts } from '../shared/usage.js';
import type { FormatTool } from './request.js';

/** Converse's stop reasons as finish reasons (unknown: a stop) */
const FINISH: Readonly<Record<string, FinishReason>> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  max_tokens: 'length',
  model_context_window_exceeded: 'length',
  tool_use: 'tool_calls',
  guardrail_intervened: 'content_filter',
  content_filtered: 'content_filter',
};

const broken = (message: string) => new EngineError(message, 'upstream_stream_broken', 502, { retryable: true });

/**
 * Converse's usage: inputTokens counts the input read afresh, cacheReadInputTokens and cacheWriteInputTokens the
 * input read from and written to the prompt cache; Portico's input is all three, the cache reads its cached part,
 * the cache writes its written part (of which cacheDetails' `1h` entries went to the one-hour cache).
 */
export function converseUsage(u: any): Usage | undefined {
  if (!u || typeof u !== 'object') return undefined;
  const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : 0);
  const usage: Usage = { inputTokens: num(u.inputTokens) + num(u.cacheReadInputTokens) + num(u.cacheWriteInputTokens), outputTokens: num(u.outputTokens) };
  const details: unknown[] = Array.isArray(u.cacheDetails) ? u.cacheDetails : [];
  const oneHour = details.reduce<number>(
    (n, d) => n + (d && typeof d === 'object' && (d as { ttl?: unknown }).ttl === '1h' ? num((d as { inputTokens?: unknown }).inputTokens) : 0),
    0,
  );
  const has = (v: unknown) => (typeof v === 'number' ? num(v) : undefined);
  Object.assign(usage, cacheCounts(has(u.cacheReadInputTokens), has(u.cacheWriteInputTokens), oneHour));
  return usage;
}

/** An exception message of the stream (`:exception-type`), or a JSON error: the answer failed there. */
export function streamException(type: string, message: string): EngineError {
  const msg = `upstream failed mid-stream (${type}): ${message || type}`.slice(0, 2000);
  const t = type.toLowerCase();
  if (t.startsWith('throttling')) return new EngineError(msg, 'rate_limit_exceeded', 429, { retryable: true });
  if (t.startsWith('serviceunavailable') || t.startsWith('modelnotready')) return new EngineError(msg, 'engine_unavailable', 503, { retryable: true });
  if (t.startsWith('validation')) return new EngineError(msg, 'invalid_request', 400);
  return new EngineError(msg, 'upstream_error', 502, { retryable: true });
}

export class ConverseDecoder extends BlockEmitter implements StreamDecoder {
  terminal = false;
  private usage: Usage | undefined;
  private stopReason: string | undefined;
  private started = false;
  private readonly blocks = new Map<number, { kind: 'text' | 'call' | 'format'; call?: OpenCall }>();

  constructor(
    req: GenerateRequest,
    private readonly formatTool?: FormatTool,
  ) {
    super(req);
  }

  onSse(): void {
    throw broken('upstream sent text events where an AWS event stream was expected');
  }

  /** one event of the stream: its `:event-type` and its JSON payload */
  onEvent(type: string, payload: string): void {
    if (this.terminal) return;
    let ev: any;
    try {
      ev = JSON.parse(payload);
    } catch {
      throw broken('upstream sent an unreadable stream event');
    }
    if (ev == null || typeof ev !== 'object') throw broken('upstream sent an unreadable stream event');
    switch (type) {
      case 'messageStart':
        this.started = true;
        return;
      case 'contentBlockStart':
        return this.blockStart(ev.contentBlockIndex, ev.start ?? {});
      case 'contentBlockDelta':
        return this.blockDelta(ev.contentBlockIndex, ev.delta ?? {});
      case 'contentBlockStop': {
        const b = this.blocks.get(ev.contentBlockIndex);
        if (b?.call && !b.call.ignored) this.pending = b.call;
        return;
      }
      case 'messageStop':
        if (typeof ev.stopReason === 'string') this.stopReason = ev.stopReason;
        return;
      case 'metadata':
        this.usage = converseUsage(ev.usage) ?? this.usage;
        return;
      default:
        // event types AWS may add: nothing to say
        return;
    }
  }

  private blockStart(index: number, start: any): void {
    this.endPending(false);
    if (start.toolUse) {
      const name = typeof start.toolUse.name === 'string' ? start.toolUse.name : '';
      if (this.formatTool && name === this.formatTool.name) {
        this.blocks.set(index, { kind: 'format' });
        return;
      }
      const id = typeof start.toolUse.toolUseId === 'string' && start.toolUse.toolUseId ? start.toolUse.toolUseId : `tooluse_${index}`;
      const call: OpenCall = { id, args: '', ignored: this.calls >= this.maxCalls };
      if (!call.ignored) {
        this.calls++;
        this.out.push({ type: 'tool_call_start', callId: id, name });
      }
      this.blocks.set(index, { kind: 'call', call });
      return;
    }
    this.blocks.set(index, { kind: 'text' });
  }

  private blockDelta(index: number, d: any): void {
    // text and reasoning blocks have no start event: their first delta opens them
    let b = this.blocks.get(index);
    if (!b) {
      if (d.toolUse) throw broken('upstream sent a tool input delta for a block it never started');
      this.endPending(false);
      b = { kind: 'text' };
      this.blocks.set(index, b);
    }
    if (typeof d.text === 'string') {
      if (d.text) this.text(d.text);
    } else if (d.reasoningContent) {
      if (typeof d.reasoningContent.text === 'string' && d.reasoningContent.text) this.reasoning(d.reasoningContent.text);
    } else if (d.toolUse && typeof d.toolUse.input === 'string' && d.toolUse.input) {
      if (b.kind === 'format') this.text(d.toolUse.input);
      else if (b.call) this.callPiece(b.call, d.toolUse.input);
    }
  }

  /** a whole ConverseResponse */
  onJson(m: any): void {
    const content = m?.output?.message?.content;
    if (m == null || typeof m !== 'object' || !Array.isArray(content)) throw new EngineError('upstream sent an unreadable answer', 'upstream_error', 502, { retryable: true });
    this.started = true;
    content.forEach((b: any, i: number) => {
      if (b?.toolUse) {
        this.blockStart(i, { toolUse: b.toolUse });
        const input = b.toolUse.input;
        const json = input && typeof input === 'object' && Object.keys(input).length > 0 ? JSON.stringify(input) : '';
        if (json) this.blockDelta(i, { toolUse: { input: json } });
        const blk = this.blocks.get(i);
        if (blk?.call && !blk.call.ignored) this.pending = blk.call;
      } else if (typeof b?.text === 'string') this.blockDelta(i, { text: b.text });
      else if (b?.reasoningContent?.reasoningText) this.blockDelta(i, { reasoningContent: { text: b.reasoningContent.reasoningText.text } });
    });
    if (typeof m.stopReason === 'string') this.stopReason = m.stopReason;
    this.usage = converseUsage(m.usage) ?? this.usage;
    this.finish();
  }

  finish(): void {
    if (this.terminal) return;
    if (!this.started || this.stopReason === undefined) throw broken('upstream stream ended before the answer was finished');
    this.terminal = true;
    let reason: FinishReason = FINISH[this.stopReason] ?? 'stop';
    this.endPending(reason === 'length');
    // the structured-output tool's call is the answer, not a call the client makes
    if (reason === 'tool_calls' && this.calls === 0) reason = 'stop';
    if (reason === 'stop' && this.calls > 0) reason = 'tool_calls';
    const usage = this.usage ?? { inputTokens: estimateTokens(this.req.messages, this.req.tools), outputTokens: Math.ceil(this.outChars / 4) };
    this.out.push({ type: 'done', finishReason: reason, usage, model: this.req.model });
  }
}
