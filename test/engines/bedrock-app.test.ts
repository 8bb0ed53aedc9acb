/**
 * The bedrock provider as a deployment of Portico's models, driven with the official `openai` SDK through
 * /v1/chat/completions and /v1/responses against a mock of Bedrock's Converse wire (test/helpers/bedrock-mock.ts,
 * every request's SigV4 signature checked): plain and streamed answers, a tools round trip, structured output,
 * cached-token usage charged at the model's prices in the ledger, throttling with its retry-after, a fallback to
 * an openai-compatible deployment, the refusals, and the AWS secret never in an answer or a log line.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import OpenAI from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startBedrockMock, type BedrockMock } from '../helpers/bedrock-mock.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { parseModelConfig } from '../../src/models/config.js';
import { usageRows } from '../helpers/usage.js';
import { ANSWER, THOUGHT, chatCached, chatReasoning, responsesToolsRoundTrip, upstreamRefusals } from '../helpers/provider-matrix.js';

const CREDS = { accessKeyId: 'AKIAAPPTEST000000000', secretAccessKey: 'bedrock-app-test-secret/0123456789abcdef' };
const REGION = 'eu-central-1';
const MODEL = 'anthropic.claude-3-5-haiku-20241022-v1:0';
process.env.AWS_ACCESS_KEY_ID = CREDS.accessKeyId;
process.env.AWS_SECRET_ACCESS_KEY = CREDS.secretAccessKey;
delete process.env.AWS_SESSION_TOKEN;

describe('bedrock deployments through /v1/chat/completions and /v1/responses', () => {
  let up: BedrockMock;
  let local: ScriptedUpstream;
  let t: TestApp & { url?: string };
  let key: string;
  let client: OpenAI;
  const log: string[] = [];
  const post = (path: string, body: unknown) =>
    fetch(t.url + path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const usage = (model: string) => usageRows(t, model);

  before(async () => {
    up = await startBedrockMock({ credentials: CREDS, region: REGION });
    local = await startScriptedUpstream();
    const claude = `provider: bedrock, base_url: ${up.url}, region: ${REGION}, upstream_model: "${MODEL}"`;
    const yaml = `
models:
  - { name: claude, ${claude}, retries: 0, pricing: { input_per_million: 3, output_per_million: 15, cached_input_per_million: 0.3 } }
  - { name: claude-retry, ${claude}, retries: 1 }
  - { name: claude-fb, ${claude}, retries: 0, fallbacks: [local] }
  - { name: local, provider: openai-compatible, base_url: ${local.url}, upstream_model: qwen-local }
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
  });

  test('Responses, not streamed: instructions as a system block, /converse, signed; cached tokens charged at the cached price', async () => {
    up.reset();
    up.script({ text: 'Bonjour.', usage: { inputTokens: 1000, cacheReadInputTokens: 9000, cacheWriteInputTokens: 0, outputTokens: 100 } });
    const r = await client.responses.create({ model: 'claude', instructions: 'Answer in French.', input: 'Hello' });
    assert.equal(r.status, 'completed');
    assert.equal(r.output_text, 'Bonjour.');
    assert.deepEqual([r.usage?.input_tokens, r.usage?.input_tokens_details.cached_tokens, r.usage?.output_tokens], [10000, 9000, 100]);
    const q = up.requests[0]!;
    assert.equal(q.modelId, MODEL);
    assert.equal(q.stream, false, 'a non-streamed response asks for one JSON answer');
    assert.equal(q.signed, true);
    assert.deepEqual(q.body.system, [{ text: 'Answer in French.' }]);
    const rows = (await usage('claude')).filter((x) => x.operation === 'responses');
    assert.equal(rows.length, 1);
    assert.deepEqual([rows[0]!.input_tokens, rows[0]!.output_tokens], [10000, 100]);
    // 1000 fresh input tokens at 3 per million, 9000 cached at 0.3, 100 output at 15: 0.0072 credits
    assert.equal(rows[0]!.cost, 0.0072);
  });

  test('Responses, streamed, with reasoning: a reasoning item, then the text; effort -> a thinking budget in additionalModelRequestFields', async () => {
    up.reset();
    up.script({ reasoning: 'Two and two make four.', chunks: 2, text: 'Four.' });
    const stream = await client.responses.create({ model: 'claude', input: 'What is 2+2?', reasoning: { effort: 'low' }, stream: true });
    let final: OpenAI.Responses.Response | undefined;
    for await (const ev of stream) if (ev.type === 'response.completed') final = ev.response;
    assert.ok(final);
    assert.equal(up.requests[0]!.stream, true);
    assert.deepEqual(up.requests[0]!.body.additionalModelRequestFields, { thinking: { type: 'enabled', budget_tokens: 1024 } });
    assert.deepEqual(
      final.output.map((o) => o.type),
      ['reasoning', 'message'],
    );
    const message = final.output[1] as OpenAI.Responses.ResponseOutputMessage;
    assert.deepEqual(
      message.content.map((c) => (c.type === 'output_text' ? c.text : '')),
      ['Four.'],
    );
  });

  test('Chat Completions: plain and streamed (the event stream as SSE chunks); a guardrail is finish_reason content_filter', async () => {
    up.reset();
    up.script({ text: 'Hi there.' }, { text: 'one two three', chunks: 3 }, { text: 'Blocked.', stopReason: 'guardrail_intervened' });
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
  });

  test('a tools round trip: the call as the client sees it, its result sent back as a toolResult in a user turn', async () => {
    up.reset();
    up.script({ toolUses: [{ toolUseId: 'tooluse_w1', name: 'weather', input: ['{"city":', '"Paris"}'] }] }, { text: 'It is sunny in Paris.' });
    const tools: OpenAI.Chat.ChatCompletionTool[] = [{ type: 'function', function: { name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Paris?' }];
    const first = await client.chat.completions.create({ model: 'claude', messages, tools });
    const call = first.choices[0]!.message.tool_calls![0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    assert.equal(first.choices[0]!.finish_reason, 'tool_calls');
    assert.deepEqual([call.id, call.function.name, JSON.parse(call.function.arguments)], ['tooluse_w1', 'weather', { city: 'Paris' }]);
    assert.deepEqual(up.requests[0]!.body.toolConfig.tools, [
      { toolSpec: { name: 'weather', inputSchema: { json: { type: 'object', properties: { city: { type: 'string' } } } } } },
    ]);
    messages.push(first.choices[0]!.message, { role: 'tool', tool_call_id: call.id, content: 'sunny, 24 C' });
    const second = await client.chat.completions.create({ model: 'claude', messages, tools });
    assert.equal(second.choices[0]!.message.content, 'It is sunny in Paris.');
    assert.deepEqual(up.requests[1]!.body.messages, [
      { role: 'user', content: [{ text: 'Weather in Paris?' }] },
      { role: 'assistant', content: [{ toolUse: { toolUseId: 'tooluse_w1', name: 'weather', input: { city: 'Paris' } } }] },
      { role: 'user', content: [{ toolResult: { toolUseId: 'tooluse_w1', content: [{ text: 'sunny, 24 C' }] } }] },
    ]);
  });

  test('structured output: response_format json_schema (Chat Completions) and text.format (Responses) come back as the JSON text', async () => {
    up.reset();
    const answer = (body: any) => ({ toolUses: [{ name: body.toolConfig.toolChoice.tool.name, input: { city: 'Paris', temp: 24 } }] });
    up.script(answer, answer);
    const schema = { type: 'object', properties: { city: { type: 'string' }, temp: { type: 'number' } }, required: ['city', 'temp'], additionalProperties: false };
    const r = await client.chat.completions.create({
      model: 'claude',
      messages: [{ role: 'user', content: 'Weather as JSON' }],
      response_format: { type: 'json_schema', json_schema: { name: 'weather', schema, strict: true } },
    });
    assert.deepEqual(JSON.parse(r.choices[0]!.message.content!), { city: 'Paris', temp: 24 });
    assert.equal(r.choices[0]!.finish_reason, 'stop');
    assert.deepEqual(up.requests[0]!.body.toolConfig.toolChoice, { tool: { name: 'weather' } });
    const rr = await client.responses.create({ model: 'claude', input: 'Weather as JSON', text: { format: { type: 'json_schema', name: 'weather', schema, strict: true } } });
    assert.deepEqual(JSON.parse(rr.output_text), { city: 'Paris', temp: 24 });
  });

  test('what Converse cannot do is a 400 unsupported_parameter naming it, and nothing goes upstream', async () => {
    up.reset();
    for (const [path, body, what] of [
      ['/v1/responses', { model: 'claude', input: 'hi', presence_penalty: 0.5 }, /presence_penalty/],
      ['/v1/chat/completions', { model: 'claude', messages: [{ role: 'user', content: 'hi' }], seed: 7 }, /'seed'/],
      [
        '/v1/chat/completions',
        { model: 'claude', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/a.png' } }] }] },
        /image by URL/,
      ],
    ] as const) {
      const res = await post(path, body);
      const e = ((await res.json()) as { error: { code: string; message: string } }).error;
      assert.equal(res.status, 400, `${path} ${JSON.stringify(body)}`);
      assert.equal(e.code, 'unsupported_parameter');
      assert.match(e.message, what);
    }
    assert.equal(up.requests.length, 0);
  });

  test('throttling: a 429 with its retry-after reaches the client; with a retry it is waited for; a 503 falls back to an openai-compatible model', async () => {
    up.reset();
    up.script({ status: 429, errorMessage: 'Too many requests, please wait before trying again.', headers: { 'retry-after': '3' } });
    const res = await post('/v1/chat/completions', { model: 'claude', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(res.status, 429);
    assert.equal(res.headers.get('retry-after'), '3');
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'rate_limit_exceeded');

    up.reset();
    up.script({ status: 429, errorMessage: 'Too many requests', headers: { 'retry-after': '1' } }, { text: 'after the wait' });
    const t0 = Date.now();
    const r = await client.responses.create({ model: 'claude-retry', input: 'hi' });
    assert.equal(r.output_text, 'after the wait');
    assert.ok(Date.now() - t0 >= 900, 'retry-after honoured');
    assert.equal(up.requests.length, 2);
    assert.ok(
      up.requests.every((q) => q.signed),
      'each try is signed afresh',
    );

    up.reset();
    local.reset();
    up.script({ status: 503, errorMessage: 'Bedrock is unable to process your request.' });
    local.script({ text: 'from the local Qwen' });
    const fb = await client.chat.completions.create({ model: 'claude-fb', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(fb.choices[0]!.message.content, 'from the local Qwen');
    assert.equal(up.requests.length, 1);
    assert.equal(local.requests.length, 1);
    assert.equal(local.requests[0]!.body.model, 'qwen-local');
  });

  test('a stream cut mid-way: what came is kept, the client is told it failed; the AWS secret is never in an answer or a log line', async () => {
    up.reset();
    up.script({ text: ['one ', 'two ', 'three'], breakAfter: 3 }, { status: 400, errorMessage: `secret ${CREDS.secretAccessKey} was seen` });
    const res = await post('/v1/chat/completions', { model: 'claude', messages: [{ role: 'user', content: 'hi' }], stream: true });
    assert.equal(res.status, 200);
    const body = await res.text();
    assert.match(body, /"content":"one "/);
    assert.match(body, /"error"/);
    assert.doesNotMatch(body, /three/);
    assert.equal(up.requests.length, 1, 'not tried again once output was sent');
    const refused = await post('/v1/chat/completions', { model: 'claude', messages: [{ role: 'user', content: 'hi' }] });
    const text = await refused.text();
    assert.equal(refused.status, 400);
    assert.match(text, /secret \*\*\* was seen/);
    assert.ok(log.length > 0, 'the log was captured');
    assert.deepEqual(
      log.filter((l) => l.includes(CREDS.secretAccessKey)),
      [],
    );
  });

  test('Chat Completions: reasoning (effort -> a thinking budget in additionalModelRequestFields; reasoning_content) and cached tokens, plain and streamed', async () => {
    up.reset();
    await chatReasoning(client, {
      model: 'claude',
      script: () => up.script({ reasoning: THOUGHT, text: ANSWER }),
      bodies: () => up.requests.map((q) => q.body),
      assertAsked: (body) => assert.deepEqual(body.additionalModelRequestFields, { thinking: { type: 'enabled', budget_tokens: 1024 } }),
      text: true,
      // Converse's usage has no reasoning count
      tokens: 0,
    });
    up.reset();
    // Converse's inputTokens leave the cache reads out: Portico's input counts them in
    await chatCached(client, 'claude', () => up.script({ text: 'Hi.', usage: { inputTokens: 1000, cacheReadInputTokens: 9000, outputTokens: 5 } }), 10000, 9000);
  });

  test('a tools round trip through the Responses API: the function_call_output sent back as a toolResult', async () => {
    up.reset();
    await responsesToolsRoundTrip(
      client,
      'claude',
      () => up.script({ toolUses: [{ toolUseId: 'tooluse_r1', name: 'weather', input: ['{"city":', '"Paris"}'] }] }, { text: 'It is sunny in Paris.' }),
      () => up.requests.at(-1)!.body,
      (body, id) => {
        assert.equal(id, 'tooluse_r1');
        assert.deepEqual(body.messages.slice(1), [
          { role: 'assistant', content: [{ toolUse: { toolUseId: id, name: 'weather', input: { city: 'Paris' } } }] },
          { role: 'user', content: [{ toolResult: { toolUseId: id, content: [{ text: 'sunny, 24 C' }] } }] },
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
