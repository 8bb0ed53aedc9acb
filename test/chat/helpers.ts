/** A listening Portico in front of a scripted upstream, for the Chat Completions and embeddings tests. */
import assert from 'node:assert/strict';
import { keyedCalls } from '../helpers/calls.js';
import OpenAI from 'openai';
import { buildTestApp, type TestApp, type TestDb } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream, type ScriptedUpstreamOptions } from '../helpers/scripted-upstream.js';
import type { ModelSpec } from '../../src/models/config.js';

export interface ChatEnv {
  t: TestApp & { url?: string };
  url: string;
  up: ScriptedUpstream;
  key: string;
  client: OpenAI;
  /** a raw request with the key (JSON body) */
  call(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<Response>;
  /** the body the upstream received last */
  last(): any;
  /** the usage ledger of a user, per operation and model */
  usage(user: string): Promise<Array<{ operation: string; model: string; requests: number; input_tokens: number; output_tokens: number; cost: number }>>;
  close(): Promise<void>;
}

/** the model forwarded to the scripted upstream (known there as `upstream-model`), priced */
export const MODEL = 'gpt-test';
/** the same upstream, spoken to through the Responses API: Portico generates the chat completion itself */
export const VIA_RESPONSES = 'via-responses';
/** embeddings forwarded to the scripted upstream */
export const EMBED = 'embed-test';
/** pricing of MODEL and EMBED: 1 credit per million input tokens, 2 per million output tokens */
export const PRICING = { input_per_million: 1, output_per_million: 2 };

export async function setupChat(
  opts: { db?: TestDb; extra?: ModelSpec[]; env?: Record<string, string>; upstream?: ScriptedUpstreamOptions; upstreamKeyEnv?: string } = {},
): Promise<ChatEnv> {
  const up = await startScriptedUpstream(opts.upstream);
  // every model on the scripted upstream sends the upstream key when one is named
  const auth = opts.upstreamKeyEnv ? { api_key_env: opts.upstreamKeyEnv } : {};
  // one try per request: these fixtures check how one upstream failure is answered (test/routing: retries)
  const models: ModelSpec[] = [
    { name: MODEL, provider: 'openai-compatible', base_url: up.url, upstream_model: 'upstream-model', type: 'text', retries: 0, pricing: PRICING, ...auth } as ModelSpec,
    { name: VIA_RESPONSES, provider: 'openai-compatible', base_url: up.url, api: 'responses', type: 'text', retries: 0, ...auth } as ModelSpec,
    { name: EMBED, provider: 'openai-compatible', base_url: up.url, upstream_model: 'upstream-embedder', type: 'embeddings', retries: 0, pricing: PRICING, ...auth } as ModelSpec,
    { name: 'down', provider: 'openai-compatible', base_url: 'http://127.0.0.1:9/v1', type: 'text', retries: 0, timeout_ms: 2000 } as ModelSpec,
    { name: 'down-embed', provider: 'openai-compatible', base_url: 'http://127.0.0.1:9/v1', type: 'embeddings', retries: 0, timeout_ms: 2000 } as ModelSpec,
    { name: 'slow', provider: 'openai-compatible', base_url: up.url, type: 'text', retries: 0, timeout_ms: 300, ...auth } as ModelSpec,
    { name: 'slow-embed', provider: 'openai-compatible', base_url: up.url, type: 'embeddings', retries: 0, timeout_ms: 300, ...auth } as ModelSpec,
    ...(opts.extra ?? []),
  ];
  const t = await buildTestApp({ db: opts.db ?? 'pglite', listen: true, models, env: opts.env });
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
    async usage(user) {
      const res = await fetch(`${url}/v1/portal/query/usage?group_by=operation,model`, { headers: { authorization: `Bearer ${await t.token(user)}` } });
      assert.equal(res.status, 200, await res.clone().text());
      return ((await res.json()) as any).data.list;
    },
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
  assert.deepEqual(Object.keys(body), ['error'], text);
  assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type'], text);
  assert.ok(typeof body.error.message === 'string' && body.error.message.length > 0);
  if (code !== undefined) assert.equal(body.error.code, code, text);
  if (param !== undefined) assert.equal(body.error.param, param, text);
  return body.error;
}

/** The `data:` payloads of a Chat Completions stream (no `event:` lines, LF framing), and whether it ended with [DONE]. */
export async function readChatStream(res: Response): Promise<{ chunks: any[]; done: boolean; errors: any[] }> {
  assert.equal(res.status, 200, `stream answered ${res.status}`);
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
  const text = await res.text();
  assert.ok(!text.includes('\r'), 'LF framing only');
  const chunks: any[] = [];
  const errors: any[] = [];
  let done = false;
  for (const block of text.split('\n\n')) {
    if (!block) continue;
    assert.ok(block.startsWith('data: ') && !block.includes('\n'), `one data line per event: ${JSON.stringify(block)}`);
    const data = block.slice(6);
    assert.equal(done, false, 'nothing after [DONE]');
    if (data === '[DONE]') done = true;
    else {
      const j = JSON.parse(data);
      if (j.error) errors.push(j.error);
      else chunks.push(j);
    }
  }
  return { chunks, done, errors };
}
