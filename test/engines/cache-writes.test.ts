/**
 * Prompt-cache writes priced at their own price (issue 28): Anthropic's `cache_creation_input_tokens` (split by
 * lifetime in `cache_creation`) and Bedrock's `cacheWriteInputTokens` (split in `cacheDetails`) reach the ledger's
 * cache_write_tokens and are charged at `cache_write_input_per_million` (the one-hour part at
 * `cache_write_1h_input_per_million`), through /v1/responses, /v1/chat/completions and the translated /v1/messages;
 * the Messages answer reports them as `cache_creation_input_tokens`; OpenAI's shapes get no field of their own; the
 * operators' reports and CSV show the column; a model without a cache-write price charges writes as input.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startAnthropicMock, type AnthropicMock } from '../helpers/anthropic-mock.js';
import { startBedrockMock, type BedrockMock } from '../helpers/bedrock-mock.js';
import { parseModelConfig } from '../../src/models/config.js';
import { usageRows, type UsageRow } from '../helpers/usage.js';
import { callers } from '../admin/helpers.js';
import { readAnthropicStream } from '../messages/helpers.js';

const KEY = 'sk-ant-cachewrite-test-0123456789';
process.env.CACHEWRITE_ANTHROPIC_KEY = KEY;
const CREDS = { accessKeyId: 'AKIACACHEWRITE000000', secretAccessKey: 'cachewrite-test-secret/0123456789abcdef' };
const REGION = 'us-east-1';
process.env.AWS_ACCESS_KEY_ID = CREDS.accessKeyId;
process.env.AWS_SECRET_ACCESS_KEY = CREDS.secretAccessKey;
delete process.env.AWS_SESSION_TOKEN;

/** per million: input 1, cached 0.1, cache writes 1.25 (one-hour 2), output 2 */
const PRICING = '{ input_per_million: 1, cached_input_per_million: 0.1, cache_write_input_per_million: 1.25, cache_write_1h_input_per_million: 2, output_per_million: 2 }';
/** 100k fresh, 600k read, 300k written (200k five-minute, 100k one-hour), 500k output */
const COST = 0.1 + 0.06 + 0.25 + 0.2 + 1;
/** the same counts with no cache-write price: writes at the input price */
const COST_WRITES_AS_INPUT = 0.1 + 0.06 + 0.3 + 1;

const ANTHROPIC_USAGE = {
  input_tokens: 100_000,
  cache_read_input_tokens: 600_000,
  cache_creation_input_tokens: 300_000,
  cache_creation: { ephemeral_5m_input_tokens: 200_000, ephemeral_1h_input_tokens: 100_000 },
  output_tokens: 500_000,
};
const BEDROCK_USAGE = {
  inputTokens: 100_000,
  cacheReadInputTokens: 600_000,
  cacheWriteInputTokens: 300_000,
  cacheDetails: [
    { ttl: '1h' as const, inputTokens: 100_000 },
    { ttl: '5m' as const, inputTokens: 200_000 },
  ],
  outputTokens: 500_000,
};

const close = (a: number, b: number) => Math.abs(a - b) < 1e-9;

describe('prompt-cache writes: counted, priced and reported', () => {
  let ant: AnthropicMock;
  let bed: BedrockMock;
  let t: TestApp & { url?: string };
  let key: string;
  let client: OpenAI;
  const post = (path: string, body: unknown) =>
    fetch(t.url + '/v1' + path, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify(body),
    });

  /** the one new usage row of `model` and `operation` since `before` (rows are grouped by operation and model) */
  async function added(model: string, operation: string, before: UsageRow[]): Promise<{ input: number; cached: number; written: number; output: number; cost: number }> {
    const of = (rows: UsageRow[]) => rows.find((r) => r.operation === operation) ?? { input_tokens: 0, cached_tokens: 0, cache_write_tokens: 0, output_tokens: 0, cost: 0 };
    const a = of(await usageRows(t, model));
    const b = of(before.filter((r) => r.model === model));
    return {
      input: a.input_tokens - b.input_tokens,
      cached: (a.cached_tokens ?? 0) - (b.cached_tokens ?? 0),
      written: (a.cache_write_tokens ?? 0) - (b.cache_write_tokens ?? 0),
      output: a.output_tokens - b.output_tokens,
      cost: a.cost - b.cost,
    };
  }

  before(async () => {
    ant = await startAnthropicMock({ apiKey: KEY });
    bed = await startBedrockMock({ credentials: CREDS, region: REGION });
    const a = `provider: anthropic, base_url: ${ant.url}, upstream_model: claude-up, api_key_env: CACHEWRITE_ANTHROPIC_KEY, retries: 0`;
    const b = `provider: bedrock, base_url: ${bed.url}, region: ${REGION}, upstream_model: "anthropic.claude-test-v1:0", retries: 0`;
    const yaml = `
models:
  - { name: ant, ${a}, pricing: ${PRICING} }
  - { name: ant-plain, ${a}, pricing: { input_per_million: 1, cached_input_per_million: 0.1, output_per_million: 2 } }
  - { name: bed, ${b}, pricing: ${PRICING} }
`;
    t = await buildTestApp({ listen: true, models: parseModelConfig(yaml).models });
    key = await t.inferenceKey('alice');
    client = new OpenAI({ apiKey: key, baseURL: t.url + '/v1', maxRetries: 0 });
  });
  after(async () => {
    await t.close();
    await ant.close();
    await bed.close();
  });

  test('anthropic through /v1/responses: the ledger counts the writes and charges them at the cache-write prices; the usage has no field for them', async () => {
    const before = await usageRows(t);
    ant.reset();
    ant.script({ text: 'ok', usage: ANTHROPIC_USAGE });
    const r = await client.responses.create({ model: 'ant', input: 'hi' });
    assert.equal(r.status, 'completed');
    assert.deepEqual(r.usage, {
      input_tokens: 1_000_000,
      input_tokens_details: { cached_tokens: 600_000 },
      output_tokens: 500_000,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 1_500_000,
    });
    const got = await added('ant', 'responses', before);
    assert.deepEqual([got.input, got.cached, got.written, got.output], [1_000_000, 600_000, 300_000, 500_000]);
    assert.ok(close(got.cost, COST), `cost ${got.cost}, want ${COST}`);
  });

  test('anthropic through /v1/chat/completions, streamed: the one-hour split of message_start survives message_delta', async () => {
    const before = await usageRows(t);
    ant.reset();
    ant.script({ text: 'ok', chunks: 2, usage: ANTHROPIC_USAGE });
    const stream = await client.chat.completions.create({ model: 'ant', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } });
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const c of stream) if (c.usage) usage = c.usage;
    assert.equal(ant.requests[0]!.body.stream, true);
    assert.equal(usage?.prompt_tokens, 1_000_000);
    assert.deepEqual(usage?.prompt_tokens_details, { cached_tokens: 600_000, audio_tokens: 0 });
    const got = await added('ant', 'chat.completions', before);
    assert.deepEqual([got.input, got.cached, got.written, got.output], [1_000_000, 600_000, 300_000, 500_000]);
    assert.ok(close(got.cost, COST), `cost ${got.cost}, want ${COST}`);
  });

  test('a model without a cache-write price charges the writes as input (as before), and still counts them', async () => {
    const before = await usageRows(t);
    ant.reset();
    ant.script({ text: 'ok', usage: ANTHROPIC_USAGE });
    await client.chat.completions.create({ model: 'ant-plain', messages: [{ role: 'user', content: 'hi' }] });
    const got = await added('ant-plain', 'chat.completions', before);
    assert.equal(got.written, 300_000);
    assert.ok(close(got.cost, COST_WRITES_AS_INPUT), `cost ${got.cost}, want ${COST_WRITES_AS_INPUT}`);
  });

  test('bedrock through /v1/messages (translated), streamed and not: cache_creation_input_tokens and its split reported, the writes charged at their prices', async () => {
    for (const stream of [false, true]) {
      const before = await usageRows(t);
      bed.reset();
      bed.script({ text: 'ok', usage: BEDROCK_USAGE });
      const res = await post('/messages', { model: 'bed', max_tokens: 50, stream, messages: [{ role: 'user', content: 'hi' }] });
      assert.equal(res.status, 200, await res.clone().text());
      let usage: any;
      if (stream) {
        const events = await readAnthropicStream(res);
        usage = events.find((e) => e.type === 'message_delta').usage;
      } else usage = ((await res.json()) as any).usage;
      assert.equal(bed.requests[0]!.stream, stream);
      assert.equal(usage.input_tokens, 100_000, 'input_tokens: neither read from the cache nor written to it');
      assert.equal(usage.cache_read_input_tokens, 600_000);
      assert.equal(usage.cache_creation_input_tokens, 300_000);
      assert.deepEqual(usage.cache_creation, { ephemeral_5m_input_tokens: 200_000, ephemeral_1h_input_tokens: 100_000 });
      assert.equal(usage.output_tokens, 500_000);
      const got = await added('bed', 'anthropic.messages', before);
      assert.deepEqual([got.input, got.cached, got.written, got.output], [1_000_000, 600_000, 300_000, 500_000], `stream ${stream}`);
      assert.ok(close(got.cost, COST), `stream ${stream}: cost ${got.cost}, want ${COST}`);
    }
  });

  test('bedrock through /v1/responses, streamed: the writes charged at their prices', async () => {
    const before = await usageRows(t);
    bed.reset();
    bed.script({ text: 'ok', chunks: 2, usage: BEDROCK_USAGE });
    const stream = await client.responses.create({ model: 'bed', input: 'hi', stream: true });
    let final: OpenAI.Responses.Response | undefined;
    for await (const ev of stream) if (ev.type === 'response.completed') final = ev.response;
    assert.equal(final?.usage?.input_tokens, 1_000_000);
    const got = await added('bed', 'responses', before);
    assert.deepEqual([got.input, got.written], [1_000_000, 300_000]);
    assert.ok(close(got.cost, COST), `cost ${got.cost}, want ${COST}`);
  });

  test("the operators' usage report, requests list and CSV show cache_write_tokens", async () => {
    const { operator } = await callers(t);
    const get = (url: string) => t.app.inject({ method: 'GET', url, headers: operator });
    const total = async () => (await get('/v1/admin/usage?group_by=model&model=bed')).json().data;
    const before = (await total()).total.cache_write_tokens as number;
    bed.reset();
    bed.script({ text: 'ok', usage: BEDROCK_USAGE });
    await client.chat.completions.create({ model: 'bed', messages: [{ role: 'user', content: 'hi' }] });
    const usage = await total();
    assert.equal(usage.list.length, 1);
    assert.equal(usage.list[0].cache_write_tokens, usage.total.cache_write_tokens);
    assert.equal(usage.total.cache_write_tokens - before, 300_000);
    const list = (await get('/v1/admin/requests?model=bed&operation=chat.completions')).json().data.list;
    assert.equal(list[0].cache_write_tokens, 300_000);
    assert.equal(list[0].cached_tokens, 600_000);
    const csv = (await get('/v1/admin/requests.csv?model=bed&operation=chat.completions')).body.trimEnd().split('\r\n');
    const head = csv[0]!.split(',');
    const col = head.indexOf('cache_write_tokens');
    assert.ok(col > head.indexOf('cached_tokens') && head.indexOf('cached_tokens') >= 0, csv[0]);
    assert.equal(csv[1]!.split(',')[col], '300000');
  });
});
