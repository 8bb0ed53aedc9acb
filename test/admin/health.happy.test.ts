/**
 * GET /v1/admin/health on one instance, against scripted upstreams whose answers, failures, delays and hangs the
 * test chooses: the figures are the ones those answers make (counts, error rate, the breaker's state and reason,
 * p50/p95 from known latencies, the time to the first output of a stream, in flight while a request hangs, rpm/tpm
 * used against the deployment's limits). Every configured deployment is listed, with zeros when nobody called it.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type Reply, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { parseModelConfig } from '../../src/models/config.js';
import { waitFor } from '../helpers/wait.js';
import { callers, type Callers } from './helpers.js';

describe('GET /v1/admin/health: one instance', () => {
  let up: ScriptedUpstream;
  let down: ScriptedUpstream;
  let t: TestApp & { url?: string };
  let c: Callers;
  let key: string;

  const health = async (query = '') => {
    const res = await t.app.inject({ method: 'GET', url: `/v1/admin/health${query}`, headers: c.operator });
    assert.equal(res.statusCode, 200, res.body);
    return res.json().data;
  };
  const dep = async (id: string) => {
    const d = (await health()).deployments.find((x: any) => x.deployment === id);
    assert.ok(d, `${id} is listed`);
    return d;
  };
  const chat = (model: string, body: Record<string, unknown> = {}, signal?: AbortSignal) =>
    fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], ...body }),
      signal,
    });

  before(async () => {
    up = await startScriptedUpstream();
    down = await startScriptedUpstream();
    down.defaultReply = { status: 500, errorMessage: 'the upstream is down' };
    const yaml = `
models:
  - name: steady
    id: steady-a
    provider: openai-compatible
    base_url: ${up.url}
    rpm: 1000
    tpm: 50000
  - name: streamer
    id: stream-a
    provider: openai-compatible
    base_url: ${up.url}
  - name: idle
    id: idle-a
    provider: openai-compatible
    base_url: ${up.url}
  - name: brk
    retries: 0
    breaker: { failures: 2, failure_rate: 0.5, cooldown_ms: 1500 }
    deployments:
      - { id: brk-bad, provider: openai-compatible, base_url: ${down.url}, weight: 1 }
      - { id: brk-good, provider: openai-compatible, base_url: ${up.url}, weight: 0 }
  - name: strict
    id: strict-a
    provider: openai-compatible
    base_url: ${up.url}
    retries: 0
  - name: stuck
    id: stuck-a
    provider: openai-compatible
    base_url: ${up.url}
  - name: vectors
    id: vectors-a
    type: embeddings
    provider: openai-compatible
    base_url: ${up.url}
`;
    t = await buildTestApp({ listen: true, models: parseModelConfig(yaml).models });
    c = await callers(t);
    key = await t.inferenceKey('alice');
  });
  after(async () => {
    await t.close();
    await up.close();
    await down.close();
  });

  test('every configured deployment is listed before any traffic, with zeros and nulls; this instance is the one row', async () => {
    const d = await health();
    assert.equal(d.window_seconds, 60);
    assert.ok(Math.abs(d.generated_at - Date.now() / 1000) < 5);
    assert.equal(d.instances.length, 1);
    const me = d.instances[0];
    assert.equal(me.self, true);
    assert.equal(me.pid, process.pid);
    assert.equal(me.host, hostname());
    assert.equal(me.id, t.runtime.responses.service.background.instanceId, 'named as its background runner (runner_id)');
    assert.ok(me.started_at <= d.generated_at && me.seen_at === d.generated_at);
    assert.deepEqual(
      d.deployments.map((x: any) => [x.model, x.deployment]),
      [
        ['steady', 'steady-a'],
        ['streamer', 'stream-a'],
        ['idle', 'idle-a'],
        ['brk', 'brk-bad'],
        ['brk', 'brk-good'],
        ['strict', 'strict-a'],
        ['stuck', 'stuck-a'],
        ['vectors', 'vectors-a'],
      ],
    );
    const idle = d.deployments.find((x: any) => x.deployment === 'idle-a');
    const zeros = { requests: 0, failures: 0, error_rate: 0, p50_ms: null, p95_ms: null, ttft_p50_ms: null, ttft_p95_ms: null, in_flight: 0 };
    assert.deepEqual(idle, {
      model: 'idle',
      deployment: 'idle-a',
      provider: 'openai-compatible',
      state: 'closed',
      reason: null,
      ...zeros,
      rpm: { used: 0, limit: null },
      tpm: { used: 0, limit: null },
      instances: [{ instance: me.id, state: 'closed', ...zeros, rpm_used: 0, tpm_used: 0 }],
    });
    const steady = d.deployments.find((x: any) => x.deployment === 'steady-a');
    assert.deepEqual(
      [steady.rpm, steady.tpm],
      [
        { used: 0, limit: 1000 },
        { used: 0, limit: 50000 },
      ],
    );
  });

  test('counts, rpm/tpm used against the limits, and p50/p95 from known latencies (14 answers of 50 ms, 6 of 200 ms)', async () => {
    const delays = [50, 200, 50, 50, 50, 200, 50, 50, 50, 200, 50, 50, 200, 50, 50, 50, 200, 50, 50, 200];
    up.script(...delays.map((ms): Reply => ({ text: 'fine', headerDelayMs: ms, usage: { prompt_tokens: 10, completion_tokens: 5 } })));
    let tokens = 0;
    for (let i = 0; i < delays.length; i++) {
      const r = await chat('steady');
      assert.equal(r.status, 200);
      tokens += ((await r.json()) as any).usage.total_tokens;
    }
    assert.equal(tokens, 20 * 15);
    const d = await dep('steady-a');
    assert.equal(d.requests, 20);
    assert.equal(d.failures, 0);
    assert.equal(d.error_rate, 0);
    // 70 % took 50 ms (plus Portico's own time), 30 % 200 ms: the median is in the first group, the 95th in the second
    assert.ok(d.p50_ms >= 45 && d.p50_ms < 150, `p50 ${d.p50_ms}`);
    assert.ok(d.p95_ms >= 185 && d.p95_ms < 400, `p95 ${d.p95_ms}`);
    assert.equal(d.ttft_p50_ms, null, 'a non-streamed answer gives no time to first token');
    assert.deepEqual(d.rpm, { used: 20, limit: 1000 });
    assert.deepEqual(d.tpm, { used: 300, limit: 50000 });
    assert.equal(d.in_flight, 0);
    assert.deepEqual([d.instances.length, d.instances[0].requests, d.instances[0].rpm_used, d.instances[0].tpm_used, d.instances[0].p50_ms], [1, 20, 20, 300, d.p50_ms]);
    // the model filter
    const only = await health('?model=steady');
    assert.deepEqual(
      only.deployments.map((x: any) => x.deployment),
      ['steady-a'],
    );
  });

  test("the time to the first token of a stream, apart from the whole answer's latency", async () => {
    up.script({ text: 'one two three four', chunks: 4, headerDelayMs: 150, delayMs: 60 });
    const r = await chat('streamer', { stream: true });
    assert.equal(r.status, 200);
    assert.match(await r.text(), /\[DONE\]/);
    const d = await dep('stream-a');
    assert.equal(d.requests, 1);
    assert.ok(d.ttft_p50_ms >= 135 && d.ttft_p50_ms < 300, `ttft ${d.ttft_p50_ms}`);
    assert.equal(d.ttft_p95_ms, d.ttft_p50_ms, 'one sample');
    // the first frame comes with the headers, every later one 60 ms after the one before
    assert.ok(d.p50_ms >= d.ttft_p50_ms + 200, `whole answer ${d.p50_ms} ms, first token ${d.ttft_p50_ms} ms`);
    // the Responses API's streams (the router's generate path) count the same way
    up.script({ text: 'one two three', chunks: 3, headerDelayMs: 150, delayMs: 10 });
    const res = await fetch(`${t.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'streamer', input: 'hi', stream: true }),
    });
    assert.match(await res.text(), /response\.completed/);
    const after = await dep('stream-a');
    assert.equal(after.requests, 2);
    assert.ok(after.ttft_p50_ms >= 135 && after.ttft_p95_ms < 300, `ttft ${after.ttft_p50_ms} / ${after.ttft_p95_ms}`);
  });

  test("failures open the breaker: 'open' with its reason, then half-open after the cooldown, then closed", async () => {
    for (let i = 0; i < 2; i++) assert.equal((await chat('brk')).status, 502);
    let d = await dep('brk-bad');
    assert.equal(d.state, 'open');
    assert.match(d.reason, /the upstream is down/);
    assert.deepEqual([d.requests, d.failures, d.error_rate], [2, 2, 1]);
    assert.equal(d.instances[0].state, 'open');
    // the open deployment is skipped: the other serves
    assert.equal((await chat('brk')).status, 200);
    const good = await dep('brk-good');
    assert.deepEqual([good.state, good.requests, good.failures], ['closed', 1, 0]);
    d = await waitFor(
      async () => {
        const x = await dep('brk-bad');
        return x.state === 'half-open' ? x : undefined;
      },
      { what: 'the cooldown (1.5 s) to end' },
    );
    assert.match(d.reason, /the upstream is down/, 'half-open keeps why it opened');
    // the probe succeeds: closed, no reason
    down.defaultReply = { text: 'back' };
    assert.equal((await chat('brk')).status, 200);
    d = await dep('brk-bad');
    assert.deepEqual([d.state, d.reason, d.requests, d.failures], ['closed', null, 3, 2]);
    assert.ok(Math.abs(d.error_rate - 2 / 3) < 1e-9);
  });

  test("a refusal of the request is not the deployment's failure; an upstream's 429 is", async () => {
    up.script({ status: 400, errorMessage: 'bad input' }, { status: 429, errorMessage: 'slow down' });
    assert.equal((await chat('strict')).status, 400);
    assert.equal((await chat('strict')).status, 429);
    const d = await dep('strict-a');
    assert.deepEqual([d.requests, d.failures, d.error_rate, d.state], [2, 1, 0.5, 'closed']);
  });

  test('in flight while a request hangs; back to 0 when its client leaves, a request and no failure', async () => {
    up.script({ hang: true });
    const ctl = new AbortController();
    const pending = chat('stuck', {}, ctl.signal).catch((e: Error) => e);
    const d = await waitFor(
      async () => {
        const x = await dep('stuck-a');
        return x.in_flight === 1 ? x : undefined;
      },
      { what: 'the hanging request to be in flight' },
    );
    assert.equal(d.instances[0].in_flight, 1);
    assert.equal(d.requests, 0, 'counted when it ends');
    assert.equal(d.rpm.used, 1, 'rpm counts it when it begins');
    ctl.abort();
    await pending;
    const after = await waitFor(
      async () => {
        const x = await dep('stuck-a');
        return x.in_flight === 0 ? x : undefined;
      },
      { what: 'the request to end' },
    );
    assert.deepEqual([after.requests, after.failures], [1, 0]);
  });

  test('embeddings: latency and tokens, no time to first token', async () => {
    up.script({ headerDelayMs: 50 });
    const r = await fetch(`${t.url}/v1/embeddings`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'vectors', input: 'sixteen characters' }),
    });
    assert.equal(r.status, 200);
    const d = await dep('vectors-a');
    assert.equal(d.requests, 1);
    assert.ok(d.p50_ms >= 45, `p50 ${d.p50_ms}`);
    assert.equal(d.ttft_p50_ms, null);
    assert.ok(d.tpm.used > 0);
  });
});
