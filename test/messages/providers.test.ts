/**
 * /v1/messages served by each native upstream provider (anthropic, gemini, azure-openai, bedrock), driven with
 * Anthropic's official SDK against each provider's mock: a plain answer with the mock's token counts, the same
 * through the SDK's strict stream helpers, and a tools round trip whose tool_result reaches the upstream in that
 * provider's own tool-result shape (the anthropic model's request is forwarded as the client sent it:
 * test/messages/forwarding.test.ts). One app, four models: the route must not care which engine is behind it.
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
  /** whether the last request asked the upstream for a stream (its own streaming call) */
  lastStreamed(): boolean;
  reset(): void;
  /** asserts the second request carried the tool result in the provider's own shape */
  assertToolResult(body: any, callId: string): void;
}

describe('/v1/messages in front of each native provider, with the Anthropic SDK', () => {
  let ant: AnthropicMock;
  let gem: GeminiMock;
  let az: AzureMock;
  let bed: BedrockMock;
  let t: TestApp & { url?: string };
  let sdk: Anthropic;
  let providers: Provider[];

  before(async () => {
    [ant, gem, az, bed] = await Promise.all([
      startAnthropicMock({ apiKey: ANT_KEY }),
      startGeminiMock({ apiKey: GEM_KEY }),
      startAzureMock({ apiKey: AZ_KEY }),
      startBedrockMock({ credentials: CREDS, region: REGION }),
    ]);
    const yaml = `
models:
  - { name: m-anthropic, provider: anthropic, base_url: ${ant.url}, upstream_model: claude-test, api_key_env: MSGPROV_ANTHROPIC_KEY, retries: 0 }
  - { name: m-gemini, provider: gemini, base_url: ${gem.url}, upstream_model: gemini-test, api_key_env: MSGPROV_GEMINI_KEY, retries: 0 }
  - { name: m-azure, provider: azure-openai, endpoint: ${az.url}, deployment: gpt4o-prod, api_key_env: MSGPROV_AZURE_KEY, retries: 0 }
  - { name: m-bedrock, provider: bedrock, base_url: ${bed.url}, region: ${REGION}, upstream_model: "anthropic.claude-3-5-haiku-20241022-v1:0", retries: 0 }
`;
    t = await buildTestApp({ listen: true, models: parseModelConfig(yaml).models });
    sdk = new Anthropic({ baseURL: t.url, apiKey: await t.inferenceKey('alice'), maxRetries: 0, timeout: 60_000 });
    providers = [
      {
        model: 'm-anthropic',
        answer: (text, input, output) => ant.script({ text, usage: { input_tokens: input, output_tokens: output } }),
        toolThenAnswer: (text) => ant.script({ toolUses: [{ id: 'toolu_w1', name: 'weather', input: ['{"city":', '"Paris"}'] }] }, { text }),
        lastBody: () => ant.requests.at(-1)!.body,
        lastStreamed: () => ant.requests.at(-1)!.body.stream === true,
        reset: () => ant.reset(),
        assertToolResult: (body, id) => {
          assert.equal(id, 'toolu_w1');
          assert.deepEqual(body.messages.at(-1), { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_w1', content: 'sunny, 24 C' }] });
          // forwarded as the client sent it (src/messages/forwarding.ts): the block as the answer gave it, `caller` too
          assert.deepEqual(body.messages.at(-2).content, [{ type: 'tool_use', id: 'toolu_w1', name: 'weather', input: { city: 'Paris' }, caller: { type: 'direct' } }]);
        },
      },
      {
        model: 'm-gemini',
        answer: (text, input, output) => gem.script({ text, usage: { promptTokenCount: input, candidatesTokenCount: output, totalTokenCount: input + output } }),
        toolThenAnswer: (text) => gem.script({ calls: [{ name: 'weather', args: { city: 'Paris' } }] }, { text }),
        lastBody: () => gem.requests.at(-1)!.body,
        lastStreamed: () => gem.requests.at(-1)!.path.endsWith(':streamGenerateContent'),
        reset: () => gem.reset(),
        assertToolResult: (body) => {
          // Gemini matches a result to its call by name: Portico looks the name up from the id it made
          assert.deepEqual(body.contents.at(-1), { role: 'user', parts: [{ functionResponse: { name: 'weather', response: { output: 'sunny, 24 C' } } }] });
          assert.deepEqual(body.contents.at(-2), { role: 'model', parts: [{ functionCall: { name: 'weather', args: { city: 'Paris' } } }] });
        },
      },
      {
        model: 'm-azure',
        answer: (text, input, output) => az.script({ text, usage: { prompt_tokens: input, completion_tokens: output } }),
        toolThenAnswer: (text) => az.script({ toolCalls: [{ id: 'call_w1', name: 'weather', arguments: ['{"city":', '"Paris"}'] }] }, { text }),
        lastBody: () => az.requests.at(-1)!.body,
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
      },
      {
        model: 'm-bedrock',
        answer: (text, input, output) => bed.script({ text, usage: { inputTokens: input, outputTokens: output, totalTokens: input + output } }),
        toolThenAnswer: (text) => bed.script({ toolUses: [{ toolUseId: 'tooluse_w1', name: 'weather', input: ['{"city":', '"Paris"}'] }] }, { text }),
        lastBody: () => bed.requests.at(-1)!.body,
        lastStreamed: () => bed.requests.at(-1)!.stream,
        reset: () => bed.reset(),
        assertToolResult: (body, id) => {
          assert.equal(id, 'tooluse_w1');
          assert.deepEqual(body.messages.at(-1), { role: 'user', content: [{ toolResult: { toolUseId: 'tooluse_w1', content: [{ text: 'sunny, 24 C' }] } }] });
          assert.deepEqual(body.messages.at(-2), { role: 'assistant', content: [{ toolUse: { toolUseId: 'tooluse_w1', name: 'weather', input: { city: 'Paris' } } }] });
        },
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
});
