/**
 * Workers benchmark (npm run bench:workers). Not a test: it prints figures.
 *
 * `portico serve` as a real process on PostgreSQL and Redis, once with WORKERS=1 and once with WORKERS=2,
 * behind the fast upstream (a worker thread of this process), and the upstream alone, each under the same
 * closed-loop load (BENCH_CONNECTIONS keep-alive connections, POST /v1/responses store off; the direct row
 * posts Chat Completions to the upstream). Reports requests per second, p50/p99, and Portico's CPU time per
 * request: user+system time of the primary and its workers (from /proc) over the run, divided by the requests.
 * On a machine with two cores the load generator and the upstream share the cores with the workers, so the
 * gain of the second worker is bounded by what they leave.
 */
import os from 'node:os';
import { readFileSync, readdirSync } from 'node:fs';
import { startCluster, type Instance } from '../test/helpers/cluster.js';
import { startFastUpstream } from './lib/upstream-fast.js';
import { runLoad, type LoadResult } from './lib/load.js';

const DURATION_MS = Number(process.env.BENCH_DURATION_MS || 5000);
const WARMUP_MS = Number(process.env.BENCH_WARMUP_MS || 1500);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS || 8);
const TICK_US = 1_000_000 / 100; // Linux USER_HZ

/** user+system CPU of a process and its children that are alive now (µs) */
function cpuUs(pid: number): number {
  let ticks = 0;
  for (const p of [pid, ...children(pid)]) {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(f[11]) + Number(f[12]);
    } catch {
      // gone
    }
  }
  return ticks * TICK_US;
}

/** the pids of a process's children */
function children(pid: number): number[] {
  const out: number[] = [];
  try {
    for (const t of readdirSync(`/proc/${pid}/task`)) {
      const kids = readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').trim();
      if (kids) out.push(...kids.split(/\s+/).map(Number));
    }
  } catch {
    // gone
  }
  return out;
}

/** the primary logs "N workers serving" at info only; here (LOG_LEVEL=warn) wait for the children, then give them time to listen */
async function waitWorkers(inst: Instance, n: number) {
  if (n === 1) return;
  const deadline = Date.now() + 30_000;
  while (children(inst.pid).length < n) {
    if (Date.now() > deadline) throw new Error(`workers not up:\n${inst.output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  await new Promise((r) => setTimeout(r, 4000));
}

async function main() {
  const up = await startFastUpstream();
  const rows: Array<{ name: string; r: LoadResult; cpu?: number }> = [];
  const f = (ms: number) => (ms < 10 ? ms.toFixed(3) : ms.toFixed(1));
  const load = (url: string, headers: Record<string, string>, body: string) =>
    runLoad({ url, headers: { 'content-type': 'application/json', ...headers }, body, connections: CONNECTIONS, durationMs: DURATION_MS, warmupMs: WARMUP_MS });

  const direct = await load(up.url + '/chat/completions', {}, JSON.stringify({ model: 'fast', messages: [{ role: 'user', content: 'Say hello.' }] }));
  rows.push({ name: 'upstream direct', r: direct });
  for (const workers of [1, 2]) {
    const c = await startCluster({ upstreamUrl: up.url, redisDb: 7, instances: 1, models: [{ name: 'fast' }], env: { WORKERS: String(workers), LOG_LEVEL: 'warn' } });
    try {
      const inst = c.instances[0]!;
      await waitWorkers(inst, workers);
      const { key } = await c.createKey(inst, 'bench');
      const cpu0 = cpuUs(inst.pid);
      const r = await load(inst.url + '/v1/responses', { authorization: `Bearer ${key}` }, JSON.stringify({ model: 'fast', input: 'Say hello.', store: false }));
      const cpu = cpuUs(inst.pid) - cpu0;
      // CPU spans warm-up and measured time; requests are counted in the measured time only: scale them
      const served = r.rps * ((DURATION_MS + WARMUP_MS) / 1000);
      if (r.failures) throw new Error(`WORKERS=${workers}: ${r.failures} failed requests`);
      rows.push({ name: `Portico WORKERS=${workers}`, r, cpu: cpu / served });
      console.error(`WORKERS=${workers}: ${r.rps.toFixed(0)} req/s, p50 ${f(r.p50)} ms, ${(cpu / served).toFixed(0)} µs CPU/request`);
    } finally {
      await c.close();
    }
  }
  await up.stop();

  const cpus = os.cpus();
  const lines = [
    `Machine: ${cpus.length} cores (${cpus[0]?.model.trim()}), Node ${process.version}; PostgreSQL and Redis on the same machine.`,
    `${CONNECTIONS} keep-alive connections, ${DURATION_MS / 1000} s after ${WARMUP_MS / 1000} s warm-up; POST /v1/responses, store off, non-streaming.`,
    '',
    `| Path | req/s | p50 ms | p99 ms | share of direct | Portico CPU µs/request |`,
    '|---|---:|---:|---:|---:|---:|',
    ...rows.map(
      (x) =>
        `| ${x.name} | ${x.r.rps.toFixed(0)} | ${f(x.r.p50)} | ${f(x.r.p99)} | ${((x.r.rps / direct.rps) * 100).toFixed(1)}% | ${x.cpu === undefined ? '-' : x.cpu.toFixed(0)} |`,
    ),
  ];
  console.log(lines.join('\n'));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
