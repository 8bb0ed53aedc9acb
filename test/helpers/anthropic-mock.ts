/**
 * A scripted server that speaks Anthropic's Messages API, for the anthropic provider's tests: node:http on
 * 127.0.0.1, port 0. Its answers are typed with the official SDK's own types (@anthropic-ai/sdk: Message, the
 * RawMessageStreamEvent union, ErrorResponse), so a field the wire has is a field the mock writes.
 *
 *   const up = await startAnthropicMock({ apiKey: 'sk-ant-test' });
 *   up.script({ text: 'Hello', chunks: 2, usage: { input_tokens: 10, output_tokens: 2 } });
 *   ... POST `${up.url}/v1/messages` (up.url is the API root, as the model file's base_url)
 *   up.requests[0].body / .headers
 *
 * Routes: POST /v1/messages (streamed when the body says `stream: true`, else one Message), POST
 * /v1/messages/count_tokens (`{input_tokens}` of the scripted usage), GET /v1/models. A
 * request without `anthropic-version`, or (with `apiKey`) without the right key (`x-api-key`, or a bearer token), is
 * refused as Anthropic refuses it. Failure scripts: an error status with Anthropic's error body, a hang before the headers, a stream
 * that breaks, hangs or sends an `error` event after N events, garbage.
 */
import type http from 'node:http';
import type Anthropic from '@anthropic-ai/sdk';
import { opening, sendJson, split, startRecordingMock, writeFrames, writeRaw } from './recording-mock.js';
import type { MockRequest, RecordingMock, ScriptedFailures, RawReplies } from './recording-mock.js';

type Msg = Anthropic.Messages.Message;
type StreamEvent = Anthropic.Messages.RawMessageStreamEvent;
type Usage = Anthropic.Messages.Usage;

export interface AnthropicToolUse {
  id?: string;
  name: string;
  /** the input: an object (streamed as one piece), or the pieces of its JSON text as they should be streamed */
  input: Record<string, unknown> | string[];
}

export interface AnthropicReply extends ScriptedFailures, RawReplies {
  /** answer text, or its pieces */
  text?: string | string[];
  /** pieces a string text / thinking is split into (default 1) */
  chunks?: number;
  /** thinking streamed before the text (a thinking block, with a signature) */
  thinking?: string | string[];
  /** a redacted_thinking block before everything else */
  redacted?: boolean;
  toolUses?: AnthropicToolUse[];
  /** default: tool_use with toolUses, else end_turn; null: message_delta without a stop reason */
  stopReason?: Anthropic.Messages.StopReason | null;
  /** `cache_creation`: the cache writes by lifetime, in message_start and a JSON answer (message_delta has no such field) */
  usage?: Partial<Pick<Usage, 'input_tokens' | 'output_tokens' | 'cache_read_input_tokens' | 'cache_creation_input_tokens' | 'cache_creation'>> & { thinking_tokens?: number };
  model?: string;
  /** an `error` event after this many events (Anthropic's mid-stream failure) */
  errorAfter?: number;
  /** omit message_stop (the stream ends after message_delta) */
  noStop?: boolean;
  /** a ping after message_start (as Anthropic sends them) */
  ping?: boolean;
  /** with `status` (or `errorAfter`): the type in Anthropic's error body (default: the status's) */
  errorType?: string;
}

export type AnthropicRequest = MockRequest;

/** url: the API root (no /v1), the model file's base_url */
export type AnthropicMock = RecordingMock<AnthropicRequest, AnthropicReply>;

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  529: 'overloaded_error',
};

function usageOf(r: AnthropicReply, outputTokens: number): Usage {
  const u = r.usage ?? {};
  return {
    cache_creation: u.cache_creation ?? null,
    cache_creation_input_tokens: u.cache_creation_input_tokens ?? null,
    cache_read_input_tokens: u.cache_read_input_tokens ?? null,
    inference_geo: null,
    input_tokens: u.input_tokens ?? 10,
    output_tokens: u.output_tokens ?? outputTokens,
    output_tokens_details: u.thinking_tokens !== undefined ? { thinking_tokens: u.thinking_tokens } : null,
    server_tool_use: null,
    service_tier: 'standard',
    speed: null,
  };
}

let seq = 0;

/** a whole input as the JSON answer gives it (the pieces of a call cut by max_tokens are no JSON: an empty input) */
function parsed(json: string): Record<string, unknown> {
  try {
    return JSON.parse(json || '{}') as Record<string, unknown>;
  } catch {
    return {};
  }
}

interface Plan {
  id: string;
  model: string;
  thinking: string[];
  text: string[];
  tools: { id: string; name: string; pieces: string[]; input: Record<string, unknown> }[];
  stopReason: Anthropic.Messages.StopReason | null;
  usage: Usage;
}

function plan(r: AnthropicReply, model: string): Plan {
  const n = r.chunks ?? 1;
  const thinking = split(r.thinking, n);
  const text = split(r.text, n);
  const tools = (r.toolUses ?? []).map((t, i) => {
    const pieces = Array.isArray(t.input) ? t.input : [JSON.stringify(t.input)];
    return { id: t.id ?? `toolu_${++seq}_${i}`, name: t.name, pieces, input: parsed(pieces.join('')) };
  });
  const stopReason = r.stopReason === undefined ? (tools.length ? 'tool_use' : 'end_turn') : r.stopReason;
  return { id: `msg_${++seq}`, model: r.model ?? model, thinking, text, tools, stopReason, usage: usageOf(r, thinking.length + text.length + tools.length) };
}

/** The answer as one Message (stream: false). */
function message(p: Plan, r: AnthropicReply): Msg {
  const content: Anthropic.Messages.ContentBlock[] = [];
  if (r.redacted) content.push({ type: 'redacted_thinking', data: 'opaque' });
  if (p.thinking.length) content.push({ type: 'thinking', thinking: p.thinking.join(''), signature: 'sig' });
  if (p.text.length) content.push({ type: 'text', text: p.text.join(''), citations: null });
  for (const t of p.tools) content.push({ type: 'tool_use', id: t.id, name: t.name, input: t.input, caller: { type: 'direct' } });
  return {
    id: p.id,
    type: 'message',
    role: 'assistant',
    model: p.model,
    content,
    container: null,
    diagnostics: null,
    stop_details: null,
    stop_reason: p.stopReason,
    stop_sequence: null,
    usage: p.usage,
  };
}

/** The answer as the events of a stream. */
function events(p: Plan, r: AnthropicReply): StreamEvent[] {
  const ev: StreamEvent[] = [];
  // message_start: the input counts, and the first output token (as Anthropic reports it)
  ev.push({ type: 'message_start', message: { ...message(p, r), content: [], stop_reason: null, usage: { ...p.usage, output_tokens: 1 } } });
  if (r.ping) ev.push({ type: 'ping' } as unknown as StreamEvent);
  let index = 0;
  if (r.redacted) {
    ev.push({ type: 'content_block_start', index, content_block: { type: 'redacted_thinking', data: 'opaque' } });
    ev.push({ type: 'content_block_stop', index: index++ });
  }
  if (p.thinking.length) {
    ev.push({ type: 'content_block_start', index, content_block: { type: 'thinking', thinking: '', signature: '' } });
    for (const t of p.thinking) ev.push({ type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking: t } });
    ev.push({ type: 'content_block_delta', index, delta: { type: 'signature_delta', signature: 'EqQBCgIYAhIM' } });
    ev.push({ type: 'content_block_stop', index: index++ });
  }
  if (p.text.length) {
    ev.push({ type: 'content_block_start', index, content_block: { type: 'text', text: '', citations: null } });
    for (const t of p.text) ev.push({ type: 'content_block_delta', index, delta: { type: 'text_delta', text: t } });
    ev.push({ type: 'content_block_stop', index: index++ });
  }
  for (const t of p.tools) {
    ev.push({ type: 'content_block_start', index, content_block: { type: 'tool_use', id: t.id, name: t.name, input: {}, caller: { type: 'direct' } } });
    for (const piece of t.pieces) ev.push({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: piece } });
    ev.push({ type: 'content_block_stop', index: index++ });
  }
  ev.push({
    type: 'message_delta',
    delta: { container: null, stop_details: null, stop_reason: p.stopReason, stop_sequence: null },
    usage: {
      cache_creation_input_tokens: p.usage.cache_creation_input_tokens,
      cache_read_input_tokens: p.usage.cache_read_input_tokens,
      input_tokens: p.usage.input_tokens,
      output_tokens: p.usage.output_tokens,
      output_tokens_details: p.usage.output_tokens_details,
      server_tool_use: null,
    },
  });
  if (!r.noStop) ev.push({ type: 'message_stop' });
  return ev;
}

export function anthropicError(status: number, message: string, type?: string): Anthropic.ErrorResponse {
  return { type: 'error', error: { type: (type ?? ERROR_TYPES[status] ?? 'api_error') as 'api_error', message }, request_id: `req_${++seq}` } as Anthropic.ErrorResponse;
}

export async function startAnthropicMock(opts: { apiKey?: string; defaultReply?: AnthropicReply } = {}): Promise<AnthropicMock> {
  const json = (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) =>
    sendJson(res, status, body, { 'request-id': `req_${++seq}`, ...headers });

  return startRecordingMock<AnthropicRequest, AnthropicReply>({
    defaultReply: opts.defaultReply ?? { text: 'Hello from Claude.', chunks: 2 },
    async answer(rec, req, res, replies) {
      if (rec.method === 'GET' && rec.path === '/v1/models') {
        return json(res, 200, {
          data: [{ type: 'model', id: 'claude-test', display_name: 'Claude Test', created_at: '2025-01-01T00:00:00Z' }],
          has_more: false,
          first_id: 'claude-test',
          last_id: 'claude-test',
        });
      }
      const count = rec.path === '/v1/messages/count_tokens';
      if (rec.method !== 'POST' || (rec.path !== '/v1/messages' && !count)) return json(res, 404, anthropicError(404, `Not found: ${rec.path}`));
      if (!req.headers['anthropic-version']) return json(res, 400, anthropicError(400, 'anthropic-version: header is required'));
      // the key in x-api-key, or as a bearer token (which Anthropic's own SDK sends since 1.x)
      if (opts.apiKey !== undefined && req.headers['x-api-key'] !== opts.apiKey && req.headers.authorization !== `Bearer ${opts.apiKey}`) {
        return json(res, 401, anthropicError(401, 'invalid x-api-key'));
      }
      const r = replies.next();
      if (await opening(r, req)) return;
      if (r.status !== undefined && r.status >= 400) return json(res, r.status, anthropicError(r.status, r.errorMessage ?? 'error', r.errorType), r.headers);
      // count_tokens: the input tokens of the usage scripted (rawJson and the failures above apply too)
      if (count && r.rawJson === undefined) return json(res, 200, { input_tokens: r.usage?.input_tokens ?? 10 }, r.headers);
      if (await writeRaw(res, r)) return;
      const p = plan(r, rec.body?.model ?? 'claude-test');
      if (rec.body?.stream !== true) return json(res, 200, message(p, r), r.headers);
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...r.headers });
      const frames = events(p, r).map((ev) => `event: ${ev.type}\ndata: ${JSON.stringify(ev)}\n\n`);
      const failure = () => `event: error\ndata: ${JSON.stringify(anthropicError(529, r.errorMessage ?? 'Overloaded', r.errorType ?? 'overloaded_error'))}\n\n`;
      if (await writeFrames(res, frames, r, { failAt: r.errorAfter, failure })) res.end();
    },
  });
}
