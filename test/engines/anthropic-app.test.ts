/**
 * The anthropic provider as a deployment of Portico's models, driven with the official `openai` SDK through
 * /v1/responses and /v1/chat/completions against a mock of Anthropic's wire (test/helpers/anthropic-mock.ts):
 * plain and streamed answers, a tools round trip, structured output, reasoning, cached-token usage charged at the
 * model's prices in the ledger, upstream errors with their retry-after, a fallback to an openai-compatible
 * deployment, the timeouts (a connect that hangs, no first byte, a stream cut mid-way), a key stored through the
 * admin API, and the key never in an answer or a log line.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import OpenAI from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startAnthropicMock, type AnthropicMock } from '../helpers/anthropic-mock.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { startBlackHole, type BlackHole } from '../helpers/black-hole.js';
import { timed } from '../helpers/wait.js';
import { callers } from '../admin/helpers.js';
import { parseModelConfig } from '../../src/models/config.js';
import { usageRows } from '../helpers/usage.js';
import { ANSWER, THOUGHT, chatCached, chatReasoning, responsesToolsRoundTrip, upstreamRefusals } from '../helpers/provider-matrix.js';

const KEY = 'sk-ant-app-test-0123456789';
process.env.ANTHROPIC_APP_TEST_KEY = KEY;

describe('anthropic deployments through /v1/responses and /v1/chat/completions', () => {
  let up: AnthropicMock;
  let local: ScriptedUpstream;
  let hole: BlackHole;
  let t: TestApp & { url?: string };
  let key: string;
  let client: OpenAI;
  const log: string[] = [];
  const post = (path: string, body: unknown) =>
    fetch(t.url + path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const usage = (model: string) => usageRows(t, model);

  before(async () => {
    up = await startAnthropicMock({ apiKey: KEY });
    local = await startScriptedUpstream();
    hole = await startBlackHole();
    const claude = `provider: anthropic, base_url: ${up.url}, upstream_model: claude-test, api_key_env: ANTHROPIC_APP_TEST_KEY`;
    const yaml = `
models:
  - { name: claude, ${claude}, retries: 0, pricing: { input_per_million: 3, output_per_million: 15, cached_input_per_million: 0.3 } }
  - { name: claude-retry, ${claude}, retries: 1 }
  - { name: claude-fb, ${claude}, retries: 0, fallbacks: [local] }
  - { name: local, provider: openai-compatible, base_url: ${local.url}, upstream_model: qwen-local }
  - name: claude-hole
    retries: 1
    deployments:
      - { id: ch-hole, provider: anthropic, base_url: http://127.0.0.1:${hole.port}, api_key_env: ANTHROPIC_APP_TEST_KEY, weight: 1, timeouts: { first_byte_ms: 1000 } }
      - { id: ch-local, provider: openai-compatible, base_url: ${local.url}, weight: 0 }
  - { name: claude-connect, provider: anthropic, base_url: "http://127.0.0.1:${hole.port}", api_key_env: ANTHROPIC_APP_TEST_KEY, retries: 0, timeouts: { connect_ms: 300, first_byte_ms: 20000 } }
  - { name: claude-slow, ${claude}, retries: 0, timeouts: { first_byte_ms: 500 } }
`;
    const sink = new Writable({ write: (chunk, _e, cb) => (log.push(chunk.toString()), cb()) });
    t = await buildTestApp({ listen: true, models: parseModelConfig(yaml).models, logDestination: sink, env: { LOG_LEVEL: 'trace' } });
    key = await t.inferenceKey('alice');
    client = new OpenAI({ apiKey: key, baseURL: t.url + '/v1', maxRetries: 0 });
  });
  after(async () => {
    await t.close();
    await up.close();
    await local.close();
    await hole.close();
  });

  test('Responses, not streamed: instructions as the system prompt, one JSON answer asked for, cached tokens charged at the cached price', async () => {
    up.reset();
    up.script({ text: 'Bonjour.', usage: { input_tokens: 1000, cache_read_input_tokens: 9000, cache_creation_input_tokens: 0, output_tokens: 100 } });
    const r = await client.responses.create({ model: 'claude', instructions: 'Answer in French.', input: 'Hello' });
    assert.equal(r.status, 'completed');
    assert.equal(r.output_text, 'Bonjour.');
    assert.equal(r.model, 'claude');
    assert.deepEqual([r.usage?.input_tokens, r.usage?.input_tokens_details.cached_tokens, r.usage?.output_tokens], [10000, 9000, 100]);
    const b = up.requests[0]!.body;
    assert.equal(b.model, 'claude-test');
    assert.equal(b.system, 'Answer in French.');
    assert.equal(b.stream, undefined, 'a non-streamed response asks for one JSON answer');
    assert.equal(up.requests[0]!.headers['x-api-key'], KEY);
    assert.equal(up.requests[0]!.headers.authorization, undefined);
    const rows = (await usage('claude')).filter((x) => x.operation === 'responses');
    assert.equal(rows.length, 1);
    assert.deepEqual([rows[0]!.input_tokens, rows[0]!.output_tokens], [10000, 100]);
    // 1000 fresh input tokens at 3 per million, 9000 cached at 0.3, 100 output at 15: 0.0072 credits
    assert.equal(rows[0]!.cost, 0.0072);
  });

  test('Responses, streamed, with reasoning: a reasoning item from the thinking, then the text; effort -> a thinking budget', async () => {
    up.reset();
    up.script({ thinking: 'Two and two make four.', chunks: 2, text: 'Four.', usage: { input_tokens: 20, output_tokens: 30, thinking_tokens: 12 } });
    const stream = await client.responses.create({ model: 'claude', input: 'What is 2+2?', reasoning: { effort: 'low' }, stream: true });
    const types: string[] = [];
    let final: OpenAI.Responses.Response | undefined;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'response.completed') final = ev.response;
    }
    assert.ok(final);
    assert.equal(up.requests[0]!.body.stream, true);
    assert.deepEqual(up.requests[0]!.body.thinking, { type: 'enabled', budget_tokens: 1024 });
    assert.deepEqual(
      final.output.map((o) => o.type),
      ['reasoning', 'message'],
    );
    const message = final.output[1] as OpenAI.Responses.ResponseOutputMessage;
    assert.deepEqual(
      message.content.map((c) => (c.type === 'output_text' ? c.text : '')),
      ['Four.'],
    );
    assert.equal(final.usage?.output_tokens_details.reasoning_tokens, 12);
    assert.ok(types.indexOf('response.output_text.delta') > 0);
  });

  test('Chat Completions: plain and streamed; a refusal of the upstream is finish_reason content_filter (an incomplete response in the Responses API)', async () => {
    up.reset();
    up.script({ text: 'Hi there.' }, { text: 'one two three', chunks: 3 }, { text: 'I will not help with that.', stopReason: 'refusal' });
    const r = await client.chat.completions.create({ model: 'claude', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.choices[0]!.message.content, 'Hi there.');
    assert.equal(r.choices[0]!.finish_reason, 'stop');
    const s = await client.chat.completions.create({ model: 'claude', messages: [{ role: 'user', content: 'count' }], stream: true, stream_options: { include_usage: true } });
    let text = '';
    let pieces = 0;
    for await (const c of s) {
      const d = c.choices[0]?.delta?.content;
      if (d) {
        text += d;
        pieces++;
      }
    }
    assert.equal(text, 'one two three');
    assert.equal(pieces, 3);
    const refused = await client.chat.completions.create({ model: 'claude', messages: [{ role: 'user', content: 'bad' }] });
    assert.equal(refused.choices[0]!.finish_reason, 'content_filter');
    // the Responses API: an incomplete response, for the reason OpenAI gives for it
    up.script({ text: 'I will not.', stopReason: 'refusal' });
    const rr = await client.responses.create({ model: 'claude', input: 'bad' });
    assert.equal(rr.status, 'incomplete');
    assert.deepEqual(rr.incomplete_details, { reason: 'content_filter' });
  });

  test('a tools round trip: the call as the client sees it, its result sent back as a tool_result in a user turn', async () => {
    up.reset();
    up.script({ toolUses: [{ id: 'toolu_w1', name: 'weather', input: ['{"city":', '"Paris"}'] }] }, { text: 'It is sunny in Paris.' });
    const tools: OpenAI.Chat.ChatCompletionTool[] = [{ type: 'function', function: { name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Paris?' }];
    const first = await client.chat.completions.create({ model: 'claude', messages, tools, parallel_tool_calls: false });
    const call = first.choices[0]!.message.tool_calls![0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    assert.equal(first.choices[0]!.finish_reason, 'tool_calls');
    assert.deepEqual([call.id, call.function.name, JSON.parse(call.function.arguments)], ['toolu_w1', 'weather', { city: 'Paris' }]);
    assert.deepEqual(up.requests[0]!.body.tool_choice, { type: 'auto', disable_parallel_tool_use: true });
    messages.push(first.choices[0]!.message, { role: 'tool', tool_call_id: call.id, content: 'sunny, 24 C' });
    const second = await client.chat.completions.create({ model: 'claude', messages, tools });
    assert.equal(second.choices[0]!.message.content, 'It is sunny in Paris.');
    assert.deepEqual(up.requests[1]!.body.messages, [
      { role: 'user', content: [{ type: 'text', text: 'Weather in Paris?' }] },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_w1', name: 'weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_w1', content: 'sunny, 24 C' }] },
    ]);
  });

  test('structured output: response_format json_schema (Chat Completions) and text.format (Responses) come back as the JSON text', async () => {
    up.reset();
    const answer = (body: any) => ({ toolUses: [{ name: body.tool_choice.name, input: { city: 'Paris', temp: 24 } }] });
    up.script(answer, answer);
    const schema = { type: 'object', properties: { city: { type: 'string' }, temp: { type: 'number' } }, required: ['city', 'temp'], additionalProperties: false };
    const r = await client.chat.completions.create({
      model: 'claude',
      messages: [{ role: 'user', content: 'Weather as JSON' }],
      response_format: { type: 'json_schema', json_schema: { name: 'weather', schema, strict: true } },
    });
    assert.deepEqual(JSON.parse(r.choices[0]!.message.content!), { city: 'Paris', temp: 24 });
    assert.equal(r.choices[0]!.finish_reason, 'stop');
    assert.deepEqual(up.requests[0]!.body.tool_choice, { type: 'tool', name: 'weather' });
    const rr = await client.responses.create({ model: 'claude', input: 'Weather as JSON', text: { format: { type: 'json_schema', name: 'weather', schema, strict: true } } });
    assert.deepEqual(JSON.parse(rr.output_text), { city: 'Paris', temp: 24 });
  });

  test('what Anthropic cannot do is a 400 unsupported_parameter naming it, and nothing goes upstream', async () => {
    up.reset();
    for (const [path, body, what] of [
      ['/v1/responses', { model: 'claude', input: 'hi', presence_penalty: 0.5 }, /presence_penalty/],
      ['/v1/chat/completions', { model: 'claude', messages: [{ role: 'user', content: 'hi' }], seed: 7 }, /'seed'/],
      ['/v1/chat/completions', { model: 'claude', messages: [{ role: 'user', content: 'hi' }], temperature: 1.7 }, /temperature/],
      ['/v1/chat/completions', { model: 'claude', messages: [{ role: 'user', content: 'hi' }], n: 2 }, /'n' must be 1/],
    ] as const) {
      const res = await post(path, body);
      const e = ((await res.json()) as { error: { code: string; message: string; type: string } }).error;
      assert.equal(res.status, 400, `${path} ${JSON.stringify(body)}`);
      assert.equal(e.code, 'unsupported_parameter');
      assert.match(e.message, what);
    }
    assert.equal(up.requests.length, 0);
  });

  test("upstream errors: a 429's retry-after reaches the client; with a retry it is waited for, then answered; 529 falls back to an openai-compatible model", async () => {
    up.reset();
    up.script({ status: 429, errorMessage: 'rate limited', headers: { 'retry-after': '3' } });
    const res = await post('/v1/chat/completions', { model: 'claude', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(res.status, 429);
    assert.equal(res.headers.get('retry-after'), '3');
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'rate_limit_exceeded');

    up.reset();
    up.script({ status: 429, errorMessage: 'rate limited', headers: { 'retry-after': '1' } }, { text: 'after the wait' });
    const t0 = Date.now();
    const r = await client.responses.create({ model: 'claude-retry', input: 'hi' });
    assert.equal(r.output_text, 'after the wait');
    assert.ok(Date.now() - t0 >= 900, 'retry-after honoured');
    assert.equal(up.requests.length, 2);

    up.reset();
    local.reset();
    up.script({ status: 529, errorMessage: 'Overloaded' });
    local.script({ text: 'from the local Qwen' });
    const fb = await client.chat.completions.create({ model: 'claude-fb', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(fb.choices[0]!.message.content, 'from the local Qwen');
    assert.equal(up.requests.length, 1);
    assert.equal(local.requests.length, 1);
    assert.equal(local.requests[0]!.body.model, 'qwen-local');
  });

  test('timeouts: a connect that hangs fails over within first_byte_ms; connect_ms fires on time; no first byte -> 504', async () => {
    local.reset();
    local.script({ text: 'from the live deployment' });
    const t0 = performance.now();
    const r = await timed(() => client.chat.completions.create({ model: 'claude-hole', messages: [{ role: 'user', content: 'hi' }] }));
    assert.equal(r.value.choices[0]!.message.content, 'from the live deployment');
    const ms = local.requests[0]!.at - t0;
    assert.ok(ms >= 1000 - 5 && ms <= 1000 + 100 + r.stallMs + 200, `failed over after ${ms.toFixed(0)} ms`);

    const c = await timed(() => post('/v1/responses', { model: 'claude-connect', input: 'hi' }));
    assert.equal(c.value.status, 504);
    assert.match(((await c.value.json()) as { error: { message: string } }).error.message, /connection within 300 ms/);
    assert.ok(c.ms >= 295 && c.ms <= 300 + 100 + c.stallMs + 200, `connect_ms fired after ${c.ms.toFixed(0)} ms`);

    up.reset();
    up.script({ hang: true });
    const s = await timed(() => post('/v1/chat/completions', { model: 'claude-slow', messages: [{ role: 'user', content: 'hi' }] }));
    assert.equal(s.value.status, 504);
    assert.ok(s.ms >= 495, `${s.ms}`);
    await up.requests[0]!.closed;
    assert.equal(up.requests[0]!.aborted, true, 'the upstream request was closed');
  });

  test('a stream cut mid-way: what came is kept, the client is told it failed (no retry after output)', async () => {
    up.reset();
    up.script({ text: ['one ', 'two ', 'three'], breakAfter: 4 });
    const res = await post('/v1/chat/completions', { model: 'claude', messages: [{ role: 'user', content: 'hi' }], stream: true });
    assert.equal(res.status, 200);
    const body = await res.text();
    assert.match(body, /"content":"one "/);
    assert.match(body, /"error"/);
    assert.doesNotMatch(body, /three/);
    assert.equal(up.requests.length, 1, 'not tried again once output was sent');
  });

  test('an api_key stored through the admin API is sent as x-api-key; the key is never in an answer or a log line', async () => {
    const c = await callers(t);
    const res = await t.app.inject({
      method: 'POST',
      url: '/v1/admin/models',
      headers: c.operator,
      payload: { entry: { name: 'claude-stored', provider: 'anthropic', base_url: up.url, upstream_model: 'claude-test', api_key: KEY, retries: 0 } },
    });
    assert.ok(res.statusCode < 300, res.body);
    assert.doesNotMatch(res.body, /sk-ant-app/);
    up.reset();
    up.script({ text: 'stored key works' }, { status: 400, errorMessage: `key ${KEY} may not do that` });
    const r = await client.chat.completions.create({ model: 'claude-stored', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.choices[0]!.message.content, 'stored key works');
    assert.equal(up.requests[0]!.headers['x-api-key'], KEY);
    const refused = await post('/v1/chat/completions', { model: 'claude-stored', messages: [{ role: 'user', content: 'hi' }] });
    const text = await refused.text();
    assert.equal(refused.status, 400);
    assert.match(text, /key \*\*\* may not/);
    assert.doesNotMatch(text, /sk-ant-app/);
    assert.ok(log.length > 0, 'the log was captured');
    assert.deepEqual(
      log.filter((l) => l.includes(KEY)),
      [],
    );
  });

  test('Chat Completions: reasoning (effort -> a thinking budget; reasoning_content, reasoning_tokens) and cached tokens, plain and streamed', async () => {
    up.reset();
    await chatReasoning(client, {
      model: 'claude',
      script: () => up.script({ thinking: THOUGHT, text: ANSWER, usage: { input_tokens: 20, output_tokens: 30, thinking_tokens: 12 } }),
      bodies: () => up.requests.map((q) => q.body),
      assertAsked: (body) => assert.deepEqual(body.thinking, { type: 'enabled', budget_tokens: 1024 }),
      text: true,
      tokens: 12,
    });
    up.reset();
    // Anthropic's input_tokens leave the cache reads out: Portico's input counts them in
    await chatCached(client, 'claude', () => up.script({ text: 'Hi.', usage: { input_tokens: 1000, cache_read_input_tokens: 9000, output_tokens: 5 } }), 10000, 9000);
  });

  test('a tools round trip through the Responses API: the function_call_output sent back as a tool_result', async () => {
    up.reset();
    await responsesToolsRoundTrip(
      client,
      'claude',
      () => up.script({ toolUses: [{ id: 'toolu_r1', name: 'weather', input: ['{"city":', '"Paris"}'] }] }, { text: 'It is sunny in Paris.' }),
      () => up.requests.at(-1)!.body,
      (body, id) => {
        assert.equal(id, 'toolu_r1');
        assert.deepEqual(body.messages.slice(1), [
          { role: 'assistant', content: [{ type: 'tool_use', id, name: 'weather', input: { city: 'Paris' } }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: id, content: 'sunny, 24 C' }] },
        ]);
      },
    );
  });

  test('upstream errors through both APIs: a 400 is a 400 invalid_request_error with its message, a 500 a 502, a 429 a 429 with its retry-after', async () => {
    up.reset();
    await upstreamRefusals(post, 'claude', (status, message, retryAfter) =>
      up.script({ status, errorMessage: message, ...(retryAfter !== undefined ? { headers: { 'retry-after': String(retryAfter) } } : {}) }),
    );
  });
});
