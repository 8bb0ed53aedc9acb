// Operations of real Portico processes: /healthz, /readyz (503 when PostgreSQL cannot be reached, through a
// proxy the test cuts), /metrics, and graceful shutdown on SIGTERM while a stream runs.
import { describe, test, before, after } from 'node:test';
import { metricValue } from '../helpers/metrics.js';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startCluster, createResponse, parseSse, type Cluster, type Instance } from '../helpers/cluster.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { waitFor } from '../helpers/wait.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** GET on a fresh connection (no keep-alive pool): tells a refused connection from an answer. */
function freshGet(url: string): Promise<{ status?: number; error?: string }> {
  return new Promise((resolve) => {
    const req = http.get(url, { agent: false, timeout: 3000 }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode }));
    });
    req.on('error', (e: NodeJS.ErrnoException) => resolve({ error: e.code ?? e.message }));
    req.on('timeout', () => req.destroy(new Error('timeout')));
  });
}

describe('health, readiness, metrics and graceful shutdown of real processes', () => {
  let up: ScriptedUpstream;
  let c: Cluster;
  let a: Instance;
  let b: Instance;
  let key: string;

  before(async () => {
    up = await startScriptedUpstream({ record: false });
    c = await startCluster({ upstreamUrl: up.url, proxyPostgres: true, env: { SHUTDOWN_GRACE_MS: '8000' } });
    [a, b] = c.instances;
    key = (await c.createKey(a, 'carol')).key;
  });
  after(async () => {
    await c?.close();
    await up?.close();
  });

  test('/healthz and /readyz answer 200 with every check ok', async () => {
    for (const inst of [a, b]) {
      const h = await fetch(`${inst.url}/healthz`);
      assert.equal(h.status, 200);
      assert.deepEqual(await h.json(), { status: 'ok' });
      const r = await fetch(`${inst.url}/readyz`);
      assert.equal(r.status, 200);
      const body = (await r.json()) as any;
      assert.equal(body.status, 'ready');
      assert.deepEqual(body.checks, { database: 'ok', migrations: 'ok', models: 'ok', redis: 'ok' });
    }
  });

  test('/readyz is 503 while PostgreSQL cannot be reached (healthz stays 200), 200 again once it is back', async () => {
    await c.pgProxy!.cut();
    try {
      const t0 = Date.now();
      const r = await fetch(`${a.url}/readyz`, { signal: AbortSignal.timeout(5000) });
      const ms = Date.now() - t0;
      assert.equal(r.status, 503);
      const body = (await r.json()) as any;
      assert.equal(body.status, 'not ready');
      assert.notEqual(body.checks.database, 'ok');
      assert.equal(body.checks.redis, 'ok');
      assert.ok(ms < 3000, `readyz took ${ms} ms`);
      assert.equal((await fetch(`${a.url}/healthz`)).status, 200);
    } finally {
      await c.pgProxy!.restore();
    }
    const t1 = Date.now();
    let status = 0;
    while (Date.now() - t1 < 10_000) {
      status = (await fetch(`${a.url}/readyz`)).status;
      if (status === 200) break;
      await sleep(100);
    }
    assert.equal(status, 200, 'not ready again within 10 s of PostgreSQL coming back');
  });

  test('/metrics: requests by route and status, latency histogram, tokens by model, active streams, queue depth, cache hit ratio', async () => {
    for (let i = 0; i < 3; i++) assert.equal((await createResponse(a.url, key, { model: 'm1', input: 'hi', store: false })).status, 200);
    const s = await fetch(`${a.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm1', input: 'hi', stream: true, store: false }),
    });
    assert.equal(parseSse(await s.text()).at(-1).type, 'response.completed');
    await fetch(`${a.url}/v1/models`, { headers: { authorization: 'Bearer sk-not-a-key' } });
    const r = await fetch(`${a.url}/metrics`);
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type') ?? '', /text\/plain/);
    const text = await r.text();
    assert.ok((metricValue(text, 'portico_http_requests_total', { method: 'POST', route: '/v1/responses', status: '200' }) ?? 0) >= 4, 'requests by route and status');
    assert.ok((metricValue(text, 'portico_http_requests_total', { route: '/v1/models', status: '401' }) ?? 0) >= 1);
    assert.ok((metricValue(text, 'portico_http_request_duration_seconds_count', { method: 'POST', route: '/v1/responses' }) ?? 0) >= 4, 'latency histogram');
    assert.ok(metricValue(text, 'portico_http_request_duration_seconds_bucket', { route: '/v1/responses', le: '+Inf' })! >= 4);
    assert.ok((metricValue(text, 'portico_tokens_total', { model: 'm1', direction: 'input' }) ?? 0) >= 40, 'input tokens by model');
    assert.ok((metricValue(text, 'portico_tokens_total', { model: 'm1', direction: 'output' }) ?? 0) >= 16, 'output tokens by model');
    assert.equal(metricValue(text, 'portico_active_streams'), 0);
    assert.equal(metricValue(text, 'portico_background_queue_depth'), 0);
    const ratio = metricValue(text, 'portico_key_cache_hit_ratio');
    assert.ok(ratio !== undefined && ratio > 0 && ratio <= 1, `hit ratio ${ratio}`);
    assert.ok(metricValue(text, 'portico_process_resident_memory_bytes')! > 0);
    // audio seconds are declared too (they count once an audio model is used)
    assert.match(text, /# TYPE portico_audio_seconds_total counter/);
  });

  test('SIGTERM while a stream runs: the stream completes, new connections are refused, exit 0 within the grace', async () => {
    up.script({ text: Array.from({ length: 12 }, (_, i) => `p${i} `), delayMs: 200 });
    const res = await fetch(`${b.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm1', input: 'slow', stream: true }),
    });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    const chunks: string[] = [];
    const dec = new TextDecoder();
    const first = await reader.read();
    chunks.push(dec.decode(first.value));
    // the stream is under way: ask the process to stop
    const t0 = Date.now();
    b.kill('SIGTERM');
    // until the process took the signal: then a new connection is refused, while the stream still runs (a
    // connection made while the listener closes may be reset instead: that one was not served either, and the
    // wait goes on until the refusal every later connection gets)
    const seen: string[] = [];
    const during = await waitFor(
      async () => {
        const g = await freshGet(`${b.url}/healthz`);
        if (g.error) seen.push(g.error);
        return g.error === 'ECONNREFUSED' ? g : undefined;
      },
      { timeoutMs: 10_000, what: 'new connections to be refused' },
    );
    assert.equal(during.error, 'ECONNREFUSED');
    assert.ok(
      seen.every((e) => e === 'ECONNREFUSED' || e === 'ECONNRESET'),
      `new connections during shutdown got ${seen.join(', ')}`,
    );
    assert.ok(b.running, 'refused while the process still drains its stream');
    while (true) {
      const { value, done } = await reader.read();
      if (done) break;
      chunks.push(dec.decode(value));
    }
    const streamEnded = Date.now();
    const events = parseSse(chunks.join(''));
    assert.equal(events.at(-1).type, 'response.completed');
    assert.equal(events.filter((e) => e.type === 'response.output_text.delta').length, 12);
    const { code, signal } = await b.exited;
    const ms = Date.now() - t0;
    assert.equal(signal, null);
    assert.equal(code, 0, b.output());
    assert.ok(ms < 8000 + 2000, `exited ${ms} ms after SIGTERM (grace 8000)`);
    // it does not sit out the grace period once its last stream is done (idle keep-alive sockets are closed):
    // against the server's own clock, it exits before its 8 s grace would end (the stream, 12 pieces 200 ms
    // apart, ended before that, or the server would have cut it)
    assert.ok(ms < 8000, `exited ${ms} ms after SIGTERM, ${Date.now() - streamEnded} ms after the last stream ended (grace 8000)`);
    // the stored response is complete and A serves it
    const id = events.at(-1).response.id;
    const got = await fetch(`${a.url}/v1/responses/${id}`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(((await got.json()) as any).status, 'completed');
  });
});
