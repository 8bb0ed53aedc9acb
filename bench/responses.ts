/**
 * Responses API benchmark (npm run bench:responses). Not a test: it prints figures.
 *
 * A fast local upstream (bench/lib/upstream-fast.ts, in a worker thread) answers chat.completions at once.
 * The same load generator (bench/lib/load.ts: keep-alive node:http Agent, in another worker thread) measures:
 *   - straight to the upstream: POST /v1/chat/completions, non-streaming and streaming;
 *   - through Portico (this process, main thread): POST /v1/responses, non-streaming and streaming,
 *     with store on and off.
 * Latency runs use one connection (requests one after another: the added time without queueing); throughput
 * runs use BENCH_CONNECTIONS connections. Streaming reports the time to the first event (TTFE) and to the end.
 *
 * Before any measurement every Portico scenario runs for BENCH_JIT_WARMUP_MS (default 4000) so that V8 has compiled the
 * request path (TurboFan compiles on background threads for the first ~10-20 s of load; measured cold, that work
 * and the unoptimized code inflate the first scenarios). A minimal Node proxy in this process (bench/lib/floor-
 * proxy.ts) is measured beside Portico: the floor a Node gateway stands on with the same client and upstream; the
 * same proxy in a bare Fastify (no logger, hooks or schema) shows what the framework itself adds.
 *
 * CPU per request is that of the server's threads (main thread, the embedded database's thread, V8's compiler and
 * GC helpers), from /proc: every thread of this process but the fake upstream's (the load generator's thread lives
 * only during its run), over the throughput run, divided by its requests.
 *
 * The workers rows (BENCH_WORKERS, default on; off without PostgreSQL and Redis): `portico serve` as a process of its
 * own on PostgreSQL and Redis with WORKERS=1 and WORKERS=2 (bench/lib/workers.ts), same upstream and load, store off.
 *
 * Env: BENCH_DB (pglite | postgres, default pglite), BENCH_DURATION_MS (default 3000), BENCH_WARMUP_MS (1000),
 * BENCH_CONNECTIONS (8), BENCH_ONLY (substrings of the scenario names, separated by |), BENCH_PROFILE=1 (keeps Portico busy
 * for a --cpu-prof run), BENCH_OTEL_ENDPOINT (tracing on, spans sent to that OTLP/HTTP collector).
 */
import os from 'node:os';
import type { ModelSpec } from '../src/models/config.js';
import { startFastUpstream } from './lib/upstream-fast.js';
import { runLoad, type LoadResult } from './lib/load.js';
import { startPortico } from './lib/portico.js';
import { startFastifyFloorProxy, startFloorProxy } from './lib/floor-proxy.js';
import { cpuBetween, threadsCpuUs } from './lib/threads.js';
import { measureWorkers, type WorkersRow } from './lib/workers.js';

const DURATION_MS = Number(process.env.BENCH_DURATION_MS || 3000);
const WARMUP_MS = Number(process.env.BENCH_WARMUP_MS || 1000);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS || 8);
const DB = (process.env.BENCH_DB || 'pglite') as 'pglite' | 'postgres';
const JIT_WARMUP_MS = Number(process.env.BENCH_JIT_WARMUP_MS ?? 4000);

async function portico(upstreamUrl: string) {
  const one = { provider: 'openai-compatible', base_url: upstreamUrl, type: 'text' as const, upstream_model: 'fast', weight: 1 };
  const models: ModelSpec[] = [
    { name: 'fast', provider: 'openai-compatible', base_url: upstreamUrl, type: 'text' } as ModelSpec,
    // the same upstream as three deployments of one model: what choosing among several costs (src/models/router)
    { name: 'fast3', ...one, deployments: [1, 2, 3].map((i) => ({ ...one, id: `fast3#${i}`, name: `fast3#${i}` })) } as ModelSpec,
  ];
  // the embedded default of `npm start` (PGlite files in DATA_DIR, the usage journal beside them), or PostgreSQL
  // LOG_LEVEL (default warn, as issue 13 measures): 'info' writes one line per request to /dev/null
  // BENCH_OTEL_ENDPOINT: tracing on, spans sent to this OTLP/HTTP collector (the cost of tracing)
  const otel = process.env.BENCH_OTEL_ENDPOINT;
  const env: Record<string, string> = { LOG_LEVEL: process.env.LOG_LEVEL || 'warn' };
  if (otel) env.OTEL_EXPORTER_OTLP_ENDPOINT = otel;
  const p = await startPortico({ db: DB, pglite: 'files', models, env });
  return { url: p.url, key: await p.createKey('bench'), close: p.close };
}

const f = (ms: number) => (ms < 10 ? ms.toFixed(3) : ms.toFixed(1));

async function main() {
  const up = await startFastUpstream();
  const p = await portico(up.url);
  const floor = await startFloorProxy(up.url);
  const floorFastify = await startFastifyFloorProxy(up.url);
  const notMine = new Set(up.tid === undefined ? [] : [up.tid]);
  const input = 'Say hello in five words.';
  const chatBody = (stream: boolean) =>
    JSON.stringify({ model: 'fast', messages: [{ role: 'user', content: input }], stream, ...(stream ? { stream_options: { include_usage: true } } : {}) });
  const respBody = (stream: boolean, store: boolean) => JSON.stringify({ model: 'fast', input, stream, store });
  const scenarios = [
    { name: 'upstream direct, non-streaming', url: up.url + '/chat/completions', headers: {}, body: chatBody(false), stream: false },
    { name: 'upstream direct, streaming', url: up.url + '/chat/completions', headers: {}, body: chatBody(true), stream: true },
    { name: 'minimal Node proxy, non-streaming', url: floor.url + '/v1/responses', headers: {}, body: respBody(false, false), stream: false },
    { name: 'minimal Node proxy, streaming (relays the events)', url: floor.url + '/v1/responses', headers: {}, body: respBody(true, false), stream: true },
    { name: 'minimal Fastify proxy, non-streaming', url: floorFastify.url + '/v1/responses', headers: {}, body: respBody(false, false), stream: false },
    { name: 'Portico, non-streaming, store off', url: p.url + '/v1/responses', headers: { authorization: `Bearer ${p.key}` }, body: respBody(false, false), stream: false },
    { name: 'Portico, non-streaming, store on', url: p.url + '/v1/responses', headers: { authorization: `Bearer ${p.key}` }, body: respBody(false, true), stream: false },
    {
      name: 'Portico, non-streaming, store off, 3 deployments',
      url: p.url + '/v1/responses',
      headers: { authorization: `Bearer ${p.key}` },
      body: JSON.stringify({ model: 'fast3', input, stream: false, store: false }),
      stream: false,
    },
    { name: 'Portico, streaming, store off', url: p.url + '/v1/responses', headers: { authorization: `Bearer ${p.key}` }, body: respBody(true, false), stream: true },
    { name: 'Portico, streaming, store on', url: p.url + '/v1/responses', headers: { authorization: `Bearer ${p.key}` }, body: respBody(true, true), stream: true },
  ].filter((s) => !process.env.BENCH_ONLY || process.env.BENCH_ONLY.split('|').some((o) => s.name.includes(o)));

  // one request each way first: a broken set-up fails here with its answer
  for (const stream of [false, true]) {
    const res = await fetch(p.url + '/v1/responses', {
      method: 'POST',
      headers: { authorization: `Bearer ${p.key}`, 'content-type': 'application/json' },
      body: respBody(stream, true),
    });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`Portico answered ${res.status}: ${text}`);
  }
  // the JIT's warm-up, for every scenario of the server under test (not measured)
  for (const s of scenarios.filter((x) => !x.name.startsWith('upstream'))) {
    await runLoad({
      url: s.url,
      headers: { 'content-type': 'application/json', ...(s.headers as Record<string, string>) },
      body: s.body,
      stream: s.stream,
      connections: CONNECTIONS,
      durationMs: JIT_WARMUP_MS,
      warmupMs: 0,
    });
  }
  const rows: Array<{ name: string; stream: boolean; lat: LoadResult; thr: LoadResult; cpuUs: number }> = [];
  for (const s of scenarios) {
    const base = {
      url: s.url,
      headers: { 'content-type': 'application/json', ...(s.headers as Record<string, string>) },
      body: s.body,
      stream: s.stream,
      durationMs: DURATION_MS,
      warmupMs: WARMUP_MS,
    };
    const lat = await runLoad({ ...base, connections: 1 });
    const cpu0 = threadsCpuUs(notMine);
    const thr = process.env.BENCH_PROFILE ? lat : await runLoad({ ...base, connections: CONNECTIONS });
    // CPU spans warm-up and measured time, the count only the measured time: scale the count to the whole run
    const cpuUs = s.name.startsWith('upstream') ? NaN : cpuBetween(cpu0, threadsCpuUs(notMine)) / (thr.rps * ((DURATION_MS + WARMUP_MS) / 1000));
    if (lat.failures || thr.failures) throw new Error(`${s.name}: ${lat.failures + thr.failures} failed requests`);
    rows.push({ name: s.name, stream: s.stream, lat, thr, cpuUs });
    console.error(
      `${s.name}: p50 ${f(lat.p50)} ms p99 ${f(lat.p99)} ms${s.stream ? ` TTFE p50 ${f(lat.ttfe50)} ms` : ''}; ${thr.rps.toFixed(0)} req/s at ${CONNECTIONS} connections`,
    );
  }
  await p.close();
  await floor.close();
  await floorFastify.close();
  let workers: WorkersRow[] = [];
  if (process.env.BENCH_WORKERS !== 'off' && !process.env.BENCH_ONLY) {
    workers = await measureWorkers(up.url, { connections: CONNECTIONS, durationMs: DURATION_MS, warmupMs: WARMUP_MS });
    for (const w of workers) console.error(`WORKERS=${w.workers}: ${w.r.rps.toFixed(0)} req/s at ${CONNECTIONS} connections, ${w.cpu.toFixed(0)} µs CPU/request`);
  }
  await up.stop();

  const cpus = os.cpus();
  const lines: string[] = [];
  lines.push(`Machine: ${cpus.length} cores (${cpus[0]?.model.trim()}), Node ${process.version}, ${os.platform()} ${os.release()}; database ${DB}.`);
  lines.push(
    `Latency: one connection, requests one after another, ${DURATION_MS / 1000} s after ${WARMUP_MS / 1000} s warm-up. Throughput: ${CONNECTIONS} keep-alive connections.`,
  );
  lines.push('');
  lines.push(
    '| Path | p50 ms | p99 ms | TTFE p50 ms | TTFE p99 ms | req/s (1 conn) | req/s (' + CONNECTIONS + ' conns) | p50 at ' + CONNECTIONS + ' conns ms | server CPU µs/req |',
  );
  lines.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of rows) {
    lines.push(
      `| ${r.name} | ${f(r.lat.p50)} | ${f(r.lat.p99)} | ${r.stream ? f(r.lat.ttfe50) : '-'} | ${r.stream ? f(r.lat.ttfe99) : '-'} | ${r.lat.rps.toFixed(0)} | ${r.thr.rps.toFixed(0)} | ${f(r.thr.p50)} | ${Number.isNaN(r.cpuUs) ? '-' : r.cpuUs.toFixed(0)} |`,
    );
  }
  const get = (n: string) => rows.find((r) => r.name === n);
  const added = (a: string, b: string, k: 'p50' | 'ttfe50' = 'p50') => {
    const x = get(a);
    const y = get(b);
    return x && y ? (x.lat[k] - y.lat[k]).toFixed(3) : 'n/a';
  };
  lines.push('');
  lines.push('Added p50 by Portico (one connection):');
  lines.push(
    `- non-streaming, store off: ${added('Portico, non-streaming, store off', 'upstream direct, non-streaming')} ms; store on: ${added('Portico, non-streaming, store on', 'upstream direct, non-streaming')} ms`,
  );
  lines.push(`- non-streaming, store off, a model of 3 deployments: ${added('Portico, non-streaming, store off, 3 deployments', 'upstream direct, non-streaming')} ms`);
  lines.push(
    `- streaming, time to first event, store off: ${added('Portico, streaming, store off', 'upstream direct, streaming', 'ttfe50')} ms; store on: ${added('Portico, streaming, store on', 'upstream direct, streaming', 'ttfe50')} ms`,
  );
  lines.push(
    `- streaming, whole stream, store off: ${added('Portico, streaming, store off', 'upstream direct, streaming')} ms; store on: ${added('Portico, streaming, store on', 'upstream direct, streaming')} ms`,
  );
  lines.push(
    `- the minimal Node proxy adds ${added('minimal Node proxy, non-streaming', 'upstream direct, non-streaming')} ms (non-streaming) and ${added('minimal Node proxy, streaming (relays the events)', 'upstream direct, streaming', 'ttfe50')} ms to the first event; the same in a bare Fastify adds ${added('minimal Fastify proxy, non-streaming', 'upstream direct, non-streaming')} ms (non-streaming)`,
  );
  const share = (a: string, b: string) => {
    const x = get(a);
    const y = get(b);
    return x && y ? `${((100 * x.thr.rps) / y.thr.rps).toFixed(1)}%` : 'n/a';
  };
  lines.push('');
  lines.push(`Throughput at ${CONNECTIONS} connections as a share of the direct upstream's (same run):`);
  lines.push(
    `- Portico non-streaming, store off: ${share('Portico, non-streaming, store off', 'upstream direct, non-streaming')}; streaming, store off: ${share('Portico, streaming, store off', 'upstream direct, streaming')}; the minimal Node proxy: ${share('minimal Node proxy, non-streaming', 'upstream direct, non-streaming')} / ${share('minimal Node proxy, streaming (relays the events)', 'upstream direct, streaming')}; in a bare Fastify: ${share('minimal Fastify proxy, non-streaming', 'upstream direct, non-streaming')}`,
  );
  if (workers.length) {
    const direct = get('upstream direct, non-streaming');
    lines.push('');
    lines.push(
      `Several processes (\`portico serve\` on PostgreSQL and Redis, a process of its own; non-streaming, store off; ${CONNECTIONS} connections; share of the direct upstream's throughput above):`,
    );
    lines.push('');
    lines.push('| WORKERS | req/s | p50 ms | p99 ms | share of direct | Portico CPU µs/req (primary and workers) |');
    lines.push('|---:|---:|---:|---:|---:|---:|');
    for (const w of workers) {
      lines.push(
        `| ${w.workers} | ${w.r.rps.toFixed(0)} | ${f(w.r.p50)} | ${f(w.r.p99)} | ${direct ? ((100 * w.r.rps) / direct.thr.rps).toFixed(1) + '%' : '-'} | ${w.cpu.toFixed(0)} |`,
      );
    }
  }
  console.log(lines.join('\n'));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
