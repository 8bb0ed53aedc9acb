/**
 * CPU time per OS thread of this process, from /proc (Linux): what a benchmark charges to the server under test
 * when the load generator and the fake upstream are worker threads of the same process. The threads to leave
 * out name themselves with osThreadId() (a thread that started and ended between two readings is in neither).
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/** this thread's OS thread id (Linux), or undefined elsewhere */
export function osThreadId(): number | undefined {
  try {
    return Number(readlinkSync('/proc/thread-self').split('/').pop());
  } catch {
    return undefined;
  }
}

/** CPU time (µs, user + system) of one thread of this process, or of process `pid` */
export function threadCpuUs(tid: number, pid: number | 'self' = 'self'): number {
  try {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) * 10_000;
  } catch {
    return NaN;
  }
}

/** CPU time (µs) of every live thread of this process (or of process `pid`) but `exclude`d ones, by thread id */
export function threadsCpuUs(exclude: ReadonlySet<number> = new Set(), pid: number | 'self' = 'self'): Map<number, number> {
  const out = new Map<number, number>();
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const t of tids) {
    const tid = Number(t);
    if (!exclude.has(tid)) out.set(tid, threadCpuUs(tid, pid));
  }
  return out;
}

/** CPU time (µs) the threads spent between two readings (threads that appeared meanwhile count from zero) */
export function cpuBetween(before: Map<number, number>, after: Map<number, number>): number {
  let sum = 0;
  for (const [tid, us] of after) if (Number.isFinite(us)) sum += us - (before.get(tid) ?? 0);
  return sum;
}

/**
 * How often one thread of process `pid` gave up the CPU (Linux, /proc/<pid>/task/<tid>/status): `voluntary`, it
 * waited (an event loop's epoll_wait with nothing to do: each count is one wake-up), and `involuntary`, the
 * scheduler took the CPU from it (another thread on the same core). NaN elsewhere.
 */
export function threadSwitches(tid: number, pid: number | 'self' = 'self'): { voluntary: number; involuntary: number } {
  try {
    const s = readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
    return {
      voluntary: Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(s)?.[1] ?? NaN),
      involuntary: Number(/^nonvoluntary_ctxt_switches:\s+(\d+)/m.exec(s)?.[1] ?? NaN),
    };
  } catch {
    return { voluntary: NaN, involuntary: NaN };
  }
}
