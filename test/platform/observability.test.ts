/**
 * The request log line and the per-model metrics (docs/operations.md, "Logs" and "Metrics"), after real requests
 * through Portico to a scripted upstream: a success (JSON and streamed), an upstream failure (its status and
 * reason, logged once), a refused key (no key in the line), and the Prometheus series per model and deployment.
 */
import { describe, test, before, after } from 'node:test';
import { metricValue } from '../helpers/metrics.js';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { waitFor } from '../helpers/wait.js';
import { startScriptedAudioUpstream, type ScriptedAudioUpstream } from '../helpers/scripted-audio-upstream.js';
import type { ModelSpec } from '../../src/models/config.js';
import { createLogger } from '../../src/platform/log.js';
import { loadConfig } from '../../src/platform/config.js';

type Line = Record<string, unknown>;

describe('request log lines and per-model metrics', () => {
  let up: ScriptedUpstream;
  let audio: ScriptedAudioUpstream;
  let t: TestApp & { url?: string };
  let key: string;
  let keyId: string;
  let deployment: string;
  const raw: string[] = [];
  const lines = () => raw.map((l) => JSON.parse(l) as Line);
  /** the request line of one request (there must be exactly one) */
  const requestLine = (reqId: string): Line => {
    const found = lines().filter((l) => l.reqId === reqId && l.msg === 'request');
    assert.equal(found.length, 1, `one request line for ${reqId}: ${JSON.stringify(found)}`);
    return found[0]!;
  };

  before(async () => {
    up = await startScriptedUpstream();
    audio = await startScriptedAudioUpstream();
    const models = [
      { name: 'm1', provider: 'openai-compatible', base_url: up.url, type: 'text', retries: 0 },
      { name: 'emb', provider: 'openai-compatible', base_url: up.url, type: 'embeddings' },
      { name: 'tts', provider: 'openai-compatible', base_url: audio.baseUrl, type: 'speech' },
    ] as ModelSpec[];
    deployment = 'm1';
    const sink = new Writable({ write: (c, _e, cb) => (raw.push(...c.toString().split('\n').filter(Boolean)), cb()) });
    t = await buildTestApp({ models, listen: true, logDestination: sink, env: { LOG_LEVEL: 'info' } });
    const made = await t.app.inject({
      method: 'POST',
      url: '/v1/portal/api-keys',
      headers: { authorization: `Bearer ${await t.token('alice')}` },
      payload: { name: 'observed' },
    });
    assert.equal(made.statusCode, 200, made.body);
    key = made.json().data.api_key;
    keyId = made.json().data.id;
    assert.ok(key && keyId, made.body);
  });
  after(async () => {
    await t?.close();
    await up?.close();
    await audio?.close();
  });

  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${t.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

  test('a JSON answer: route, model, deployment, key id, user, org, tokens, upstream and own latency', async () => {
    up.script({ text: 'Hello there', usage: { prompt_tokens: 11, completion_tokens: 7 }, headerDelayMs: 30 });
    const r = await post('/v1/responses', { model: 'm1', input: 'hi', store: false }, { 'x-request-id': 'obs-json-1' });
    assert.equal(r.status, 200, await r.clone().text());
    await r.text();
    const l = requestLine('obs-json-1');
    assert.equal(l.level, 30);
    assert.equal(l.method, 'POST');
    assert.equal(l.route, '/v1/responses');
    assert.equal(l.status, 200);
    assert.equal(l.model, 'm1');
    assert.equal(l.deployment, deployment);
    assert.equal(l.key_id, keyId);
    assert.equal(l.user_id, 'alice');
    assert.equal(typeof l.org_id, 'string');
    assert.equal(l.tokens_in, 11);
    assert.equal(l.tokens_out, 7);
    // the upstream waited 30 ms before answering: that is the upstream's time, not Portico's
    assert.ok((l.upstream_ms as number) >= 25, `upstream_ms ${l.upstream_ms}`);
    assert.ok((l.ttft_ms as number) >= 25 && (l.ttft_ms as number) <= (l.upstream_ms as number) + 0.01, `ttft_ms ${l.ttft_ms}`);
    assert.ok(typeof l.portico_ms === 'number' && l.portico_ms >= 0 && l.portico_ms < (l.ms as number), `portico_ms ${l.portico_ms} of ${l.ms}`);
    assert.ok(Math.abs((l.ms as number) - (l.upstream_ms as number) - (l.portico_ms as number)) < 0.05);
    assert.equal(l.error, undefined);
    assert.equal(l.upstream_error, undefined);
    for (const s of raw) assert.ok(!s.includes(key), 'the key is never logged');
  });

  test('a streamed chat completion: the line is written when the stream ends, with its tokens and time to first token', async () => {
    up.script({ text: ['a', 'b', 'c', 'd'], delayMs: 15, usage: { prompt_tokens: 5, completion_tokens: 4 } });
    const r = await post('/v1/chat/completions', { model: 'm1', messages: [{ role: 'user', content: 'hi' }], stream: true }, { 'x-request-id': 'obs-stream-1' });
    assert.equal(r.status, 200);
    const text = await r.text();
    assert.match(text, /\[DONE\]/);
    const l = requestLine('obs-stream-1');
    assert.equal(l.route, '/v1/chat/completions');
    assert.equal(l.model, 'm1');
    assert.equal(l.deployment, deployment);
    assert.equal(l.tokens_in, 5);
    assert.equal(l.tokens_out, 4);
    // four events 15 ms apart: the first token comes well before the end
    assert.ok((l.upstream_ms as number) >= 40, `upstream_ms ${l.upstream_ms}`);
    assert.ok((l.ttft_ms as number) < (l.upstream_ms as number) - 20, `ttft_ms ${l.ttft_ms} upstream_ms ${l.upstream_ms}`);
    assert.ok((l.ms as number) >= (l.upstream_ms as number));
  });

  test("an upstream failure is logged once, with the upstream's status and reason", async () => {
    up.script({ status: 500, errorMessage: 'the GPU caught fire' });
    const r = await post('/v1/responses', { model: 'm1', input: 'hi', store: false }, { 'x-request-id': 'obs-fail-1' });
    assert.equal(r.status, 502);
    await r.text();
    const l = requestLine('obs-fail-1');
    assert.equal(l.level, 50, 'a 5xx is logged at error level');
    assert.equal(l.status, 502);
    assert.equal(l.model, 'm1');
    assert.equal(l.upstream_status, 500);
    assert.match(String(l.upstream_error), /the GPU caught fire/);
    // the client's code for an upstream 5xx
    assert.equal(l.error, 'engine_error');
    assert.equal(typeof l.upstream_ms, 'number');
    const mentions = raw.filter((s) => s.includes('the GPU caught fire'));
    assert.equal(mentions.length, 1, `logged once: ${mentions.join('\n')}`);

    // an upstream rate limit: the client's problem to back off from, a warning with the upstream's status
    up.script({ status: 429, errorMessage: 'slow down', headers: { 'retry-after': '3' } });
    const r2 = await post('/v1/chat/completions', { model: 'm1', messages: [{ role: 'user', content: 'hi' }] }, { 'x-request-id': 'obs-fail-2' });
    assert.equal(r2.status, 429);
    await r2.text();
    const l2 = requestLine('obs-fail-2');
    assert.equal(l2.level, 40);
    assert.equal(l2.upstream_status, 429);
    assert.match(String(l2.upstream_error), /slow down/);
    assert.equal(l2.error, 'rate_limit_exceeded');
  });

  test('an upstream that breaks mid-stream: the response fails, and the line says why', async () => {
    up.script({ text: ['one', 'two', 'three'], breakAfter: 2, delayMs: 5 });
    const r = await post('/v1/responses', { model: 'm1', input: 'hi', stream: true, store: false }, { 'x-request-id': 'obs-break-1' });
    assert.equal(r.status, 200);
    assert.match(await r.text(), /response\.failed/);
    const l = requestLine('obs-break-1');
    assert.equal(l.status, 200);
    assert.equal(l.level, 40);
    assert.match(String(l.upstream_error), /broke mid-stream|premature|cut/);
    assert.equal(typeof l.error, 'string');
  });

  test('embeddings and speech: their lines carry what they are charged (input tokens, characters)', async () => {
    const e = await post('/v1/embeddings', { model: 'emb', input: ['one two three four', 'five six'] }, { 'x-request-id': 'obs-emb-1' });
    assert.equal(e.status, 200, await e.clone().text());
    const usage = (await e.json()).usage;
    const le = requestLine('obs-emb-1');
    assert.equal(le.route, '/v1/embeddings');
    assert.equal(le.model, 'emb');
    assert.equal(le.deployment, 'emb');
    assert.equal(le.tokens_in, usage.prompt_tokens);
    assert.equal(typeof le.upstream_ms, 'number');

    const sp = await post('/v1/audio/speech', { model: 'tts', input: 'Hello there.', voice: 'alloy', response_format: 'pcm' }, { 'x-request-id': 'obs-tts-1' });
    assert.equal(sp.status, 200);
    await sp.arrayBuffer();
    const ls = requestLine('obs-tts-1');
    assert.equal(ls.route, '/v1/audio/speech');
    assert.equal(ls.model, 'tts');
    assert.equal(ls.deployment, 'tts');
    assert.equal(ls.characters, 'Hello there.'.length);
    assert.equal(typeof ls.ttft_ms, 'number');
    assert.equal(typeof ls.upstream_ms, 'number');
  });

  test('a refused key: the line has the status and error, and neither the key nor a key id', async () => {
    const bad = 'sk-' + 'x'.repeat(38);
    const r = await fetch(`${t.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${bad}`, 'content-type': 'application/json', 'x-request-id': 'obs-refused-1' },
      body: JSON.stringify({ model: 'm1', input: 'hi' }),
    });
    assert.equal(r.status, 401);
    await r.text();
    const l = requestLine('obs-refused-1');
    assert.equal(l.status, 401);
    assert.equal(l.route, '/v1/responses');
    assert.equal(l.error, 'invalid_format', 'the refusal, as the client got it');
    assert.equal(l.key_id, undefined);
    assert.equal(l.model, undefined, 'no model: the request never reached one');
    for (const s of raw) assert.ok(!s.includes(bad), 'the refused key is not logged');
  });

  test('the per-model series count real requests (requests, errors by type, latency, first token, tokens)', async () => {
    const before = await t.runtime.scrape();
    const n0 = metricValue(before, 'portico_model_requests_total', { model: 'm1', deployment }) ?? 0;
    const tokensIn0 = metricValue(before, 'portico_model_tokens_total', { model: 'm1', deployment, direction: 'input' }) ?? 0;
    up.script({ text: 'ok', usage: { prompt_tokens: 100, completion_tokens: 3 } }, { status: 503, errorMessage: 'overloaded' });
    assert.equal((await post('/v1/responses', { model: 'm1', input: 'hi', store: false })).status, 200);
    assert.equal((await post('/v1/responses', { model: 'm1', input: 'hi', store: false })).status, 502);
    const text = await t.runtime.scrape();
    assert.equal(metricValue(text, 'portico_model_requests_total', { model: 'm1', deployment }), n0 + 2);
    assert.equal(metricValue(text, 'portico_model_tokens_total', { model: 'm1', deployment, direction: 'input' }), tokensIn0 + 100);
    assert.ok((metricValue(text, 'portico_model_errors_total', { model: 'm1', deployment, type: 'engine_error' }) ?? 0) >= 2);
    assert.ok((metricValue(text, 'portico_model_errors_total', { model: 'm1', deployment, type: 'rate_limit_exceeded' }) ?? 0) >= 1);
    assert.equal(metricValue(text, 'portico_model_request_duration_seconds_count', { model: 'm1', deployment }), n0 + 2);
    assert.ok((metricValue(text, 'portico_model_time_to_first_token_seconds_count', { model: 'm1', deployment }) ?? 0) >= 3);
    assert.ok((metricValue(text, 'portico_model_upstream_duration_seconds_count', { model: 'm1', deployment }) ?? 0) >= n0 + 2);
    // a refused key reached no model: it is not a request of m1
    assert.equal(metricValue(text, 'portico_model_requests_total', { model: 'unknown' }), undefined);
    // the routing series exist with their labels
    for (const name of ['portico_model_retries_total', 'portico_model_fallbacks_total', 'portico_model_circuit_state']) {
      assert.match(text, new RegExp(`# TYPE ${name} (counter|gauge)`));
    }
    // m1 was routed (retries 0: its failure was not tried again) and its breaker is closed
    assert.equal(metricValue(text, 'portico_model_retries_total', { model: 'm1', deployment }), undefined);
    assert.equal(metricValue(text, 'portico_model_circuit_state', { model: 'm1', deployment }), 0);
  });
});

describe('log format', () => {
  test('LOG_FORMAT pretty writes coloured lines; json writes JSON; anything else is refused', async () => {
    const out: string[] = [];
    const sink = new Writable({ write: (c, _e, cb) => (out.push(c.toString()), cb()) });
    const pretty = createLogger('info', sink, 'pretty');
    pretty.info({ model: 'm1', status: 200 }, 'request');
    // the line is written a moment later (the logger's stream): until it is there
    await waitFor(() => /request[\s\S]*\n$/.test(out.join('')), { what: 'the pretty line' });
    const text = out.join('');
    assert.match(text, /request/);
    assert.match(text, /\x1b\[\d+m/, 'ANSI colours');
    assert.throws(() => JSON.parse(text.trim()));

    const jsonOut: string[] = [];
    const jsonLog = createLogger('info', new Writable({ write: (c, _e, cb) => (jsonOut.push(c.toString()), cb()) }), 'json');
    jsonLog.info({ model: 'm1' }, 'request');
    await waitFor(() => jsonOut.join('').endsWith('\n'), { what: 'the JSON line' });
    assert.equal(JSON.parse(jsonOut.join('')).model, 'm1');

    const env = { DATA_DIR: mkdtempSync(join(tmpdir(), 'portico-logfmt-')), JWT_SECRET: 'x'.repeat(32), KEY_PEPPER: 'y'.repeat(32) };
    assert.equal(loadConfig({ ...env, LOG_FORMAT: 'pretty' }).logFormat, 'pretty');
    assert.equal(loadConfig(env).logFormat, 'auto');
    assert.throws(() => loadConfig({ ...env, LOG_FORMAT: 'xml' }), /LOG_FORMAT must be one of pretty, json, auto/);
    rmSync(env.DATA_DIR, { recursive: true, force: true });
  });
});

describe('per-model series without label hashing', () => {
  test('the bound histogram and counters print as Prometheus histograms and counters (le inclusive, cumulative)', async () => {
    const { Metrics } = await import('../../src/platform/ops/metrics.js');
    const m = new Metrics(false);
    const s = m.modelSeries('m', 'd');
    assert.equal(m.modelSeries('m', 'd'), s, 'made once per model and deployment');
    for (const v of [0.005, 0.0051, 0.3, 1000]) s.duration.observe(v);
    s.requests.inc();
    s.tokensOut.inc(7);
    const text = await m.registry.metrics();
    const b = (le: string) => metricValue(text, 'portico_model_request_duration_seconds_bucket', { model: 'm', deployment: 'd', le });
    assert.equal(b('0.005'), 1, 'a value equal to a bound is in that bucket');
    assert.equal(b('0.01'), 2);
    assert.equal(b('0.5'), 3);
    assert.equal(b('300'), 3);
    assert.equal(b('+Inf'), 4);
    assert.equal(metricValue(text, 'portico_model_request_duration_seconds_count', { model: 'm', deployment: 'd' }), 4);
    assert.ok(Math.abs(metricValue(text, 'portico_model_request_duration_seconds_sum', { model: 'm', deployment: 'd' })! - 1000.3101) < 1e-9);
    assert.equal(metricValue(text, 'portico_model_requests_total', { model: 'm', deployment: 'd' }), 1);
    assert.equal(metricValue(text, 'portico_model_tokens_total', { model: 'm', deployment: 'd', direction: 'output' }), 7);
    assert.match(text, /# TYPE portico_model_request_duration_seconds histogram/);
    assert.match(text, /# TYPE portico_model_tokens_total counter/);
  });
});
