/**
 * The cost of observing one request (npm run bench:observability). Not a test: it prints figures.
 *
 * Measures, in this process, what the onResponse hook of src/compose/http.ts does per request, against what it
 * did before the request facts (the baseline, measured in the same run, rounds interleaved):
 *   - baseline: the route counter and latency histogram, and a 4-field log line (method, url, status, ms);
 *   - now: a RequestFacts filled as a service fills it (model, deployment, engine start, first output, end,
 *     tokens), the same two route series, the full request line (logRequest) and the per-model series
 *     (modelMetrics: requests, latency, first token, upstream time, tokens in and out).
 *   - now, tracing on: the same, plus the request's server span (continuing an incoming traceparent), made active,
 *     one client span for the upstream call with its traceparent written, both ended with their attributes.
 * The logger writes JSON to /dev/null, as production writes to stdout (pino's own destination, synchronous here
 * so the write is counted). The spans' export (batched every second, off the request path) is not counted: the
 * exporter points at a closed port.
 *
 * Env: BENCH_N (requests per round, default 100000), BENCH_ROUNDS (default 5).
 */
import os from 'node:os';
import pino from 'pino';
import type { FastifyRequest } from 'fastify';
import { Metrics } from '../src/platform/ops/metrics.js';
import { RequestFacts } from '../src/platform/ops/facts.js';
import { logRequest, modelMetrics } from '../src/compose/http.js';
import { OtelTracing } from '../src/platform/ops/tracing-otel.js';
import { upstreamSpan } from '../src/platform/ops/tracing.js';

const N = Number(process.env.BENCH_N || 100_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 5);

const log = pino({ level: 'info' }, pino.destination({ dest: '/dev/null', sync: true }));
const metrics = new Metrics(false);
const key = { keyId: 'key_0123456789abcdef', kind: 'inference', userId: 'alice', orgId: 'default', scopes: [], rpmLimit: null, tpmLimit: null };

/** a request as onResponse sees it (the fields it reads) */
function request(i: number): FastifyRequest {
  return {
    id: `req_${i}`,
    method: 'POST',
    url: '/v1/responses',
    routeOptions: { url: '/v1/responses' },
    apiKey: key,
    user: undefined,
    facts: null,
    log: log.child({ reqId: `req_${i}` }),
  } as unknown as FastifyRequest;
}

function baseline(): number {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < N; i++) {
    const req = request(i);
    const route = req.routeOptions.url ?? 'unknown';
    const ms = 0.5 + (i % 7) * 0.1;
    metrics.httpRequest(req.method, route, 200, ms / 1000);
    req.log.info({ method: req.method, url: req.routeOptions.url ?? req.url.split('?')[0], status: 200, ms: Math.round(ms * 100) / 100 }, 'request');
  }
  return Number(process.hrtime.bigint() - t0) / N;
}

function observed(): number {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < N; i++) {
    const req = request(i);
    // onRequest
    const f = new RequestFacts();
    req.facts = f;
    // the service
    f.model = 'fast';
    f.deployment = 'openai-compatible:127.0.0.1:8000';
    f.engineStarted();
    f.firstOutput();
    f.engineEnded();
    f.used({ inputTokens: 12, outputTokens: 7 });
    // onResponse
    const route = req.routeOptions.url ?? 'unknown';
    const ms = 0.5 + (i % 7) * 0.1;
    metrics.httpRequest(req.method, route, 200, ms / 1000);
    logRequest(req, route, 200, ms);
    modelMetrics(metrics, f, ms);
  }
  return Number(process.hrtime.bigint() - t0) / N;
}

const tracing = new OtelTracing({ url: 'http://127.0.0.1:9/v1/traces', serviceName: 'bench' });
const incoming = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' };
const upstreamAttributes = { 'http.request.method': 'POST', 'server.address': '127.0.0.1', 'server.port': 8000 };

function traced(): number {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < N; i++) {
    const req = request(i);
    const f = new RequestFacts();
    req.facts = f;
    f.span = tracing.start('POST', '/v1/responses', incoming);
    tracing.enter(f.span, () => {
      f.model = 'fast';
      f.deployment = 'openai-compatible:127.0.0.1:8000';
      f.engineStarted();
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      const span = upstreamSpan('POST /chat/completions', upstreamAttributes, headers);
      span?.status(200);
      span?.end();
      f.firstOutput();
      f.engineEnded();
      f.used({ inputTokens: 12, outputTokens: 7 });
    });
    const route = req.routeOptions.url ?? 'unknown';
    const ms = 0.5 + (i % 7) * 0.1;
    metrics.httpRequest(req.method, route, 200, ms / 1000);
    logRequest(req, route, 200, ms);
    modelMetrics(metrics, f, ms);
    tracing.end(f.span, { route, status: 200, attributes: { 'portico.model': f.model, 'portico.deployment': f.deployment, 'portico.request_id': req.id } });
  }
  return Number(process.hrtime.bigint() - t0) / N;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

// warm-up: both paths compiled before anything is measured
baseline();
observed();
traced();
const base: number[] = [];
const now: number[] = [];
const withSpans: number[] = [];
for (let r = 0; r < ROUNDS; r++) {
  base.push(baseline());
  now.push(observed());
  withSpans.push(traced());
}
const b = median(base);
const n = median(now);
const tr = median(withSpans);
console.log(`Machine: ${os.cpus().length} cores (${os.cpus()[0]?.model.trim()}), Node ${process.version}, load average ${os.loadavg()[0]!.toFixed(1)}`);
console.log(`${ROUNDS} rounds of ${N} requests, interleaved; median per request`);
console.log('');
console.log('| What the hooks do per request | ns/request | ratio |');
console.log('|---|---:|---:|');
console.log(`| baseline: route series + 4-field log line | ${b.toFixed(0)} | 1.00 |`);
console.log(`| now: facts + route series + full log line + per-model series | ${n.toFixed(0)} | ${(n / b).toFixed(2)} |`);
console.log(`| now, tracing on: + server span, client span, traceparent | ${tr.toFixed(0)} | ${(tr / b).toFixed(2)} |`);
console.log('');
console.log(`added per request: ${((n - b) / 1000).toFixed(2)} µs (tracing off), ${((tr - b) / 1000).toFixed(2)} µs (tracing on)`);
console.log(
  `rounds (ns): baseline ${base.map((x) => x.toFixed(0)).join(', ')}; now ${now.map((x) => x.toFixed(0)).join(', ')}; tracing on ${withSpans.map((x) => x.toFixed(0)).join(', ')}`,
);
await tracing.close().catch(() => {});
