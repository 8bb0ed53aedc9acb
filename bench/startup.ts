/**
 * Start-up and memory benchmark (npm run bench:startup). Not a test: it prints figures.
 *
 * What an orchestrator scaling out waits for: `portico serve` (the built command, as `npm start` runs it once
 * the build is current) from spawn to the first 200 of GET /healthz and of GET /readyz, and its resident memory
 * (VmRSS) once idle. Rows: the first start on an empty DATA_DIR (the embedded database is created), restarts
 * on that DATA_DIR, and restarts on PostgreSQL (PORTICO_TEST_DATABASE_URL, a schema of its own). BENCH_RUNS runs each; the
 * median is reported with the range.
 *
 * First, the build a first `npm start` runs: scripts/build.mjs --app (esbuild, file by file, no type-check) against
 * what it replaced, tsc emitting the same files (the baseline, measured in the same run), each in a copy of the
 * sources (BENCH_BUILD_RUNS, default 3).
 *
 * RSS is read twice: 2 s after /readyz, and once settled, BENCH_SETTLE_MS (default 30000; 0 skips it) after
 * /readyz. In between V8's memory reducer, which runs a few seconds after the process goes quiet (8-30 s after
 * start here), gives back the young generation that start-up grew to 2 x 16 MiB; a forced GC does not (see
 * docs/performance.md, "Start-up and memory"). The settled figure is what an idle instance holds.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { copyApp } from '../test/helpers/app-copy.js';
import { tmpdir, cpus } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { TEST_PG_URL, testPgUrl } from '../test/helpers/services.js';

const RUNS = Number(process.env.BENCH_RUNS || 5);
const SETTLE_MS = Number(process.env.BENCH_SETTLE_MS ?? 30000);
const MAIN = join(import.meta.dirname, '..', 'src', 'cli', 'main.js');
/** the PostgreSQL of the tests (PORTICO_TEST_DATABASE_URL) */
const PG_URL = TEST_PG_URL;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const rssMiB = (pid: number) => {
  const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : 0;
};

type Run = { healthz: number; readyz: number; rss: number; settled: number };

async function once(env: Record<string, string>, settle = SETTLE_MS): Promise<Run> {
  const port = 20000 + Math.floor(Math.random() * 20000);
  const t0 = performance.now();
  const p = spawn(process.execPath, [MAIN, 'serve'], {
    env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'warn', HOST: '127.0.0.1', PORT: String(port), ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  p.stderr!.on('data', (b) => (err += b));
  const exited = new Promise((r) => p.once('exit', r));
  const until = async (path: string) => {
    for (;;) {
      if (p.exitCode !== null) throw new Error(`portico exited: ${err}`);
      try {
        const r = await fetch(`http://127.0.0.1:${port}${path}`);
        await r.arrayBuffer();
        if (r.status === 200) return performance.now() - t0;
      } catch {
        // not listening yet
      }
      await sleep(5);
    }
  };
  const healthz = await until('/healthz');
  const readyz = await until('/readyz');
  await sleep(2000);
  const rss = rssMiB(p.pid!);
  if (settle > 2000) await sleep(settle - 2000);
  const settled = settle > 0 ? rssMiB(p.pid!) : NaN;
  p.kill('SIGTERM');
  await exited;
  return { healthz, readyz, rss, settled };
}

function summary(name: string, xs: Run[]) {
  const med = (k: 'healthz' | 'readyz' | 'rss' | 'settled') => {
    const s = xs.map((x) => x[k]).sort((a, b) => a - b);
    return { m: s[Math.floor(s.length / 2)]!, lo: s[0]!, hi: s.at(-1)! };
  };
  const h = med('healthz');
  const r = med('readyz');
  const m = med('rss');
  const st = med('settled');
  const settled = SETTLE_MS > 0 ? `${st.m.toFixed(0)} (${st.lo.toFixed(0)}-${st.hi.toFixed(0)})` : '-';
  return `| ${name} | ${xs.length} | ${h.m.toFixed(0)} (${h.lo.toFixed(0)}-${h.hi.toFixed(0)}) | ${r.m.toFixed(0)} | ${m.m.toFixed(0)} (${m.lo.toFixed(0)}-${m.hi.toFixed(0)}) | ${settled} |`;
}

/** ms to run `args` in a fresh copy of the sources (the build writes dist/ there, not here) */
function timedInCopy(args: string[]): number {
  const dir = mkdtempSync(join(tmpdir(), 'portico-build-'));
  try {
    copyApp(dir);
    const t0 = performance.now();
    const r = spawnSync(process.execPath, args, { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'] });
    if (r.status !== 0) throw new Error(`${args.join(' ')} failed`);
    return performance.now() - t0;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function buildRows(): string[] {
  const runs = Number(process.env.BENCH_BUILD_RUNS || 3);
  const esb: number[] = [];
  const tsc: number[] = [];
  for (let i = 0; i < runs; i++) {
    esb.push(timedInCopy(['scripts/build.mjs', '--app', '--quiet']));
    tsc.push(timedInCopy(['node_modules/typescript/bin/tsc', '-p', 'tsconfig.app.json']));
  }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const range = (xs: number[]) => `${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)}`;
  return [
    `| Build | runs | wall ms, median (range) |`,
    '|---|---:|---:|',
    `| scripts/build.mjs --app (esbuild + vendored bundles + page) | ${runs} | ${med(esb).toFixed(0)} (${range(esb)}) |`,
    `| baseline: tsc -p tsconfig.app.json (emit only, the old first-start build's main part) | ${runs} | ${med(tsc).toFixed(0)} (${range(tsc)}) |`,
    `| ratio esbuild / tsc | | ${(med(esb) / med(tsc)).toFixed(2)} |`,
    '',
  ];
}

async function main() {
  const builds = process.env.BENCH_BUILD_RUNS === '0' ? [] : buildRows();
  const secrets = { JWT_SECRET: 'bench-secret-0123456789abcdef0123456789abcdef', KEY_PEPPER: 'bench-pepper-0123456789abcdef0123456789abcdef' };
  const rows: string[] = [];
  const first: Run[] = [];
  const again: Run[] = [];
  for (let i = 0; i < RUNS; i++) {
    const dir = mkdtempSync(join(tmpdir(), 'portico-startup-'));
    try {
      first.push(await once({ ...secrets, DATA_DIR: dir }));
      again.push(await once({ ...secrets, DATA_DIR: dir }));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  rows.push(summary('PGlite, first start (empty DATA_DIR)', first), summary('PGlite, restart', again));

  const schema = `bench_su_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: PG_URL });
  await admin.connect();
  await admin.query(`create schema ${schema}`);
  try {
    const url = testPgUrl({ searchPath: schema });
    const dir = mkdtempSync(join(tmpdir(), 'portico-startup-'));
    const pgRuns: Run[] = [];
    await once({ ...secrets, DATA_DIR: dir, DATABASE_URL: url }, 0); // migrations
    for (let i = 0; i < RUNS; i++) pgRuns.push(await once({ ...secrets, DATA_DIR: dir, DATABASE_URL: url }));
    rmSync(dir, { recursive: true, force: true });
    rows.push(summary('PostgreSQL, restart', pgRuns));
  } finally {
    await admin.query(`drop schema ${schema} cascade`);
    await admin.end();
  }
  console.log(
    [
      `Machine: ${cpus().length} cores (${cpus()[0]?.model.trim()}), Node ${process.version}. Median of ${RUNS} runs (range).`,
      '',
      ...builds,
      `| Start | runs | to /healthz 200, ms | to /readyz 200, ms | RSS 2 s later, MiB | RSS settled (${SETTLE_MS / 1000} s), MiB |`,
      '|---|---:|---:|---:|---:|---:|',
      ...rows,
    ].join('\n'),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
