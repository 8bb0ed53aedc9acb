/**
 * The azure-openai provider's engines against a mock that speaks Azure OpenAI (test/helpers/azure-mock.ts, typed
 * with the openai package and driven once by its AzureOpenAI client): the URL of each surface and its api-version,
 * the key in api-key or an Entra token as a bearer (never the key in Authorization), the body, streamed and whole
 * answers, tool calls, the content filter both ways, error statuses and retry-after, and the transport's failures
 * (refused, reset, garbage, a break mid-stream, a hang at connect and before the first byte).
 */
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type net from 'node:net';
import { createAzureOpenAIEmbeddingsEngine, createAzureOpenAIEngine, DEFAULT_API_VERSION } from '../../src/engines/azure-openai/index.js';
import { azureOpenAI } from '../../src/engines/azure-openai/provider.js';
import { EngineError, type GenerateEvent, type GenerateRequest, type TextEngine } from '../../src/engines/types.js';
import { withStoredSecret, type ProviderContext } from '../../src/engines/provider.js';
import { startAzureMock, type AzureMock } from '../helpers/azure-mock.js';
import { stallWatch } from '../helpers/wait.js';
import { startBlackHole } from '../helpers/black-hole.js';
import { collect, failure, text, done } from '../helpers/engine-events.js';

const KEY = 'az-secret-key-123';
const TOKEN = 'eyJ0eXAi.entra-token.sig';
let az: AzureMock;
let engine: TextEngine;

before(async () => {
  az = await startAzureMock({ apiKey: KEY, adToken: TOKEN });
  engine = createAzureOpenAIEngine({ endpoint: az.url, deployment: 'gpt4o-prod', apiKey: KEY });
});
after(async () => {
  await engine.close();
  await az.close();
});
beforeEach(() => az.reset());

const req = (over: Partial<GenerateRequest> = {}): GenerateRequest => ({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi' }], ...over });

function ctx(env: Record<string, string | undefined>): ProviderContext {
  return { env, ttsPoolSize: 1, llamaGpu: 'cpu', log: { info() {}, warn() {} } };
}

// ------------------------------------------------------------------ the request

test('the request: deployments URL with the default api-version, the key in api-key and never in Authorization, the deployment as model', async () => {
  const evs = await collect(
    engine.generate(
      req({
        messages: [
          { role: 'developer', content: 'Be brief.' },
          { role: 'user', content: 'Hi' },
        ],
        temperature: 0.2,
        maxOutputTokens: 50,
      }),
    ),
  );
  assert.equal(text(evs), 'Hello from Azure.');
  const r = az.requests[0]!;
  assert.equal(r.path, '/openai/deployments/gpt4o-prod/chat/completions');
  assert.equal(r.query.get('api-version'), DEFAULT_API_VERSION);
  assert.equal(r.headers['api-key'], KEY);
  assert.equal(r.headers.authorization, undefined);
  assert.equal(r.body.model, 'gpt4o-prod');
  assert.deepEqual(r.body.messages, [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hi' },
  ]);
  assert.deepEqual([r.body.stream, r.body.stream_options, r.body.temperature, r.body.max_tokens], [true, { include_usage: true }, 0.2, 50]);
});

test('the v1 surface: /openai/v1/chat/completions, the deployment in the body, api-version only when the model file names one; an api_version is sent on deployments', async () => {
  const v1 = createAzureOpenAIEngine({ endpoint: az.url + '/', deployment: 'dep-a', surface: 'v1', apiKey: KEY });
  await collect(v1.generate(req()));
  const pinned = createAzureOpenAIEngine({ endpoint: az.url, deployment: 'dep-a', surface: 'v1', apiVersion: 'preview', apiKey: KEY });
  await collect(pinned.generate(req()));
  const dated = createAzureOpenAIEngine({ endpoint: az.url, deployment: 'dep b', apiVersion: '2025-04-01-preview', apiKey: KEY });
  await collect(dated.generate(req()));
  const [a, b, c] = az.requests;
  assert.deepEqual([a!.path, a!.query.has('api-version'), a!.body.model], ['/openai/v1/chat/completions', false, 'dep-a']);
  assert.deepEqual([b!.path, b!.query.get('api-version')], ['/openai/v1/chat/completions', 'preview']);
  assert.deepEqual([c!.path, c!.deployment, c!.query.get('api-version')], ['/openai/deployments/dep%20b/chat/completions', 'dep b', '2025-04-01-preview']);
  await Promise.all([v1.close(), pinned.close(), dated.close()]);
});

test('an Entra ID token: Authorization: Bearer <token>, no api-key header', async () => {
  const e = createAzureOpenAIEngine({ endpoint: az.url, deployment: 'd', adToken: TOKEN });
  await collect(e.generate(req()));
  assert.equal(az.requests[0]!.headers.authorization, `Bearer ${TOKEN}`);
  assert.equal(az.requests[0]!.headers['api-key'], undefined);
  await e.close();
});

test('max_tokens_field max_completion_tokens: an o-series deployment asked without a reasoning effort gets the cap it takes', async () => {
  const o = createAzureOpenAIEngine({ endpoint: az.url, deployment: 'o4-mini', apiKey: KEY, outputCap: 'max_completion_tokens' });
  await collect(o.generate(req({ maxOutputTokens: 40 })));
  assert.deepEqual([az.requests[0]!.body.max_completion_tokens, az.requests[0]!.body.max_tokens], [40, undefined]);
  await o.close();
  // the default: max_tokens without an effort (what every api-version and model takes)
  await collect(engine.generate(req({ maxOutputTokens: 40 })));
  assert.deepEqual([az.requests[1]!.body.max_tokens, az.requests[1]!.body.max_completion_tokens], [40, undefined]);
});

// ------------------------------------------------------------------ the answer

test('streamed: the first chunk without choices (prompt_filter_results) is skipped, deltas as they come, usage with cached tokens', async () => {
  az.script({ text: ['one ', 'two ', 'three'], usage: { prompt_tokens: 40, completion_tokens: 3, cached_tokens: 32 }, model: 'gpt-4o-2024-11-20' });
  const evs = await collect(engine.generate(req()));
  assert.deepEqual(
    evs.filter((e) => e.type === 'text_delta').map((e) => (e as { delta: string }).delta),
    ['one ', 'two ', 'three'],
  );
  const d = done(evs);
  assert.equal(d.finishReason, 'stop');
  assert.deepEqual(d.usage, { inputTokens: 40, outputTokens: 3, cachedTokens: 32 });
  assert.equal(d.model, 'gpt-4o-2024-11-20');
});

test('stream false: one JSON answer is asked for, the events are the same', async () => {
  az.script({ text: 'Whole answer.', usage: { prompt_tokens: 9, completion_tokens: 3 } });
  const evs = await collect(engine.generate(req({ stream: false })));
  assert.equal(az.requests[0]!.body.stream, false);
  assert.equal(text(evs), 'Whole answer.');
  assert.deepEqual(done(evs).usage, { inputTokens: 9, outputTokens: 3, cachedTokens: 0 });
});

test('tools: the tools and tool_choice go as OpenAI has them; streamed and whole calls come back as start, deltas, end; finish tool_calls', async () => {
  const tools = [{ name: 'weather', description: 'the weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } }];
  az.script(
    { toolCalls: [{ id: 'call_1', name: 'weather', arguments: ['{"city":', '"Paris"}'] }] },
    { toolCalls: [{ id: 'call_2', name: 'weather', arguments: '{"city":"Rome"}' }] },
  );
  for (const stream of [true, false]) {
    const evs = await collect(engine.generate(req({ tools, toolChoice: 'required', stream })));
    const end = evs.find((e) => e.type === 'tool_call_end') as Extract<GenerateEvent, { type: 'tool_call_end' }>;
    assert.equal(end.arguments, stream ? '{"city":"Paris"}' : '{"city":"Rome"}');
    assert.equal(done(evs).finishReason, 'tool_calls');
  }
  const b = az.requests[0]!.body;
  assert.deepEqual(b.tools, [{ type: 'function', function: { name: 'weather', description: 'the weather', parameters: tools[0]!.parameters } }]);
  assert.equal(b.tool_choice, 'required');
});

test('content filter, the completion: finish_reason content_filter -> FinishReason content_filter, streamed and whole, the text before kept', async () => {
  az.script({ text: 'It began', contentFilter: 'completion' }, { text: 'It began', contentFilter: 'completion' });
  let evs = await collect(engine.generate(req()));
  assert.equal(text(evs), 'It began');
  assert.equal(done(evs).finishReason, 'content_filter');
  evs = await collect(engine.generate(req({ stream: false })));
  assert.equal(done(evs).finishReason, 'content_filter');
});

test('content filter, the prompt: a 400 content_filter naming the categories, not retryable', async () => {
  az.script({ contentFilter: 'prompt' }, { contentFilter: 'prompt' });
  for (const stream of [true, false]) {
    const { error } = await failure(engine.generate(req({ stream })));
    assert.deepEqual([error.status, error.code, error.retryable, error.upstreamStatus], [400, 'content_filter', false, 400]);
    assert.match(error.message, /content filter \(violence\)/);
  }
});

// ------------------------------------------------------------------ errors

test('error statuses: 400 keeps message and code, 401/403 an operator problem without the body, 404 (no such deployment) retryable, context too long', async () => {
  az.script(
    { status: 400, errorCode: 'invalid_value', errorMessage: "Invalid value for 'temperature'" },
    { status: 401, errorCode: '401', errorMessage: `Access denied, key ${KEY}` },
    { status: 403, errorMessage: 'forbidden' },
    { status: 404, errorCode: 'DeploymentNotFound', errorMessage: 'The API deployment for this resource does not exist.' },
    { status: 400, errorCode: 'context_length_exceeded', errorMessage: "This model's maximum context length is 128000 tokens." },
  );
  let { error } = await failure(engine.generate(req()));
  assert.deepEqual([error.status, error.code, error.retryable], [400, 'invalid_value', false]);
  for (const s of [401, 403]) {
    ({ error } = await failure(engine.generate(req())));
    assert.deepEqual([error.status, error.code, error.retryable], [502, 'upstream_auth_failed', true], String(s));
    assert.doesNotMatch(error.message, /az-secret|forbidden/);
  }
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.status, error.retryable], [502, true]);
  assert.match(error.message, /deployment for this resource does not exist/);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.status, error.code], [400, 'context_length_exceeded']);
});

test('429 keeps its retry-after, 500 and 503 are retryable 502s', async () => {
  az.script(
    { status: 429, errorCode: '429', errorMessage: 'Requests to the ChatCompletions_Create Operation have exceeded the rate limit.', headers: { 'retry-after': '9' } },
    { status: 500, errorMessage: 'The server had an error' },
    { status: 503, errorMessage: 'The engine is currently overloaded' },
  );
  let { error } = await failure(engine.generate(req()));
  assert.deepEqual([error.status, error.code, error.retryable, error.retryAfterMs], [429, 'rate_limit_exceeded', true, 9000]);
  for (let i = 0; i < 2; i++) {
    ({ error } = await failure(engine.generate(req())));
    assert.deepEqual([error.status, error.retryable], [502, true]);
  }
});

test('the key never leaks through the provider: an error that echoes it is redacted', async () => {
  const e = await azureOpenAI.create.text!({ name: 'gpt-4o', type: 'text', endpoint: az.url }, ctx({ AZURE_OPENAI_API_KEY: KEY }));
  az.script({ status: 400, errorMessage: `bad key ${KEY} here` });
  const { error } = await failure(e.generate(req()));
  assert.doesNotMatch(error.message, /az-secret/);
  assert.match(error.message, /bad key \*\*\* here/);
  await e.close();
});

// ------------------------------------------------------------------ the transport's failures

test('refused, reset, garbage, a stream that breaks mid-way or ends without a finish: clear retryable failures', async () => {
  const server = http.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  const refused = createAzureOpenAIEngine({ endpoint: `http://127.0.0.1:${port}`, deployment: 'd', apiKey: KEY });
  let { error } = await failure(refused.generate(req()));
  assert.deepEqual([error.code, error.status, error.retryable], ['upstream_unavailable', 502, true]);
  assert.match(error.message, /ECONNREFUSED/);
  await refused.close();

  az.script(
    { reset: true },
    { raw: ['this is not an event stream\n\n'] },
    { rawJson: '{"id": "chatcmpl-1", "choices": [' },
    { text: ['one ', 'two ', 'three'], breakAfter: 4 },
    { raw: ['data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"cut"},"finish_reason":null}]}\n\n'] },
  );
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.code, error.retryable], ['upstream_unavailable', true]);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.code, error.retryable], ['upstream_stream_broken', true]);
  ({ error } = await failure(engine.generate(req({ stream: false }))));
  assert.deepEqual([error.status, error.retryable], [502, true], 'an unreadable JSON answer');
  let r = await failure(engine.generate(req()));
  assert.equal(r.error.code, 'upstream_stream_broken');
  assert.equal(text(r.events), 'one two ');
  r = await failure(engine.generate(req()));
  assert.equal(r.error.code, 'upstream_stream_broken');
  assert.match(r.error.message, /ended before the answer was finished/);
});

test('a hang at connect -> 504 within connectTimeoutMs; no headers within timeoutMs -> 504; silent mid-stream -> 504 after what came', async () => {
  const hole = await startBlackHole();
  const atConnect = createAzureOpenAIEngine({ endpoint: `http://127.0.0.1:${hole.port}`, deployment: 'd', apiKey: KEY, connectTimeoutMs: 300, timeoutMs: 20000 });
  const stalls = stallWatch();
  let t0 = Date.now();
  let { error } = await failure(atConnect.generate(req()));
  assert.deepEqual([error.status, error.retryable], [504, true], error.message);
  assert.match(error.message, /did not accept a connection within 300 ms/);
  assert.ok(Date.now() - t0 < 3000 + stalls.stop(), `the connect timeout came after ${Date.now() - t0} ms`);
  await atConnect.close();
  await hole.close();

  const e = createAzureOpenAIEngine({ endpoint: az.url, deployment: 'd', apiKey: KEY, timeoutMs: 500 });
  az.script({ hang: true }, { text: ['a ', 'b'], hangAfter: 3 });
  const stalls2 = stallWatch();
  t0 = Date.now();
  ({ error } = await failure(e.generate(req())));
  assert.deepEqual([error.code, error.status, error.retryable], ['upstream_unavailable', 504, true]);
  assert.ok(Date.now() - t0 < 2500 + stalls2.stop(), `the timeout came after ${Date.now() - t0} ms`);
  await az.requests[0]!.closed;
  assert.equal(az.requests[0]!.aborted, true);
  const r = await failure(e.generate(req()));
  assert.equal(r.error.status, 504);
  assert.equal(text(r.events), 'a ');
  await e.close();
});

test('abort: the signal closes the upstream request mid-stream', async () => {
  az.script({ text: ['a', 'b', 'c', 'd'], hangAfter: 3 });
  const ctl = new AbortController();
  const it = engine.generate(req({ signal: ctl.signal }))[Symbol.asyncIterator]();
  const first = await it.next();
  assert.equal((first.value as GenerateEvent).type, 'text_delta');
  ctl.abort();
  await assert.rejects(it.next(), (e: unknown) => e instanceof EngineError && e.code === 'aborted');
  await az.requests[0]!.closed;
  assert.equal(az.requests[0]!.aborted, true);
});

// ------------------------------------------------------------------ embeddings

test('embeddings: the deployment URL with api-version and api-key, the deployment as model, vectors in order', async () => {
  const e = createAzureOpenAIEmbeddingsEngine({ endpoint: az.url, deployment: 'emb-small', apiKey: KEY });
  const out = await e.embed({ model: 'text-embedding-3-small', input: ['ab', 'abcd'] });
  assert.deepEqual(out.vectors, [
    [2, 0, 0.5],
    [4, 1, 0.5],
  ]);
  assert.equal(out.inputTokens, 6);
  const r = az.requests[0]!;
  assert.deepEqual([r.path, r.query.get('api-version'), r.headers['api-key'], r.body.model], ['/openai/deployments/emb-small/embeddings', DEFAULT_API_VERSION, KEY, 'emb-small']);
  await e.probe!('models', 'x', AbortSignal.timeout(5000));
  assert.equal(az.requests[1]!.path, '/openai/deployments/emb-small/embeddings');
  await e.close();
});

// ------------------------------------------------------------------ the provider

test('provider: the key from AZURE_OPENAI_API_KEY by default, from api_key_env, or stored; an Entra token from azure_ad_token_env; none -> a 503 that says what to set', async () => {
  const seen = async (e: TextEngine) => {
    az.reset();
    await collect(e.generate(req()));
    await e.close();
    const r = az.requests[0]!;
    return [r.deployment, r.headers['api-key'] ?? r.headers.authorization];
  };
  const base = { name: 'gpt-4o', type: 'text' as const, endpoint: az.url };
  assert.deepEqual(await seen(await azureOpenAI.create.text!(base, ctx({ AZURE_OPENAI_API_KEY: KEY }))), ['gpt-4o', KEY]);
  assert.deepEqual(await seen(await azureOpenAI.create.text!({ ...base, upstream_model: 'up-name', api_key_env: 'K2' }, ctx({ K2: KEY }))), ['up-name', KEY]);
  assert.deepEqual(await seen(await azureOpenAI.create.text!({ ...base, deployment: 'dep-x' }, ctx({ AZURE_OPENAI_API_KEY: KEY }))), ['dep-x', KEY]);
  // (a copy: the stored secret stays on the object it is put on)
  assert.deepEqual(await seen(await azureOpenAI.create.text!(withStoredSecret({ ...base }, { apiKey: KEY, version: '1' }), ctx({}))), ['gpt-4o', KEY]);
  // a token variable: the bearer, even with AZURE_OPENAI_API_KEY set
  assert.deepEqual(await seen(await azureOpenAI.create.text!({ ...base, azure_ad_token_env: 'AZ_TOKEN' }, ctx({ AZ_TOKEN: TOKEN, AZURE_OPENAI_API_KEY: 'other' }))), [
    'gpt-4o',
    `Bearer ${TOKEN}`,
  ]);
  await assert.rejects(azureOpenAI.create.text!(base, ctx({})), (e: unknown) => {
    assert.ok(e instanceof EngineError);
    assert.equal(e.status, 503);
    assert.match(e.message, /has no credential: set AZURE_OPENAI_API_KEY/);
    return true;
  });
  const emb = await azureOpenAI.create.embeddings!({ name: 'text-embedding-3-small', type: 'embeddings', endpoint: az.url }, ctx({ AZURE_OPENAI_API_KEY: KEY }));
  await emb.embed({ model: 'text-embedding-3-small', input: ['x'] });
  assert.equal(az.requests.at(-1)!.deployment, 'text-embedding-3-small');
  await emb.close();
});

test('provider: the model-file check (endpoint, credentials) and the probe (a one-token completion of the deployment)', async () => {
  const c = (o: Record<string, unknown>, env?: Record<string, string>) =>
    azureOpenAI.check!({ name: 'm', type: 'text', endpoint: 'https://r.openai.azure.com', ...o } as never, env);
  assert.equal(c({}), undefined);
  assert.match(c({ endpoint: 'ftp://x' }) ?? '', /'endpoint' must be an http/);
  assert.match(c({ endpoint: 'https://r.openai.azure.com/openai/deployments/x' }) ?? '', /without \/openai/);
  assert.match(c({ endpoint: 'https://r.openai.azure.com/?api-version=1' }) ?? '', /'endpoint' must not carry a query/);
  assert.match(c({ api_key_env: 'A', azure_ad_token_env: 'B' }) ?? '', /exclusive/);
  assert.match(c({ azure_ad_token_env: 'NOPE' }, {}) ?? '', /'azure_ad_token_env' names NOPE, which is not set/);
  assert.equal(c({ context_window: 100, surface: 'v1', api_version: 'preview' }), undefined);
  assert.match(azureOpenAI.check!({ name: 'e', type: 'embeddings', endpoint: 'https://r.openai.azure.com', context_window: 100 } as never) ?? '', /text models only/);
  await engine.probe!('models', 'gpt-4o', AbortSignal.timeout(5000));
  assert.equal(az.requests[0]!.path, '/openai/deployments/gpt4o-prod/chat/completions');
  assert.deepEqual(az.requests[0]!.body, { model: 'gpt4o-prod', messages: [{ role: 'user', content: 'ping' }], max_tokens: 1, stream: false });
});

test("the mock speaks Azure's wire: the openai package's AzureOpenAI client reads its streamed and whole answers, with a key and with a token", async () => {
  const { AzureOpenAI } = await import('openai');
  const sdk = new AzureOpenAI({ endpoint: az.url, apiKey: KEY, apiVersion: DEFAULT_API_VERSION, deployment: 'gpt4o-prod', maxRetries: 0 });
  az.script({ text: 'Hello there.', chunks: 2, usage: { prompt_tokens: 5, completion_tokens: 3, cached_tokens: 2 } }, { text: 'Whole.' }, { contentFilter: 'prompt' });
  const stream = await sdk.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } });
  let got = '';
  let usage: unknown;
  for await (const ch of stream) {
    got += ch.choices[0]?.delta?.content ?? '';
    if (ch.usage) usage = ch.usage.prompt_tokens_details?.cached_tokens;
  }
  assert.equal(got, 'Hello there.');
  assert.equal(usage, 2);
  const whole = await sdk.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(whole.choices[0]!.message.content, 'Whole.');
  await assert.rejects(sdk.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'bad' }] }), (e: unknown) => {
    assert.equal((e as { status?: number }).status, 400);
    assert.equal((e as { code?: string }).code, 'content_filter');
    return true;
  });
  // the client's own addressing and headers are the ones the engine uses
  const [a] = az.requests;
  assert.deepEqual(
    [a!.path, a!.query.get('api-version'), a!.headers['api-key'], a!.headers.authorization],
    ['/openai/deployments/gpt4o-prod/chat/completions', DEFAULT_API_VERSION, KEY, undefined],
  );
  const withToken = new AzureOpenAI({ endpoint: az.url, azureADTokenProvider: async () => TOKEN, apiVersion: DEFAULT_API_VERSION, maxRetries: 0 });
  const emb = await withToken.embeddings.create({ model: 'emb-small', input: ['abc'] });
  assert.deepEqual(emb.data[0]!.embedding, [3, 0, 0.5]);
  const last = az.requests.at(-1)!;
  assert.deepEqual([last.path, last.headers.authorization], ['/openai/deployments/emb-small/embeddings', `Bearer ${TOKEN}`]);
});
