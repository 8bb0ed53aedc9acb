/**
 * Portico as a real `portico serve` process on PostgreSQL and Redis with WORKERS=1 and WORKERS=2 under the same
 * closed-loop load (POST /v1/responses, store off): requests per second, p50/p99, and Portico's CPU time per
 * request (user+system time of the primary and its workers, from /proc, over the run, divided by the requests).
 * Used by bench/workers.ts and by bench/responses.ts (its workers rows).
 */
import { readFileSync, readdirSync } from 'node:fs';
import { startCluster, type Instance } from '../../test/helpers/cluster.js';
import { runLoad, type LoadResult } from './load.js';

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

export interface WorkersRow {
  workers: number;
  r: LoadResult;
  /** Portico's CPU µs per request (primary and workers) */
  cpu: number;
}

/** Runs `portico serve` with each WORKERS value in turn against the upstream at `upstreamUrl` (ending in /v1). */
export async function measureWorkers(
  upstreamUrl: string,
  o: { connections: number; durationMs: number; warmupMs: number; counts?: number[]; onRow?: (row: WorkersRow) => void },
): Promise<WorkersRow[]> {
  const rows: WorkersRow[] = [];
  for (const workers of o.counts ?? [1, 2]) {
    const c = await startCluster({ upstreamUrl, instances: 1, models: [{ name: 'fast' }], env: { WORKERS: String(workers), LOG_LEVEL: 'warn' } });
    try {
      const inst = c.instances[0]!;
      await waitWorkers(inst, workers);
      const { key } = await c.createKey(inst, 'bench');
      const load = () =>
        runLoad({
          url: inst.url + '/v1/responses',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
          body: JSON.stringify({ model: 'fast', input: 'Say hello.', store: false }),
          connections: o.connections,
          durationMs: o.durationMs,
          warmupMs: o.warmupMs,
        });
      // the JIT's warm-up (not measured), as bench:responses gives its own rows
      await load();
      const cpu0 = cpuUs(inst.pid);
      const r = await load();
      const cpu = cpuUs(inst.pid) - cpu0;
      // CPU spans warm-up and measured time; requests are counted in the measured time only: scale them
      const served = r.rps * ((o.durationMs + o.warmupMs) / 1000);
      if (r.failures) throw new Error(`WORKERS=${workers}: ${r.failures} failed requests`);
      const row = { workers, r, cpu: cpu / served };
      rows.push(row);
      o.onRow?.(row);
    } finally {
      await c.close();
    }
  }
  return rows;
}
