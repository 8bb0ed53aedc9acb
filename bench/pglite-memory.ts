/**
 * Large requests and the embedded database's memory (npm run bench:pglite-memory; issue 22 §6). Not a test: it
 * prints figures.
 *
 * A real `portico serve` process (the built command) in front of the fast mock upstream (a worker thread here),
 * LOG_LEVEL=warn, on PGlite files in a temporary DATA_DIR and, as the baseline, on PostgreSQL (PORTICO_TEST_DATABASE_URL, a
 * schema of its own, dropped at the end). The server's RSS (VmRSS of /proc/<pid>/status, sampled every 25 ms) idle
 * 2 s after start, at its peak during each phase, and idle after (BENCH_IDLE_MS, 5 s, after the last answer), with
 * the main thread's V8 heap then (its own /metrics); the kernel's VmHWM is printed too, but on PGlite it holds the
 * first start's initdb (a fresh DATA_DIR), so the phases' peaks are the figures to compare. Phases, all
 * `store: true`, non-streaming:
 *
 * 1. large: BENCH_LARGE (8) requests of BENCH_INPUT_MIB (4 MiB) of input each (64 message items), at
 *    BENCH_CONCURRENCY (4) at a time;
 * 2. chain: a chain of BENCH_CHAIN (8) continuations (previous_response_id), each with BENCH_CHAIN_MIB (2 MiB) of
 *    input, one after another (the last one loads the whole chain before it);
 * 3. read: GET /v1/responses/{id} and its input_items for each response of phase 1, at BENCH_CONCURRENCY.
 *
 * BENCH_DBS (pglite,postgres) picks the databases; BENCH_ROUNDS (1) repeats each.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, cpus } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { startFastUpstream } from './lib/upstream-fast.js';
import { TEST_PG_URL, testPgUrl } from '../test/helpers/services.js';
import { signToken } from '../src/platform/auth/jwt.js';

const LARGE = Number(process.env.BENCH_LARGE || 8);
const INPUT_MIB = Number(process.env.BENCH_INPUT_MIB || 4);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY || 4);
const CHAIN = Number(process.env.BENCH_CHAIN || 8);
const CHAIN_MIB = Number(process.env.BENCH_CHAIN_MIB || 2);
const IDLE_MS = Number(process.env.BENCH_IDLE_MS || 5000);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 1);
const DBS = (process.env.BENCH_DBS || 'pglite,postgres').split(',') as Array<'pglite' | 'postgres'>;
const MAIN = join(import.meta.dirname, '..', 'src', 'cli', 'main.js');
/** the PostgreSQL of the tests (PORTICO_TEST_DATABASE_URL) */
const PG_URL = TEST_PG_URL;
const SECRET = 'bench-secret-0123456789abcdef0123456789abcdef';
const MiB = 1024 * 1024;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function status(pid: number): { rss: number; hwm: number } {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+)`).exec(s)?.[1] ?? 0);
  return { rss: kib('VmRSS') / 1024, hwm: kib('VmHWM') / 1024 };
}

/** The peak of VmRSS while `work` runs, sampled every 25 ms (VmHWM is the process's peak since it started). */
async function peakDuring<T>(pid: number, work: () => Promise<T>): Promise<{ result: T; peak: number }> {
  let peak = status(pid).rss;
  const timer = setInterval(() => (peak = Math.max(peak, status(pid).rss)), 25);
  try {
    const result = await work();
    return { result, peak: Math.max(peak, status(pid).rss) };
  } finally {
    clearInterval(timer);
  }
}

interface Server {
  url: string;
  pid: number;
  key: string;
  stop(): Promise<void>;
}

async function startServer(upstreamUrl: string, db: 'pglite' | 'postgres'): Promise<Server> {
  const dir = mkdtempSync(join(tmpdir(), 'portico-bench-pglmem-'));
  const config = join(dir, 'models.yaml');
  writeFileSync(config, `models:\n  - name: fast\n    provider: openai-compatible\n    base_url: ${upstreamUrl}\n    upstream_model: fast\n`);
  const schema = db === 'postgres' ? `bench_${randomBytes(5).toString('hex')}` : undefined;
  if (schema) {
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    await c.query(`create schema ${schema}`);
    await c.end();
  }
  const port = 20000 + Math.floor(Math.random() * 20000);
  const passed = Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith('PGLITE_') || k.startsWith('PORTICO_PGLITE')));
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
      ...passed,
      ...(schema ? { DATABASE_URL: testPgUrl({ searchPath: schema }) } : {}),
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  p.stderr!.on('data', (b) => (err += b));
  const exited = new Promise((r) => p.once('exit', r));
  const dropSchema = async () => {
    if (!schema) return;
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    await c.query(`drop schema if exists ${schema} cascade`);
    await c.end();
  };
  const url = `http://127.0.0.1:${port}`;
  try {
    for (;;) {
      if (p.exitCode !== null) throw new Error(`portico exited: ${err}`);
      try {
        const r = await fetch(`${url}/readyz`);
        await r.arrayBuffer();
        if (r.status === 200) break;
      } catch {
        // not listening yet
      }
      await sleep(50);
    }
  } catch (e) {
    await dropSchema();
    rmSync(dir, { recursive: true, force: true });
    throw e;
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
      if (p.exitCode === null) p.kill('SIGTERM');
      await exited;
      await dropSchema();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** `mib` MiB of input as 64 user messages of text (varied, so nothing compresses to nothing) */
function input(mib: number): unknown[] {
  const items = 64;
  const each = Math.floor((mib * MiB) / items);
  const words = 'the quick brown fox jumps over a lazy dog while seven wizards box and quietly hum '.split(' ');
  return Array.from({ length: items }, (_, i) => {
    let s = `${i}: `;
    let j = i;
    while (s.length < each) s += words[(j = (j * 31 + 7) % words.length)] + ' ';
    return { role: 'user', content: s.slice(0, each) };
  });
}

async function create(s: Server, body: object): Promise<string> {
  const r = await fetch(`${s.url}/v1/responses`, {
    method: 'POST',
    headers: { authorization: `Bearer ${s.key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`POST /v1/responses: ${r.status} ${text.slice(0, 300)}`);
  return (JSON.parse(text) as { id: string }).id;
}

async function get(s: Server, path: string): Promise<void> {
  const r = await fetch(`${s.url}${path}`, { headers: { authorization: `Bearer ${s.key}` } });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`GET ${path}: ${r.status} ${text.slice(0, 300)}`);
}

async function pool<T>(n: number, concurrency: number, one: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, concurrency) }, async () => {
      while (next < n) {
        const i = next++;
        out[i] = await one(i);
      }
    }),
  );
  return out;
}

/** the main thread's V8 heap (used / total) and external memory, MiB, from the server's own /metrics (prom-client) */
async function mainHeap(s: Server): Promise<string> {
  const text = await (await fetch(`${s.url}/metrics`)).text();
  const get = (name: string) => Number(new RegExp(`^portico_${name} (\\S+)`, 'm').exec(text)?.[1] ?? NaN) / MiB;
  return `${get('nodejs_heap_size_used_bytes').toFixed(0)} / ${get('nodejs_heap_size_total_bytes').toFixed(0)} / ${get('nodejs_external_memory_bytes').toFixed(0)}`;
}

interface Row {
  db: string;
  heap: string;
  idle: number;
  large: number;
  chain: number;
  read: number;
  hwm: number;
  after: number;
  seconds: number;
}

async function run(upstream: string, db: 'pglite' | 'postgres'): Promise<Row> {
  const s = await startServer(upstream, db);
  try {
    await sleep(2000);
    const idle = status(s.pid).rss;
    const t0 = performance.now();
    const big = input(INPUT_MIB);
    const large = await peakDuring(s.pid, () => pool(LARGE, CONCURRENCY, () => create(s, { model: 'fast', input: big, store: true })));
    const turn = input(CHAIN_MIB);
    const chain = await peakDuring(s.pid, async () => {
      let prev: string | undefined;
      for (let i = 0; i < CHAIN; i++) prev = await create(s, { model: 'fast', input: turn, store: true, ...(prev ? { previous_response_id: prev } : {}) });
    });
    const read = await peakDuring(s.pid, () =>
      pool(large.result.length, CONCURRENCY, async (i) => {
        await get(s, `/v1/responses/${large.result[i]}`);
        await get(s, `/v1/responses/${large.result[i]}/input_items?limit=100`);
      }),
    );
    const seconds = (performance.now() - t0) / 1000;
    await sleep(IDLE_MS);
    const end = status(s.pid);
    const heap = await mainHeap(s);
    return { db, heap, idle, large: large.peak, chain: chain.peak, read: read.peak, hwm: end.hwm, after: end.rss, seconds };
  } finally {
    await s.stop();
  }
}

async function main() {
  const up = await startFastUpstream();
  const out: string[] = [
    `bench:pglite-memory, ${new Date().toISOString().slice(0, 16)}Z, ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), Node ${process.version}`,
    `${LARGE} x ${INPUT_MIB} MiB stored at ${CONCURRENCY} at a time; a chain of ${CHAIN} x ${CHAIN_MIB} MiB; reads of the first; idle ${IDLE_MS / 1000} s after`,
    Object.entries(process.env)
      .filter(([k]) => k.startsWith('PGLITE_') || k.startsWith('PORTICO_PGLITE'))
      .map(([k, v]) => `${k}=${v}`)
      .join(' ') || '(default settings)',
    '',
    "| database | idle before, MiB | peak: large, MiB | peak: chain, MiB | peak: reads, MiB | peak (VmHWM, with the first start's initdb), MiB | idle after, MiB | main thread after: heap used / total / external, MiB | seconds |",
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const db of DBS) {
        const r = await run(up.url, db);
        const f = (x: number) => x.toFixed(0);
        out.push(`| ${r.db} | ${f(r.idle)} | ${f(r.large)} | ${f(r.chain)} | ${f(r.read)} | ${f(r.hwm)} | ${f(r.after)} | ${r.heap} | ${r.seconds.toFixed(1)} |`);
        console.error(out.at(-1));
      }
    }
  } finally {
    await up.stop();
  }
  console.log(out.join('\n'));
}

await main();
