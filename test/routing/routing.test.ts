/**
 * Routing (src/models/router): several deployments per model, retries before any output, fallbacks, the
 * circuit breaker and its state shared through Redis, with scripted upstreams that fail in every way.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { parseModelConfig, ModelConfigError } from '../../src/models/config.js';
import { dropInstallationKeys } from '../helpers/redis-keys.js';
import { testRedisPrefix, testRedisUrl } from '../helpers/services.js';

const REFUSED = 'http://127.0.0.1:9/v1';

function yaml(a: ScriptedUpstream, b: ScriptedUpstream): string {
  return `
models:
  - name: pair
    routing: weighted
    retries: 2
    retry_backoff_ms: 10
    deployments:
      - { id: pair-a, provider: openai-compatible, base_url: ${a.url}, upstream_model: up-a }
      - { id: pair-b, provider: openai-compatible, base_url: ${b.url}, upstream_model: up-b }
  - name: refused-first
    retry_backoff_ms: 10
    deployments:
      - { id: rf-dead, provider: openai-compatible, base_url: ${REFUSED}, weight: 1 }
      - { id: rf-live, provider: openai-compatible, base_url: ${b.url}, weight: 0 }
  - name: stalls
    retry_backoff_ms: 10
    deployments:
      - { id: st-slow, provider: openai-compatible, base_url: ${a.url}, weight: 1, timeouts: { first_byte_ms: 300 } }
      - { id: st-live, provider: openai-compatible, base_url: ${b.url}, weight: 0 }
  - name: primary-fallback
    fallbacks: [pair-backup]
    retries: 0
    deployments:
      - { id: pf-a, provider: openai-compatible, base_url: ${a.url}, weight: 1 }
      - { id: pf-b, provider: openai-compatible, base_url: ${b.url}, weight: 0 }
  - name: pair-backup
    id: backup-b
    provider: openai-compatible
    base_url: ${b.url}
    upstream_model: big-model
  - name: small-window
    provider: openai-compatible
    base_url: ${a.url}
    context_window_fallbacks: [pair-backup]
  - name: breaker
    breaker: { failures: 2, cooldown_ms: 60000 }
    retry_backoff_ms: 10
    deployments:
      - { id: br-a, provider: openai-compatible, base_url: ${a.url}, weight: 1 }
      - { id: br-b, provider: openai-compatible, base_url: ${b.url}, weight: 0 }
  - name: limited
    deployments:
      - { id: lim-a, provider: openai-compatible, base_url: ${a.url}, weight: 1, rpm: 1 }
      - { id: lim-b, provider: openai-compatible, base_url: ${b.url}, weight: 0 }
  - name: one
    id: one-a
    provider: openai-compatible
    base_url: ${a.url}
    retry_backoff_ms: 10
  - name: emb
    type: embeddings
    deployments:
      - { id: emb-dead, provider: openai-compatible, base_url: ${REFUSED}, weight: 1 }
      - { id: emb-live, provider: openai-compatible, base_url: ${b.url}, weight: 0 }
`;
}

describe('the model file: deployments', () => {
  const err = (text: string, re: RegExp) =>
    assert.throws(
      () => parseModelConfig(text, 'm.yaml'),
      (e: unknown) => e instanceof ModelConfigError && re.test((e as Error).message),
    );
  test('a model lists deployments; each is checked against its provider; ids default to name#n', () => {
    const { models } = parseModelConfig(
      'models:\n  - name: m\n    fallbacks: [n]\n    deployments:\n      - { provider: openai-compatible, base_url: "http://a/v1", weight: 2, rpm: 5, timeouts: { connect_ms: 50 } }\n      - { provider: openai-compatible, base_url: "http://b/v1", upstream_model: x }\n  - { name: n, provider: openai-compatible, base_url: "http://c/v1" }\n',
    );
    const m = models[0]!;
    assert.deepEqual(
      m.deployments!.map((d) => [d.id, d.weight, d.upstream_model, d.rpm, d.timeouts?.connect_ms]),
      [
        ['m#1', 2, 'm', 5, 50],
        ['m#2', 1, 'x', undefined, undefined],
      ],
    );
    assert.equal(m.provider, 'openai-compatible');
    assert.equal(m.base_url, 'http://a/v1', 'the first deployment lends its keys to the entry');
  });
  test('unknown keys are errors naming the key, wherever they are', () => {
    err(
      'models:\n  - name: m\n    deployments:\n      - { provider: openai-compatible, base_url: "http://a/v1", wieght: 2 }\n',
      /deployments\[0\]: unknown key 'wieght'.*did you mean 'weight'/,
    );
    err(
      'models:\n  - name: m\n    deployments:\n      - { provider: openai-compatible, base_url: "http://a/v1", timeouts: { first_bite_ms: 1 } }\n',
      /unknown key 'timeouts.first_bite_ms'.*first_byte_ms/,
    );
    err(
      'models:\n  - name: m\n    provider: openai-compatible\n    deployments:\n      - { provider: openai-compatible, base_url: "http://a/v1" }\n',
      /unknown key 'provider' for a model with deployments \('provider' goes in each deployment\)/,
    );
    err(
      'models:\n  - name: m\n    deployments:\n      - { provider: openai-compatible, base_url: "http://a/v1", fallbacks: [x] }\n',
      /'fallbacks' belongs to the model, not to one deployment/,
    );
    err('models:\n  - { name: m, provider: openai-compatible, base_url: "http://a/v1", weight: 2 }\n', /unknown key 'weight'/);
    err('models:\n  - { name: m, provider: openai-compatible, base_url: "http://a/v1", routing: random }\n', /'routing' must be one of: weighted, least-busy/);
  });
  test('two entries of one name point to deployments; fallbacks must name models of the file', () => {
    err(
      'models:\n  - { name: m, provider: openai-compatible, base_url: "http://a/v1" }\n  - { name: m, provider: openai-compatible, base_url: "http://b/v1" }\n',
      /duplicates the model name "m"; .*'deployments'/,
    );
    err('models:\n  - { name: m, provider: openai-compatible, base_url: "http://a/v1", fallbacks: [nope] }\n', /'fallbacks' names "nope", which is not a model of this file/);
    err('models:\n  - { name: m, provider: openai-compatible, base_url: "http://a/v1", fallbacks: [m] }\n', /names the model itself/);
    err(
      'models:\n  - name: m\n    deployments:\n      - { id: same, provider: openai-compatible, base_url: "http://a/v1" }\n      - { id: same, provider: openai-compatible, base_url: "http://b/v1" }\n',
      /two deployments have the id "same"/,
    );
  });
});

describe('routing with scripted upstreams that fail', () => {
  let a: ScriptedUpstream;
  let b: ScriptedUpstream;
  let t: TestApp & { url?: string };
  let key: string;
  let client: OpenAI;
  const post = (path: string, body: Record<string, unknown>) =>
    fetch(t.url + path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  /** the usage rows of the last requests, newest last */
  const usageRows = async () => {
    await t.core.usage.flush();
    return t.core.db.db
      .selectFrom('usage_records')
      .select(['model', 'deployment', 'operation', 'output_tokens', 'request_id'])
      .orderBy('created_at')
      .orderBy('record_id')
      .execute();
  };
  const reset = () => {
    a.reset();
    b.reset();
  };

  before(async () => {
    a = await startScriptedUpstream();
    b = await startScriptedUpstream();
    t = await buildTestApp({ listen: true, models: parseModelConfig(yaml(a, b)).models });
    key = await t.inferenceKey('alice');
    client = new OpenAI({ apiKey: key, baseURL: t.url + '/v1', maxRetries: 0 });
  });
  after(async () => {
    await t.close();
    await a.close();
    await b.close();
  });

  test('weighted: both deployments answer, each under its own upstream name; the response keeps the requested name', async () => {
    reset();
    for (let i = 0; i < 16; i++) {
      const r = await client.responses.create({ model: 'pair', input: 'hi' });
      assert.equal(r.model, 'pair');
    }
    assert.ok(a.requests.length > 0 && b.requests.length > 0, `spread: ${a.requests.length} / ${b.requests.length}`);
    assert.equal(a.requests.length + b.requests.length, 16, 'one try per request');
    assert.ok(a.requests.every((r) => r.body.model === 'up-a') && b.requests.every((r) => r.body.model === 'up-b'));
  });

  test('refused connection: the next deployment answers (SDK), usage names it, charged once', async () => {
    reset();
    const r = await client.responses.create({ model: 'refused-first', input: 'hi' });
    assert.equal(r.status, 'completed');
    assert.equal(r.model, 'refused-first');
    assert.equal(b.requests.length, 1);
    const rows = (await usageRows()).filter((x) => x.model === 'refused-first');
    assert.equal(rows.length, 1, 'one usage record');
    assert.equal(rows[0]!.deployment, 'rf-live');
  });

  test('429 with retry-after on the only deployment: waited for, then answered; 500 then answered', async () => {
    reset();
    a.script({ status: 429, errorMessage: 'slow down', headers: { 'retry-after': '1' } });
    const t0 = Date.now();
    const r = await client.responses.create({ model: 'one', input: 'hi' });
    assert.equal(r.status, 'completed');
    assert.ok(Date.now() - t0 >= 900, 'retry-after honoured');
    assert.equal(a.requests.length, 2);
    a.script({ status: 500, errorMessage: 'boom' }, { status: 503, errorMessage: 'busy' });
    const r2 = await client.chat.completions.create({ model: 'one', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r2.model, 'one');
    assert.equal(a.requests.length, 5, 'two failures, then the answer');
    // each try after the first is counted, by model and the deployment tried again
    assert.match(await t.runtime.scrape(), /portico_model_retries_total\{model="one",deployment="[^"]+"\} [3-9]/);
    // a refusal of the request itself is not retried
    a.script({ status: 400, errorMessage: 'bad seed' });
    const res = await post('/v1/responses', { model: 'one', input: 'hi' });
    assert.equal(res.status, 400);
    assert.equal(a.requests.length, 6);
    // retries are bounded: three failures in a row (retries 2) are the client's 502
    a.script({ status: 502 }, { status: 502 }, { status: 502 }, { text: 'never reached' });
    const res2 = await post('/v1/responses', { model: 'one', input: 'hi' });
    assert.equal(res2.status, 502, await res2.text());
    assert.equal(a.requests.length, 9);
    a.reset();
  });

  test('a deployment that stalls past first_byte_ms: the next one answers, streaming too', async () => {
    reset();
    a.script({ hang: true }, { hang: true });
    const t0 = Date.now();
    const r = await client.responses.create({ model: 'stalls', input: 'hi' });
    assert.equal(r.status, 'completed');
    const s = await client.chat.completions.create({ model: 'stalls', messages: [{ role: 'user', content: 'hi' }], stream: true });
    let text = '';
    for await (const c of s) text += c.choices[0]?.delta?.content ?? '';
    assert.ok(text.length > 0);
    assert.ok(Date.now() - t0 < 5000);
    assert.equal(b.requests.length, 2);
  });

  test('reset before any output is retried; reset mid-answer is not: the stream fails, nothing is tried again, usage charged once', async () => {
    reset();
    a.script({ text: 'x', breakAfter: 0 });
    const ok = await client.responses.create({ model: 'one', input: 'hi' });
    assert.equal(ok.status, 'completed');
    assert.ok(a.requests.length >= 2, 'tried again after a reset before any output');

    reset();
    a.script({ text: 'a long answer that breaks in the middle', chunks: 6, breakAfter: 3 });
    const before = new Set((await usageRows()).map((x) => x.request_id));
    const res = await post('/v1/responses', { model: 'one', input: 'hi', stream: true });
    assert.equal(res.status, 200);
    const body = await res.text();
    assert.match(body, /response\.output_text\.delta/);
    assert.match(body, /response\.failed/);
    assert.equal(a.requests.length, 1, 'not tried again after output');
    // the rows this request made (created_at is in seconds: rows of one second are in no set order)
    const rows = (await usageRows()).filter((x) => !before.has(x.request_id) && x.model === 'one');
    assert.equal(rows.length, 1, 'charged once');
    assert.equal(rows[0]!.deployment, 'one-a');
  });

  test('Responses streaming and background: a refused deployment before any output is tried on the next', async () => {
    reset();
    const res = await post('/v1/responses', { model: 'refused-first', input: 'hi', stream: true });
    assert.equal(res.status, 200);
    assert.match(await res.text(), /response\.completed/);
    const bg = await client.responses.create({ model: 'refused-first', input: 'hi', background: true });
    let r = bg;
    const deadline = Date.now() + 10_000;
    while (r.status === 'in_progress' && Date.now() < deadline) {
      await new Promise((x) => setTimeout(x, 50));
      r = await client.responses.retrieve(bg.id);
    }
    assert.equal(r.status, 'completed');
    assert.equal(r.model, 'refused-first');
    assert.equal(b.requests.length, 2);
  });

  test('every deployment down: the fallback answers under the requested name; usage names the fallback deployment', async () => {
    reset();
    a.script({ status: 503 });
    b.script({ status: 503 });
    const r = await client.responses.create({ model: 'primary-fallback', input: 'hi' });
    assert.equal(r.model, 'primary-fallback');
    assert.equal(b.requests.length, 2);
    assert.equal(b.requests[1]!.body.model, 'big-model');
    const row = (await usageRows()).filter((x) => x.model === 'primary-fallback').pop()!;
    assert.equal(row.deployment, 'backup-b');
    // the fallback is counted under the requested model and the deployment that failed last
    assert.match(await t.runtime.scrape(), /portico_model_fallbacks_total\{model="primary-fallback",deployment="pf-[ab]"\} [1-9]/);
    // chat completions forwarded: the chunks name the requested model too
    a.script({ status: 503 });
    b.script({ status: 503 });
    const c = await client.chat.completions.create({ model: 'primary-fallback', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(c.model, 'primary-fallback');
  });

  test('a context-window refusal goes to context_window_fallbacks', async () => {
    reset();
    a.script({
      status: 400,
      errorBody: { error: { message: "This model's maximum context length is 10 tokens", type: 'invalid_request_error', param: 'messages', code: 'context_length_exceeded' } },
    });
    const r = await client.responses.create({ model: 'small-window', input: 'a long input' });
    assert.equal(r.status, 'completed');
    assert.equal(r.model, 'small-window');
    assert.equal(b.requests[0]!.body.model, 'big-model');
  });

  test('the breaker opens after N failures, keeps requests off the deployment, and closes after a good probe', async () => {
    reset();
    a.script({ status: 500 }, { status: 500 });
    await client.responses.create({ model: 'breaker', input: '1' });
    await client.responses.create({ model: 'breaker', input: '2' });
    assert.equal(a.requests.length, 2);
    const health = () => t.runtime.router.health.get('br-a')!;
    assert.equal(health().state(Date.now()), 'open');
    assert.ok(health().openUntil > Date.now() + 30_000, 'open for its cooldown (60 s)');
    await client.responses.create({ model: 'breaker', input: '3' });
    assert.equal(a.requests.length, 2, 'open: not called');
    assert.equal(b.requests.length, 3);
    // the cooldown ends: brought to now rather than waited for (a short cooldown raced request 3 on a slow machine)
    health().openUntil = Date.now();
    assert.equal(health().state(Date.now()), 'half-open');
    await client.responses.create({ model: 'breaker', input: '4' });
    assert.equal(a.requests.length, 3, 'half-open: one probe');
    assert.equal(health().state(Date.now()), 'closed');
  });

  test('rpm: a deployment at its limit is skipped', async () => {
    reset();
    await client.responses.create({ model: 'limited', input: '1' });
    await client.responses.create({ model: 'limited', input: '2' });
    assert.equal(a.requests.length, 1);
    assert.equal(b.requests.length, 1);
  });

  test('embeddings fail over too, and name the deployment', async () => {
    reset();
    const r = await client.embeddings.create({ model: 'emb', input: 'hello' });
    assert.equal(r.model, 'emb');
    assert.equal(b.requests.length, 1);
    const row = (await usageRows()).filter((x) => x.model === 'emb').pop()!;
    assert.equal(row.deployment, 'emb-live');
  });
});

describe('the breaker state is shared through Redis', () => {
  test('a breaker opened on one instance keeps the other off the deployment', async () => {
    const a = await startScriptedUpstream();
    const b = await startScriptedUpstream();
    const models = parseModelConfig(yaml(a, b)).models;
    // two processes of one installation: on embedded databases they cannot share one, so they share a REDIS_PREFIX
    // (installations are otherwise named after their database, and never hear each other: test/platform/installations.test.ts)
    const env = { REDIS_URL: testRedisUrl(), REDIS_PREFIX: testRedisPrefix('breaker') };
    const one = await buildTestApp({ listen: true, models, env });
    const two = await buildTestApp({ listen: true, models, env });
    try {
      const c1 = new OpenAI({ apiKey: await one.inferenceKey('alice'), baseURL: one.url + '/v1', maxRetries: 0 });
      const c2 = new OpenAI({ apiKey: await two.inferenceKey('bob'), baseURL: two.url + '/v1', maxRetries: 0 });
      // the second instance knows the deployment (and subscribes) before the first opens it
      await c2.responses.create({ model: 'breaker', input: '0' });
      a.reset();
      a.script({ status: 500 }, { status: 500 });
      await c1.responses.create({ model: 'breaker', input: '1' });
      await c1.responses.create({ model: 'breaker', input: '2' });
      assert.equal(a.requests.length, 2);
      // a deadline that only bounds a failure (the breaker stays open for its 60 s cooldown)
      const deadline = Date.now() + 10_000;
      while (two.runtime.router.health.get('br-a')!.state(Date.now()) !== 'open' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.equal(two.runtime.router.health.get('br-a')!.state(Date.now()), 'open', 'the other instance heard it');
      await c2.responses.create({ model: 'breaker', input: '3' });
      assert.equal(a.requests.length, 2, 'the other instance does not call it');
    } finally {
      await one.close();
      await two.close();
      await dropInstallationKeys(env.REDIS_URL, env.REDIS_PREFIX);
      await a.close();
      await b.close();
    }
  });
});
