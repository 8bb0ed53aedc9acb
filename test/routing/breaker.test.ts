/**
 * The circuit breaker judges deployments as docs/models.md says ("Circuit breaker"): a failure rate over a
 * window with a least number of failures, one verdict per client request and deployment (retries do not
 * multiply it), failures after the first output counted too, a 429 never a failure, a model's only deployment
 * taken out only when it fails nearly everything; and a malformed answer is a retryable failure of its
 * deployment. Each scenario is one that, before, took a healthy model down or kept a broken deployment in.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { parseModelConfig } from '../../src/models/config.js';
import { HealthBoard, DEFAULT_BREAKER, type BreakerPolicy } from '../../src/models/router/health.js';

describe('the breaker rule (HealthBoard, a clock of the test)', () => {
  const policy: BreakerPolicy = { ...DEFAULT_BREAKER, failures: 3, failureRate: 0.5, windowMs: 10_000, cooldownMs: 5_000 };
  test('opens on a failure rate with a least count; successes keep it closed', () => {
    const b = new HealthBoard();
    const h = b.of('d', undefined, undefined, policy.windowMs);
    let now = 1_000_000;
    for (let i = 0; i < 10; i++) b.succeeded(h, now);
    for (let i = 0; i < 5; i++) b.failed(h, policy, now, 'boom', false, false);
    assert.equal(h.state(now), 'closed', '5 failures in 15 verdicts: under half');
    for (let i = 0; i < 5; i++) b.failed(h, policy, now, 'boom', false, false);
    assert.equal(h.state(now), 'open', '10 of 20 failed');
    assert.equal(h.openUntil, now + 5_000);
    assert.equal(h.lastError, 'boom');
    // the cooldown passes: half-open, one probe; its failure opens it again, its answer closes it
    now += 5_000;
    assert.equal(h.state(now), 'half-open');
    assert.equal(b.begin(h, now), true, 'the first try is the probe');
    assert.equal(h.usable(now), false, 'and no other goes meanwhile');
    b.failed(h, policy, now, 'still down', true, false);
    b.release(h, true);
    assert.equal(h.state(now), 'open');
    now += 5_000;
    assert.equal(b.begin(h, now), true);
    b.answered(h);
    b.release(h, true);
    assert.equal(h.state(now), 'closed');
  });
  test('fewer failures than the least count never open it, even at 100 %', () => {
    const b = new HealthBoard();
    const h = b.of('d', undefined, undefined, policy.windowMs);
    const now = 1_000_000;
    b.failed(h, policy, now, 'x', false, false);
    b.failed(h, policy, now, 'x', false, false);
    assert.equal(h.state(now), 'closed');
    b.failed(h, policy, now, 'x', false, false);
    assert.equal(h.state(now), 'open');
  });
  test('failures older than the window are forgotten', () => {
    const b = new HealthBoard();
    const h = b.of('d', undefined, undefined, policy.windowMs);
    let now = 1_000_000;
    b.failed(h, policy, now, 'x', false, false);
    b.failed(h, policy, now, 'x', false, false);
    now += policy.windowMs + 1000;
    b.failed(h, policy, now, 'x', false, false);
    assert.equal(h.state(now), 'closed', 'two of the three are out of the window');
  });
  test("a model's only deployment opens only when it fails nearly everything (90 %, at least 10)", () => {
    const b = new HealthBoard();
    const h = b.of('d', undefined, undefined, policy.windowMs);
    const now = 1_000_000;
    for (let i = 0; i < 9; i++) b.failed(h, policy, now, 'x', false, true);
    assert.equal(h.state(now), 'closed', '9 failures: fewer than 10');
    b.succeeded(h, now);
    b.succeeded(h, now);
    b.failed(h, policy, now, 'x', false, true);
    assert.equal(h.state(now), 'closed', '10 of 12 failed: under 90 %');
    for (let i = 0; i < 8; i++) b.failed(h, policy, now, 'x', false, true);
    assert.equal(h.state(now), 'open', '18 of 20 failed');
  });
});

test("an opening heard from another instance carries its reason (the operators' view shows why)", async () => {
  const handlers = new Map<string, Array<(m: Record<string, unknown>) => void>>();
  const share = {
    publish: async (channel: string, m: Record<string, unknown>) => {
      for (const h of handlers.get(channel) ?? []) h(JSON.parse(JSON.stringify(m)));
    },
    subscribe: (channel: string, h: (m: Record<string, unknown>) => void) => void handlers.set(channel, [...(handlers.get(channel) ?? []), h]),
  };
  const one = new HealthBoard(share);
  const other = new HealthBoard(share);
  const now = Date.now();
  one.open(one.of('d'), now + 60_000, 'connection refused');
  await new Promise((r) => setImmediate(r));
  const h = other.peek('d')!;
  assert.equal(h.state(now), 'open');
  assert.equal(h.lastError, 'connection refused');
});

describe('the breaker against scripted upstreams', () => {
  let a: ScriptedUpstream;
  let b: ScriptedUpstream;
  let t: TestApp & { url?: string };
  let key: string;
  let client: OpenAI;
  const post = (path: string, body: Record<string, unknown>) =>
    fetch(t.url + path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const state = (id: string) => t.runtime.router.health.peek(id)?.state(Date.now()) ?? 'closed';
  const reset = () => {
    a.reset();
    b.reset();
    a.defaultReply = { text: 'Hello from a.', chunks: 4 };
    b.defaultReply = { text: 'Hello from b.', chunks: 4 };
  };

  before(async () => {
    a = await startScriptedUpstream();
    b = await startScriptedUpstream();
    const yaml = `
models:
  - name: solo
    id: solo-a
    provider: openai-compatible
    base_url: ${a.url}
    retry_backoff_ms: 1
  - name: midstream
    retries: 0
    breaker: { failures: 3 }
    deployments:
      - { id: ms-a, provider: openai-compatible, base_url: ${a.url}, weight: 1 }
      - { id: ms-b, provider: openai-compatible, base_url: ${b.url}, weight: 0 }
  - name: solo-midstream
    id: sm-a
    provider: openai-compatible
    base_url: ${a.url}
    retries: 0
    breaker: { failures: 3 }
  - name: storm
    retry_backoff_ms: 1
    deployments:
      - { id: st-a, provider: openai-compatible, base_url: ${a.url}, weight: 1 }
      - { id: st-b, provider: openai-compatible, base_url: ${b.url}, weight: 0 }
  - name: garbage
    retry_backoff_ms: 1
    deployments:
      - { id: gb-a, provider: openai-compatible, base_url: ${a.url}, weight: 1 }
      - { id: gb-b, provider: openai-compatible, base_url: ${b.url}, weight: 0 }
  - name: garbage-embed
    type: embeddings
    retry_backoff_ms: 1
    deployments:
      - { id: ge-a, provider: openai-compatible, base_url: ${a.url}, weight: 1 }
      - { id: ge-b, provider: openai-compatible, base_url: ${b.url}, weight: 0 }
`;
    t = await buildTestApp({ listen: true, models: parseModelConfig(yaml).models });
    key = await t.inferenceKey('alice');
    client = new OpenAI({ apiKey: key, baseURL: t.url + '/v1', maxRetries: 0 });
  });
  after(async () => {
    await t.close();
    await a.close();
    await b.close();
  });

  test("retries are one failure: two failing requests (3 tries each) do not take a model's only deployment out", async () => {
    reset();
    a.script({ status: 500 }, { status: 500 }, { status: 500 }, { status: 502 }, { status: 502 }, { status: 502 });
    for (let i = 0; i < 2; i++) assert.equal((await post('/v1/responses', { model: 'solo', input: 'hi' })).status, 502);
    assert.equal(a.requests.length, 6, 'three tries each');
    assert.equal(state('solo-a'), 'closed');
    // the upstream recovered: the next request is answered, not a 503 for the cooldown
    const r = await client.responses.create({ model: 'solo', input: 'hi' });
    assert.equal(r.status, 'completed');
  });

  test('one prompt the upstream always fails (a tokenizer error) does not take the model down for the others', async () => {
    reset();
    a.defaultReply = (body: { messages?: Array<{ content?: unknown }> }) =>
      JSON.stringify(body.messages ?? []).includes('poison') ? { status: 500, errorMessage: 'tokenizer error' } : { text: 'fine' };
    let refused = 0;
    for (let i = 0; i < 15; i++) {
      if ((await post('/v1/chat/completions', { model: 'solo', messages: [{ role: 'user', content: 'poison' }] })).status === 502) refused++;
      const ok = await client.chat.completions.create({ model: 'solo', messages: [{ role: 'user', content: `hello ${i}` }] });
      assert.equal(ok.choices[0]!.message.content, 'fine', `the others are served (round ${i})`);
    }
    assert.equal(refused, 15);
    assert.equal(state('solo-a'), 'closed');
  });

  test('a deployment that always breaks mid-stream is taken out: the first output does not clear its failures', async () => {
    reset();
    a.defaultReply = { text: 'a long answer that breaks in the middle', chunks: 6, breakAfter: 3 };
    for (let i = 0; i < 3; i++) {
      const res = await post('/v1/responses', { model: 'midstream', input: 'hi', stream: true });
      assert.match(await res.text(), /response\.failed/);
    }
    assert.equal(state('ms-a'), 'open', 'three broken streams of three');
    assert.match(t.runtime.router.health.peek('ms-a')!.lastError ?? '', /mid-stream|broke|ended/);
    const res = await post('/v1/responses', { model: 'midstream', input: 'hi', stream: true });
    assert.match(await res.text(), /response\.completed/);
    assert.equal(a.requests.length, 3, 'the open deployment is not called');
    assert.equal(b.requests.length, 1);
    // Chat Completions forwarded break the same way, and count the same way (a fresh start: brought to closed)
    t.runtime.router.health.peek('ms-a')!.openUntil = 0;
    t.runtime.router.health.peek('ms-a')!.outcomes.clear();
    reset();
    a.defaultReply = { text: 'a long answer that breaks in the middle', chunks: 6, breakAfter: 3 };
    for (let i = 0; i < 3; i++) {
      const r = await post('/v1/chat/completions', { model: 'midstream', messages: [{ role: 'user', content: 'hi' }], stream: true });
      await r.text().catch(() => '');
    }
    assert.equal(state('ms-a'), 'open');
  });

  test("a model's only deployment that breaks every stream is taken out too, but only after 10", async () => {
    reset();
    a.defaultReply = { text: 'a long answer that breaks in the middle', chunks: 6, breakAfter: 3 };
    for (let i = 0; i < 9; i++) await (await post('/v1/responses', { model: 'solo-midstream', input: 'hi', stream: true })).text();
    assert.equal(state('sm-a'), 'closed', '9 of 9: fewer than 10');
    await (await post('/v1/responses', { model: 'solo-midstream', input: 'hi', stream: true })).text();
    assert.equal(state('sm-a'), 'open', '10 of 10');
    const res = await post('/v1/responses', { model: 'solo-midstream', input: 'hi' });
    assert.equal(res.status, 503);
  });

  test('a 429 storm is load, not failure: the breaker stays closed, and the other deployment serves meanwhile', async () => {
    reset();
    a.defaultReply = { status: 429, errorMessage: 'slow down' };
    for (let i = 0; i < 12; i++) {
      const r = await client.responses.create({ model: 'storm', input: 'hi' });
      assert.equal(r.status, 'completed');
    }
    assert.equal(state('st-a'), 'closed');
    assert.equal(b.requests.length, 12);
  });

  test('a 200 whose body is not JSON, or a malformed stream before any output, is retried on the healthy deployment', async () => {
    reset();
    a.defaultReply = { rawJson: '<html>502 Bad Gateway</html>' };
    for (let i = 0; i < 10; i++) {
      const r = await client.responses.create({ model: 'garbage', input: 'hi' });
      assert.equal(r.status, 'completed', `non-streaming ${i}`);
      const c = await client.chat.completions.create({ model: 'garbage', messages: [{ role: 'user', content: 'hi' }] });
      assert.equal(c.choices[0]!.message.content, 'Hello from b.');
    }
    a.defaultReply = { raw: ['data: {not json at all\n\n'] };
    for (let i = 0; i < 10; i++) {
      const res = await post('/v1/responses', { model: 'garbage', input: 'hi', stream: true });
      assert.match(await res.text(), /response\.completed/, `streaming ${i}`);
      const chat = await post('/v1/chat/completions', { model: 'garbage', messages: [{ role: 'user', content: 'hi' }], stream: true });
      const text = await chat.text();
      const content = [...text.matchAll(/"content":"([^"]*)"/g)].map((m) => m[1]).join('');
      assert.equal(content, 'Hello from b.', `chat streaming ${i}`);
      assert.doesNotMatch(text, /"error"/);
    }
    a.defaultReply = { rawJson: '{"object":"list","data":"not a list"' };
    for (let i = 0; i < 5; i++) {
      const e = await client.embeddings.create({ model: 'garbage-embed', input: 'hi' });
      assert.equal(e.data.length, 1);
    }
  });
});
