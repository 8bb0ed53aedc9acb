/** GenerateRequest <-> an upstream that speaks the Responses API itself (POST /responses, store false: streamed, or one JSON answer for a non-streaming caller). */
import { EngineError, type ChatMessage, type FinishReason, type GenerateEvent, type GenerateRequest, type Usage } from '../types.js';
import type { StreamDecoder } from './chat.js';
import { ToolCallAssembler } from './tool-calls.js';
import { estimateTokens } from '../shared/tokens.js';

function textOf(content: ChatMessage['content']): string {
  if (typeof content === 'string') return content;
  let s = '';
  for (const p of content) if (p.type === 'text') s = s ? s + '\n' + p.text : p.text;
  return s;
}

/**
 * Messages -> Responses input items. Leading system/developer messages become `instructions`; later ones stay
 * messages with their role. Assistant tool calls become function_call items, tool messages function_call_output.
 * Assistant reasoning is not sent: with store false the upstream can only take it back as encrypted content.
 */
export function responsesInput(messages: readonly ChatMessage[]): { instructions?: string; input: unknown[] } {
  let i = 0;
  let instructions: string | undefined;
  for (; i < messages.length; i++) {
    const m = messages[i]!; // i < length
    if (m.role !== 'system' && m.role !== 'developer') break;
    const t = textOf(m.content);
    instructions = instructions === undefined ? t : instructions + '\n\n' + t;
  }
  const input: unknown[] = [];
  for (const m of messages.slice(i)) {
    switch (m.role) {
      case 'system':
      case 'developer':
        input.push({ type: 'message', role: m.role, content: textOf(m.content) });
        break;
      case 'user':
        input.push({
          type: 'message',
          role: 'user',
          content:
            typeof m.content === 'string'
              ? [{ type: 'input_text', text: m.content }]
              : m.content.map((p) => (p.type === 'text' ? { type: 'input_text', text: p.text } : { type: 'input_image', image_url: p.url, detail: p.detail ?? 'auto' })),
        });
        break;
      case 'assistant': {
        const t = textOf(m.content);
        if (t) input.push({ type: 'message', role: 'assistant', content: t });
        if (m.toolCalls) for (const c of m.toolCalls) input.push({ type: 'function_call', call_id: c.callId, name: c.name, arguments: c.arguments });
        break;
      }
      case 'tool':
        input.push({ type: 'function_call_output', call_id: m.toolCallId ?? '', output: textOf(m.content) });
        break;
    }
  }
  return { instructions, input };
}

export function buildResponsesBody(req: GenerateRequest): Record<string, unknown> {
  const { instructions, input } = responsesInput(req.messages);
  const body: Record<string, unknown> = { model: req.model, input, store: false, stream: req.stream !== false };
  if (instructions !== undefined) body.instructions = instructions;
  if (req.tools?.length) {
    body.tools = req.tools.map((t) => {
      const o: Record<string, unknown> = { type: 'function', name: t.name };
      if (t.description !== undefined) o.description = t.description;
      o.parameters = t.parameters ?? { type: 'object', properties: {} };
      // strict left out when unset: the upstream's Responses default applies, as the client expects
      if (t.strict !== undefined) o.strict = t.strict;
      return o;
    });
    if (req.parallelToolCalls !== undefined) body.parallel_tool_calls = req.parallelToolCalls;
    // the Responses API has the cap itself: the upstream stops calling (and generating) once it is reached
    if (req.maxToolCalls !== undefined) body.max_tool_calls = req.maxToolCalls;
  }
  const tc = req.toolChoice;
  if (tc !== undefined && (req.tools?.length || tc === 'none')) body.tool_choice = typeof tc === 'string' ? tc : { type: 'function', name: tc.name };
  const f = req.format;
  if (f && f.type !== 'text') {
    if (f.type === 'json_object') body.text = { format: { type: 'json_object' } };
    else {
      const fmt: Record<string, unknown> = { type: 'json_schema', name: f.name, schema: f.schema };
      if (f.strict !== undefined) fmt.strict = f.strict;
      if (f.description !== undefined) fmt.description = f.description;
      body.text = { format: fmt };
    }
  }
  if (req.temperature !== undefined) body.temperature = req.temperature;
  if (req.topP !== undefined) body.top_p = req.topP;
  if (req.maxOutputTokens !== undefined) body.max_output_tokens = req.maxOutputTokens;
  // summary 'auto' so reasoning models stream their reasoning summary (the only reasoning text OpenAI shows)
  if (req.reasoningEffort) body.reasoning = { effort: req.reasoningEffort, summary: 'auto' };
  // `stop` has no Responses equivalent: the upstream cannot be asked for it, so it is not sent
  return body;
}

/** why an incomplete response ended: the token cap (length) or the upstream's content filter, as it says */
function incompleteReason(resp: any): FinishReason {
  const reason = resp?.incomplete_details?.reason;
  return reason === 'max_output_tokens' ? 'length' : reason === 'content_filter' ? 'content_filter' : 'stop';
}

export function responsesUsage(u: any): Usage | undefined {
  if (!u || typeof u !== 'object' || typeof u.input_tokens !== 'number') return undefined;
  const usage: Usage = { inputTokens: u.input_tokens, outputTokens: typeof u.output_tokens === 'number' ? u.output_tokens : 0 };
  const cached = u.input_tokens_details?.cached_tokens;
  if (typeof cached === 'number') usage.cachedTokens = cached;
  const reasoning = u.output_tokens_details?.reasoning_tokens;
  if (typeof reasoning === 'number') usage.reasoningTokens = reasoning;
  return usage;
}

export class ResponsesDecoder implements StreamDecoder {
  readonly out: GenerateEvent[] = [];
  terminal = false;
  private readonly calls: ToolCallAssembler;
  private model: string | undefined;
  private outChars = 0;
  /** raw reasoning text and reasoning summaries may both be streamed: the first kind seen is kept */
  private reasoningKind: string | undefined;
  private readonly itemKeys = new Map<string, number | string>();

  constructor(private readonly req: GenerateRequest) {
    this.calls = new ToolCallAssembler(this.out, req.parallelToolCalls === false);
  }

  onSse(data: string, event: string): void {
    if (this.terminal || data === '[DONE]') return;
    let e: any;
    try {
      e = JSON.parse(data);
    } catch {
      throw new EngineError('upstream sent an unreadable stream event', 'upstream_stream_broken', 502, { retryable: true });
    }
    this.event(e, typeof e?.type === 'string' ? e.type : event);
  }

  private key(e: any): number | string {
    if (typeof e.item_id === 'string') {
      const k = this.itemKeys.get(e.item_id);
      if (k !== undefined) return k;
    }
    return typeof e.output_index === 'number' ? e.output_index : (e.item_id ?? 0);
  }

  private reasoning(kind: string, delta: unknown): void {
    if (typeof delta !== 'string' || !delta) return;
    this.reasoningKind ??= kind;
    if (this.reasoningKind !== kind) return;
    this.outChars += delta.length;
    this.out.push({ type: 'reasoning_delta', delta });
  }

  private event(e: any, type: string): void {
    switch (type) {
      case 'response.output_text.delta':
      case 'response.refusal.delta':
        if (typeof e.delta === 'string' && e.delta) {
          this.outChars += e.delta.length;
          this.out.push({ type: 'text_delta', delta: e.delta });
          this.calls.otherOutput();
        }
        return;
      case 'response.reasoning_summary_text.delta':
        return this.reasoning('summary', e.delta);
      case 'response.reasoning_summary_part.added':
        // several summary parts read as paragraphs
        if (typeof e.summary_index === 'number' && e.summary_index > 0 && this.reasoningKind === 'summary') this.reasoning('summary', '\n\n');
        return;
      case 'response.reasoning_text.delta': // OpenAI raw reasoning (gpt-oss via vLLM, etc.)
      case 'response.reasoning.delta': // Open Responses
        return this.reasoning('text', e.delta);
      case 'response.output_item.added': {
        const item = e.item;
        if (item?.type !== 'function_call') return;
        const k = typeof e.output_index === 'number' ? e.output_index : (item.id ?? item.call_id);
        if (typeof item.id === 'string') this.itemKeys.set(item.id, k);
        this.calls.add(k, item.call_id ?? item.id, item.name, typeof item.arguments === 'string' ? item.arguments : undefined);
        return;
      }
      case 'response.function_call_arguments.delta':
        if (typeof e.delta === 'string') this.calls.add(this.key(e), undefined, undefined, e.delta);
        return;
      case 'response.function_call_arguments.done':
        this.calls.setArguments(this.key(e), e.arguments);
        return;
      case 'response.output_item.done': {
        const item = e.item;
        if (item?.type !== 'function_call') return;
        const k = typeof e.output_index === 'number' ? e.output_index : this.key({ item_id: item.id });
        if (typeof item.arguments === 'string') this.calls.setArguments(k, item.arguments);
        if (item.status === 'incomplete') this.calls.markCut(k);
        this.calls.complete(k);
        return;
      }
      case 'response.created':
      case 'response.in_progress':
        if (typeof e.response?.model === 'string') this.model = e.response.model;
        return;
      case 'response.completed':
        return this.end(e.response, 'stop');
      case 'response.incomplete':
        return this.end(e.response, incompleteReason(e.response));
      case 'response.failed': {
        const err = e.response?.error;
        throw new EngineError(`upstream failed: ${err?.message ?? 'unknown error'}`, typeof err?.code === 'string' ? err.code : 'upstream_error', 502);
      }
      case 'error': {
        const msg = e.message ?? e.error?.message ?? 'unknown error';
        const code = e.code ?? e.error?.code;
        throw new EngineError(`upstream failed: ${msg}`, typeof code === 'string' ? code : 'upstream_error', 502);
      }
    }
  }

  private end(resp: any, reason: FinishReason): void {
    this.terminal = true;
    if (typeof resp?.model === 'string' && resp.model) this.model = resp.model;
    this.calls.finishAll(reason === 'length');
    const finishReason: FinishReason = reason === 'length' || reason === 'content_filter' ? reason : this.calls.count > 0 ? 'tool_calls' : 'stop';
    // no usage from the upstream: estimated, see tokens.ts
    const usage = responsesUsage(resp?.usage) ?? {
      inputTokens: estimateTokens(this.req.messages, this.req.tools),
      outputTokens: Math.ceil((this.outChars + this.calls.chars) / 4),
    };
    this.out.push(this.model ? { type: 'done', finishReason, usage, model: this.model } : { type: 'done', finishReason, usage });
  }

  /** a whole (non-streamed) response object */
  onJson(resp: any): void {
    if (resp?.error && resp.status !== 'completed') {
      throw new EngineError(`upstream failed: ${resp.error.message ?? 'unknown error'}`, 'upstream_error', 502);
    }
    const output = Array.isArray(resp?.output) ? resp.output : [];
    output.forEach((item: any, i: number) => {
      if (item?.type === 'reasoning') {
        const parts = Array.isArray(item.content) && item.content.length ? item.content : item.summary;
        if (Array.isArray(parts)) for (const p of parts) this.reasoning(parts === item.content ? 'text' : 'summary', p?.text);
      } else if (item?.type === 'message') {
        for (const p of item.content ?? []) if (p?.type === 'output_text' || p?.type === 'refusal') this.event({ delta: p.text ?? p.refusal }, 'response.output_text.delta');
      } else if (item?.type === 'function_call') {
        this.calls.add(i, item.call_id, item.name, item.arguments);
        if (item.status === 'incomplete') this.calls.markCut(i);
        this.calls.complete(i);
      }
    });
    this.end(resp, resp?.status === 'incomplete' ? incompleteReason(resp) : 'stop');
  }

  finish(): void {
    if (!this.terminal) throw new EngineError('upstream stream ended before the response was finished', 'upstream_stream_broken', 502, { retryable: true });
  }
}
