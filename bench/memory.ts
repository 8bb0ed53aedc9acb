/**
 * Memory and embedded-database benchmark (npm run bench:memory). Not a test: it prints figures.
 *
 * A real `portico serve` process (the built command) in front of the fast mock upstream (a worker thread here),
 * POST /v1/responses non-streaming, LOG_LEVEL=warn. Three parts:
 *
 * 1. Growth: on the embedded default (PGlite files in DATA_DIR), store off and store on, the server's RSS
 *    (VmRSS) idle after start, after BENCH_FIRST requests (10k) and after BENCH_REQUESTS (100k), at
 *    BENCH_CONNECTIONS (8) connections. Aim: RSS at 100k within 10% of RSS at 10k.
 * 2. Store on against store off, one connection, BENCH_LATENCY requests each (2,000), alternating in rounds:
 *    added p50 of store on, on PGlite on its own thread (the default), PGlite on the main thread
 *    (PORTICO_PGLITE_THREAD=off, the baseline) and PostgreSQL (PORTICO_TEST_DATABASE_URL, a schema of its own).
 * 3. Event-loop lag of the server's main thread (its own /metrics: how late a 100 ms timer fired, reset at each
 *    scrape, src/platform/ops/loop-lag.ts; before 2026-11-29 prom-client's 10 ms monitorEventLoopDelay, whose
 *    values included the 10 ms) over a store-on load at 8 connections, for the same three databases.
 *
 * Requests/s in these rows are for orientation only: the load generator shares this machine's cores.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir, cpus } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { startFastUpstream } from './lib/upstream-fast.js';
import { TEST_PG_URL, testPgUrl } from '../test/helpers/services.js';
import { signToken } from '../src/platform/auth/jwt.js';

const FIRST = Number(process.env.BENCH_FIRST || 10_000);
const TOTAL = Number(process.env.BENCH_REQUESTS || 100_000);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS || 8);
const LATENCY_N = Number(process.env.BENCH_LATENCY || 2_000);
const LAG_N = Number(process.env.BENCH_LAG || 5_000);
const PARTS = (process.env.BENCH_PARTS || 'growth,latency,lag').split(',');
const MAIN = join(import.meta.dirname, '..', 'src', 'cli', 'main.js');
/** the PostgreSQL of the tests (PORTICO_TEST_DATABASE_URL) */
const PG_URL = TEST_PG_URL;
const SECRET = 'bench-secret-0123456789abcdef0123456789abcdef';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const rssMiB = (pid: number) => {
  const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : 0;
};

interface Server {
  url: string;
  pid: number;
  key: string;
  stop(): Promise<void>;
}

async function startServer(upstreamUrl: string, db: 'pglite' | 'pglite-main' | 'postgres'): Promise<Server> {
  const dir = mkdtempSync(join(tmpdir(), 'portico-bench-mem-'));
  const config = join(dir, 'models.yaml');
  writeFileSync(config, `models:\n  - name: fast\n    provider: openai-compatible\n    base_url: ${upstreamUrl}\n    upstream_model: fast\n`);
  const schema = db === 'postgres' ? `bench_${randomBytes(5).toString('hex')}` : undefined;
  const port = 20000 + Math.floor(Math.random() * 20000);
  const p: ChildProcess = spawn(process.execPath, [MAIN, 'serve'], {
    env: {
      PATH: process.env.PATH ?? '',
      LOG_LEVEL: 'warn',
      HOST: '127.0.0.1',
      PORT: String(port),
      DATA_DIR: join(dir, 'data'),
      PORTICO_CONFIG: config,
      JWT_SECRET: SECRET,
      KEY_PEPPER: 'bench-pepper-0123456789abcdef0123456789abcdef',
      ...(db === 'pglite-main' ? { PORTICO_PGLITE_THREAD: 'off' } : {}),
      // the embedded database's shared buffers, when the run compares them (default: Portico's own, 8 MB)
      ...(process.env.PGLITE_SHARED_BUFFERS_MB ? { PGLITE_SHARED_BUFFERS_MB: process.env.PGLITE_SHARED_BUFFERS_MB } : {}),
      ...(schema ? { DATABASE_URL: testPgUrl({ searchPath: schema }) } : {}),
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  p.stderr!.on('data', (b) => (err += b));
  const exited = new Promise((r) => p.once('exit', r));
  if (schema) {
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    await c.query(`create schema ${schema}`);
    await c.end();
  }
  const url = `http://127.0.0.1:${port}`;
  for (;;) {
    if (p.exitCode !== null) throw new Error(`portico exited: ${err}`);
    try {
      const r = await fetch(`${url}/readyz`);
      await r.arrayBuffer();
      if (r.status === 200) break;
    } catch {
      // not listening yet
    }
    await sleep(20);
  }
  const jwt = await signToken(new TextEncoder().encode(SECRET), { userId: 'bench-user', ttlSeconds: 3600 });
  const created = await fetch(`${url}/v1/portal/api-keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
    body: '{"name":"bench"}',
  });
  const key = ((await created.json()) as { data: { api_key: string } }).data.api_key;
  return {
    url,
    pid: p.pid!,
    key,
    async stop() {
      p.kill('SIGTERM');
      await exited;
      if (schema) {
        const c = new pg.Client({ connectionString: PG_URL });
        await c.connect();
        await c.query(`drop schema ${schema} cascade`);
        await c.end();
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** `n` requests over `connections` keep-alive connections; gives each one's latency (ms). Any non-200 aborts the run. */
async function drive(s: Server, store: boolean, n: number, connections: number): Promise<{ ms: number[]; seconds: number }> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections });
  const body = JSON.stringify({ model: 'fast', input: 'Say hello in five words.', store });
  const u = new URL(`${s.url}/v1/responses`);
  const headers = { authorization: `Bearer ${s.key}`, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) };
  const ms: number[] = [];
  let sent = 0;
  const one = () =>
    new Promise<void>((resolve, reject) => {
      const t0 = performance.now();
      const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', agent, headers }, (res) => {
        res.on('data', () => {});
        res.on('end', () => {
          if (res.statusCode !== 200) reject(new Error(`status ${res.statusCode}`));
          else {
            ms.push(performance.now() - t0);
            resolve();
          }
        });
      });
      req.on('error', reject);
      req.end(body);
    });
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (sent < n) {
        sent++;
        await one();
      }
    }),
  );
  agent.destroy();
  return { ms, seconds: (performance.now() - t0) / 1000 };
}

const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function lagSeconds(s: Server): Promise<{ p50: number; p99: number; max: number }> {
  const text = await (await fetch(`${s.url}/metrics`)).text();
  const get = (name: string) => Number(new RegExp(`^portico_nodejs_eventloop_lag_${name}_seconds (\\S+)`, 'm').exec(text)?.[1] ?? NaN);
  return { p50: get('p50'), p99: get('p99'), max: get('max') };
}

async function growth(upstream: string, out: string[]) {
  out.push(
    `### Growth: RSS of a \`portico serve\` process on PGlite files, ${CONNECTIONS} connections`,
    '',
    `| store | idle after start, MiB | after ${FIRST / 1000}k, MiB | after ${TOTAL / 1000}k, MiB | growth 10k -> 100k | req/s |`,
    '|---|---:|---:|---:|---:|---:|',
  );
  for (const store of [false, true]) {
    const s = await startServer(upstream, 'pglite');
    try {
      await sleep(1000);
      const idle = rssMiB(s.pid);
      const a = await drive(s, store, FIRST, CONNECTIONS);
      await sleep(1000);
      const atFirst = rssMiB(s.pid);
      const b = await drive(s, store, TOTAL - FIRST, CONNECTIONS);
      await sleep(1000);
      const atTotal = rssMiB(s.pid);
      const rps = (a.ms.length + b.ms.length) / (a.seconds + b.seconds);
      out.push(
        `| ${store ? 'on' : 'off'} | ${idle.toFixed(0)} | ${atFirst.toFixed(0)} | ${atTotal.toFixed(0)} | ${(((atTotal - atFirst) / atFirst) * 100).toFixed(1)}% | ${rps.toFixed(0)} |`,
      );
      console.error(out.at(-1));
    } finally {
      await s.stop();
    }
  }
  out.push('');
}

const DBS = [
  ['pglite', 'PGlite, own thread (default)'],
  ['pglite-main', 'PGlite, main thread (PORTICO_PGLITE_THREAD=off)'],
  ['postgres', 'PostgreSQL'],
] as const;

async function latency(upstream: string, out: string[]) {
  out.push(
    `### Store on against store off: 1 connection, ${LATENCY_N} requests each, in 4 alternating rounds`,
    '',
    '| database | p50 store off, ms | p50 store on, ms | added by store on, ms |',
    '|---|---:|---:|---:|',
  );
  for (const [db, name] of DBS) {
    const s = await startServer(upstream, db);
    try {
      await drive(s, false, 300, 1);
      await drive(s, true, 300, 1);
      const off: number[] = [];
      const on: number[] = [];
      for (let round = 0; round < 4; round++) {
        off.push(...(await drive(s, false, LATENCY_N / 4, 1)).ms);
        on.push(...(await drive(s, true, LATENCY_N / 4, 1)).ms);
      }
      out.push(`| ${name} | ${p50(off).toFixed(3)} | ${p50(on).toFixed(3)} | ${(p50(on) - p50(off)).toFixed(3)} |`);
      console.error(out.at(-1));
    } finally {
      await s.stop();
    }
  }
  out.push('');
}

async function lag(upstream: string, out: string[]) {
  out.push(
    `### Event-loop lag of the server's main thread: ${LAG_N} store-on requests at ${CONNECTIONS} connections`,
    '',
    '| database | lag p50, ms | lag p99, ms | lag max, ms | req/s |',
    '|---|---:|---:|---:|---:|',
  );
  for (const [db, name] of DBS) {
    const s = await startServer(upstream, db);
    try {
      await drive(s, true, 500, CONNECTIONS);
      await lagSeconds(s); // resets the histogram
      const r = await drive(s, true, LAG_N, CONNECTIONS);
      const l = await lagSeconds(s);
      out.push(`| ${name} | ${(l.p50 * 1000).toFixed(1)} | ${(l.p99 * 1000).toFixed(1)} | ${(l.max * 1000).toFixed(1)} | ${(r.ms.length / r.seconds).toFixed(0)} |`);
      console.error(out.at(-1));
    } finally {
      await s.stop();
    }
  }
  out.push('');
}

async function main() {
  const up = await startFastUpstream();
  const out: string[] = [`bench:memory, ${new Date().toISOString().slice(0, 10)}, ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), Node ${process.version}`, ''];
  try {
    if (PARTS.includes('growth')) await growth(up.url, out);
    if (PARTS.includes('latency')) await latency(up.url, out);
    if (PARTS.includes('lag')) await lag(up.url, out);
  } finally {
    await up.stop();
  }
  console.log(out.join('\n'));
}

await main();
