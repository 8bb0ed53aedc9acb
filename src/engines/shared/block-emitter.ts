/**
 * What the decoders of answers made of content blocks share (Anthropic's Messages, Bedrock's Converse): the engine
 * events they emit for text, reasoning and the pieces of tool calls; the characters emitted (the output estimate
 * when an upstream reports no usage); how many calls the request allows (parallel_tool_calls false: one;
 * max_tool_calls); and the last call, ended once the next block starts or the answer ends.
 */
import type { GenerateEvent, GenerateRequest } from '../types.js';

export interface OpenCall {
  id: string;
  args: string;
  /** dropped: a call past what the request allows (parallel_tool_calls false, max_tool_calls) */
  ignored: boolean;
}

export abstract class BlockEmitter {
  readonly out: GenerateEvent[] = [];
  /** the last tool call whose block stopped: ended once the next block starts or the answer ends */
  protected pending: OpenCall | undefined;
  protected calls = 0;
  protected outChars = 0;
  protected readonly maxCalls: number;

  constructor(protected readonly req: GenerateRequest) {
    this.maxCalls = req.parallelToolCalls === false ? 1 : (req.maxToolCalls ?? Infinity);
  }

  protected text(t: string): void {
    this.outChars += t.length;
    this.out.push({ type: 'text_delta', delta: t });
  }

  protected reasoning(t: string): void {
    this.outChars += t.length;
    this.out.push({ type: 'reasoning_delta', delta: t });
  }

  protected callPiece(call: OpenCall, piece: string): void {
    call.args += piece;
    this.outChars += piece.length;
    if (!call.ignored) this.out.push({ type: 'tool_call_delta', callId: call.id, delta: piece });
  }

  /** the last call ends: cut by the token cap (`cut`), it says so; a call without input gets `{}`, as OpenAI's do */
  protected endPending(cut: boolean): void {
    const c = this.pending;
    if (!c) return;
    this.pending = undefined;
    if (cut) {
      this.out.push({ type: 'tool_call_end', callId: c.id, arguments: c.args, incomplete: true });
      return;
    }
    if (!c.args) {
      c.args = '{}';
      this.out.push({ type: 'tool_call_delta', callId: c.id, delta: '{}' });
    }
    this.out.push({ type: 'tool_call_end', callId: c.id, arguments: c.args });
  }
}
