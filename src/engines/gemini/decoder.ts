/**
 * Gemini's answer -> GenerateEvents: the chunks of streamGenerateContent (`alt=sse`: each `data:` line one
 * GenerateContentResponse, its parts new pieces of the first candidate) or one GenerateContentResponse.
 *
 * Text parts are text, parts marked `thought` are reasoning; a functionCall part is one whole tool call (Gemini
 * gives no call ids unless its own: a stable id is made for each, the same in its start, delta and end). Gemini
 * has no end-of-stream event: the answer is complete once a chunk carried a finishReason (or the prompt was
 * blocked, promptFeedback.blockReason, which is a content_filter refusal with no candidate at all).
 */
import { randomBytes } from 'node:crypto';
import { EngineError, type FinishReason, type GenerateEvent, type GenerateRequest, type Usage } from '../types.js';
import type { StreamDecoder } from '../shared/answer.js';
import { estimateTokens } from '../shared/tokens.js';

/** Gemini's finish reasons (FinishReason in @google/genai) as Portico's; unknown ones are taken as a stop */
const FINISH: Readonly<Record<string, FinishReason>> = {
  STOP: 'stop',
  MAX_TOKENS: 'length',
  SAFETY: 'content_filter',
  RECITATION: 'content_filter',
  BLOCKLIST: 'content_filter',
  PROHIBITED_CONTENT: 'content_filter',
  SPII: 'content_filter',
  IMAGE_SAFETY: 'content_filter',
  IMAGE_PROHIBITED_CONTENT: 'content_filter',
  IMAGE_RECITATION: 'content_filter',
  LANGUAGE: 'content_filter',
};

const broken = (message: string) => new EngineError(message, 'upstream_stream_broken', 502, { retryable: true });

const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined);

/**
 * usageMetadata -> Usage: promptTokenCount counts the cached part too (cachedContentTokenCount); the output is
 * the candidates' tokens and the thoughts' (as OpenAI's output_tokens counts reasoning), thoughts the reasoning.
 */
export function geminiUsage(u: any): Usage | undefined {
  if (!u || typeof u !== 'object') return undefined;
  const prompt = num(u.promptTokenCount);
  const out = num(u.candidatesTokenCount);
  const thoughts = num(u.thoughtsTokenCount);
  const tools = num(u.toolUsePromptTokenCount);
  if (prompt === undefined && out === undefined && thoughts === undefined) return undefined;
  const usage: Usage = { inputTokens: (prompt ?? 0) + (tools ?? 0), outputTokens: (out ?? 0) + (thoughts ?? 0) };
  const cached = num(u.cachedContentTokenCount);
  if (cached !== undefined) usage.cachedTokens = cached;
  if (thoughts !== undefined) usage.reasoningTokens = thoughts;
  return usage;
}

/** An error in Google's shape ({error:{code, message, status}}) inside a stream: the answer failed there. */
function midStreamError(e: any): EngineError {
  const status = typeof e?.status === 'string' ? e.status : 'INTERNAL';
  const msg = typeof e?.message === 'string' && e.message ? e.message : status;
  const unavailable = status === 'UNAVAILABLE' || e?.code === 503;
  return new EngineError(`upstream failed mid-stream (${status}): ${msg}`.slice(0, 2000), unavailable ? 'engine_unavailable' : 'upstream_error', unavailable ? 503 : 502, {
    retryable: true,
  });
}

export class GeminiDecoder implements StreamDecoder {
  readonly out: GenerateEvent[] = [];
  terminal = false;
  private model: string | undefined;
  private usage: Usage | undefined;
  private finishReason: string | undefined;
  private blocked: string | undefined;
  private started = false;
  private calls = 0;
  private outChars = 0;
  private readonly maxCalls: number;
  /** what the ids of this answer's calls start with: unique per answer, so ids never repeat in a conversation */
  private readonly idBase = 'call_' + randomBytes(6).toString('hex');

  constructor(
    private readonly req: GenerateRequest,
    /** called with each call's thought signature, when Gemini gives one */
    private readonly onSignature?: (callId: string, signature: string) => void,
  ) {
    this.maxCalls = req.parallelToolCalls === false ? 1 : (req.maxToolCalls ?? Infinity);
  }

  onSse(data: string): void {
    if (this.terminal) return;
    let chunk: any;
    try {
      chunk = JSON.parse(data);
    } catch {
      throw broken('upstream sent an unreadable stream event');
    }
    if (chunk == null || typeof chunk !== 'object' || Array.isArray(chunk)) throw broken('upstream sent an unreadable stream event');
    this.chunk(chunk);
  }

  private chunk(c: any): void {
    if (c.error) throw midStreamError(c.error);
    this.started = true;
    if (!this.model && typeof c.modelVersion === 'string' && c.modelVersion) this.model = c.modelVersion;
    this.usage = geminiUsage(c.usageMetadata) ?? this.usage;
    if (typeof c.promptFeedback?.blockReason === 'string' && c.promptFeedback.blockReason !== 'BLOCKED_REASON_UNSPECIFIED') this.blocked = c.promptFeedback.blockReason;
    const cand = Array.isArray(c.candidates) ? c.candidates[0] : undefined;
    if (!cand || typeof cand !== 'object') return;
    const parts = Array.isArray(cand.content?.parts) ? cand.content.parts : [];
    for (const p of parts) {
      if (!p || typeof p !== 'object') continue;
      if (typeof p.text === 'string' && p.text) {
        this.outChars += p.text.length;
        this.out.push({ type: p.thought === true ? 'reasoning_delta' : 'text_delta', delta: p.text });
      } else if (p.functionCall && typeof p.functionCall === 'object') this.call(p.functionCall, p.thoughtSignature);
      // inlineData, executableCode and the like: Portico asks for none
    }
    if (typeof cand.finishReason === 'string' && cand.finishReason !== 'FINISH_REASON_UNSPECIFIED') this.finishReason = cand.finishReason;
  }

  private call(fc: any, signature: unknown): void {
    if (this.calls >= this.maxCalls) return;
    const id = typeof fc.id === 'string' && fc.id ? fc.id : `${this.idBase}_${this.calls}`;
    this.calls++;
    if (typeof signature === 'string' && signature) this.onSignature?.(id, signature);
    const args = JSON.stringify(fc.args && typeof fc.args === 'object' ? fc.args : {});
    this.outChars += args.length;
    this.out.push({ type: 'tool_call_start', callId: id, name: typeof fc.name === 'string' ? fc.name : '' });
    this.out.push({ type: 'tool_call_delta', callId: id, delta: args });
    this.out.push({ type: 'tool_call_end', callId: id, arguments: args });
  }

  onJson(body: any): void {
    if (body == null || typeof body !== 'object' || Array.isArray(body)) throw new EngineError('upstream sent an unreadable answer', 'upstream_error', 502, { retryable: true });
    this.chunk(body);
    this.finish();
  }

  finish(): void {
    if (this.terminal) return;
    if (!this.started || (this.finishReason === undefined && this.blocked === undefined)) throw broken('upstream stream ended before the answer was finished');
    this.terminal = true;
    let reason: FinishReason = this.blocked !== undefined ? 'content_filter' : (FINISH[this.finishReason!] ?? 'stop');
    if (reason === 'stop' && this.calls > 0) reason = 'tool_calls';
    const usage = this.usage ?? { inputTokens: estimateTokens(this.req.messages, this.req.tools), outputTokens: Math.ceil(this.outChars / 4) };
    this.out.push(this.model ? { type: 'done', finishReason: reason, usage, model: this.model } : { type: 'done', finishReason: reason, usage });
  }
}
