/**
 * What clients and operators are told of the routing (docs/models.md, "What the client is told"): the
 * deployment that served and the retries and fallback in response headers (JSON answers and streams alike);
 * retry-after and retry-after-ms on the gateway's own refusals (every deployment out: 503; at its rpm/tpm: 429),
 * which the official SDK honours; `model` in every answer is the name the client sent, whatever the upstream
 * calls it; the retry and fallback series count per request and name the deployment that failed.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { metricValue } from '../helpers/metrics.js';
import { parseModelConfig } from '../../src/models/config.js';

describe('what the client and the operator are told', () => {
  let a: ScriptedUpstream;
  let b: ScriptedUpstream;
  let t: TestApp & { url?: string };
  let key: string;
  let client: OpenAI;
  const post = (path: string, body: Record<string, unknown>) =>
    fetch(t.url + path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const reset = () => {
    a.reset();
    b.reset();
  };

  before(async () => {
    // both upstreams name a dated variant of their own in every answer
    a = await startScriptedUpstream({ defaultReply: { text: 'from a', model: 'mock-model-2024-08-06' } });
    b = await startScriptedUpstream({ defaultReply: { text: 'from b', model: 'mock-model-2024-08-06' } });
    const yaml = `
models:
  - name: gpt-4o-mini
    retry_backoff_ms: 1
    breaker: { failures: 100 }    # the failures scripted here must not take a deployment out
    fallbacks: [backup]
    deployments:
      - { id: mini-a, provider: openai-compatible, base_url: ${a.url}, weight: 1, upstream_model: mock-model }
      - { id: mini-b, provider: openai-compatible, base_url: ${b.url}, weight: 0, upstream_model: mock-model }
  - { name: backup, id: backup-b, provider: openai-compatible, base_url: ${b.url}, upstream_model: big }
  - name: tight
    deployments:
      - { id: tight-a, provider: openai-compatible, base_url: ${a.url}, rpm: 1 }
  - name: embed
    type: embeddings
    deployments:
      - { id: emb-a, provider: openai-compatible, base_url: ${a.url}, upstream_model: mock-embed }
  - name: opened
    breaker: { failures: 1, cooldown_ms: 60000 }
    retries: 0
    deployments:
      - { id: op-a, provider: openai-compatible, base_url: ${a.url}, weight: 1 }
      - { id: op-b, provider: openai-compatible, base_url: ${b.url}, weight: 1 }
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

  test('model in every answer is the name the client sent: Chat Completions, Responses (events, stored), embeddings', async () => {
    reset();
    const c = await client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(c.model, 'gpt-4o-mini');
    const cs = await client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], stream: true });
    for await (const chunk of cs) assert.equal(chunk.model, 'gpt-4o-mini');
    const r = await client.responses.create({ model: 'gpt-4o-mini', input: 'hi' });
    assert.equal(r.model, 'gpt-4o-mini');
    assert.equal((await client.responses.retrieve(r.id)).model, 'gpt-4o-mini');
    const stream = await client.responses.create({ model: 'gpt-4o-mini', input: 'hi', stream: true });
    const models = new Set<string>();
    let id = '';
    for await (const e of stream) {
      if ('response' in e) {
        models.add(e.response.model);
        id = e.response.id;
      }
    }
    assert.deepEqual([...models], ['gpt-4o-mini'], 'response.created and response.completed agree');
    assert.equal((await client.responses.retrieve(id)).model, 'gpt-4o-mini');
    const e = await client.embeddings.create({ model: 'embed', input: 'hi' });
    assert.equal(e.model, 'embed');
    assert.ok(
      a.requests.every((x) => x.body.model === 'mock-model' || x.body.model === 'mock-embed'),
      'the upstream was asked by its own name',
    );
  });

  test('x-portico-deployment / -retries / -fallback: on a JSON answer and on a stream', async () => {
    reset();
    let res = await post('/v1/chat/completions', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-portico-deployment'), 'mini-a');
    assert.equal(res.headers.get('x-portico-retries'), '0');
    assert.equal(res.headers.get('x-portico-fallback'), null);
    // a retry on the other deployment
    a.script({ status: 500 });
    res = await post('/v1/responses', { model: 'gpt-4o-mini', input: 'hi', stream: true });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-portico-deployment'), 'mini-b');
    assert.equal(res.headers.get('x-portico-retries'), '1');
    await res.text();
    // both deployments fail every try (a, b, a again: a weighs more), then the fallback serves
    a.script({ status: 503 }, { status: 503 });
    b.script({ status: 503 });
    const raw = await client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }).withResponse();
    assert.equal(raw.response.headers.get('x-portico-deployment'), 'backup-b');
    assert.equal(raw.response.headers.get('x-portico-fallback'), 'backup');
    assert.equal(raw.response.headers.get('x-portico-retries'), '3');
    assert.equal(raw.data.model, 'gpt-4o-mini');
  });

  test('the retry and fallback series: per request, labelled with the deployment that failed', async () => {
    reset();
    const before = await t.runtime.scrape();
    const retriesA0 = metricValue(before, 'portico_model_retries_total', { model: 'gpt-4o-mini', deployment: 'mini-a' }) ?? 0;
    const retriesB0 = metricValue(before, 'portico_model_retries_total', { model: 'gpt-4o-mini', deployment: 'mini-b' }) ?? 0;
    const fallbacks0 = metricValue(before, 'portico_model_fallbacks_total', { model: 'gpt-4o-mini' }) ?? 0;
    // five requests: a fails (500), b answers: one retry each, labelled mini-a (the one that failed)
    for (let i = 0; i < 5; i++) {
      a.script({ status: 500 });
      await client.responses.create({ model: 'gpt-4o-mini', input: 'hi' });
    }
    // four requests that fall back (three tries fail each: a, b, a)
    for (let i = 0; i < 4; i++) {
      a.script({ status: 503 }, { status: 503 });
      b.script({ status: 503 });
      await client.responses.create({ model: 'gpt-4o-mini', input: 'hi' });
    }
    const after = await t.runtime.scrape();
    const retriesA = (metricValue(after, 'portico_model_retries_total', { model: 'gpt-4o-mini', deployment: 'mini-a' }) ?? 0) - retriesA0;
    const retriesB = (metricValue(after, 'portico_model_retries_total', { model: 'gpt-4o-mini', deployment: 'mini-b' }) ?? 0) - retriesB0;
    const fallbacks = (metricValue(after, 'portico_model_fallbacks_total', { model: 'gpt-4o-mini' }) ?? 0) - fallbacks0;
    assert.equal(fallbacks, 4, 'one per request that fell back');
    // 5 retries after a's failures; in the fallen-back requests, 2 retries each after the first two of three failures
    assert.equal(retriesA + retriesB, 5 + 4 * 2);
    assert.ok(retriesA >= 5, `the retries after a's failures name a (${retriesA})`);
  });

  test('every deployment out: 503 with retry-after and retry-after-ms; a deployment at its rpm: 429 with them; the SDK waits and retries', async () => {
    reset();
    // open op-a and op-b (one failure each opens them)
    a.script({ status: 500 });
    b.script({ status: 500 });
    for (let i = 0; i < 2; i++) await post('/v1/responses', { model: 'opened', input: 'hi' });
    const h = (id: string) => t.runtime.router.health.peek(id)!;
    assert.equal(h('op-a').state(Date.now()), 'open');
    assert.equal(h('op-b').state(Date.now()), 'open');
    const res = await post('/v1/responses', { model: 'opened', input: 'hi' });
    assert.equal(res.status, 503);
    const ra = Number(res.headers.get('retry-after'));
    const raMs = Number(res.headers.get('retry-after-ms'));
    assert.ok(ra >= 55 && ra <= 60, `retry-after ${ra}`);
    assert.ok(raMs > 55_000 && raMs <= 60_000, `retry-after-ms ${raMs}`);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'engine_unavailable');

    // rpm 1: the first request is served, the second refused with 429 until the minute's window frees
    const first = await post('/v1/chat/completions', { model: 'tight', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(first.status, 200);
    const second = await post('/v1/chat/completions', { model: 'tight', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(second.status, 429);
    const body = (await second.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'rate_limit_exceeded');
    assert.match(body.error.message, /tight-a: at its rpm limit/);
    const wait = Number(second.headers.get('retry-after-ms'));
    assert.ok(wait > 0 && wait <= 60_000, `retry-after-ms ${wait}`);
    assert.equal(second.headers.get('retry-after'), String(Math.ceil(wait / 1000)));
  });

  test('the official SDK honours retry-after-ms of a 429: it waits and is served', async () => {
    reset();
    // the deployment is at its limit for a short while: retry-after-ms as the upstream gave it (300 ms)
    a.script({ status: 429, errorMessage: 'slow down', headers: { 'retry-after-ms': '300', 'retry-after': '1' } });
    const sdk = new OpenAI({ apiKey: key, baseURL: t.url + '/v1', maxRetries: 2 });
    const r = await sdk.embeddings.create({ model: 'embed', input: 'hi' });
    assert.equal(r.model, 'embed');
  });
});
