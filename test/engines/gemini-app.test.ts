/**
 * The gemini provider as a deployment of Portico's models, driven with the official `openai` SDK through
 * /v1/responses, /v1/chat/completions and /v1/embeddings against a mock of Gemini's wire (test/helpers/gemini-mock.ts):
 * plain and streamed answers, a tools round trip (ids Portico made, names looked up on the way back), structured
 * output, reasoning, cached-token usage charged at the model's prices in the ledger, safety blocks, a 429's wait,
 * a fallback to an openai-compatible deployment, and embeddings.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startGeminiMock, type GeminiMock } from '../helpers/gemini-mock.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { parseModelConfig } from '../../src/models/config.js';
import { usageRows } from '../helpers/usage.js';
import { ANSWER, THOUGHT, chatCached, chatReasoning, responsesToolsRoundTrip, upstreamRefusals } from '../helpers/provider-matrix.js';

const KEY = 'AIza-app-test-0123456789';
process.env.GEMINI_APP_TEST_KEY = KEY;

describe('gemini deployments through /v1/responses, /v1/chat/completions and /v1/embeddings', () => {
  let up: GeminiMock;
  let local: ScriptedUpstream;
  let t: TestApp & { url?: string };
  let key: string;
  let client: OpenAI;
  const post = (path: string, body: unknown) =>
    fetch(t.url + path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const usage = (model: string) => usageRows(t, model);

  before(async () => {
    up = await startGeminiMock({ apiKey: KEY });
    local = await startScriptedUpstream();
    const g = `provider: gemini, base_url: ${up.url}, upstream_model: gemini-test, api_key_env: GEMINI_APP_TEST_KEY`;
    const yaml = `
models:
  - { name: gem, ${g}, retries: 0, pricing: { input_per_million: 3, output_per_million: 15, cached_input_per_million: 0.3 } }
  - { name: gem-retry, ${g}, retries: 1 }
  - { name: gem-fb, ${g}, retries: 0, fallbacks: [local] }
  - { name: local, provider: openai-compatible, base_url: ${local.url}, upstream_model: qwen-local }
  - { name: gem-embed, type: embeddings, provider: gemini, base_url: ${up.url}, upstream_model: text-embedding-004, api_key_env: GEMINI_APP_TEST_KEY }
`;
    t = await buildTestApp({ listen: true, models: parseModelConfig(yaml).models });
    key = await t.inferenceKey('alice');
    client = new OpenAI({ apiKey: key, baseURL: t.url + '/v1', maxRetries: 0 });
  });
  after(async () => {
    await t.close();
    await up.close();
    await local.close();
  });

  test('Responses, not streamed: instructions as systemInstruction, generateContent, cached tokens charged at the cached price', async () => {
    up.reset();
    up.script({ text: 'Bonjour.', usage: { promptTokenCount: 10000, cachedContentTokenCount: 9000, candidatesTokenCount: 100, totalTokenCount: 10100 } });
    const r = await client.responses.create({ model: 'gem', instructions: 'Answer in French.', input: 'Hello' });
    assert.equal(r.status, 'completed');
    assert.equal(r.output_text, 'Bonjour.');
    assert.deepEqual([r.usage?.input_tokens, r.usage?.input_tokens_details.cached_tokens, r.usage?.output_tokens], [10000, 9000, 100]);
    const q = up.requests[0]!;
    assert.equal(q.path, '/v1beta/models/gemini-test:generateContent');
    assert.deepEqual(q.body.systemInstruction, { parts: [{ text: 'Answer in French.' }] });
    assert.equal(q.headers['x-goog-api-key'], KEY);
    const rows = (await usage('gem')).filter((x) => x.operation === 'responses');
    assert.equal(rows.length, 1);
    assert.deepEqual([rows[0]!.input_tokens, rows[0]!.output_tokens], [10000, 100]);
    // 1000 fresh input tokens at 3 per million, 9000 cached at 0.3, 100 output at 15: 0.0072 credits
    assert.equal(rows[0]!.cost, 0.0072);
  });

  test('Responses, streamed, with reasoning: a reasoning item from the thought parts, then the text; effort -> thinkingConfig', async () => {
    up.reset();
    up.script({ thought: 'Two and two make four.', chunks: 2, text: 'Four.', usage: { promptTokenCount: 20, candidatesTokenCount: 18, thoughtsTokenCount: 12 } });
    const stream = await client.responses.create({ model: 'gem', input: 'What is 2+2?', reasoning: { effort: 'low' }, stream: true });
    let final: OpenAI.Responses.Response | undefined;
    for await (const ev of stream) if (ev.type === 'response.completed') final = ev.response;
    assert.ok(final);
    assert.equal(up.requests[0]!.path, '/v1beta/models/gemini-test:streamGenerateContent');
    assert.deepEqual(up.requests[0]!.body.generationConfig.thinkingConfig, { thinkingBudget: 1024, includeThoughts: true });
    assert.deepEqual(
      final.output.map((o) => o.type),
      ['reasoning', 'message'],
    );
    const message = final.output[1] as OpenAI.Responses.ResponseOutputMessage;
    assert.deepEqual(
      message.content.map((c) => (c.type === 'output_text' ? c.text : '')),
      ['Four.'],
    );
    assert.deepEqual([final.usage?.output_tokens, final.usage?.output_tokens_details.reasoning_tokens], [30, 12]);
  });

  test('Chat Completions: plain and streamed; SAFETY and a blocked prompt are finish_reason content_filter (an incomplete response in the Responses API)', async () => {
    up.reset();
    up.script({ text: 'Hi there.' }, { text: 'one two three', chunks: 3 }, { text: '', finishReason: 'SAFETY' }, { blockReason: 'PROHIBITED_CONTENT' });
    const r = await client.chat.completions.create({ model: 'gem', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.choices[0]!.message.content, 'Hi there.');
    assert.equal(r.choices[0]!.finish_reason, 'stop');
    const s = await client.chat.completions.create({ model: 'gem', messages: [{ role: 'user', content: 'count' }], stream: true, stream_options: { include_usage: true } });
    let text = '';
    let pieces = 0;
    for await (const c of s) {
      const d = c.choices[0]?.delta?.content;
      if (d) {
        text += d;
        pieces++;
      }
    }
    assert.equal([text, pieces].join('|'), 'one two three|3');
    const refused = await client.chat.completions.create({ model: 'gem', messages: [{ role: 'user', content: 'bad' }] });
    assert.equal(refused.choices[0]!.finish_reason, 'content_filter');
    const rr = await client.responses.create({ model: 'gem', input: 'bad' });
    assert.equal(rr.status, 'incomplete');
    assert.deepEqual(rr.incomplete_details, { reason: 'content_filter' });
  });

  test('a tools round trip: the call with an id Portico made, its result sent back as a functionResponse named after the call', async () => {
    up.reset();
    up.script({ calls: [{ name: 'weather', args: { city: 'Paris' } }] }, { text: 'It is sunny in Paris.' });
    const tools: OpenAI.Chat.ChatCompletionTool[] = [{ type: 'function', function: { name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Paris?' }];
    const first = await client.chat.completions.create({ model: 'gem', messages, tools, tool_choice: 'required' });
    const call = first.choices[0]!.message.tool_calls![0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    assert.equal(first.choices[0]!.finish_reason, 'tool_calls');
    assert.match(call.id, /^call_/);
    assert.deepEqual([call.function.name, JSON.parse(call.function.arguments)], ['weather', { city: 'Paris' }]);
    assert.deepEqual(up.requests[0]!.body.toolConfig, { functionCallingConfig: { mode: 'ANY' } });
    assert.deepEqual(up.requests[0]!.body.tools[0].functionDeclarations[0], {
      name: 'weather',
      parametersJsonSchema: { type: 'object', properties: { city: { type: 'string' } } },
    });
    messages.push(first.choices[0]!.message, { role: 'tool', tool_call_id: call.id, content: 'sunny, 24 C' });
    const second = await client.chat.completions.create({ model: 'gem', messages, tools });
    assert.equal(second.choices[0]!.message.content, 'It is sunny in Paris.');
    assert.deepEqual(up.requests[1]!.body.contents, [
      { role: 'user', parts: [{ text: 'Weather in Paris?' }] },
      { role: 'model', parts: [{ functionCall: { name: 'weather', args: { city: 'Paris' } } }] },
      { role: 'user', parts: [{ functionResponse: { name: 'weather', response: { output: 'sunny, 24 C' } } }] },
    ]);

    // the same through the Responses API, streamed
    up.script({ calls: [{ name: 'weather', args: { city: 'Oslo' } }] });
    const rs = await client.responses.create({
      model: 'gem',
      input: 'Weather in Oslo?',
      tools: [{ type: 'function', name: 'weather', parameters: null, strict: false }],
      stream: true,
    });
    let done: OpenAI.Responses.Response | undefined;
    for await (const ev of rs) if (ev.type === 'response.completed') done = ev.response;
    const fc = done!.output.find((o) => o.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall;
    assert.deepEqual([fc.name, JSON.parse(fc.arguments)], ['weather', { city: 'Oslo' }]);
  });

  test('structured output: response_format json_schema (Chat Completions) and text.format (Responses) -> responseJsonSchema', async () => {
    up.reset();
    up.script({ text: '{"city":"Paris","temp":24}' }, { text: ['{"city":"Paris",', '"temp":24}'] });
    const schema = { type: 'object', properties: { city: { type: 'string' }, temp: { type: 'number' } }, required: ['city', 'temp'], additionalProperties: false };
    const r = await client.chat.completions.create({
      model: 'gem',
      messages: [{ role: 'user', content: 'Weather as JSON' }],
      response_format: { type: 'json_schema', json_schema: { name: 'weather', schema, strict: true } },
    });
    assert.deepEqual(JSON.parse(r.choices[0]!.message.content!), { city: 'Paris', temp: 24 });
    assert.deepEqual(up.requests[0]!.body.generationConfig, { responseMimeType: 'application/json', responseJsonSchema: schema });
    const rr = await client.responses.create({
      model: 'gem',
      input: 'Weather as JSON',
      text: { format: { type: 'json_schema', name: 'weather', schema, strict: true } },
      stream: false,
    });
    assert.deepEqual(JSON.parse(rr.output_text), { city: 'Paris', temp: 24 });
  });

  test('what Gemini cannot take is a 400 unsupported_parameter naming it, and nothing goes upstream', async () => {
    up.reset();
    for (const [path, body, what] of [
      ['/v1/chat/completions', { model: 'gem', messages: [{ role: 'user', content: 'hi', name: 'bob' }] }, /name/],
      ['/v1/chat/completions', { model: 'gem', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/picture' } }] }] }, /extension/],
      [
        '/v1/responses',
        {
          model: 'gem',
          input: [
            {
              role: 'user',
              content: [
                { type: 'input_image', image_url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'low' },
                { type: 'input_image', image_url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'high' },
              ],
            },
          ],
        },
        /detail/,
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

  test("upstream errors: a 429's wait (its RetryInfo) reaches the client; with a retry it is waited for; 503 falls back to an openai-compatible model", async () => {
    up.reset();
    up.script({ status: 429, errorMessage: 'Resource has been exhausted (e.g. check quota).', retryDelay: '3s' });
    const res = await post('/v1/chat/completions', { model: 'gem', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(res.status, 429);
    assert.equal(res.headers.get('retry-after'), '3');
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'rate_limit_exceeded');

    up.reset();
    up.script({ status: 429, errorMessage: 'Quota', headers: { 'retry-after': '1' } }, { text: 'after the wait' });
    const t0 = Date.now();
    const r = await client.responses.create({ model: 'gem-retry', input: 'hi' });
    assert.equal(r.output_text, 'after the wait');
    assert.ok(Date.now() - t0 >= 900, 'retry-after honoured');
    assert.equal(up.requests.length, 2);

    up.reset();
    local.reset();
    up.script({ status: 503, errorMessage: 'The model is overloaded. Please try again later.' });
    local.script({ text: 'from the local Qwen' });
    const fb = await client.chat.completions.create({ model: 'gem-fb', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(fb.choices[0]!.message.content, 'from the local Qwen');
    assert.equal(up.requests.length, 1);
    assert.equal(local.requests.length, 1);
  });

  test('embeddings through /v1/embeddings: batchEmbedContents, dimensions, usage; token arrays a 400', async () => {
    up.reset();
    const r = await client.embeddings.create({ model: 'gem-embed', input: ['hello', 'world!'], dimensions: 6 });
    assert.equal(r.data.length, 2);
    assert.equal(r.data[0]!.embedding.length, 6);
    assert.ok(r.usage.prompt_tokens > 0);
    assert.equal(up.requests[0]!.path, '/v1beta/models/text-embedding-004:batchEmbedContents');
    assert.equal(up.requests[0]!.body.requests[1].outputDimensionality, 6);
    const res = await post('/v1/embeddings', { model: 'gem-embed', input: [[1, 2, 3]] });
    assert.equal(res.status, 400);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'unsupported_parameter');
    assert.equal(up.requests.length, 1);
  });

  test('Chat Completions: reasoning (effort -> thinkingConfig; reasoning_content, reasoning_tokens) and cached tokens, plain and streamed', async () => {
    up.reset();
    await chatReasoning(client, {
      model: 'gem',
      script: () => up.script({ thought: THOUGHT, text: ANSWER, usage: { promptTokenCount: 20, candidatesTokenCount: 18, thoughtsTokenCount: 12 } }),
      bodies: () => up.requests.map((q) => q.body),
      assertAsked: (body) => assert.deepEqual(body.generationConfig.thinkingConfig, { thinkingBudget: 1024, includeThoughts: true }),
      text: true,
      tokens: 12,
    });
    up.reset();
    await chatCached(
      client,
      'gem',
      () => up.script({ text: 'Hi.', usage: { promptTokenCount: 10000, cachedContentTokenCount: 9000, candidatesTokenCount: 5, totalTokenCount: 10005 } }),
      10000,
      9000,
    );
  });

  test('a tools round trip through the Responses API: the function_call_output sent back as a functionResponse named after the call', async () => {
    up.reset();
    await responsesToolsRoundTrip(
      client,
      'gem',
      () => up.script({ calls: [{ name: 'weather', args: { city: 'Paris' } }] }, { text: 'It is sunny in Paris.' }),
      () => up.requests.at(-1)!.body,
      (body) => {
        assert.deepEqual(body.contents.slice(1), [
          { role: 'model', parts: [{ functionCall: { name: 'weather', args: { city: 'Paris' } } }] },
          { role: 'user', parts: [{ functionResponse: { name: 'weather', response: { output: 'sunny, 24 C' } } }] },
        ]);
      },
    );
  });

  test('upstream errors through both APIs: a 400 is a 400 invalid_request_error with its message, a 500 a 502, a 429 a 429 with its wait (RetryInfo) as retry-after', async () => {
    up.reset();
    await upstreamRefusals(post, 'gem', (status, message, retryAfter) =>
      up.script({ status, errorMessage: message, ...(retryAfter !== undefined ? { retryDelay: `${retryAfter}s` } : {}) }),
    );
  });
});
