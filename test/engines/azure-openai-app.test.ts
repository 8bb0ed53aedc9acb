/**
 * The azure-openai provider as a deployment of Portico's models, driven with the official `openai` SDK through
 * /v1/chat/completions, /v1/responses and /v1/embeddings against a mock of Azure OpenAI (test/helpers/azure-mock.ts):
 * plain and streamed answers, a tools round trip, structured output, cached-token usage charged at the model's
 * prices, Azure's content filter both ways (a cut answer, a refused prompt), a 429's retry-after, a fallback to an
 * openai-compatible model, embeddings, a key stored through the admin API, and the key never in an answer or a log line.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import OpenAI from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startAzureMock, type AzureMock } from '../helpers/azure-mock.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { callers } from '../admin/helpers.js';
import { parseModelConfig } from '../../src/models/config.js';
import { usageRows } from '../helpers/usage.js';
import { ANSWER, chatCached, chatReasoning, responsesToolsRoundTrip, upstreamRefusals } from '../helpers/provider-matrix.js';

const KEY = 'az-app-test-key-0123456789';
process.env.AZURE_APP_TEST_KEY = KEY;

describe('azure-openai deployments through /v1/chat/completions, /v1/responses and /v1/embeddings', () => {
  let az: AzureMock;
  let local: ScriptedUpstream;
  let t: TestApp & { url?: string };
  let key: string;
  let client: OpenAI;
  const log: string[] = [];
  const post = (path: string, body: unknown) =>
    fetch(t.url + path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const usage = (model: string) => usageRows(t, model);

  before(async () => {
    az = await startAzureMock({ apiKey: KEY });
    local = await startScriptedUpstream();
    const gpt = `provider: azure-openai, endpoint: ${az.url}, deployment: gpt4o-prod, api_key_env: AZURE_APP_TEST_KEY`;
    const yaml = `
models:
  - { name: gpt-4o, ${gpt}, retries: 0, pricing: { input_per_million: 2.5, output_per_million: 10, cached_input_per_million: 1.25 } }
  - { name: gpt-4o-retry, ${gpt}, retries: 1 }
  - { name: gpt-4o-fb, ${gpt}, retries: 0, fallbacks: [local] }
  - { name: local, provider: openai-compatible, base_url: ${local.url}, upstream_model: qwen-local }
  - { name: text-embedding-3-small, type: embeddings, provider: azure-openai, endpoint: ${az.url}, surface: v1, api_key_env: AZURE_APP_TEST_KEY }
`;
    const sink = new Writable({ write: (chunk, _e, cb) => (log.push(chunk.toString()), cb()) });
    t = await buildTestApp({ listen: true, models: parseModelConfig(yaml).models, logDestination: sink, env: { LOG_LEVEL: 'trace' } });
    key = await t.inferenceKey('alice');
    client = new OpenAI({ apiKey: key, baseURL: t.url + '/v1', maxRetries: 0 });
  });
  after(async () => {
    await t.close();
    await az.close();
    await local.close();
  });

  test('Responses, not streamed: the deployment URL and api-key, one JSON answer asked for, cached tokens charged at the cached price', async () => {
    az.reset();
    az.script({ text: 'Bonjour.', usage: { prompt_tokens: 10000, completion_tokens: 100, cached_tokens: 8000 } });
    const r = await client.responses.create({ model: 'gpt-4o', instructions: 'Answer in French.', input: 'Hello' });
    assert.equal(r.status, 'completed');
    assert.equal(r.output_text, 'Bonjour.');
    assert.deepEqual([r.usage?.input_tokens, r.usage?.input_tokens_details.cached_tokens, r.usage?.output_tokens], [10000, 8000, 100]);
    const q = az.requests[0]!;
    assert.deepEqual(
      [q.path, q.query.get('api-version'), q.headers['api-key'], q.headers.authorization],
      ['/openai/deployments/gpt4o-prod/chat/completions', '2024-10-21', KEY, undefined],
    );
    assert.equal(q.body.stream, false);
    assert.deepEqual(q.body.messages[0], { role: 'system', content: 'Answer in French.' });
    const rows = (await usage('gpt-4o')).filter((x) => x.operation === 'responses');
    assert.equal(rows.length, 1);
    assert.deepEqual([rows[0]!.input_tokens, rows[0]!.output_tokens], [10000, 100]);
    // 2000 fresh input tokens at 2.5 per million, 8000 cached at 1.25, 100 output at 10: 0.005 + 0.01 + 0.001
    assert.equal(rows[0]!.cost, 0.016);
  });

  test('Responses streamed, Chat Completions plain and streamed', async () => {
    az.reset();
    az.script({ text: ['Str', 'eamed.'] }, { text: 'Hi there.' }, { text: ['one ', 'two ', 'three'] });
    const stream = await client.responses.create({ model: 'gpt-4o', input: 'hi', stream: true });
    let final: OpenAI.Responses.Response | undefined;
    let deltas = 0;
    for await (const ev of stream) {
      if (ev.type === 'response.output_text.delta') deltas++;
      if (ev.type === 'response.completed') final = ev.response;
    }
    const msg = final?.output[0] as OpenAI.Responses.ResponseOutputMessage;
    assert.deepEqual(
      msg.content.map((c) => (c.type === 'output_text' ? c.text : '')),
      ['Streamed.'],
    );
    assert.equal(deltas, 2);
    assert.equal(az.requests[0]!.body.stream, true);
    const r = await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] });
    assert.deepEqual([r.choices[0]!.message.content, r.choices[0]!.finish_reason], ['Hi there.', 'stop']);
    const s = await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'count' }], stream: true, stream_options: { include_usage: true } });
    const pieces: string[] = [];
    for await (const c of s) if (c.choices[0]?.delta?.content) pieces.push(c.choices[0].delta.content);
    assert.deepEqual(pieces, ['one ', 'two ', 'three']);
  });

  test("Azure's content filter: a cut answer is finish_reason content_filter (Responses: incomplete, content_filter); a refused prompt a 400 content_filter", async () => {
    az.reset();
    az.script({ text: 'It began', contentFilter: 'completion' }, { text: 'It began', contentFilter: 'completion' }, { contentFilter: 'prompt' }, { contentFilter: 'prompt' });
    const cut = await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'bad' }] });
    assert.deepEqual([cut.choices[0]!.message.content, cut.choices[0]!.finish_reason], ['It began', 'content_filter']);
    const rr = await client.responses.create({ model: 'gpt-4o', input: 'bad' });
    assert.equal(rr.status, 'incomplete');
    assert.deepEqual(rr.incomplete_details, { reason: 'content_filter' });
    for (const [path, body] of [
      ['/v1/chat/completions', { model: 'gpt-4o', messages: [{ role: 'user', content: 'worse' }] }],
      ['/v1/responses', { model: 'gpt-4o', input: 'worse', stream: false }],
    ] as const) {
      const res = await post(path, body);
      const e = ((await res.json()) as { error: { code: string; message: string; type: string } }).error;
      assert.equal(res.status, 400, path);
      assert.deepEqual([e.code, e.type], ['content_filter', 'invalid_request_error']);
      assert.match(e.message, /content filter \(violence\)/);
    }
    // the same prompt would be refused anywhere: no fallback is tried
    local.reset();
    az.script({ contentFilter: 'prompt' });
    const fb = await post('/v1/chat/completions', { model: 'gpt-4o-fb', messages: [{ role: 'user', content: 'worse' }] });
    assert.equal(fb.status, 400);
    assert.equal(((await fb.json()) as { error: { code: string } }).error.code, 'content_filter');
    assert.equal(local.requests.length, 0);
  });

  test('a tools round trip and structured output', async () => {
    az.reset();
    az.script({ toolCalls: [{ id: 'call_w1', name: 'weather', arguments: ['{"city":', '"Paris"}'] }] }, { text: 'It is sunny in Paris.' }, { text: '{"city":"Paris","temp":24}' });
    const tools: OpenAI.Chat.ChatCompletionTool[] = [{ type: 'function', function: { name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Paris?' }];
    const first = await client.chat.completions.create({ model: 'gpt-4o', messages, tools });
    const call = first.choices[0]!.message.tool_calls![0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    assert.equal(first.choices[0]!.finish_reason, 'tool_calls');
    assert.deepEqual([call.id, call.function.name, JSON.parse(call.function.arguments)], ['call_w1', 'weather', { city: 'Paris' }]);
    messages.push(first.choices[0]!.message, { role: 'tool', tool_call_id: call.id, content: 'sunny, 24 C' });
    const second = await client.chat.completions.create({ model: 'gpt-4o', messages, tools });
    assert.equal(second.choices[0]!.message.content, 'It is sunny in Paris.');
    const sent = az.requests[1]!.body.messages;
    assert.deepEqual(sent[1].tool_calls, [{ id: 'call_w1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } }]);
    assert.deepEqual(sent[2], { role: 'tool', tool_call_id: 'call_w1', content: 'sunny, 24 C', name: 'weather' });
    const schema = { type: 'object', properties: { city: { type: 'string' }, temp: { type: 'number' } }, required: ['city', 'temp'], additionalProperties: false };
    const rr = await client.responses.create({ model: 'gpt-4o', input: 'Weather as JSON', text: { format: { type: 'json_schema', name: 'weather', schema, strict: true } } });
    assert.deepEqual(JSON.parse(rr.output_text), { city: 'Paris', temp: 24 });
    assert.deepEqual(az.requests[2]!.body.response_format, { type: 'json_schema', json_schema: { name: 'weather', schema, strict: true } });
  });

  test("upstream errors: a 429's retry-after reaches the client; with a retry it is waited for; a 500 falls back to an openai-compatible model", async () => {
    az.reset();
    az.script({ status: 429, errorCode: '429', errorMessage: 'rate limited', headers: { 'retry-after': '3' } });
    const res = await post('/v1/chat/completions', { model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(res.status, 429);
    assert.equal(res.headers.get('retry-after'), '3');
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'rate_limit_exceeded');

    az.reset();
    az.script({ status: 429, errorCode: '429', errorMessage: 'rate limited', headers: { 'retry-after': '1' } }, { text: 'after the wait' });
    const t0 = Date.now();
    const r = await client.responses.create({ model: 'gpt-4o-retry', input: 'hi' });
    assert.equal(r.output_text, 'after the wait');
    assert.ok(Date.now() - t0 >= 900, 'retry-after honoured');
    assert.equal(az.requests.length, 2);

    az.reset();
    local.reset();
    az.script({ status: 500, errorMessage: 'The server had an error' });
    local.script({ text: 'from the local Qwen' });
    const fb = await client.chat.completions.create({ model: 'gpt-4o-fb', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(fb.choices[0]!.message.content, 'from the local Qwen');
    assert.deepEqual([az.requests.length, local.requests.length], [1, 1]);
  });

  test('embeddings on the v1 surface: /openai/v1/embeddings, the deployment as model, no api-version; base64 asked by the SDK is served', async () => {
    az.reset();
    const r = await client.embeddings.create({ model: 'text-embedding-3-small', input: ['ab', 'abcd'] });
    assert.deepEqual(
      r.data.map((d) => Array.from(d.embedding)),
      [
        [2, 0, 0.5],
        [4, 1, 0.5],
      ],
    );
    const q = az.requests[0]!;
    assert.deepEqual(
      [q.path, q.query.has('api-version'), q.body.model, q.body.encoding_format, q.headers['api-key']],
      ['/openai/v1/embeddings', false, 'text-embedding-3-small', 'float', KEY],
    );
  });

  test('an api_key stored through the admin API is sent as api-key; the key is never in an answer or a log line', async () => {
    const c = await callers(t);
    const res = await t.app.inject({
      method: 'POST',
      url: '/v1/admin/models',
      headers: c.operator,
      payload: { entry: { name: 'gpt-stored', provider: 'azure-openai', endpoint: az.url, deployment: 'dep-stored', api_key: KEY, retries: 0 } },
    });
    assert.ok(res.statusCode < 300, res.body);
    assert.doesNotMatch(res.body, /az-app-test/);
    az.reset();
    az.script({ text: 'stored key works' }, { status: 400, errorMessage: `key ${KEY} may not do that` });
    const r = await client.chat.completions.create({ model: 'gpt-stored', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.choices[0]!.message.content, 'stored key works');
    assert.deepEqual([az.requests[0]!.deployment, az.requests[0]!.headers['api-key']], ['dep-stored', KEY]);
    const refused = await post('/v1/chat/completions', { model: 'gpt-stored', messages: [{ role: 'user', content: 'hi' }] });
    const text = await refused.text();
    assert.equal(refused.status, 400);
    assert.match(text, /key \*\*\* may not/);
    assert.doesNotMatch(text, /az-app-test/);
    assert.ok(log.length > 0, 'the log was captured');
    assert.deepEqual(
      log.filter((l) => l.includes(KEY)),
      [],
    );
  });

  test('reasoning: reasoning_effort reaches the deployment, with max_completion_tokens (a reasoning deployment refuses max_tokens); its reasoning_tokens come back (Chat Completions and Responses)', async () => {
    az.reset();
    const script = () => az.script({ text: ANSWER, usage: { prompt_tokens: 20, completion_tokens: 30, reasoning_tokens: 12 } });
    const asked = (body: any) => {
      assert.equal(body.reasoning_effort, 'low');
      assert.equal(body.max_tokens, undefined);
    };
    // Azure's Chat Completions gives the reasoning's count, not its text
    await chatReasoning(client, { model: 'gpt-4o', script, bodies: () => az.requests.map((q) => q.body), assertAsked: asked, text: false, tokens: 12 });
    az.reset();
    script();
    const r = await client.responses.create({ model: 'gpt-4o', input: 'What is 2+2?', reasoning: { effort: 'low' }, max_output_tokens: 500 });
    assert.equal(r.output_text, ANSWER);
    assert.deepEqual([r.usage?.output_tokens, r.usage?.output_tokens_details.reasoning_tokens], [30, 12]);
    asked(az.requests[0]!.body);
    assert.equal(az.requests[0]!.body.max_completion_tokens, 500);
    // without reasoning, the cap is max_tokens still (what every API version and model takes)
    az.reset();
    await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], max_tokens: 50 });
    assert.deepEqual([az.requests[0]!.body.max_tokens, az.requests[0]!.body.max_completion_tokens], [50, undefined]);
    // cached tokens in Chat Completions (Responses: the first test)
    az.reset();
    await chatCached(client, 'gpt-4o', () => az.script({ text: 'Hi.', usage: { prompt_tokens: 10000, completion_tokens: 5, cached_tokens: 8000 } }), 10000, 8000);
  });

  test('a tools round trip through the Responses API: the function_call_output sent back as a tool message', async () => {
    az.reset();
    await responsesToolsRoundTrip(
      client,
      'gpt-4o',
      () => az.script({ toolCalls: [{ id: 'call_r1', name: 'weather', arguments: ['{"city":', '"Paris"}'] }] }, { text: 'It is sunny in Paris.' }),
      () => az.requests.at(-1)!.body,
      (body, id) => {
        assert.equal(id, 'call_r1');
        assert.deepEqual(body.messages[1].tool_calls, [{ id, type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } }]);
        assert.deepEqual(body.messages[2], { role: 'tool', tool_call_id: id, content: 'sunny, 24 C', name: 'weather' });
      },
    );
  });

  test('upstream errors through both APIs: a 400 is a 400 invalid_request_error with its message, a 500 a 502, a 429 a 429 with its retry-after', async () => {
    az.reset();
    await upstreamRefusals(post, 'gpt-4o', (status, message, retryAfter) =>
      az.script({ status, errorMessage: message, ...(retryAfter !== undefined ? { headers: { 'retry-after': String(retryAfter) } } : {}) }),
    );
  });
});
