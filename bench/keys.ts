/**
 * Key management and verification benchmark (npm run bench:keys). Not a test: it prints figures.
 *
 * On PGlite and on PostgreSQL: latency (p50/p99) of create and list through app.inject and through a real
 * socket; requests per second one process serves on GET /v1/models with an inference key over real HTTP,
 * next to the same route without authentication (the baseline); and the cost of one cached verification
 * measured directly (services.verifier.verify against a no-op).
 */
import http from 'node:http';
import os from 'node:os';
import type { ModelSpec } from '../src/models/config.js';
import { latency, timeEach, fmt, type Latency } from './lib/stats.js';
import { request } from './lib/http.js';
import { runLoad, type LoadResult } from './lib/load.js';
import { startPortico } from './lib/portico.js';

const N_LATENCY = Number(process.env.BENCH_N || 300);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS || 16);
const DURATION_MS = Number(process.env.BENCH_DURATION_MS || 5000);
const VERIFY_N = Number(process.env.BENCH_VERIFY_N || 200_000);
const models: ModelSpec[] = ['m1', 'm2', 'm3'].map((name) => ({ name, provider: 'openai-compatible', base_url: 'http://127.0.0.1:9/v1', type: 'text' }) as ModelSpec);
/** what GET /v1/models lists (set once Portico is up), for the unauthenticated baseline route */
let baselineModels: ModelSpec[] = [];
const startedAt = Math.floor(Date.now() / 1000);

interface DbResult {
  db: string;
  createInject: Latency;
  listInject: Latency;
  createSocket: Latency;
  listSocket: Latency;
  authed: LoadResult;
  baseline: LoadResult;
  verifyUs: number;
  noopUs: number;
  verifierHits: number;
  verifierMisses: number;
}

async function benchDb(db: 'pglite' | 'postgres'): Promise<DbResult> {
  // PGlite in memory, or PostgreSQL
  const s = await startPortico({
    db,
    models,
    env: { MAX_ACTIVE_MANAGEMENT_KEYS: '10000', MAX_ACTIVE_INFERENCE_KEYS: '10000' },
    extraModules: [
      {
        name: 'bench-baseline',
        routes: {
          // the baseline: the same answer as GET /v1/models, without authentication
          api: (api) => {
            api.get('/bench-noauth-models', { config: { auth: 'none' } }, async () => ({
              object: 'list' as const,
              data: baselineModels.map((m) => ({ id: m.name, object: 'model' as const, created: startedAt, owned_by: m.owned_by ?? 'portico' })),
            }));
          },
        },
      },
    ],
  });
  try {
    const { app, url } = s;
    const services = { verifier: s.runtime.verifier, models: s.runtime.models, db: s.runtime.core.db, usage: s.runtime.core.usage };
    baselineModels = services.models.list();
    const auth = { authorization: `Bearer ${s.jwt}` };
    const json = { ...auth, 'content-type': 'application/json' };
    const body = (i: number) => JSON.stringify({ name: `bench key ${i}`, description: 'benchmark', scopes: ['usage:read'] });

    // warm up both paths (JIT, prepared plans, connections)
    for (let i = 0; i < 30; i++) {
      await app.inject({ method: 'POST', url: '/v1/portal/management/api-keys', headers: json, payload: body(i) });
      await app.inject({ method: 'GET', url: '/v1/portal/management/api-keys', headers: auth });
    }

    const check = (status: number, what: string) => {
      if (status !== 200) throw new Error(`${what} answered ${status}`);
    };
    const createInject = latency(
      await timeEach(N_LATENCY, async (i) =>
        check((await app.inject({ method: 'POST', url: '/v1/portal/management/api-keys', headers: json, payload: body(i) })).statusCode, 'create'),
      ),
    );
    const listInject = latency(
      await timeEach(N_LATENCY, async () => check((await app.inject({ method: 'GET', url: '/v1/portal/management/api-keys', headers: auth })).statusCode, 'list')),
    );
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const createSocket = latency(
      await timeEach(N_LATENCY, async (i) =>
        check((await request(agent, `${url}/v1/portal/management/api-keys`, { method: 'POST', headers: json, body: body(i) })).status, 'create'),
      ),
    );
    const listSocket = latency(await timeEach(N_LATENCY, async () => check((await request(agent, `${url}/v1/portal/management/api-keys`, { headers: auth })).status, 'list')));
    agent.destroy();

    // requests per second with an inference key, and the unauthenticated baseline
    const key = await s.createKey('load');
    const h0 = services.verifier.hits;
    const m0 = services.verifier.misses;
    const authed = await runLoad({ url: `${url}/v1/models`, headers: { authorization: `Bearer ${key}` }, connections: CONNECTIONS, durationMs: DURATION_MS, warmupMs: 1000 });
    const verifierHits = services.verifier.hits - h0;
    const verifierMisses = services.verifier.misses - m0;
    const baseline = await runLoad({ url: `${url}/v1/bench-noauth-models`, connections: CONNECTIONS, durationMs: DURATION_MS, warmupMs: 1000 });
    if (authed.non2xx || baseline.non2xx) throw new Error(`non-2xx answers under load: ${authed.non2xx} / ${baseline.non2xx}`);

    // the verifier alone, from the cache, against a no-op of the same shape
    const principal = await services.verifier.verify(key, 'inference');
    const noop = async (_k: string, _kind: string) => principal;
    const perCall = async (f: (k: string, kind: 'inference') => Promise<unknown>) => {
      for (let i = 0; i < 10_000; i++) await f(key, 'inference');
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < VERIFY_N; i++) await f(key, 'inference');
      return Number(process.hrtime.bigint() - t0) / 1e3 / VERIFY_N;
    };
    const verify = (k: string, kind: 'inference') => services.verifier.verify(k, kind);
    const noopUs = await perCall(noop);
    const verifyUs = await perCall(verify);
    return { db, createInject, listInject, createSocket, listSocket, authed, baseline, verifyUs, noopUs, verifierHits, verifierMisses };
  } finally {
    await s.close();
  }
}

function report(results: DbResult[]) {
  const lines: string[] = [];
  const row = (...c: string[]) => lines.push(`| ${c.join(' | ')} |`);
  lines.push(
    `Requests per latency figure: ${N_LATENCY}, one after another. Load: ${CONNECTIONS} keep-alive connections from a worker thread, ${DURATION_MS / 1000} s after 1 s warm-up.`,
  );
  lines.push('');
  row('Database', 'Operation', 'Path', 'p50 (ms)', 'p99 (ms)', 'mean (ms)');
  row('---', '---', '---', '---:', '---:', '---:');
  for (const r of results) {
    for (const [op, path, l] of [
      ['create', 'app.inject', r.createInject],
      ['list (20 of 600+)', 'app.inject', r.listInject],
      ['create', 'HTTP socket', r.createSocket],
      ['list (20 of 600+)', 'HTTP socket', r.listSocket],
    ] as const) {
      row(r.db, op, path, fmt(l.p50), fmt(l.p99), fmt(l.mean));
    }
  }
  lines.push('');
  row('Database', 'Route', 'Requests/s', 'p50 (ms)', 'p99 (ms)', 'Verifier cache hits / DB reads');
  row('---', '---', '---:', '---:', '---:', '---');
  for (const r of results) {
    row(r.db, 'GET /v1/models with an inference key', r.authed.rps.toFixed(0), fmt(r.authed.p50), fmt(r.authed.p99), `${r.verifierHits} / ${r.verifierMisses}`);
    row(r.db, 'same answer, no authentication (baseline)', r.baseline.rps.toFixed(0), fmt(r.baseline.p50), fmt(r.baseline.p99), '-');
  }
  lines.push('');
  row(
    'Database',
    'verifier.verify(key) from the cache (µs/call)',
    'no-op async call (µs/call)',
    'verification cost (µs/call)',
    'HTTP cost per request, authenticated vs baseline (µs)',
  );
  row('---', '---:', '---:', '---:', '---:');
  for (const r of results) {
    const httpDelta = (1e6 / r.authed.rps - 1e6 / r.baseline.rps).toFixed(1);
    row(r.db, r.verifyUs.toFixed(2), r.noopUs.toFixed(2), (r.verifyUs - r.noopUs).toFixed(2), httpDelta);
  }
  return lines.join('\n');
}

async function main() {
  const which = (process.env.BENCH_DBS || 'pglite,postgres').split(',') as Array<'pglite' | 'postgres'>;
  const results: DbResult[] = [];
  for (const db of which) {
    process.stderr.write(`benchmarking ${db}...\n`);
    results.push(await benchDb(db));
  }
  const cpus = os.cpus();
  process.stdout.write(`Machine: ${cpus.length} cores (${cpus[0]?.model ?? 'unknown'}), Node ${process.version}, ${os.platform()} ${os.arch()}\n\n`);
  process.stdout.write(report(results) + '\n');
}

main().catch((e) => {
  process.stderr.write(`${e?.stack ?? e}\n`);
  process.exitCode = 1;
});
