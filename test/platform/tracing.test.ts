/**
 * OpenTelemetry traces (docs/operations.md, "Traces"), received by a real OTLP/HTTP collector in this process
 * (POST /v1/traces, the JSON encoding @opentelemetry/exporter-trace-otlp-http sends): one server span per request,
 * continuing an incoming W3C traceparent; a client span per upstream call, whose context reaches the upstream in
 * its traceparent header. Without a collector configured, nothing is traced and no traceparent is sent.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { waitFor } from '../helpers/wait.js';
import { WebSocket } from 'ws';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { startScriptedAudioUpstream, type ScriptedAudioUpstream } from '../helpers/scripted-audio-upstream.js';
import type { ModelSpec } from '../../src/models/config.js';

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: Array<{ key: string; value: { stringValue?: string; intValue?: string | number } }>;
  status?: { code?: number; message?: string };
}

const SERVER = 2;
const CLIENT = 3;

/** An OTLP/HTTP trace receiver: keeps every span it is sent, with the resource's service name. */
async function startCollector() {
  const spans: Array<OtlpSpan & { service?: string }> = [];
  const posts: Array<{ path: string; contentType: string | undefined }> = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      posts.push({ path: req.url ?? '', contentType: req.headers['content-type'] });
      if (req.method !== 'POST' || req.url !== '/v1/traces' || !String(req.headers['content-type']).includes('json')) {
        res.writeHead(415).end();
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      for (const rs of body.resourceSpans ?? []) {
        const service = rs.resource?.attributes?.find((a: { key: string }) => a.key === 'service.name')?.value?.stringValue;
        for (const ss of rs.scopeSpans ?? []) for (const s of ss.spans ?? []) spans.push({ ...s, service });
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, spans, posts, close: () => new Promise<void>((r) => server.close(() => r())) };
}

const attr = (s: OtlpSpan, key: string) => {
  const v = s.attributes.find((a) => a.key === key)?.value;
  return v?.stringValue ?? (v?.intValue !== undefined ? Number(v.intValue) : undefined);
};

describe('OpenTelemetry traces to an OTLP/HTTP collector', () => {
  let collector: Awaited<ReturnType<typeof startCollector>>;
  let up: ScriptedUpstream;
  let audio: ScriptedAudioUpstream;
  let t: TestApp & { url?: string };
  let key: string;

  before(async () => {
    collector = await startCollector();
    up = await startScriptedUpstream();
    audio = await startScriptedAudioUpstream();
    const models = [
      { name: 'm1', provider: 'openai-compatible', base_url: up.url, type: 'text', retries: 0 },
      { name: 'm2', provider: 'openai-compatible', base_url: up.url, type: 'text', retries: 1, retry_backoff_ms: 1 },
      { name: 'tts', provider: 'openai-compatible', base_url: audio.baseUrl, type: 'speech' },
      { name: 'stt', provider: 'openai-compatible', base_url: audio.baseUrl, type: 'transcription' },
      { name: 'rt', provider: 'pipeline', type: 'realtime', text: 'm1', speech: 'tts', transcription: 'stt' },
    ] as ModelSpec[];
    t = await buildTestApp({ models, listen: true, env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_SERVICE_NAME: 'portico-test' } });
    key = await t.inferenceKey('alice');
  });
  after(async () => {
    await t?.close();
    await up?.close();
    await audio?.close();
    await collector?.close();
  });

  test('a request continues the incoming trace; its upstream call is a child span whose context reaches the upstream', async () => {
    assert.ok(t.runtime.tracing, 'tracing is on with OTEL_EXPORTER_OTLP_ENDPOINT');
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const parentId = '00f067aa0ba902b7';
    up.script({ text: 'traced', usage: { prompt_tokens: 3, completion_tokens: 2 } });
    const r = await t.app.inject({
      method: 'POST',
      url: '/v1/responses',
      headers: { authorization: `Bearer ${key}`, traceparent: `00-${traceId}-${parentId}-01`, 'x-request-id': 'traced-1' },
      payload: { model: 'm1', input: 'hi', store: false },
    });
    assert.equal(r.statusCode, 200, r.body);
    await t.runtime.tracing!.flush();

    const server = collector.spans.find((s) => s.kind === SERVER && attr(s, 'portico.request_id') === 'traced-1');
    assert.ok(server, `a server span: ${JSON.stringify(collector.spans.map((s) => s.name))}`);
    assert.equal(server.service, 'portico-test');
    assert.equal(server.traceId, traceId, 'the incoming trace is continued');
    assert.equal(server.parentSpanId, parentId);
    assert.equal(server.name, 'POST /v1/responses');
    assert.equal(attr(server, 'http.route'), '/v1/responses');
    assert.equal(attr(server, 'http.response.status_code'), 200);
    assert.equal(attr(server, 'portico.model'), 'm1');
    assert.equal(attr(server, 'portico.deployment'), 'm1');
    assert.equal(attr(server, 'portico.retries'), 0);
    assert.equal(attr(server, 'portico.fallback'), undefined);
    assert.equal(attr(server, 'gen_ai.usage.input_tokens'), 3);
    assert.equal(typeof attr(server, 'portico.key_id'), 'string');
    for (const a of server.attributes) assert.ok(!JSON.stringify(a).includes(key), 'no key in a span');

    const client = collector.spans.find((s) => s.kind === CLIENT && s.parentSpanId === server.spanId);
    assert.ok(client, 'a client span under the server span');
    assert.equal(client.traceId, traceId);
    assert.equal(client.name, 'POST /chat/completions');
    assert.equal(attr(client, 'http.response.status_code'), 200);
    assert.equal(attr(client, 'server.port'), up.port);

    // the upstream got the client span's context
    const got = up.requests.at(-1)!.headers.traceparent;
    assert.equal(got, `00-${traceId}-${client.spanId}-01`);
  });

  test('a realtime session: each response is a span of its own in the trace of the upgrade, its text model call a child', async () => {
    const traceId = '5cf92f3577b34da6a3ce929d0e0e4737';
    up.script({ text: 'spoken turn', usage: { prompt_tokens: 4, completion_tokens: 2 } });
    const ws = new WebSocket(`${t.url!.replace('http', 'ws')}/v1/realtime?model=rt`, {
      headers: { authorization: `Bearer ${key}`, traceparent: `00-${traceId}-00f067aa0ba902b8-01` },
    });
    const got: any[] = [];
    ws.on('message', (d) => got.push(JSON.parse(d.toString())));
    await new Promise((r) => ws.once('open', r));
    ws.send(JSON.stringify({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'], audio: { input: { turn_detection: null } } } }));
    ws.send(JSON.stringify({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'hi' }] } }));
    ws.send(JSON.stringify({ type: 'response.create' }));
    const done = await waitFor(() => got.find((e) => e.type === 'response.done'), { what: 'response.done' });
    ws.close();
    await t.runtime.tracing!.flush();
    const turn = collector.spans.find((s) => s.kind === SERVER && attr(s, 'portico.realtime.response') === done.response.id);
    assert.ok(turn, `a span for the turn: ${JSON.stringify(collector.spans.map((s) => s.name))}`);
    assert.equal(turn.traceId, traceId, "in the upgrade's trace");
    assert.equal(attr(turn, 'portico.realtime.status'), 'completed');
    assert.equal(attr(turn, 'gen_ai.usage.input_tokens'), 4);
    const client = collector.spans.find((s) => s.kind === CLIENT && s.parentSpanId === turn.spanId);
    assert.ok(client, "the text model's upstream call is the turn's child");
    assert.equal(client.name, 'POST /chat/completions');
  });

  test('a retry: the server span says how many, and each try is a client span of its own', async () => {
    up.script({ status: 500, errorMessage: 'boom' }, { text: 'second try' });
    const r = await t.app.inject({
      method: 'POST',
      url: '/v1/responses',
      headers: { authorization: `Bearer ${key}`, 'x-request-id': 'traced-retry' },
      payload: { model: 'm2', input: 'hi', store: false },
    });
    assert.equal(r.statusCode, 200, r.body);
    assert.equal(r.headers['x-portico-retries'], '1');
    await t.runtime.tracing!.flush();
    const server = collector.spans.find((s) => s.kind === SERVER && attr(s, 'portico.request_id') === 'traced-retry');
    assert.ok(server);
    assert.equal(attr(server, 'portico.retries'), 1);
    assert.equal(collector.spans.filter((s) => s.kind === CLIENT && s.parentSpanId === server.spanId).length, 2);
  });

  test("an upstream that echoes Portico's credentials: the client span's status carries none of them (text and speech)", async () => {
    // an upstream behind basic auth in base_url that quotes the request's Authorization header in its errors
    const echo = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(502, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: `bad gateway for ${req.headers.authorization} (${req.url})` } }));
      });
    });
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
    const port = (echo.address() as AddressInfo).port;
    const base = `http://upstream-user:s3cret-pass-42@127.0.0.1:${port}/v1`;
    const echoed = await buildTestApp({
      models: [
        { name: 'echo-text', provider: 'openai-compatible', base_url: base, type: 'text', retries: 0 },
        { name: 'echo-tts', provider: 'openai-compatible', base_url: base, type: 'speech' },
      ] as ModelSpec[],
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_SERVICE_NAME: 'portico-test' },
    });
    try {
      const k = await echoed.inferenceKey('alice');
      const headers = { authorization: `Bearer ${k}`, 'x-request-id': 'traced-echo' };
      const r = await echoed.app.inject({ method: 'POST', url: '/v1/responses', headers, payload: { model: 'echo-text', input: 'hi', store: false } });
      assert.equal(r.statusCode, 502);
      const s = await echoed.app.inject({
        method: 'POST',
        url: '/v1/audio/speech',
        headers: { ...headers, 'x-request-id': 'traced-echo-tts' },
        payload: { model: 'echo-tts', voice: 'alloy', input: 'hi' },
      });
      assert.ok(s.statusCode >= 500, String(s.statusCode));
      await echoed.runtime.tracing!.flush();
      const basic = Buffer.from('upstream-user:s3cret-pass-42').toString('base64');
      const clients = collector.spans.filter((x) => x.kind === CLIENT && x.status?.message?.includes('bad gateway for'));
      assert.ok(clients.length >= 2, `the failed calls are spans with the upstream's message (${clients.length})`);
      for (const c of clients) {
        const text = JSON.stringify(c);
        assert.ok(!text.includes(basic) && !text.includes('s3cret-pass-42'), `no credential in a span: ${c.status?.message}`);
        assert.match(c.status!.message!, /\*\*\*/, 'the credential is replaced');
      }
    } finally {
      await echoed.close();
      await new Promise((r) => echo.close(r));
    }
  });

  test('a request without traceparent starts a trace; a failed upstream call is an error span', async () => {
    up.script({ status: 500, errorMessage: 'boom' });
    const r = await t.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${key}`, 'x-request-id': 'traced-2' },
      payload: { model: 'm1', messages: [{ role: 'user', content: 'hi' }] },
    });
    assert.equal(r.statusCode, 502);
    await t.runtime.tracing!.flush();
    const server = collector.spans.find((s) => s.kind === SERVER && attr(s, 'portico.request_id') === 'traced-2');
    assert.ok(server);
    assert.equal(server.parentSpanId || undefined, undefined, 'a new trace');
    assert.equal(server.status?.code, 2, 'a 5xx server span is an error');
    assert.equal(attr(server, 'error.type'), 'engine_error');
    assert.equal(attr(server, 'portico.upstream_status'), 500);
    const client = collector.spans.find((s) => s.kind === CLIENT && s.parentSpanId === server.spanId);
    assert.ok(client);
    assert.equal(client.traceId, server.traceId);
    assert.equal(client.status?.code, 2);
    assert.equal(attr(client, 'http.response.status_code'), 500);
    assert.match(up.requests.at(-1)!.headers.traceparent as string, new RegExp(`^00-${server.traceId}-${client.spanId}-01$`));
    assert.ok(collector.posts.every((p) => p.path === '/v1/traces'));
  });

  test('speech: the audio upstream call is a client span too, and gets the traceparent', async () => {
    const r = await t.app.inject({
      method: 'POST',
      url: '/v1/audio/speech',
      headers: { authorization: `Bearer ${key}`, 'x-request-id': 'traced-tts' },
      payload: { model: 'tts', input: 'Hello.', voice: 'alloy', response_format: 'pcm' },
    });
    assert.equal(r.statusCode, 200);
    await t.runtime.tracing!.flush();
    const server = collector.spans.find((s) => s.kind === SERVER && attr(s, 'portico.request_id') === 'traced-tts');
    assert.ok(server);
    assert.equal(server.name, 'POST /v1/audio/speech');
    const client = collector.spans.find((s) => s.kind === CLIENT && s.parentSpanId === server.spanId);
    assert.ok(client, 'a client span for the audio upstream');
    assert.equal(client.name, 'POST /audio/speech');
    assert.equal(attr(client, 'http.response.status_code'), 200);
    assert.equal(audio.requests.at(-1)!.headers.traceparent, `00-${server.traceId}-${client.spanId}-01`);
  });

  test('a streamed answer: the client span ends with the stream, under the request span', async () => {
    up.script({ text: ['a', 'b', 'c'], delayMs: 10 });
    const r = await t.app.inject({
      method: 'POST',
      url: '/v1/responses',
      headers: { authorization: `Bearer ${key}`, 'x-request-id': 'traced-3' },
      payload: { model: 'm1', input: 'hi', stream: true, store: false },
    });
    assert.equal(r.statusCode, 200);
    await t.runtime.tracing!.flush();
    const server = collector.spans.find((s) => s.kind === SERVER && attr(s, 'portico.request_id') === 'traced-3');
    assert.ok(server);
    const client = collector.spans.find((s) => s.kind === CLIENT && s.parentSpanId === server.spanId);
    assert.ok(client, 'the streamed call is traced too');
    const ns = (s: OtlpSpan, k: 'startTimeUnixNano' | 'endTimeUnixNano') => BigInt((s as unknown as Record<string, string>)[k]!);
    assert.ok(ns(client, 'endTimeUnixNano') - ns(client, 'startTimeUnixNano') >= 15_000_000n, 'the client span lasts as long as the stream');
    assert.ok(ns(client, 'endTimeUnixNano') <= ns(server, 'endTimeUnixNano'));
  });
});

describe('OpenTelemetry traces: a client that leaves', () => {
  test('a stream the client abandons ends its span once, status 499, outcome client_closed, not an error', async () => {
    const collector = await startCollector();
    const up = await startScriptedUpstream();
    const models = [{ name: 'm1', provider: 'openai-compatible', base_url: up.url, type: 'text', retries: 0 }] as ModelSpec[];
    const t = await buildTestApp({ models, listen: true, env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url } });
    try {
      const key = await t.inferenceKey('carol');
      up.script({ text: Array.from({ length: 40 }, (_, i) => `piece${i} `), delayMs: 40 });
      const ac = new AbortController();
      const res = await fetch(`${t.url}/v1/responses`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-request-id': 'traced-left' },
        body: JSON.stringify({ model: 'm1', input: 'hi', stream: true, store: false }),
        signal: ac.signal,
      });
      const reader = res.body!.getReader();
      let text = '';
      while (!text.includes('piece1')) text += Buffer.from((await reader.read()).value!).toString('utf8');
      ac.abort();
      const deadline = Date.now() + 10_000;
      const mine = () => collector.spans.filter((s) => s.kind === SERVER && attr(s, 'portico.request_id') === 'traced-left');
      while (mine().length === 0) {
        assert.ok(Date.now() < deadline, 'the span of the abandoned request reached the collector');
        await t.runtime.tracing!.flush();
        await new Promise((r) => setTimeout(r, 20));
      }
      await t.runtime.tracing!.flush();
      const spans = mine();
      assert.equal(spans.length, 1, 'one span');
      const server = spans[0]!;
      assert.equal(attr(server, 'http.response.status_code'), 499);
      assert.equal(attr(server, 'portico.outcome'), 'client_closed');
      assert.equal(attr(server, 'portico.model'), 'm1');
      assert.notEqual(server.status?.code, 2, 'a client that leaves is not a server error');
      assert.ok(
        collector.spans.some((s) => s.kind === CLIENT && s.parentSpanId === server.spanId),
        'its upstream call is under it',
      );
    } finally {
      await t.close();
      await up.close();
      await collector.close();
    }
  });
});

describe('tracing off (no collector configured)', () => {
  test('no span, no traceparent sent upstream, no tracing object', async () => {
    const up = await startScriptedUpstream();
    const models = [{ name: 'm1', provider: 'openai-compatible', base_url: up.url, type: 'text', retries: 0 }] as ModelSpec[];
    const t = await buildTestApp({ models });
    try {
      assert.equal(t.runtime.tracing, undefined);
      const key = await t.inferenceKey('bob');
      const r = await t.app.inject({
        method: 'POST',
        url: '/v1/responses',
        headers: { authorization: `Bearer ${key}`, traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
        payload: { model: 'm1', input: 'hi', store: false },
      });
      assert.equal(r.statusCode, 200);
      assert.equal(up.requests.at(-1)!.headers.traceparent, undefined, 'the incoming traceparent is not forwarded as is, and none is made');
    } finally {
      await t.close();
      await up.close();
    }
  });
});
