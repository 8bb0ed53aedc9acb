/**
 * Chat Completions benchmark (after `npm run build`: node dist/bench/chat.js). Not a test: it prints figures.
 *
 * What forwarding costs: the fast local upstream (bench/lib/upstream-fast.ts, in a worker thread) answers
 * /chat/completions at once; the same load generator (bench/lib/load.ts, in another worker thread) measures
 *   - straight to the upstream: POST /v1/chat/completions, non-streaming and streaming (the baseline);
 *   - through Portico: POST /v1/chat/completions (forwarded as it is), non-streaming and streaming;
 *   - through Portico: POST /v1/responses store off (the same upstream call, translated), for comparison.
 * Latency runs use one connection (the added time without queueing); throughput runs BENCH_CONNECTIONS.
 *
 * Env: BENCH_DB (pglite | postgres, default pglite), BENCH_DURATION_MS (3000), BENCH_WARMUP_MS (1000),
 * BENCH_CONNECTIONS (8), BENCH_ONLY (a substring of the scenario names).
 */
import os from 'node:os';
import type { ModelSpec } from '../src/models/config.js';
import { startFastUpstream } from './lib/upstream-fast.js';
import { runLoad, type LoadResult } from './lib/load.js';
import { startPortico } from './lib/portico.js';

const DURATION_MS = Number(process.env.BENCH_DURATION_MS || 3000);
const WARMUP_MS = Number(process.env.BENCH_WARMUP_MS || 1000);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS || 8);
const DB = (process.env.BENCH_DB || 'pglite') as 'pglite' | 'postgres';
const f = (ms: number) => (ms < 10 ? ms.toFixed(3) : ms.toFixed(1));

async function main() {
  const up = await startFastUpstream();
  const models: ModelSpec[] = [{ name: 'fast', provider: 'openai-compatible', base_url: up.url, type: 'text' } as ModelSpec];
  const p = await startPortico({ db: DB, pglite: 'files', models });
  const key = await p.createKey('bench');
  const auth = { authorization: `Bearer ${key}` };
  const chat = (stream: boolean) =>
    JSON.stringify({ model: 'fast', messages: [{ role: 'user', content: 'Say hello in five words.' }], stream, ...(stream ? { stream_options: { include_usage: true } } : {}) });
  const resp = (stream: boolean) => JSON.stringify({ model: 'fast', input: 'Say hello in five words.', stream, store: false });
  const scenarios = [
    { name: 'upstream direct, non-streaming', url: up.url + '/chat/completions', headers: {}, body: chat(false), stream: false },
    { name: 'upstream direct, streaming', url: up.url + '/chat/completions', headers: {}, body: chat(true), stream: true },
    { name: 'Portico chat (forwarded), non-streaming', url: p.url + '/v1/chat/completions', headers: auth, body: chat(false), stream: false },
    { name: 'Portico chat (forwarded), streaming', url: p.url + '/v1/chat/completions', headers: auth, body: chat(true), stream: true },
    { name: 'Portico responses (translated), non-streaming', url: p.url + '/v1/responses', headers: auth, body: resp(false), stream: false },
    { name: 'Portico responses (translated), streaming', url: p.url + '/v1/responses', headers: auth, body: resp(true), stream: true },
  ].filter((s) => !process.env.BENCH_ONLY || s.name.includes(process.env.BENCH_ONLY));

  // one request each way first: a broken set-up fails here with its answer
  for (const s of scenarios.filter((x) => x.url.startsWith(p.url))) {
    const res = await fetch(s.url, { method: 'POST', headers: { 'content-type': 'application/json', ...s.headers }, body: s.body });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`${s.name}: Portico answered ${res.status}: ${text}`);
  }
  const rows: Array<{ name: string; stream: boolean; lat: LoadResult; thr: LoadResult }> = [];
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
    const thr = await runLoad({ ...base, connections: CONNECTIONS });
    if (lat.failures || thr.failures) throw new Error(`${s.name}: ${lat.failures + thr.failures} failed requests`);
    rows.push({ name: s.name, stream: s.stream, lat, thr });
    console.error(`${s.name}: p50 ${f(lat.p50)} ms${s.stream ? ` TTFE p50 ${f(lat.ttfe50)} ms` : ''}; ${thr.rps.toFixed(0)} req/s at ${CONNECTIONS} connections`);
  }
  await p.close();
  await up.stop();

  const cpus = os.cpus();
  const lines: string[] = [];
  lines.push(`Machine: ${cpus.length} cores (${cpus[0]?.model.trim()}), Node ${process.version}; database ${DB}; load average ${os.loadavg()[0]!.toFixed(1)}.`);
  lines.push(`Latency: one connection, ${DURATION_MS / 1000} s after ${WARMUP_MS / 1000} s warm-up. Throughput: ${CONNECTIONS} keep-alive connections.`);
  lines.push('');
  lines.push(`| Path | p50 ms | p99 ms | TTFE p50 ms | req/s (1 conn) | req/s (${CONNECTIONS} conns) |`);
  lines.push('|---|---:|---:|---:|---:|---:|');
  for (const r of rows) lines.push(`| ${r.name} | ${f(r.lat.p50)} | ${f(r.lat.p99)} | ${r.stream ? f(r.lat.ttfe50) : '-'} | ${r.lat.rps.toFixed(0)} | ${r.thr.rps.toFixed(0)} |`);
  const get = (n: string) => rows.find((r) => r.name === n);
  const added = (a: string, b: string, k: 'p50' | 'ttfe50' = 'p50') => {
    const x = get(a);
    const y = get(b);
    return x && y ? (x.lat[k] - y.lat[k]).toFixed(3) : 'n/a';
  };
  const ratio = (a: string, b: string) => {
    const x = get(a);
    const y = get(b);
    return x && y ? (x.thr.rps / y.thr.rps).toFixed(2) : 'n/a';
  };
  lines.push('');
  lines.push('Added p50 by Portico over the upstream alone (one connection):');
  lines.push(
    `- chat forwarded: non-streaming ${added('Portico chat (forwarded), non-streaming', 'upstream direct, non-streaming')} ms; streaming, first chunk ${added('Portico chat (forwarded), streaming', 'upstream direct, streaming', 'ttfe50')} ms, whole stream ${added('Portico chat (forwarded), streaming', 'upstream direct, streaming')} ms`,
  );
  lines.push(
    `- responses translated: non-streaming ${added('Portico responses (translated), non-streaming', 'upstream direct, non-streaming')} ms; streaming, whole stream ${added('Portico responses (translated), streaming', 'upstream direct, streaming')} ms`,
  );
  lines.push(
    `Throughput, chat forwarded / responses translated (${CONNECTIONS} conns): non-streaming ${ratio('Portico chat (forwarded), non-streaming', 'Portico responses (translated), non-streaming')}x, streaming ${ratio('Portico chat (forwarded), streaming', 'Portico responses (translated), streaming')}x`,
  );
  console.log(lines.join('\n'));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
