/**
 * /v1/messages forwarded unchanged to models served by Anthropic itself (issue 28): the client's body reaches the
 * upstream byte for byte but for the model name (with what Portico's translation loses or refuses: cache_control,
 * a signed thinking block, top_k, metadata, a document block), the answer or the stream comes back as the upstream
 * wrote it (the model named as the client named it), betas are merged, usage is read from the answer (cache reads
 * priced as cached), retries go to a second deployment before the first byte, upstream errors reach the client in
 * Anthropic's shape, and every failure path of the upstream is a clean error. A model with one deployment that is
 * not Anthropic's is translated as before; count_tokens is forwarded too.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startAnthropicMock, type AnthropicMock } from '../helpers/anthropic-mock.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { usageRows, type UsageRow } from '../helpers/usage.js';
import { parseModelConfig } from '../../src/models/config.js';
import { forwardsMessages } from '../../src/engines/providers.js';
import { expectAnthropicError, readAnthropicStream } from './helpers.js';

const KEY = 'sk-ant-msgfwd-test-0123456789';
process.env.MSGFWD_ANTHROPIC_KEY = KEY;

/** pricing that tells cached input apart: 1 credit a million input tokens, 0.1 cached, 2 output */
const PRICING = '{ input_per_million: 1, cached_input_per_million: 0.1, output_per_million: 2 }';

/** the same, and cache writes at 1.25 a million (2 for the one-hour cache) */
const CACHE_WRITE_PRICING =
  '{ input_per_million: 1, cached_input_per_million: 0.1, cache_write_input_per_million: 1.25, cache_write_1h_input_per_million: 2, output_per_million: 2 }';

function yaml(ant: string, dead: string, openai: string): string {
  const a = `provider: anthropic, base_url: ${ant}, api_key_env: MSGFWD_ANTHROPIC_KEY`;
  return `
models:
  - { name: fwd, ${a}, upstream_model: claude-up, anthropic_beta: [portico-beta-1], retries: 0, pricing: ${PRICING} }
  - { name: fwd-cw, ${a}, upstream_model: claude-up, retries: 0, pricing: ${CACHE_WRITE_PRICING} }
  - name: fwd-pair
    retries: 1
    retry_backoff_ms: 1
    deployments:
      - { id: fp-a, ${a}, upstream_model: claude-a, weight: 1 }
      - { id: fp-b, ${a}, upstream_model: claude-b, weight: 0 }
  - name: fwd-dead-first
    retries: 1
    retry_backoff_ms: 1
    deployments:
      - { id: fd-dead, provider: anthropic, base_url: ${dead}, api_key_env: MSGFWD_ANTHROPIC_KEY, upstream_model: claude-dead, weight: 1 }
      - { id: fd-live, ${a}, upstream_model: claude-live, weight: 0 }
  - name: fwd-slow
    retries: 0
    deployments:
      - { id: fs-1, ${a}, upstream_model: claude-slow, timeouts: { first_byte_ms: 300 } }
  - name: mixed
    retries: 0
    deployments:
      - { id: mixed-ant, ${a}, upstream_model: claude-mixed, weight: 1 }
      - { id: mixed-oai, provider: openai-compatible, base_url: ${openai}, weight: 0 }
  - { name: falls-to-oai, ${a}, upstream_model: claude-f, retries: 0, fallbacks: [oai] }
  - { name: oai, provider: openai-compatible, base_url: ${openai}, retries: 0 }
`;
}

/** a conversation with what the translation cannot carry */
function richBody(stream: boolean) {
  return {
    model: 'fwd',
    max_tokens: 256,
    system: [{ type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } }],
    messages: [
      {
        role: 'user',
        content: [
          { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'The sky is blue.' }, title: 'Facts', citations: { enabled: true } },
          { type: 'text', text: 'What colour is the sky?', cache_control: { type: 'ephemeral', ttl: '1h' } },
        ],
      },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 'The document says blue.', signature: 'EqQBCgIYAhIMsig' },
          { type: 'redacted_thinking', data: 'opaque-bytes' },
          { type: 'text', text: 'Blue.' },
        ],
      },
      { role: 'user', content: 'And at night?' },
    ],
    tools: [{ type: 'web_search_20250305', name: 'web_search', max_uses: 2 }],
    thinking: { type: 'enabled', budget_tokens: 1024 },
    top_k: 5,
    metadata: { user_id: 'u-123' },
    service_tier: 'auto',
    stream,
  };
}

/** the text the client sent, with the model named as the upstream knows it */
const asSent = (body: object, model: string) => JSON.stringify({ ...body, model });

describe('/v1/messages forwarded to Anthropic deployments', () => {
  let ant: AnthropicMock;
  let oai: ScriptedUpstream;
  let t: TestApp & { url?: string };
  let key: string;
  let sdk: Anthropic;
  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${t.url}/v1${path}`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...headers },
      body: JSON.stringify(body),
    });

  before(async () => {
    ant = await startAnthropicMock({ apiKey: KEY });
    oai = await startScriptedUpstream();
    // a port nothing listens on: a connection refused
    const dead = await startAnthropicMock();
    const deadUrl = dead.url;
    await dead.close();
    t = await buildTestApp({ listen: true, models: parseModelConfig(yaml(ant.url, deadUrl, oai.url)).models });
    key = await t.inferenceKey('alice');
    sdk = new Anthropic({ baseURL: t.url, apiKey: key, maxRetries: 0, timeout: 60_000 });
  });
  after(async () => {
    await t.close();
    await ant.close();
    await oai.close();
  });

  test('the provider says it forwards; other providers do not', () => {
    assert.equal(forwardsMessages({ name: 'x', provider: 'anthropic' } as never), true);
    assert.equal(forwardsMessages({ name: 'x', provider: 'openai-compatible', base_url: 'http://x' } as never), false);
  });

  test('non-stream: the body arrives byte for byte but the model, the answer reaches the SDK as Anthropic wrote it', async () => {
    ant.reset();
    ant.script({ text: 'Dark.', thinking: 'Night.', redacted: true, usage: { input_tokens: 12, output_tokens: 7 } });
    const body = richBody(false);
    const res = await post('/messages', body);
    const text = await res.text();
    assert.equal(res.status, 200, text);
    const [got] = ant.requests;
    assert.equal(got!.path, '/v1/messages');
    assert.equal(got!.raw, asSent(body, 'claude-up'));
    const answer = JSON.parse(text);
    assert.equal(answer.model, 'fwd');
    // everything else as the upstream wrote it: the redacted block, the signature, its id, its usage
    assert.match(answer.id, /^msg_/);
    assert.deepEqual(
      answer.content.map((b: any) => b.type),
      ['redacted_thinking', 'thinking', 'text'],
    );
    assert.equal(answer.content[1].signature, 'sig');
    assert.equal(answer.usage.input_tokens, 12);
    assert.equal(answer.usage.server_tool_use, null);
    assert.equal(answer.container, null);
    // the same through the official SDK, with its own typed body
    ant.reset();
    ant.script({ text: 'Dark.' });
    const m = await sdk.messages.create(richBody(false) as unknown as Anthropic.MessageCreateParamsNonStreaming);
    assert.equal(m.model, 'fwd');
    assert.deepEqual(m.content, [{ type: 'text', text: 'Dark.', citations: null }]);
    assert.equal(ant.requests[0]!.raw, asSent(richBody(false), 'claude-up'));
  });

  test('stream: the events reach the client as Anthropic sent them (the model named as the client named it)', async () => {
    ant.reset();
    ant.script({ text: 'Dark at night.', chunks: 3, thinking: 'Hmm.', ping: true, usage: { input_tokens: 9, output_tokens: 4 } });
    const body = richBody(true);
    const events = await readAnthropicStream(await post('/messages', body));
    assert.equal(ant.requests[0]!.raw, asSent(body, 'claude-up'));
    // the upstream's stream, replayed directly against the mock, is the same list but for the model name
    ant.script({ text: 'Dark at night.', chunks: 3, thinking: 'Hmm.', ping: true, usage: { input_tokens: 9, output_tokens: 4 } });
    const direct = await readAnthropicStream(
      await fetch(`${ant.url}/v1/messages`, {
        method: 'POST',
        headers: { 'x-api-key': KEY, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
        body: asSent(body, 'claude-up'),
      }),
    );
    const strip = (evs: any[]) => evs.map((e) => (e.type === 'message_start' ? { ...e, message: { ...e.message, id: 'x', model: 'm' } } : e));
    assert.deepEqual(strip(events), strip(direct));
    assert.equal(events[0].message.model, 'fwd');
    assert.ok(events.some((e) => e.delta?.type === 'signature_delta'));
    assert.ok(events.some((e) => e.type === 'ping'));
    // and through the SDK's stream helper: its final message is whole
    ant.script({ text: 'Dark.', chunks: 2 });
    const s = sdk.messages.stream(richBody(true) as unknown as Anthropic.MessageCreateParamsStreaming);
    const final = await s.finalMessage();
    assert.equal(final.model, 'fwd');
    assert.deepEqual(final.content, [{ type: 'text', text: 'Dark.', citations: null }]);
  });

  test('fields the translation refuses are refused for other models still', async () => {
    oai.reset();
    const res = await post('/messages', { model: 'oai', max_tokens: 10, top_k: 5, messages: [{ role: 'user', content: 'hi' }] });
    const err = await expectAnthropicError(res, 400, 'invalid_request_error');
    assert.match(err.message, /top_k/);
    // a body the schema refuses (a document block's title) names the field, as before
    const doc = await post('/messages', {
      model: 'oai',
      max_tokens: 10,
      messages: [{ role: 'user', content: [{ type: 'document', title: 'x', source: { type: 'text', data: 'y' } }] }],
    });
    await expectAnthropicError(doc, 400, 'invalid_request_error');
    assert.equal(oai.requests.length, 0);
  });

  test('a mixed model (an Anthropic deployment and another) and a fallback to another provider are translated', async () => {
    for (const model of ['mixed', 'falls-to-oai']) {
      ant.reset();
      ant.script({ text: 'Translated.' });
      const res = await post('/messages', { model, max_tokens: 10, messages: [{ role: 'user', content: 'hi' }], top_k: 3 });
      const err = await expectAnthropicError(res, 400, 'invalid_request_error');
      assert.match(err.message, /top_k/, model);
      const ok = await post('/messages', { model, max_tokens: 10, messages: [{ role: 'user', content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral' } }] }] });
      assert.equal(ok.status, 200, await ok.clone().text());
      assert.equal(((await ok.json()) as any).content[0].text, 'Translated.');
      // translated: Portico's own body (no cache_control unless cache_prompt), the upstream model mapped
      const sent = ant.requests[0]!.body;
      assert.deepEqual(sent.messages, [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }]);
    }
  });

  test('anthropic-beta: the deployment’s values, then the client’s; anthropic-version the deployment’s', async () => {
    ant.reset();
    ant.script({ text: 'ok' });
    const res = await post(
      '/messages',
      { model: 'fwd', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] },
      { 'anthropic-beta': 'files-api-2025-04-14, portico-beta-1,context-1m-2025-08-07' },
    );
    assert.equal(res.status, 200, await res.text());
    const h = ant.requests[0]!.headers;
    assert.equal(h['anthropic-beta'], 'portico-beta-1,files-api-2025-04-14,context-1m-2025-08-07');
    assert.equal(h['anthropic-version'], '2023-06-01');
    assert.equal(h['x-api-key'], KEY);
    // none from the client: the deployment's alone
    ant.script({ text: 'ok' });
    await (await post('/messages', { model: 'fwd', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] })).text();
    assert.equal(ant.requests[1]!.headers['anthropic-beta'], 'portico-beta-1');
    // a header that is no list of beta names is refused before anything is sent
    const bad = await post('/messages', { model: 'fwd', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }, { 'anthropic-beta': 'a b;c' });
    await expectAnthropicError(bad, 400, 'invalid_request_error');
    assert.equal(ant.requests.length, 2);
  });

  test('usage is recorded from the answer: cache reads as cached input, cache writes as input', async () => {
    const beforeRows = await usageRows(t, 'fwd');
    const sum = (rows: typeof beforeRows, k: 'input_tokens' | 'output_tokens' | 'cost') => rows.reduce((s, r) => s + r[k], 0);
    ant.reset();
    const usage = { input_tokens: 100_000, cache_read_input_tokens: 600_000, cache_creation_input_tokens: 300_000, output_tokens: 500_000 };
    ant.script({ text: 'cached', usage });
    await readAnthropicStream(await post('/messages', { model: 'fwd', max_tokens: 5, stream: true, messages: [{ role: 'user', content: 'hi' }] }));
    ant.script({ text: 'cached', usage });
    assert.equal((await post('/messages', { model: 'fwd', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] })).status, 200);
    const rows = await usageRows(t, 'fwd');
    assert.equal(sum(rows, 'input_tokens') - sum(beforeRows, 'input_tokens'), 2_000_000);
    assert.equal(sum(rows, 'output_tokens') - sum(beforeRows, 'output_tokens'), 1_000_000);
    // (0.4 uncached + 0.6 cached at 0.1 + 0.5 output at 2) per answer = 1.46 credits; without the cache price it would be 2
    const cost = sum(rows, 'cost') - sum(beforeRows, 'cost');
    assert.ok(Math.abs(cost - 2.92) < 1e-6, `cost ${cost}`);
  });

  test('cache writes are counted and charged at the cache-write prices, the one-hour part from message_start (stream and not)', async () => {
    const cw = (rows: UsageRow[]) => rows.find((r) => r.operation === 'anthropic.messages') ?? { input_tokens: 0, cache_write_tokens: 0, cost: 0 };
    const usage = {
      input_tokens: 100_000,
      cache_read_input_tokens: 600_000,
      cache_creation_input_tokens: 300_000,
      cache_creation: { ephemeral_5m_input_tokens: 200_000, ephemeral_1h_input_tokens: 100_000 },
      output_tokens: 500_000,
    };
    for (const stream of [true, false]) {
      const before = cw(await usageRows(t, 'fwd-cw'));
      ant.reset();
      ant.script({ text: 'cached', usage });
      const res = await post('/messages', { model: 'fwd-cw', max_tokens: 5, stream, messages: [{ role: 'user', content: 'hi' }] });
      // the client reads the upstream's counts as it wrote them
      if (stream) {
        const events = await readAnthropicStream(res);
        assert.deepEqual(events[0].message.usage.cache_creation, usage.cache_creation);
        assert.equal(events.find((e) => e.type === 'message_delta').usage.cache_creation_input_tokens, 300_000);
      } else {
        assert.equal(res.status, 200, await res.clone().text());
        const u = ((await res.json()) as any).usage;
        assert.deepEqual([u.cache_creation_input_tokens, u.cache_creation], [300_000, usage.cache_creation]);
      }
      const after = cw(await usageRows(t, 'fwd-cw'));
      assert.equal(after.input_tokens - before.input_tokens, 1_000_000);
      assert.equal((after.cache_write_tokens ?? 0) - (before.cache_write_tokens ?? 0), 300_000);
      // 0.1 uncached + 0.06 cached + 0.25 written (5 minutes) + 0.2 written (1 hour) + 1 output; writes as input: 1.46
      const cost = after.cost - before.cost;
      assert.ok(Math.abs(cost - 1.61) < 1e-9, `stream ${stream}: cost ${cost}`);
    }
  });

  test('a deployment that refuses before the first byte: the next one serves (stream and not)', async () => {
    for (const stream of [false, true]) {
      ant.reset();
      ant.script({ status: 529, errorMessage: 'Overloaded' }, { text: 'second' });
      const res = await post('/messages', { model: 'fwd-pair', max_tokens: 5, stream, messages: [{ role: 'user', content: 'hi' }] });
      const text = stream ? (await readAnthropicStream(res)).find((e) => e.delta?.type === 'text_delta').delta.text : ((await res.json()) as any).content[0].text;
      assert.equal(text, 'second');
      assert.deepEqual(
        ant.requests.map((r) => r.body.model),
        ['claude-a', 'claude-b'],
      );
    }
    // a connection refused, then another deployment
    ant.reset();
    ant.script({ text: 'live' });
    const res = await post('/messages', { model: 'fwd-dead-first', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(res.status, 200, await res.clone().text());
    assert.equal(ant.requests[0]!.body.model, 'claude-live');
  });

  test('upstream errors reach the client in Anthropic’s shape', async () => {
    const cases: Array<[number, number, string]> = [
      [400, 400, 'invalid_request_error'],
      [429, 429, 'rate_limit_error'],
      [500, 502, 'api_error'],
      [529, 503, 'overloaded_error'],
      [401, 502, 'api_error'],
    ];
    for (const [status, want, type] of cases) {
      for (const stream of [false, true]) {
        ant.reset();
        ant.script({ status, errorMessage: `upstream says ${status}` });
        const res = await post('/messages', { model: 'fwd', max_tokens: 5, stream, messages: [{ role: 'user', content: 'hi' }] });
        const err = await expectAnthropicError(res, want, type);
        assert.ok(!err.message.includes(KEY));
        if (status === 400) assert.match(err.message, /upstream says 400/);
      }
    }
  });

  test('failure paths: reset, hang before the first byte, broken or failing mid-stream, garbage', async () => {
    const body = (stream: boolean) => ({ model: 'fwd', max_tokens: 5, stream, messages: [{ role: 'user', content: 'hi' }] });
    // reset before any answer
    ant.reset();
    ant.script({ reset: true });
    await expectAnthropicError(await post('/messages', body(false)), 502, 'api_error');
    // hang before the first byte: the deployment's first_byte_ms ends the try
    ant.reset();
    ant.script({ hang: true });
    const slow = await post('/messages', { ...body(true), model: 'fwd-slow' });
    await expectAnthropicError(slow, 504, 'timeout_error');
    await ant.requests[0]!.closed;
    assert.equal(ant.requests[0]!.aborted, true);
    // garbage: a JSON answer that is none, an event stream of garbage
    ant.reset();
    ant.script({ rawJson: 'not json' });
    await expectAnthropicError(await post('/messages', body(false)), 502, 'api_error');
    ant.script({ raw: ['event: message_start\ndata: {nope\n\n'] });
    await expectAnthropicError(await post('/messages', body(true)), 502, 'api_error');
    // mid-stream: broken, an error event, a stream without message_stop: an `error` event ends the client's stream
    for (const r of [{ breakAfter: 3 }, { errorAfter: 3 }, { noStop: true }, { hangAfter: 3, delayMs: 0 }]) {
      ant.reset();
      ant.script({ text: 'abcdef', chunks: 3, ...r });
      const model = 'hangAfter' in r ? 'fwd-slow' : 'fwd';
      const res = await post('/messages', { ...body(true), model });
      if ('hangAfter' in r) {
        // (no total_ms: the stream stays open until the client gives up; the client's leave closes the upstream)
        const reader = res.body!.getReader();
        await reader.read();
        await reader.cancel();
        await ant.requests[0]!.closed;
        assert.equal(ant.requests[0]!.aborted, true);
        continue;
      }
      const events = await readAnthropicStream(res);
      assert.equal(events[0].type, 'message_start', JSON.stringify(r));
      const last = events.at(-1);
      assert.equal(last.type, 'error', JSON.stringify(events));
      assert.ok(!events.some((e) => e.type === 'message_stop'));
    }
  });

  test('an upstream that answers one JSON message to a stream request: its events, in order', async () => {
    ant.reset();
    const msg = {
      id: 'msg_x',
      type: 'message',
      role: 'assistant',
      model: 'claude-up',
      content: [{ type: 'text', text: 'whole' }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: 3, output_tokens: 1 },
    };
    ant.script({ rawJson: JSON.stringify(msg) });
    const events = await readAnthropicStream(await post('/messages', { model: 'fwd', max_tokens: 5, stream: true, messages: [{ role: 'user', content: 'hi' }] }));
    assert.deepEqual(
      events.map((e) => e.type),
      ['message_start', 'content_block_start', 'content_block_stop', 'message_delta', 'message_stop'],
    );
    assert.equal(events[0].message.model, 'fwd');
    assert.deepEqual(events[1].content_block, { type: 'text', text: 'whole' });
    assert.equal(events[3].delta.stop_reason, 'end_turn');
  });

  test('count_tokens is forwarded: the body unchanged but the model, the answer as Anthropic wrote it', async () => {
    ant.reset();
    ant.script({ usage: { input_tokens: 321 } });
    const body = {
      model: 'fwd',
      system: [{ type: 'text', text: 'sys', cache_control: { type: 'ephemeral' } }],
      messages: [{ role: 'user', content: 'hi' }],
      tools: [{ type: 'web_search_20250305', name: 'web_search' }],
    };
    const res = await post('/messages/count_tokens', body, { 'anthropic-beta': 'token-counting-2024-11-01' });
    const text = await res.text();
    assert.equal(res.status, 200, text);
    assert.deepEqual(JSON.parse(text), { input_tokens: 321 });
    const got = ant.requests[0]!;
    assert.equal(got.path, '/v1/messages/count_tokens');
    assert.equal(got.raw, asSent(body, 'claude-up'));
    assert.equal(got.headers['anthropic-beta'], 'portico-beta-1,token-counting-2024-11-01');
    // through the SDK
    ant.script({ usage: { input_tokens: 7 } });
    assert.deepEqual(await sdk.messages.countTokens({ model: 'fwd', messages: [{ role: 'user', content: 'hi' }] }), { input_tokens: 7 });
    // its failures: an upstream refusal in Anthropic's shape, a reset
    ant.script({ status: 400, errorMessage: 'bad count' });
    const err = await expectAnthropicError(await post('/messages/count_tokens', body), 400, 'invalid_request_error');
    assert.match(err.message, /bad count/);
    ant.script({ reset: true });
    await expectAnthropicError(await post('/messages/count_tokens', body), 502, 'api_error');
    // nothing is charged for a count
    assert.ok((await usageRows(t)).every((r) => r.operation !== 'anthropic.messages' || r.model !== 'fwd' || r.input_tokens !== 321));
  });

  test('a forwarded body still needs a model, max_tokens and messages Portico can read', async () => {
    ant.reset();
    for (const bad of [
      { model: 'fwd', messages: [{ role: 'user', content: 'hi' }] },
      { model: 'fwd', max_tokens: 'x', messages: [] },
      { model: 'fwd', max_tokens: 5, messages: 'hi' },
      { model: 'fwd', max_tokens: 5, stream: 'yes', messages: [] },
      { model: 5, max_tokens: 5, messages: [] },
    ]) {
      await expectAnthropicError(await post('/messages', bad), 400, 'invalid_request_error');
    }
    // an unknown model with a bad body: the body's error, as before
    await expectAnthropicError(await post('/messages', { model: 'nope', max_tokens: 'x', messages: [] }), 400, 'invalid_request_error');
    assert.equal(ant.requests.length, 0);
  });
});

describe('/v1/messages forwarded: budgets (a reservation at admission)', () => {
  let ant: AnthropicMock;
  let t: TestApp & { url?: string };

  before(async () => {
    ant = await startAnthropicMock({ apiKey: KEY });
    const models = parseModelConfig(`
models:
  - { name: fwd, provider: anthropic, base_url: ${ant.url}, api_key_env: MSGFWD_ANTHROPIC_KEY, upstream_model: claude-up, retries: 0, pricing: ${PRICING} }
`).models;
    t = await buildTestApp({ listen: true, models, env: { BILLING_ENABLED: 'true', PORTICO_DB: '' } });
  });
  after(async () => {
    await t.close();
    await ant.close();
  });

  test('no credits: refused before the upstream is called; past what it reserved, the stream ends as at max_tokens', async () => {
    const key = await t.inferenceKey('payer');
    const post = (body: unknown) =>
      fetch(`${t.url}/v1/messages`, { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const body = { model: 'fwd', max_tokens: 2, stream: true, top_k: 3, messages: [{ role: 'user', content: 'hi' }] };
    await expectAnthropicError(await post(body), 429, 'rate_limit_error');
    assert.equal(ant.requests.length, 0);
    await t.services.usage.grant('payer', 'default', 1);
    // an upstream that ignores max_tokens: the third piece passes the reservation of 2 output tokens
    ant.script({ text: ['a', 'b', 'c', 'd', 'e', 'f'], delayMs: 5, usage: { input_tokens: 4, output_tokens: 6 } });
    const events = await readAnthropicStream(await post(body));
    assert.deepEqual(
      events.filter((e) => e.type === 'content_block_delta').map((e) => e.delta.text),
      ['a', 'b'],
    );
    assert.deepEqual(
      events.slice(-3).map((e) => e.type),
      ['content_block_stop', 'message_delta', 'message_stop'],
    );
    assert.equal(events.at(-2).delta.stop_reason, 'max_tokens');
    await ant.requests[0]!.closed;
    assert.equal(ant.requests[0]!.aborted, true, 'the upstream was closed');
    const rows = await usageRows(t, 'fwd', 'payer');
    assert.equal(rows.length, 1);
    assert.equal(rows[0]!.input_tokens, 4);
    assert.ok(rows[0]!.output_tokens <= 2, JSON.stringify(rows));
  });
});
