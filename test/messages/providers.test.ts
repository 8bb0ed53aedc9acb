/**
 * /v1/messages served by each native upstream provider (anthropic, gemini, azure-openai, bedrock), driven with
 * Anthropic's official SDK against each provider's mock: a plain answer with the mock's token counts, the same
 * through the SDK's strict stream helpers, a tools round trip whose tool_result reaches the upstream in that
 * provider's own tool-result shape, structured output (output_config.format) and thinking reaching the upstream in
 * its own shape, reasoning back as thinking blocks, cache reads as cache_read_input_tokens, upstream errors (a
 * 429's retry-after, a 400, a 5xx) in Anthropic's shape, and a fallback to a model on another provider (the
 * anthropic model's request is forwarded as the client sent it: test/messages/forwarding.test.ts). One app, four
 * models: the route must not care which engine is behind it.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startAnthropicMock, type AnthropicMock } from '../helpers/anthropic-mock.js';
import { startGeminiMock, type GeminiMock } from '../helpers/gemini-mock.js';
import { startAzureMock, type AzureMock } from '../helpers/azure-mock.js';
import { startBedrockMock, type BedrockMock } from '../helpers/bedrock-mock.js';
import { parseModelConfig } from '../../src/models/config.js';
import { expectAnthropicError, readAnthropicStream } from './helpers.js';

const ANT_KEY = 'sk-ant-msgprov-test-0123456789';
const GEM_KEY = 'AIza-msgprov-test-0123456789';
const AZ_KEY = 'az-msgprov-test-key-0123456789';
const CREDS = { accessKeyId: 'AKIAMSGPROVTEST00000', secretAccessKey: 'bedrock-msgprov-secret/0123456789abcdef' };
const REGION = 'eu-central-1';
process.env.MSGPROV_ANTHROPIC_KEY = ANT_KEY;
process.env.MSGPROV_GEMINI_KEY = GEM_KEY;
process.env.MSGPROV_AZURE_KEY = AZ_KEY;
process.env.AWS_ACCESS_KEY_ID = CREDS.accessKeyId;
process.env.AWS_SECRET_ACCESS_KEY = CREDS.secretAccessKey;
delete process.env.AWS_SESSION_TOKEN;

const WEATHER: Anthropic.Messages.Tool = { name: 'weather', description: 'Weather in a city', input_schema: { type: 'object', properties: { city: { type: 'string' } } } };

/** What differs per provider: how its mock is scripted, and what it received. */
interface Provider {
  model: string;
  /** scripts one plain answer with these token counts */
  answer(text: string, input: number, output: number): void;
  /** scripts a call of `weather` with {city: 'Paris'}, then a text answer */
  toolThenAnswer(text: string): void;
  /** the last request's body the mock received */
  lastBody(): any;
  /** how many requests the mock received */
  count(): number;
  /** whether the last request asked the upstream for a stream (its own streaming call) */
  lastStreamed(): boolean;
  reset(): void;
  /** asserts the second request carried the tool result in the provider's own shape */
  assertToolResult(body: any, callId: string): void;
  /** scripts the answer to a request for structured output: the JSON object `value`, as the provider gives it */
  structured(value: Record<string, unknown>): void;
  /** asserts the request asked for `schema` in the provider's own structured-output shape */
  assertFormat(body: any, schema: Record<string, unknown>): void;
  /** scripts reasoning `thought` (where the provider gives its text), then `text`; THINKING_TOKENS of it where it counts them */
  reasoned(thought: string, text: string): void;
  /** whether the upstream gives its reasoning's text (Azure's Chat Completions gives only its count) */
  reasoningText: boolean;
  /** whether the upstream counts its reasoning tokens */
  reasoningCount: boolean;
  /** asserts the request asked for reasoning in the provider's own shape (the client's budget_tokens BUDGET, max_tokens MAX) */
  assertThinking(body: any): void;
  /** scripts an answer that read `cached` of its input from the provider's prompt cache, `fresh` not */
  cached(text: string, fresh: number, cached: number, output: number): void;
  /** scripts an upstream error of this status (a 429 says to come back in `retryAfter` seconds, in the provider's own way) */
  fail(status: number, message: string, retryAfter?: number): void;
  /** scripts the upstream's "unavailable, try elsewhere" (a 503, Anthropic's 529 overloaded) */
  unavailable(): void;
}

/** thinking asked by the client: its budget, the cap, and the reasoning tokens the mocks report */
const BUDGET = 2000;
const MAX = 4000;
const THINKING_TOKENS = 7;
/** the effort a budget of 2000 is (src/messages/prepare.ts effortOfBudget), for an upstream that takes an effort, not a budget */
const EFFORT = 'low';

const SCHEMA = { type: 'object', properties: { city: { type: 'string' }, temp: { type: 'number' } }, required: ['city', 'temp'], additionalProperties: false };

/** each provider's model falls back to the next provider's */
const FALLBACK: Record<string, string> = { 'm-anthropic': 'm-gemini', 'm-gemini': 'm-bedrock', 'm-bedrock': 'm-azure', 'm-azure': 'm-anthropic' };

describe('/v1/messages in front of each native provider, with the Anthropic SDK', () => {
  let ant: AnthropicMock;
  let gem: GeminiMock;
  let az: AzureMock;
  let bed: BedrockMock;
  let t: TestApp & { url?: string };
  let sdk: Anthropic;
  let key: string;
  let providers: Provider[];
  const post = (body: unknown) =>
    fetch(`${t.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const textOf = (m: Anthropic.Messages.Message) => m.content.map((b) => (b.type === 'text' ? b.text : '')).join('');

  before(async () => {
    [ant, gem, az, bed] = await Promise.all([
      startAnthropicMock({ apiKey: ANT_KEY }),
      startGeminiMock({ apiKey: GEM_KEY }),
      startAzureMock({ apiKey: AZ_KEY }),
      startBedrockMock({ credentials: CREDS, region: REGION }),
    ]);
    const deployments: Record<string, string> = {
      'm-anthropic': `provider: anthropic, base_url: ${ant.url}, upstream_model: claude-test, api_key_env: MSGPROV_ANTHROPIC_KEY`,
      'm-gemini': `provider: gemini, base_url: ${gem.url}, upstream_model: gemini-test, api_key_env: MSGPROV_GEMINI_KEY`,
      'm-azure': `provider: azure-openai, endpoint: ${az.url}, deployment: gpt4o-prod, api_key_env: MSGPROV_AZURE_KEY`,
      'm-bedrock': `provider: bedrock, base_url: ${bed.url}, region: ${REGION}, upstream_model: "anthropic.claude-3-5-haiku-20241022-v1:0"`,
    };
    // each model, and the same deployment with a fallback to another provider's model (m-gemini-fb -> m-bedrock)
    const yaml = `
models:
${Object.entries(deployments)
  .map(([name, d]) => `  - { name: ${name}, ${d}, retries: 0 }\n  - { name: ${name}-fb, ${d}, retries: 0, fallbacks: [${FALLBACK[name]}] }`)
  .join('\n')}
`;
    t = await buildTestApp({ listen: true, models: parseModelConfig(yaml).models });
    key = await t.inferenceKey('alice');
    sdk = new Anthropic({ baseURL: t.url, apiKey: key, maxRetries: 0, timeout: 60_000 });
    providers = [
      {
        model: 'm-anthropic',
        answer: (text, input, output) => ant.script({ text, usage: { input_tokens: input, output_tokens: output } }),
        toolThenAnswer: (text) => ant.script({ toolUses: [{ id: 'toolu_w1', name: 'weather', input: ['{"city":', '"Paris"}'] }] }, { text }),
        lastBody: () => ant.requests.at(-1)!.body,
        count: () => ant.requests.length,
        lastStreamed: () => ant.requests.at(-1)!.body.stream === true,
        reset: () => ant.reset(),
        assertToolResult: (body, id) => {
          assert.equal(id, 'toolu_w1');
          assert.deepEqual(body.messages.at(-1), { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_w1', content: 'sunny, 24 C' }] });
          // forwarded as the client sent it (src/messages/forwarding.ts): the block as the answer gave it, `caller` too
          assert.deepEqual(body.messages.at(-2).content, [{ type: 'tool_use', id: 'toolu_w1', name: 'weather', input: { city: 'Paris' }, caller: { type: 'direct' } }]);
        },
        structured: (value) => ant.script({ text: JSON.stringify(value) }),
        // forwarded: output_config as the client sent it
        assertFormat: (body, schema) => assert.deepEqual(body.output_config, { format: { type: 'json_schema', schema } }),
        reasoned: (thought, text) => ant.script({ thinking: thought, text, usage: { thinking_tokens: THINKING_TOKENS } }),
        reasoningText: true,
        reasoningCount: true,
        assertThinking: (body) => assert.deepEqual(body.thinking, { type: 'enabled', budget_tokens: BUDGET }),
        cached: (text, fresh, cached, output) => ant.script({ text, usage: { input_tokens: fresh, cache_read_input_tokens: cached, output_tokens: output } }),
        fail: (status, message, retryAfter) =>
          ant.script({ status, errorMessage: message, ...(retryAfter !== undefined ? { headers: { 'retry-after': String(retryAfter) } } : {}) }),
        unavailable: () => ant.script({ status: 529, errorMessage: 'Overloaded' }),
      },
      {
        model: 'm-gemini',
        answer: (text, input, output) => gem.script({ text, usage: { promptTokenCount: input, candidatesTokenCount: output, totalTokenCount: input + output } }),
        toolThenAnswer: (text) => gem.script({ calls: [{ name: 'weather', args: { city: 'Paris' } }] }, { text }),
        lastBody: () => gem.requests.at(-1)!.body,
        count: () => gem.requests.length,
        lastStreamed: () => gem.requests.at(-1)!.path.endsWith(':streamGenerateContent'),
        reset: () => gem.reset(),
        assertToolResult: (body) => {
          // Gemini matches a result to its call by name: Portico looks the name up from the id it made
          assert.deepEqual(body.contents.at(-1), { role: 'user', parts: [{ functionResponse: { name: 'weather', response: { output: 'sunny, 24 C' } } }] });
          assert.deepEqual(body.contents.at(-2), { role: 'model', parts: [{ functionCall: { name: 'weather', args: { city: 'Paris' } } }] });
        },
        structured: (value) => gem.script({ text: JSON.stringify(value) }),
        assertFormat: (body, schema) => {
          assert.equal(body.generationConfig.responseMimeType, 'application/json');
          assert.deepEqual(body.generationConfig.responseJsonSchema, schema);
        },
        reasoned: (thought, text) =>
          gem.script({ thought, text, usage: { promptTokenCount: 10, candidatesTokenCount: 3, thoughtsTokenCount: THINKING_TOKENS, totalTokenCount: 13 + THINKING_TOKENS } }),
        reasoningText: true,
        reasoningCount: true,
        assertThinking: (body) => assert.deepEqual(body.generationConfig.thinkingConfig, { thinkingBudget: BUDGET, includeThoughts: true }),
        // promptTokenCount counts the cached part too
        cached: (text, fresh, cached, output) =>
          gem.script({
            text,
            usage: { promptTokenCount: fresh + cached, cachedContentTokenCount: cached, candidatesTokenCount: output, totalTokenCount: fresh + cached + output },
          }),
        // Google says when to come back in the error's RetryInfo, not in a header
        fail: (status, message, retryAfter) => gem.script({ status, errorMessage: message, ...(retryAfter !== undefined ? { retryDelay: `${retryAfter}s` } : {}) }),
        unavailable: () => gem.script({ status: 503, errorMessage: 'The model is overloaded.' }),
      },
      {
        model: 'm-azure',
        answer: (text, input, output) => az.script({ text, usage: { prompt_tokens: input, completion_tokens: output } }),
        toolThenAnswer: (text) => az.script({ toolCalls: [{ id: 'call_w1', name: 'weather', arguments: ['{"city":', '"Paris"}'] }] }, { text }),
        lastBody: () => az.requests.at(-1)!.body,
        count: () => az.requests.length,
        lastStreamed: () => az.requests.at(-1)!.body.stream === true,
        reset: () => az.reset(),
        assertToolResult: (body, id) => {
          assert.equal(id, 'call_w1');
          const tool = body.messages.find((m: any) => m.role === 'tool');
          assert.ok(tool, JSON.stringify(body.messages));
          assert.equal(tool.tool_call_id, 'call_w1');
          assert.equal(tool.content, 'sunny, 24 C');
          const asked = body.messages.find((m: any) => m.role === 'assistant');
          assert.equal(asked.tool_calls[0].id, 'call_w1');
          assert.deepEqual(JSON.parse(asked.tool_calls[0].function.arguments), { city: 'Paris' });
        },
        structured: (value) => az.script({ text: JSON.stringify(value) }),
        assertFormat: (body, schema) => assert.deepEqual(body.response_format, { type: 'json_schema', json_schema: { name: 'output', schema, strict: true } }),
        // Azure's Chat Completions gives no reasoning text, only its count
        reasoned: (_thought, text) => az.script({ text, usage: { prompt_tokens: 10, completion_tokens: 3 + THINKING_TOKENS, reasoning_tokens: THINKING_TOKENS } }),
        reasoningText: false,
        reasoningCount: true,
        assertThinking: (body) => {
          assert.equal(body.reasoning_effort, EFFORT);
          // max_tokens as a reasoning deployment takes it (it refuses max_tokens)
          assert.deepEqual([body.max_completion_tokens, body.max_tokens], [MAX, undefined]);
        },
        // prompt_tokens counts the cached part too
        cached: (text, fresh, cached, output) => az.script({ text, usage: { prompt_tokens: fresh + cached, completion_tokens: output, cached_tokens: cached } }),
        fail: (status, message, retryAfter) =>
          az.script({ status, errorMessage: message, ...(retryAfter !== undefined ? { headers: { 'retry-after': String(retryAfter) } } : {}) }),
        unavailable: () => az.script({ status: 503, errorMessage: 'Service Unavailable' }),
      },
      {
        model: 'm-bedrock',
        answer: (text, input, output) => bed.script({ text, usage: { inputTokens: input, outputTokens: output, totalTokens: input + output } }),
        toolThenAnswer: (text) => bed.script({ toolUses: [{ toolUseId: 'tooluse_w1', name: 'weather', input: ['{"city":', '"Paris"}'] }] }, { text }),
        lastBody: () => bed.requests.at(-1)!.body,
        count: () => bed.requests.length,
        lastStreamed: () => bed.requests.at(-1)!.stream,
        reset: () => bed.reset(),
        assertToolResult: (body, id) => {
          assert.equal(id, 'tooluse_w1');
          assert.deepEqual(body.messages.at(-1), { role: 'user', content: [{ toolResult: { toolUseId: 'tooluse_w1', content: [{ text: 'sunny, 24 C' }] } }] });
          assert.deepEqual(body.messages.at(-2), { role: 'assistant', content: [{ toolUse: { toolUseId: 'tooluse_w1', name: 'weather', input: { city: 'Paris' } } }] });
        },
        // Converse has no JSON output parameter: the schema is a tool the model is made to call, its input the answer
        structured: (value) => bed.script((body) => ({ toolUses: [{ name: body.toolConfig.tools.at(-1).toolSpec.name, input: value }] })),
        assertFormat: (body, schema) => {
          const tool = body.toolConfig.tools.at(-1).toolSpec;
          assert.deepEqual(tool.inputSchema, { json: schema });
          assert.deepEqual(body.toolConfig.toolChoice, { tool: { name: tool.name } });
        },
        reasoned: (thought, text) => bed.script({ reasoning: thought, text }),
        reasoningText: true,
        // Converse's usage has no reasoning count
        reasoningCount: false,
        assertThinking: (body) => assert.deepEqual(body.additionalModelRequestFields, { thinking: { type: 'enabled', budget_tokens: BUDGET } }),
        // inputTokens counts only what was not read from the cache
        cached: (text, fresh, cached, output) => bed.script({ text, usage: { inputTokens: fresh, cacheReadInputTokens: cached, outputTokens: output } }),
        fail: (status, message, retryAfter) =>
          bed.script({ status, errorMessage: message, ...(retryAfter !== undefined ? { headers: { 'retry-after': String(retryAfter) } } : {}) }),
        unavailable: () => bed.script({ status: 503, errorMessage: 'Service Unavailable' }),
      },
    ];
  });
  after(async () => {
    await t?.close();
    await Promise.all([ant?.close(), gem?.close(), az?.close(), bed?.close()]);
  });

  test('messages.create: the upstream answer as a text block, its token counts as usage', async () => {
    for (const p of providers) {
      p.reset();
      p.answer(`Bonjour from ${p.model}.`, 123, 45);
      const m = await sdk.messages.create({ model: p.model, max_tokens: 100, system: 'Answer in French.', messages: [{ role: 'user', content: 'Hello' }] });
      assert.equal(m.type, 'message', p.model);
      assert.equal(m.role, 'assistant');
      assert.equal(m.model, p.model);
      assert.deepEqual(
        m.content.map((b) => (b.type === 'text' ? b.text : b.type)),
        [`Bonjour from ${p.model}.`],
        p.model,
      );
      assert.equal(m.stop_reason, 'end_turn', p.model);
      assert.deepEqual([m.usage.input_tokens, m.usage.output_tokens], [123, 45], p.model);
      assert.equal(p.lastStreamed(), false, `${p.model}: one answer asked for`);
    }
  });

  test('messages.stream: the strict helpers assemble the same text', async () => {
    for (const p of providers) {
      p.reset();
      p.answer(`Streamed from ${p.model}.`, 12, 5);
      const stream = sdk.messages.stream({ model: p.model, max_tokens: 100, messages: [{ role: 'user', content: 'Hello' }] });
      let deltas = '';
      stream.on('text', (d) => (deltas += d));
      const m = await stream.finalMessage();
      assert.equal(deltas, `Streamed from ${p.model}.`, p.model);
      assert.equal(m.content.length, 1, p.model);
      assert.equal(m.content[0]!.type === 'text' && m.content[0]!.text, `Streamed from ${p.model}.`, p.model);
      assert.equal(m.stop_reason, 'end_turn', p.model);
      assert.equal(m.usage.output_tokens, 5, p.model);
      // streamed end to end: the upstream was asked through its own streaming call, not buffered then replayed
      assert.equal(p.lastStreamed(), true, p.model);
    }
  });

  test("a tools round trip: tool_use with the parsed input, then the tool_result in the provider's own shape", async () => {
    for (const p of providers) {
      p.reset();
      p.toolThenAnswer('It is sunny in Paris.');
      const messages: Anthropic.Messages.MessageParam[] = [{ role: 'user', content: 'Weather in Paris?' }];
      const first = await sdk.messages.create({ model: p.model, max_tokens: 100, tools: [WEATHER], messages });
      assert.equal(first.stop_reason, 'tool_use', p.model);
      const use = first.content.find((b): b is Anthropic.Messages.ToolUseBlock => b.type === 'tool_use');
      assert.ok(use, `${p.model}: ${JSON.stringify(first.content)}`);
      assert.equal(use.name, 'weather');
      assert.deepEqual(use.input, { city: 'Paris' }, p.model);
      messages.push({ role: 'assistant', content: first.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny, 24 C' }] });
      const second = await sdk.messages.create({ model: p.model, max_tokens: 100, tools: [WEATHER], messages });
      assert.equal(second.stop_reason, 'end_turn', p.model);
      assert.deepEqual(
        second.content.map((b) => (b.type === 'text' ? b.text : b.type)),
        ['It is sunny in Paris.'],
        p.model,
      );
      p.assertToolResult(p.lastBody(), use.id);
    }
  });

  test('structured output: output_config.format reaches the upstream in its own shape, the JSON comes back as the text (create and stream)', async () => {
    for (const p of providers) {
      for (const stream of [false, true]) {
        const value = { city: 'Paris', temp: stream ? 25 : 24 };
        p.reset();
        p.structured(value);
        const params = {
          model: p.model,
          max_tokens: 100,
          output_config: { format: { type: 'json_schema' as const, schema: SCHEMA } },
          messages: [{ role: 'user' as const, content: 'Weather as JSON' }],
        };
        const m = stream ? await sdk.messages.stream(params).finalMessage() : await sdk.messages.create(params);
        const what = `${p.model} stream=${stream}`;
        assert.deepEqual(
          m.content.map((b) => b.type),
          ['text'],
          what,
        );
        assert.deepEqual(JSON.parse(textOf(m)), value, what);
        assert.equal(m.stop_reason, 'end_turn', what);
        p.assertFormat(p.lastBody(), SCHEMA);
        assert.equal(p.lastStreamed(), stream, what);
      }
    }
  });

  test('thinking: budget_tokens reaches the upstream in its own shape; its reasoning comes back as a thinking block (create) and thinking_delta events (stream), its count as thinking_tokens', async () => {
    for (const p of providers) {
      p.reset();
      p.reasoned('The user greets; answer briefly.', 'Hello!');
      const params = { model: p.model, max_tokens: MAX, thinking: { type: 'enabled' as const, budget_tokens: BUDGET }, messages: [{ role: 'user' as const, content: 'Hi' }] };
      const m = await sdk.messages.create(params);
      p.assertThinking(p.lastBody());
      const blocks = m.content.map((b) => (b.type === 'thinking' ? `thinking:${b.thinking}` : b.type === 'text' ? b.text : b.type));
      assert.deepEqual(blocks, [...(p.reasoningText ? ['thinking:The user greets; answer briefly.'] : []), 'Hello!'], p.model);
      assert.equal(m.usage.output_tokens_details?.thinking_tokens, p.reasoningCount ? THINKING_TOKENS : undefined, p.model);

      p.reset();
      p.reasoned('The user greets; answer briefly.', 'Hello!');
      const res = await post({ ...params, stream: true });
      const events = await readAnthropicStream(res);
      p.assertThinking(p.lastBody());
      assert.equal(p.lastStreamed(), true, p.model);
      const thinking = events
        .filter((e) => e.type === 'content_block_delta' && e.delta.type === 'thinking_delta')
        .map((e) => e.delta.thinking)
        .join('');
      assert.equal(thinking, p.reasoningText ? 'The user greets; answer briefly.' : '', p.model);
      const starts = events.filter((e) => e.type === 'content_block_start').map((e) => e.content_block.type);
      assert.deepEqual(starts, [...(p.reasoningText ? ['thinking'] : []), 'text'], p.model);
      const end = events.find((e) => e.type === 'message_delta');
      assert.equal(end.usage.output_tokens_details?.thinking_tokens, p.reasoningCount ? THINKING_TOKENS : undefined, p.model);
    }
  });

  test('cache reads: the provider’s cached count as cache_read_input_tokens, input_tokens without it (create and stream)', async () => {
    for (const p of providers) {
      for (const stream of [false, true]) {
        p.reset();
        p.cached('From the cache.', 200, 8000, 30);
        const params = { model: p.model, max_tokens: 100, messages: [{ role: 'user' as const, content: 'Hello again' }] };
        const m = stream ? await sdk.messages.stream(params).finalMessage() : await sdk.messages.create(params);
        const what = `${p.model} stream=${stream}`;
        assert.equal(textOf(m), 'From the cache.', what);
        assert.deepEqual([m.usage.input_tokens, m.usage.cache_read_input_tokens, m.usage.output_tokens], [200, 8000, 30], what);
      }
    }
  });

  test('a fallback to another provider: the deployment unavailable, the next provider’s model answers through /v1/messages (create and stream)', async () => {
    for (const p of providers) {
      const next = providers.find((x) => x.model === FALLBACK[p.model])!;
      for (const stream of [false, true]) {
        const what = `${p.model} -> ${next.model} stream=${stream}`;
        p.reset();
        next.reset();
        p.unavailable();
        next.answer(`Answered by ${next.model}.`, 11, 4);
        const params = { model: `${p.model}-fb`, max_tokens: 100, messages: [{ role: 'user' as const, content: 'Hello' }] };
        const m = stream ? await sdk.messages.stream(params).finalMessage() : await sdk.messages.create(params);
        assert.equal(textOf(m), `Answered by ${next.model}.`, what);
        assert.equal(m.model, `${p.model}-fb`, what);
        assert.deepEqual([m.usage.input_tokens, m.usage.output_tokens], [11, 4], what);
        // one try at the model's own deployment, then the fallback's, through its own streaming call or not
        assert.equal(next.lastStreamed(), stream, what);
        assert.deepEqual([p.count(), next.count()], [1, 1], what);
      }
    }
  });

  test('what a provider cannot do is a 400 naming it, and nothing goes upstream: structured output with thinking on Bedrock', async () => {
    const p = providers.find((x) => x.model === 'm-bedrock')!;
    p.reset();
    const res = await post({
      model: p.model,
      max_tokens: MAX,
      thinking: { type: 'enabled', budget_tokens: BUDGET },
      output_config: { format: { type: 'json_schema', schema: SCHEMA } },
      messages: [{ role: 'user', content: 'Weather as JSON' }],
    });
    const err = await expectAnthropicError(res, 400, 'invalid_request_error');
    assert.match(err.message, /Structured output .* with reasoning is not supported by this model/);
    assert.equal(p.count(), 0);
  });

  // last: a 429 leaves each model's deployment alone for its retry-after
  test('upstream errors in Anthropic’s shape: a 429 with its retry-after, a 400 as invalid_request_error, a 5xx as api_error (create and stream)', async () => {
    const cases: Array<{ status: number; retryAfter?: number; want: number; type: string; sdkError: abstract new (...args: never[]) => InstanceType<typeof Anthropic.APIError> }> =
      [
        { status: 400, want: 400, type: 'invalid_request_error', sdkError: Anthropic.BadRequestError },
        { status: 500, want: 502, type: 'api_error', sdkError: Anthropic.InternalServerError },
        // last: the deployment is left alone for its retry-after (the router waits it out before the stream's try)
        { status: 429, retryAfter: 2, want: 429, type: 'rate_limit_error', sdkError: Anthropic.RateLimitError },
      ];
    for (const p of providers) {
      for (const c of cases) {
        const what = `${p.model} upstream ${c.status}`;
        p.reset();
        p.fail(c.status, `upstream says ${c.status}`, c.retryAfter);
        const err = await sdk.messages.create({ model: p.model, max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }).then(
          () => assert.fail(`${what}: answered`),
          (e: unknown) => e,
        );
        assert.ok(err instanceof c.sdkError, `${what}: ${String(err)}`);
        assert.equal(err.status, c.want, what);
        assert.equal((err.error as { error?: { type?: string } }).error?.type, c.type, what);
        assert.equal(err.headers?.get('retry-after') ?? undefined, c.retryAfter === undefined ? undefined : String(c.retryAfter), what);
        // an upstream's refusal of the request says why
        if (c.status === 400) assert.match((err.error as { error: { message: string } }).error.message, /upstream says 400/, what);
        // a stream refused before its first event: a plain HTTP error, the same
        p.reset();
        p.fail(c.status, `upstream says ${c.status}`, c.retryAfter);
        const res = await post({ model: p.model, max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'hi' }] });
        const retryAfter = res.headers.get('retry-after') ?? undefined;
        await expectAnthropicError(res, c.want, c.type);
        assert.equal(retryAfter, c.retryAfter === undefined ? undefined : String(c.retryAfter), `${what} (stream)`);
      }
    }
  });
});
