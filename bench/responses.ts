/**
 * Responses API benchmark (npm run bench:responses). Not a test: it prints figures.
 *
 * A fast local upstream (bench/lib/upstream-fast.ts, in a worker thread) answers chat.completions at once.
 * The same load generator (a keep-alive node:http Agent, in another worker thread) measures:
 *   - straight to the upstream: POST /v1/chat/completions, non-streaming and streaming;
 *   - through Portico (this process, main thread): POST /v1/responses, non-streaming and streaming,
 *     with store on and off.
 * Latency runs use one connection (requests one after another: the added time without queueing); throughput
 * runs use BENCH_CONNECTIONS connections. Streaming reports the time to the first event (TTFE) and to the end.
 *
 * Env: BENCH_DB (pglite | postgres, default pglite), BENCH_DURATION_MS (default 3000), BENCH_CONNECTIONS (8),
 * BENCH_ONLY (a substring of the scenario names), BENCH_PROFILE=1 (keeps Portico busy for a --cpu-prof run).
 */
import http from 'node:http';
import os from 'node:os';
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import pg from 'pg';
import type { ModelSpec } from '../src/models/config.js';
import { startFastUpstream } from './lib/upstream-fast.js';

const PG_URL = process.env.PORTICO_BENCH_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
const DURATION_MS = Number(process.env.BENCH_DURATION_MS || 3000);
const WARMUP_MS = Number(process.env.BENCH_WARMUP_MS || 1000);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS || 8);
const DB = (process.env.BENCH_DB || 'pglite') as 'pglite' | 'postgres';

interface LoadOptions {
  load: true;
  url: string;
  headers: Record<string, string>;
  body: string;
  stream: boolean;
  connections: number;
  durationMs: number;
  warmupMs: number;
}

interface LoadResult {
  requests: number;
  failures: number;
  rps: number;
  p50: number;
  p99: number;
  /** streaming: time to the first body bytes (the first event) */
  ttfe50: number;
  ttfe99: number;
}

// ------------------------------------------------------------------ load generator (worker thread)

function pct(s: number[], q: number) {
  return s.length ? s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] : 0;
}

async function work(o: LoadOptions): Promise<LoadResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: o.connections });
  const u = new URL(o.url);
  const headers = { ...o.headers, 'content-length': String(Buffer.byteLength(o.body)) };
  let measuring = false;
  let stop = false;
  let requests = 0;
  let failures = 0;
  const lat: number[] = [];
  const first: number[] = [];
  const one = () =>
    new Promise<void>((resolve) => {
      const t0 = process.hrtime.bigint();
      let t1: bigint | undefined;
      let ok = true;
      const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers, agent }, (res) => {
        if (res.statusCode !== 200) ok = false;
        let tail = '';
        res.on('data', (c: Buffer) => {
          t1 ??= process.hrtime.bigint();
          if (o.stream) tail = (tail + c.toString('latin1')).slice(-64);
        });
        res.on('end', () => {
          const t2 = process.hrtime.bigint();
          if (o.stream && !tail.includes('[DONE]')) ok = false;
          if (measuring) {
            requests++;
            if (!ok) failures++;
            lat.push(Number(t2 - t0) / 1e6);
            if (t1) first.push(Number(t1 - t0) / 1e6);
          }
          resolve();
        });
        res.on('error', () => {
          if (measuring) failures++;
          resolve();
        });
      });
      req.on('error', () => {
        if (measuring) failures++;
        resolve();
      });
      req.end(o.body);
    });
  const loop = async () => {
    while (!stop) await one();
  };
  const loops = Array.from({ length: o.connections }, loop);
  await new Promise((r) => setTimeout(r, o.warmupMs));
  measuring = true;
  const start = process.hrtime.bigint();
  await new Promise((r) => setTimeout(r, o.durationMs));
  measuring = false;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  stop = true;
  await Promise.all(loops);
  agent.destroy();
  lat.sort((a, b) => a - b);
  first.sort((a, b) => a - b);
  return { requests, failures, rps: requests / seconds, p50: pct(lat, 0.5), p99: pct(lat, 0.99), ttfe50: pct(first, 0.5), ttfe99: pct(first, 0.99) };
}

function runLoad(o: Omit<LoadOptions, 'load'>): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL(import.meta.url), { workerData: { ...o, load: true } });
    w.once('message', resolve);
    w.once('error', reject);
    w.once('exit', (code) => code !== 0 && reject(new Error(`load worker exited ${code}`)));
  });
}

// ------------------------------------------------------------------ main

async function portico(upstreamUrl: string) {
  const { buildApp, closeServices, createServices } = await import('../src/app.js');
  const { loadConfig } = await import('../src/platform/config.js');
  const { signToken } = await import('../src/platform/auth/jwt.js');
  const { apiPlugins } = await import('../src/api/plugins.js');
  const dataDir = mkdtempSync(join(tmpdir(), 'portico-bench-'));
  const schema = DB === 'postgres' ? `bench_${randomBytes(5).toString('hex')}` : undefined;
  const secret = 'bench-secret-0123456789abcdef0123456789abcdef';
  const config = loadConfig({
    DATA_DIR: dataDir,
    // the embedded default of `npm start`: PGlite files in DATA_DIR (and the usage journal beside them)
    PORTICO_DB: '',
    DATABASE_URL: DB === 'postgres' ? PG_URL : '',
    JWT_SECRET: secret,
    LOG_LEVEL: 'info',
  });
  const models: ModelSpec[] = [{ name: 'fast', provider: 'openai-compatible', base_url: upstreamUrl, type: 'text' } as ModelSpec];
  const services = await createServices(config, { dbSchema: schema, models });
  // production-like logging: one info line per request, written to /dev/null
  const devnull = createWriteStream('/dev/null');
  const app = await buildApp(services, { apiPlugins, logger: { level: 'info', stream: devnull } as any });
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  const jwt = await signToken(new TextEncoder().encode(secret), { userId: 'bench-user', ttlSeconds: 3600 });
  const created = await app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${jwt}` }, payload: { name: 'bench' } });
  if (created.statusCode !== 200) throw new Error(`key: ${created.body}`);
  const key: string = created.json().data.api_key;
  return {
    url,
    key,
    async close() {
      await app.close();
      await closeServices(services);
      devnull.end();
      if (schema) {
        const c = new pg.Client({ connectionString: PG_URL });
        await c.connect();
        await c.query(`drop schema if exists ${schema} cascade`);
        await c.end();
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

const f = (ms: number) => (ms < 10 ? ms.toFixed(3) : ms.toFixed(1));

async function main() {
  const up = await startFastUpstream();
  const p = await portico(up.url);
  const input = 'Say hello in five words.';
  const chatBody = (stream: boolean) =>
    JSON.stringify({ model: 'fast', messages: [{ role: 'user', content: input }], stream, ...(stream ? { stream_options: { include_usage: true } } : {}) });
  const respBody = (stream: boolean, store: boolean) => JSON.stringify({ model: 'fast', input, stream, store });
  const scenarios = [
    { name: 'upstream direct, non-streaming', url: up.url + '/chat/completions', headers: {}, body: chatBody(false), stream: false },
    { name: 'upstream direct, streaming', url: up.url + '/chat/completions', headers: {}, body: chatBody(true), stream: true },
    { name: 'Portico, non-streaming, store off', url: p.url + '/v1/responses', headers: { authorization: `Bearer ${p.key}` }, body: respBody(false, false), stream: false },
    { name: 'Portico, non-streaming, store on', url: p.url + '/v1/responses', headers: { authorization: `Bearer ${p.key}` }, body: respBody(false, true), stream: false },
    { name: 'Portico, streaming, store off', url: p.url + '/v1/responses', headers: { authorization: `Bearer ${p.key}` }, body: respBody(true, false), stream: true },
    { name: 'Portico, streaming, store on', url: p.url + '/v1/responses', headers: { authorization: `Bearer ${p.key}` }, body: respBody(true, true), stream: true },
  ].filter((s) => !process.env.BENCH_ONLY || s.name.includes(process.env.BENCH_ONLY));

  // one request each way first: a broken set-up fails here with its answer
  for (const stream of [false, true]) {
    const res = await fetch(p.url + '/v1/responses', { method: 'POST', headers: { authorization: `Bearer ${p.key}`, 'content-type': 'application/json' }, body: respBody(stream, true) });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`Portico answered ${res.status}: ${text}`);
  }
  const rows: Array<{ name: string; stream: boolean; lat: LoadResult; thr: LoadResult }> = [];
  for (const s of scenarios) {
    const base = { url: s.url, headers: { 'content-type': 'application/json', ...(s.headers as Record<string, string>) }, body: s.body, stream: s.stream, durationMs: DURATION_MS, warmupMs: WARMUP_MS };
    const lat = await runLoad({ ...base, connections: 1 });
    const thr = process.env.BENCH_PROFILE ? lat : await runLoad({ ...base, connections: CONNECTIONS });
    if (lat.failures || thr.failures) throw new Error(`${s.name}: ${lat.failures + thr.failures} failed requests`);
    rows.push({ name: s.name, stream: s.stream, lat, thr });
    console.error(`${s.name}: p50 ${f(lat.p50)} ms p99 ${f(lat.p99)} ms${s.stream ? ` TTFE p50 ${f(lat.ttfe50)} ms` : ''}; ${thr.rps.toFixed(0)} req/s at ${CONNECTIONS} connections`);
  }
  await p.close();
  await up.stop();

  const cpus = os.cpus();
  const lines: string[] = [];
  lines.push(`Machine: ${cpus.length} cores (${cpus[0]?.model.trim()}), Node ${process.version}, ${os.platform()} ${os.release()}; database ${DB}.`);
  lines.push(`Latency: one connection, requests one after another, ${DURATION_MS / 1000} s after ${WARMUP_MS / 1000} s warm-up. Throughput: ${CONNECTIONS} keep-alive connections.`);
  lines.push('');
  lines.push('| Path | p50 ms | p99 ms | TTFE p50 ms | TTFE p99 ms | req/s (1 conn) | req/s (' + CONNECTIONS + ' conns) | p50 at ' + CONNECTIONS + ' conns ms |');
  lines.push('|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of rows) {
    lines.push(`| ${r.name} | ${f(r.lat.p50)} | ${f(r.lat.p99)} | ${r.stream ? f(r.lat.ttfe50) : '-'} | ${r.stream ? f(r.lat.ttfe99) : '-'} | ${r.lat.rps.toFixed(0)} | ${r.thr.rps.toFixed(0)} | ${f(r.thr.p50)} |`);
  }
  const get = (n: string) => rows.find((r) => r.name === n);
  const added = (a: string, b: string, k: 'p50' | 'ttfe50' = 'p50') => {
    const x = get(a);
    const y = get(b);
    return x && y ? (x.lat[k] - y.lat[k]).toFixed(3) : 'n/a';
  };
  lines.push('');
  lines.push('Added p50 by Portico (one connection):');
  lines.push(`- non-streaming, store off: ${added('Portico, non-streaming, store off', 'upstream direct, non-streaming')} ms; store on: ${added('Portico, non-streaming, store on', 'upstream direct, non-streaming')} ms`);
  lines.push(
    `- streaming, time to first event, store off: ${added('Portico, streaming, store off', 'upstream direct, streaming', 'ttfe50')} ms; store on: ${added('Portico, streaming, store on', 'upstream direct, streaming', 'ttfe50')} ms`,
  );
  lines.push(`- streaming, whole stream, store off: ${added('Portico, streaming, store off', 'upstream direct, streaming')} ms; store on: ${added('Portico, streaming, store on', 'upstream direct, streaming')} ms`);
  console.log(lines.join('\n'));
}

if (isMainThread) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
} else if ((workerData as LoadOptions | undefined)?.load) {
  work(workerData as LoadOptions).then((r) => parentPort!.postMessage(r));
}
