/**
 * Active health checks (src/models/router/checks.ts): a deployment with `health_check` is probed off the request
 * path; failed probes open its breaker before a user's request meets the failure, a good probe closes it again,
 * and /metrics shows the verdicts. The model file refuses a health check where the provider cannot be probed.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { metricValue } from '../helpers/metrics.js';
import { parseModelConfig, ModelConfigError } from '../../src/models/config.js';
import { waitFor } from '../helpers/wait.js';

describe('active health checks', () => {
  let a: ScriptedUpstream;
  let b: ScriptedUpstream;
  let t: TestApp & { url?: string };
  let client: OpenAI;

  before(async () => {
    a = await startScriptedUpstream();
    b = await startScriptedUpstream();
    const yaml = `
models:
  - name: checked
    deployments:
      - { id: ck-a, provider: openai-compatible, base_url: ${a.url}, weight: 1, health_check: { interval_ms: 1000, failures: 2 } }
      - { id: ck-b, provider: openai-compatible, base_url: ${b.url}, weight: 0 }
  - name: checked-gen
    type: embeddings
    deployments:
      - { id: cg-a, provider: openai-compatible, base_url: ${a.url}, health_check: { probe: completion, interval_ms: 1000, timeout_ms: 300, failures: 1 } }
`;
    t = await buildTestApp({ listen: true, models: parseModelConfig(yaml).models });
    client = new OpenAI({ apiKey: await t.inferenceKey('alice'), baseURL: t.url + '/v1', maxRetries: 0 });
  });
  after(async () => {
    await t.close();
    await a.close();
    await b.close();
  });

  test('probes run at start; failing probes open the breaker before any request; a good probe closes it', async () => {
    const h = () => t.runtime.router.health.peek('ck-a');
    await waitFor(() => h()?.checkOk === true, { what: 'the first probe of ck-a' });
    assert.ok(
      a.requests.some((r) => r.method === 'GET' && r.path === '/v1/models'),
      'GET /models was asked',
    );
    assert.equal(metricValue(await t.runtime.scrape(), 'portico_deployment_health_check_up', { deployment: 'ck-a' }), 1);

    // the upstream starts failing: two failed probes in a row open the breaker, with no request at all
    a.modelsReply = { status: 500 };
    const chats = a.requests.filter((r) => r.path === '/v1/responses' || r.path === '/v1/chat/completions').length;
    await waitFor(() => h()!.state(Date.now()) === 'open', { what: 'ck-a opened by its health check' });
    assert.equal(a.requests.filter((r) => r.path === '/v1/responses' || r.path === '/v1/chat/completions').length, chats, 'no user request was needed');
    assert.match(h()!.lastError ?? '', /health check/);
    const scrape = await t.runtime.scrape();
    assert.equal(metricValue(scrape, 'portico_deployment_health_check_up', { deployment: 'ck-a' }), 0);
    assert.equal(metricValue(scrape, 'portico_model_circuit_state', { deployment: 'ck-a' }), 2);
    // requests go to the other deployment meanwhile
    const r = await client.responses.create({ model: 'checked', input: 'hi' });
    assert.equal(r.status, 'completed');
    assert.equal(a.requests.filter((x) => x.path === '/v1/responses' || x.path === '/v1/chat/completions').length, chats);

    // it recovers: the next good probe closes the breaker (long before its cooldown of 30 s)
    a.modelsReply = undefined;
    await waitFor(() => h()!.state(Date.now()) === 'closed' && h()!.checkOk === true, { what: 'ck-a closed by a good probe' });
  });

  test('a completion probe that hangs past timeout_ms fails (and with failures: 1 opens the breaker at once)', async () => {
    const h = () => t.runtime.router.health.peek('cg-a');
    await waitFor(() => h()?.checkOk === true, { what: 'the first probe of cg-a' });
    assert.ok(
      a.requests.some((r) => r.method === 'POST' && r.path === '/v1/embeddings' && r.body.input === 'ping'),
      'a one-input embeddings request',
    );
    a.defaultReply = { hang: true };
    try {
      await waitFor(() => h()!.state(Date.now()) === 'open', { what: 'cg-a opened by a hanging probe' });
      assert.match(h()!.lastError ?? '', /within 300 ms/);
    } finally {
      a.defaultReply = { text: 'Hello from the scripted upstream.', chunks: 4 };
    }
    await waitFor(() => h()!.state(Date.now()) === 'closed', { what: 'cg-a closed again' });
  });

  test('the model file: health_check keys are checked, and refused where the provider cannot be probed', () => {
    assert.throws(
      () => parseModelConfig('models:\n  - { name: m, provider: openai-compatible, base_url: "http://a/v1", health_check: { intervl_ms: 5 } }\n'),
      (e: unknown) => e instanceof ModelConfigError && /unknown key 'health_check.intervl_ms'.*interval_ms/.test((e as Error).message),
    );
    assert.throws(
      () => parseModelConfig('models:\n  - { name: m, provider: openai-compatible, base_url: "http://a/v1", health_check: { interval_ms: 10 } }\n'),
      (e: unknown) => e instanceof ModelConfigError && /interval_ms' must be at least 1000/.test((e as Error).message),
    );
    assert.throws(
      () => parseModelConfig('models:\n  - { name: m, provider: llama, path: ./x.gguf, health_check: {} }\n'),
      (e: unknown) => e instanceof ModelConfigError && /health_check' needs an upstream that can be probed/.test((e as Error).message),
    );
    const { models } = parseModelConfig('models:\n  - { name: m, provider: openai-compatible, base_url: "http://a/v1", health_check: { probe: completion } }\n');
    assert.deepEqual(models[0]!.deployments?.[0]?.health_check ?? models[0]!.health_check, { probe: 'completion' });
  });
});
