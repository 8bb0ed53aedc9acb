/** GenerateRequest <-> Chat Completions (POST /chat/completions: streamed, or one JSON answer for a non-streaming caller). */
import { EngineError, type ChatMessage, type FinishReason, type GenerateEvent, type GenerateRequest, type Usage } from '../types.js';
import { ToolCallAssembler } from './tool-calls.js';
import { estimateTokens } from './tokens.js';

export interface ChatOptions {
  /** how `developer` messages are sent: many open servers' chat templates only know `system` (default 'system') */
  developerRole: 'system' | 'developer';
  /**
   * the field the output cap goes in (default 'max_tokens'): `max_tokens`, which vLLM, Ollama, llama.cpp, LocalAI...
   * know; `max_completion_tokens`, which OpenAI's reasoning models require (they refuse max_tokens); `reasoning`:
   * max_completion_tokens when a reasoning effort is sent, else max_tokens (Azure: its reasoning deployments refuse
   * max_tokens, its older api-versions' other deployments know only max_tokens)
   */
  outputCap?: 'max_tokens' | 'max_completion_tokens' | 'reasoning';
}

const STREAM_OPTIONS = { include_usage: true } as const;

function textOf(content: ChatMessage['content']): string {
  if (typeof content === 'string') return content;
  let s = '';
  for (const p of content) if (p.type === 'text') s = s ? s + '\n' + p.text : p.text;
  return s;
}

function chatContent(content: ChatMessage['content']): unknown {
  if (typeof content === 'string') return content;
  let hasImage = false;
  for (const p of content) if (p.type !== 'text') hasImage = true;
  // text-only: a plain string, which every server (and every chat template) understands
  if (!hasImage) return textOf(content);
  return content.map((p) => (p.type === 'text' ? { type: 'text', text: p.text } : { type: 'image_url', image_url: p.detail ? { url: p.url, detail: p.detail } : { url: p.url } }));
}

export function chatMessages(messages: readonly ChatMessage[], opts: ChatOptions): unknown[] {
  const out: unknown[] = [];
  // tool messages carry the function name (some chat templates need it): find it from the assistant's calls
  let callNames: Map<string, string> | undefined;
  for (const m of messages) {
    switch (m.role) {
      case 'system':
      case 'developer': {
        const o: Record<string, unknown> = { role: m.role === 'developer' ? opts.developerRole : 'system', content: textOf(m.content) };
        if (m.name) o.name = m.name;
        out.push(o);
        break;
      }
      case 'user': {
        const o: Record<string, unknown> = { role: 'user', content: chatContent(m.content) };
        if (m.name) o.name = m.name;
        out.push(o);
        break;
      }
      case 'assistant': {
        const text = textOf(m.content);
        const o: Record<string, unknown> = { role: 'assistant', content: text };
        if (m.name) o.name = m.name;
        if (m.toolCalls?.length) {
          if (!text) o.content = null;
          o.tool_calls = m.toolCalls.map((c) => {
            (callNames ??= new Map()).set(c.callId, c.name);
            return { id: c.callId, type: 'function', function: { name: c.name, arguments: c.arguments } };
          });
        }
        // m.reasoning is not sent back: DeepSeek refuses reasoning_content in input and others ignore it
        out.push(o);
        break;
      }
      case 'tool': {
        const o: Record<string, unknown> = { role: 'tool', tool_call_id: m.toolCallId ?? '', content: textOf(m.content) };
        const name = m.name ?? (m.toolCallId ? callNames?.get(m.toolCallId) : undefined);
        if (name) o.name = name;
        out.push(o);
        break;
      }
    }
  }
  return out;
}

export function buildChatBody(req: GenerateRequest, opts: ChatOptions): Record<string, unknown> {
  // a non-streaming caller gets one JSON answer from the upstream (no stream_options: only valid with stream)
  const body: Record<string, unknown> =
    req.stream === false
      ? { model: req.model, messages: chatMessages(req.messages, opts), stream: false }
      : { model: req.model, messages: chatMessages(req.messages, opts), stream: true, stream_options: STREAM_OPTIONS };
  if (req.tools?.length) {
    body.tools = req.tools.map((t) => {
      const f: Record<string, unknown> = { name: t.name };
      if (t.description !== undefined) f.description = t.description;
      f.parameters = t.parameters ?? { type: 'object', properties: {} };
      if (t.strict !== undefined) f.strict = t.strict;
      return { type: 'function', function: f };
    });
    // tool_choice and parallel_tool_calls are refused by OpenAI when no tools are sent, so only with tools
    const tc = req.toolChoice;
    if (tc !== undefined) body.tool_choice = typeof tc === 'string' ? tc : { type: 'function', function: { name: tc.name } };
    if (req.parallelToolCalls !== undefined) body.parallel_tool_calls = req.parallelToolCalls;
  } else if (req.toolChoice === 'none') {
    body.tool_choice = 'none';
  }
  const f = req.format;
  if (f && f.type !== 'text') {
    if (f.type === 'json_object') body.response_format = { type: 'json_object' };
    else {
      const js: Record<string, unknown> = { name: f.name, schema: f.schema };
      if (f.strict !== undefined) js.strict = f.strict;
      if (f.description !== undefined) js.description = f.description;
      body.response_format = { type: 'json_schema', json_schema: js };
    }
  }
  if (req.stop?.length) body.stop = req.stop;
  if (req.temperature !== undefined) body.temperature = req.temperature;
  if (req.topP !== undefined) body.top_p = req.topP;
  if (req.presencePenalty !== undefined) body.presence_penalty = req.presencePenalty;
  if (req.frequencyPenalty !== undefined) body.frequency_penalty = req.frequencyPenalty;
  if (req.maxOutputTokens !== undefined) {
    const cap = opts.outputCap ?? 'max_tokens';
    const completion = cap === 'max_completion_tokens' || (cap === 'reasoning' && req.reasoningEffort !== undefined);
    body[completion ? 'max_completion_tokens' : 'max_tokens'] = req.maxOutputTokens;
  }
  if (req.reasoningEffort) body.reasoning_effort = req.reasoningEffort;
  return body;
}

function mapFinish(r: unknown): FinishReason | undefined {
  if (r == null) return undefined;
  if (r === 'length' || r === 'max_tokens') return 'length';
  if (r === 'tool_calls' || r === 'function_call') return 'tool_calls';
  // the upstream's content filter ended the answer (OpenAI, Azure): the client is told so, as OpenAI tells it
  if (r === 'content_filter') return 'content_filter';
  return 'stop'; // stop, eos, ...
}

export function chatUsage(u: any): Usage | undefined {
  if (!u || typeof u !== 'object' || typeof u.prompt_tokens !== 'number') return undefined;
  const usage: Usage = { inputTokens: u.prompt_tokens, outputTokens: typeof u.completion_tokens === 'number' ? u.completion_tokens : 0 };
  const cached = u.prompt_tokens_details?.cached_tokens;
  if (typeof cached === 'number') usage.cachedTokens = cached;
  const reasoning = u.completion_tokens_details?.reasoning_tokens;
  if (typeof reasoning === 'number') usage.reasoningTokens = reasoning;
  return usage;
}

export type { StreamDecoder } from './answer.js';
import type { StreamDecoder } from './answer.js';

export class ChatDecoder implements StreamDecoder {
  readonly out: GenerateEvent[] = [];
  terminal = false;
  private readonly calls: ToolCallAssembler;
  private finishReason: FinishReason | undefined;
  private usage: Usage | undefined;
  private model: string | undefined;
  private outChars = 0;
  private readonly onChunk = (c: any) => this.chunk(c);

  constructor(private readonly req: GenerateRequest) {
    this.calls = new ToolCallAssembler(this.out, req.parallelToolCalls === false);
  }

  onSse(data: string): void {
    if (this.terminal) return;
    if (data === '[DONE]') {
      // [DONE] without a finish_reason: the server declared the end, take it as a normal stop
      this.finishReason ??= 'stop';
      return this.finish();
    }
    let c: any;
    try {
      c = JSON.parse(data);
    } catch {
      return this.fallbackParse(data);
    }
    this.chunk(c);
  }

  private fallbackParse(data: string): void {
    // two events without a blank line between them arrive as one payload joined by LF
    if (data.indexOf('\n') === -1) throw new EngineError('upstream sent an unreadable stream event', 'upstream_stream_broken', 502, { retryable: true });
    for (const line of data.split('\n')) {
      const t = line.startsWith('data:') ? line.slice(5).trim() : line.trim();
      if (!t) continue;
      if (t === '[DONE]') {
        this.finishReason ??= 'stop';
        return this.finish();
      }
      let c: any;
      try {
        c = JSON.parse(t);
      } catch {
        throw new EngineError('upstream sent an unreadable stream event', 'upstream_stream_broken', 502, { retryable: true });
      }
      this.onChunk(c);
    }
  }

  private chunk(c: any): void {
    if (c == null || typeof c !== 'object') return;
    if (c.error) {
      const e = c.error;
      const msg = typeof e === 'string' ? e : typeof e.message === 'string' ? e.message : 'upstream error';
      throw new EngineError(`upstream failed mid-stream: ${msg}`, typeof e.code === 'string' ? e.code : 'upstream_error', 502, { retryable: true });
    }
    if (!this.model && typeof c.model === 'string' && c.model) this.model = c.model;
    if (c.usage) this.usage = chatUsage(c.usage) ?? this.usage;
    const choices = c.choices;
    if (!Array.isArray(choices) || choices.length === 0) return;
    const ch = choices[0];
    const d = ch.delta ?? ch.message;
    if (d) {
      const r = d.reasoning_content ?? d.reasoning;
      if (typeof r === 'string' && r) {
        this.outChars += r.length;
        this.out.push({ type: 'reasoning_delta', delta: r });
      }
      const t = d.content;
      if (typeof t === 'string' && t) {
        this.outChars += t.length;
        this.out.push({ type: 'text_delta', delta: t });
        this.calls.otherOutput();
      }
      const tcs = d.tool_calls;
      if (Array.isArray(tcs)) {
        for (let i = 0; i < tcs.length; i++) {
          const tc = tcs[i];
          const fn = tc.function ?? {};
          const args = typeof fn.arguments === 'string' ? fn.arguments : fn.arguments != null ? JSON.stringify(fn.arguments) : undefined;
          this.calls.add(this.callKey(tc, i), typeof tc.id === 'string' ? tc.id : undefined, typeof fn.name === 'string' ? fn.name : undefined, args);
        }
      } else if (d.function_call) {
        // legacy functions API
        const fc = d.function_call;
        this.calls.add(0, undefined, fc.name, fc.arguments);
      }
    }
    const fr = mapFinish(ch.finish_reason);
    if (fr) this.finishReason = fr;
  }

  private readonly idKeys = new Map<string, number | string>();
  private lastIndexId = new Map<number, string>();

  /**
   * Which call a piece belongs to: its `index`; when a server repeats an index with a new id (Ollama used to
   * send every call as index 0) the id wins; without an index, the id, else the position in the array.
   */
  private callKey(tc: any, pos: number): number | string {
    const id = typeof tc.id === 'string' && tc.id ? tc.id : undefined;
    if (typeof tc.index === 'number') {
      if (!id) return this.idKeys.get(`#${tc.index}`) ?? tc.index;
      const known = this.idKeys.get(id);
      if (known !== undefined) return known;
      const prev = this.lastIndexId.get(tc.index);
      const key = prev === undefined ? tc.index : `${tc.index}:${id}`;
      this.lastIndexId.set(tc.index, id);
      this.idKeys.set(id, key);
      this.idKeys.set(`#${tc.index}`, key);
      return key;
    }
    if (id) {
      let k = this.idKeys.get(id);
      if (k === undefined) this.idKeys.set(id, (k = `id:${id}`));
      return k;
    }
    return pos;
  }

  onJson(body: any): void {
    this.chunk(body);
    this.finish();
  }

  finish(): void {
    if (this.terminal) return;
    if (this.finishReason === undefined) {
      throw new EngineError('upstream stream ended before the answer was finished', 'upstream_stream_broken', 502, { retryable: true });
    }
    this.terminal = true;
    this.calls.finishAll(this.finishReason === 'length' || this.finishReason === 'content_filter');
    const finishReason: FinishReason = this.finishReason === 'length' || this.finishReason === 'content_filter' ? this.finishReason : this.calls.count > 0 ? 'tool_calls' : 'stop';
    // no usage from the upstream (some servers ignore stream_options): estimated, see tokens.ts
    const usage = this.usage ?? {
      inputTokens: estimateTokens(this.req.messages, this.req.tools),
      outputTokens: Math.ceil((this.outChars + this.calls.chars) / 4),
    };
    this.out.push(this.model ? { type: 'done', finishReason, usage, model: this.model } : { type: 'done', finishReason, usage });
  }
}
