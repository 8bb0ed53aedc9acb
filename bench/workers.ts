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
import { startFastUpstream } from './lib/upstream-fast.js';
import { runLoad, type LoadResult } from './lib/load.js';
import { measureWorkers } from './lib/workers.js';

const DURATION_MS = Number(process.env.BENCH_DURATION_MS || 5000);
const WARMUP_MS = Number(process.env.BENCH_WARMUP_MS || 1500);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS || 8);

async function main() {
  const up = await startFastUpstream();
  const rows: Array<{ name: string; r: LoadResult; cpu?: number }> = [];
  const f = (ms: number) => (ms < 10 ? ms.toFixed(3) : ms.toFixed(1));
  const direct = await runLoad({
    url: up.url + '/chat/completions',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'fast', messages: [{ role: 'user', content: 'Say hello.' }] }),
    connections: CONNECTIONS,
    durationMs: DURATION_MS,
    warmupMs: WARMUP_MS,
  });
  rows.push({ name: 'upstream direct', r: direct });
  await measureWorkers(up.url, {
    connections: CONNECTIONS,
    durationMs: DURATION_MS,
    warmupMs: WARMUP_MS,
    onRow: ({ workers, r, cpu }) => {
      rows.push({ name: `Portico WORKERS=${workers}`, r, cpu });
      console.error(`WORKERS=${workers}: ${r.rps.toFixed(0)} req/s, p50 ${f(r.p50)} ms, ${cpu.toFixed(0)} µs CPU/request`);
    },
  });
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
