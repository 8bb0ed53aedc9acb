import assert from 'node:assert/strict';
import { keyedCalls } from '../helpers/calls.js';
import OpenAI from 'openai';
import { buildTestApp, type TestApp, type TestDb } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream, type RecordedRequest } from '../helpers/scripted-upstream.js';
import type { ModelSpec } from '../../src/models/config.js';

export interface Env {
  t: TestApp & { url?: string };
  url: string;
  up: ScriptedUpstream;
  key: string;
  client: OpenAI;
  /** a raw POST/GET with the key (JSON body) */
  call(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<Response>;
  /** the body the upstream received last */
  last(): any;
  close(): Promise<void>;
}

export const MODEL = 'gpt-test';

/**
 * A listening Portico in front of a scripted upstream. Models: `gpt-test` (the upstream, as `upstream-model`),
 * `tiny-window` (context_window 80), `down` (nothing listens), plus `extra`.
 */
export async function setup(db: TestDb = 'pglite', extra: ModelSpec[] = [], env: Record<string, string> = {}): Promise<Env> {
  const up = await startScriptedUpstream();
  // one try per request: these fixtures check how one upstream failure is answered (test/routing: retries)
  const models: ModelSpec[] = [
    { name: MODEL, provider: 'openai-compatible', base_url: up.url, upstream_model: 'upstream-model', type: 'text', retries: 0 } as ModelSpec,
    { name: 'tiny-window', provider: 'openai-compatible', base_url: up.url, type: 'text', retries: 0, context_window: 80 } as ModelSpec,
    { name: 'down', provider: 'openai-compatible', base_url: 'http://127.0.0.1:9/v1', type: 'text', retries: 0, timeout_ms: 2000 } as ModelSpec,
    ...extra,
  ];
  const t = await buildTestApp({ db, listen: true, models, env });
  const url = t.url!;
  const key = await t.inferenceKey('alice');
  const client = new OpenAI({ apiKey: key, baseURL: url + '/v1', maxRetries: 0 });
  return {
    t,
    url,
    up,
    key,
    client,
    ...keyedCalls(url, key, up),
    async close() {
      await t.close();
      await up.close();
    },
  };
}

/** Asserts an OpenAI-shaped error answer and returns its `error`. */
export async function expectError(
  res: Response,
  status: number,
  code?: string | null,
  param?: string | null,
): Promise<{ message: string; type: string; param: string | null; code: string | null }> {
  const text = await res.text();
  assert.equal(res.status, status, `expected HTTP ${status}, got ${res.status}: ${text}`);
  const body = JSON.parse(text);
  assert.ok(body.error && typeof body.error === 'object', text);
  assert.equal(typeof body.error.message, 'string');
  assert.ok(body.error.message.length > 0);
  assert.equal(typeof body.error.type, 'string');
  assert.ok('param' in body.error && 'code' in body.error, text);
  if (code !== undefined) assert.equal(body.error.code, code, text);
  if (param !== undefined) assert.equal(body.error.param, param, text);
  return body.error;
}

export interface SseFrame {
  event?: string;
  data: string;
  json?: any;
}

/** Reads a whole SSE body into frames (checks LF-only framing). */
export async function readSse(res: Response): Promise<SseFrame[]> {
  assert.equal(res.status, 200, `stream answered ${res.status}`);
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
  const text = await res.text();
  return parseSse(text);
}

export function parseSse(text: string): SseFrame[] {
  assert.ok(!text.includes('\r'), 'SSE must use LF only');
  const frames: SseFrame[] = [];
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    const f: SseFrame = { data: '' };
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) f.event = line.slice(7);
      else if (line.startsWith('data: ')) f.data += line.slice(6);
      else assert.fail(`unexpected SSE line ${JSON.stringify(line)}`);
    }
    if (f.data !== '[DONE]') f.json = JSON.parse(f.data);
    frames.push(f);
  }
  return frames;
}

/**
 * The framing rules every Portico stream follows: `event:` equals data.type, sequence numbers 0..n without
 * gaps (or from `from`), and the last frame is `data: [DONE]` (when `done`). Returns the events.
 */
export function checkFraming(frames: SseFrame[], opts: { done?: boolean; from?: number } = {}): any[] {
  const done = opts.done ?? true;
  const events = frames.filter((f) => f.data !== '[DONE]');
  if (done) {
    assert.equal(frames[frames.length - 1].data, '[DONE]', 'the stream ends with data: [DONE]');
    assert.equal(frames[frames.length - 1].event, undefined);
    assert.equal(frames.filter((f) => f.data === '[DONE]').length, 1);
  } else
    assert.ok(
      frames.every((f) => f.data !== '[DONE]'),
      'no [DONE] expected',
    );
  let n = opts.from ?? 0;
  for (const f of events) {
    assert.equal(f.event, f.json.type, 'event: line equals data.type');
    assert.equal(f.json.sequence_number, n++, `sequence numbers without gaps (${f.json.type})`);
  }
  return events.map((f) => f.json);
}

export const types = (events: any[]) => events.map((e) => e.type);

/** The event types of one plain text message of `deltas` pieces at the start of a response. */
export function textItemTypes(deltas: number): string[] {
  return [
    'response.output_item.added',
    'response.content_part.added',
    ...Array(deltas).fill('response.output_text.delta'),
    'response.output_text.done',
    'response.content_part.done',
    'response.output_item.done',
  ];
}

export function callItemTypes(deltas: number): string[] {
  return ['response.output_item.added', ...Array(deltas).fill('response.function_call_arguments.delta'), 'response.function_call_arguments.done', 'response.output_item.done'];
}

/** Every field of the ResponseObject (spec 2.5 and the protocol reference). */
export const RESPONSE_FIELDS = [
  'id',
  'object',
  'created_at',
  'status',
  'background',
  'billing',
  'completed_at',
  'error',
  'incomplete_details',
  'instructions',
  'max_output_tokens',
  'max_tool_calls',
  'model',
  'output',
  'parallel_tool_calls',
  'previous_response_id',
  'prompt_cache_key',
  'prompt_cache_retention',
  'reasoning',
  'safety_identifier',
  'service_tier',
  'store',
  'temperature',
  'text',
  'tool_choice',
  'tools',
  'top_logprobs',
  'top_p',
  'truncation',
  'user',
  'metadata',
  'usage',
  'presence_penalty',
  'frequency_penalty',
] as const;

export function assertFullObject(r: any) {
  for (const f of RESPONSE_FIELDS) assert.ok(f in r, `ResponseObject field ${f} is missing`);
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(typeof r.created_at, 'number');
  for (const item of r.output) assert.equal(typeof item.id, 'string');
}

export function assertUsage(u: any) {
  assert.ok(u, 'usage is present');
  assert.equal(typeof u.input_tokens, 'number');
  assert.equal(typeof u.output_tokens, 'number');
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  assert.equal(typeof u.input_tokens_details.cached_tokens, 'number');
  assert.equal(typeof u.output_tokens_details.reasoning_tokens, 'number');
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls until `f` gives a truthy value (or fails after `ms`). */
export async function eventually<T>(f: () => Promise<T | undefined | false>, ms = 5000, what = 'condition'): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

export type { RecordedRequest };
