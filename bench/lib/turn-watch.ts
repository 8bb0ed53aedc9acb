/**
 * The longest turn of this thread's event loop, in wall time and in the thread's own CPU time (Linux:
 * /proc/thread-self/schedstat, nanoseconds on a CPU). A 1 ms interval ticks once per turn at most; the time
 * between two ticks is one turn, or several when no timer was due. On a shared machine the wall time of a turn
 * grows with the other processes (the thread waits for a core), its CPU time does not: the CPU column is what
 * the code itself held the loop for, the /healthz probe (test/helpers/stall-probe.ts) what a client saw.
 * Each read costs ~6 us (a pread of an open file); nothing is read where /proc is not there.
 */
import { openSync, readSync } from 'node:fs';

export interface TurnWatch {
  /** forget the longest turns so far */
  reset(): void;
  /** the longest gap between ticks since reset: wall ms, and the CPU ms the thread ran in the gap of most CPU */
  read(): { wallMs: number; cpuMs: number; cpuEndUs: number };
  stop(): void;
}

export function watchTurns(): TurnWatch {
  let fd: number | undefined;
  try {
    fd = openSync('/proc/thread-self/schedstat', 'r');
  } catch {
    fd = undefined;
  }
  const buf = Buffer.alloc(64);
  const cpuNs = (): number => {
    if (fd === undefined) return 0;
    const n = readSync(fd, buf, 0, 64, 0);
    return Number(buf.toString('latin1', 0, n).split(' ')[0]);
  };
  let lastWall = performance.now();
  let lastCpu = cpuNs();
  let wallMax = 0;
  let cpuMax = 0;
  /** when the turn of most CPU ended: CLOCK_MONOTONIC in us, the clock of a V8 CPU profile's timestamps */
  let cpuEndUs = 0;
  const timer = setInterval(() => {
    const wall = performance.now();
    const cpu = cpuNs();
    wallMax = Math.max(wallMax, wall - lastWall);
    if ((cpu - lastCpu) / 1e6 > cpuMax) {
      cpuMax = (cpu - lastCpu) / 1e6;
      cpuEndUs = Number(process.hrtime.bigint() / 1000n);
    }
    lastWall = wall;
    lastCpu = cpu;
  }, 1);
  timer.unref();
  return {
    reset() {
      wallMax = 0;
      cpuMax = 0;
    },
    read: () => ({ wallMs: wallMax, cpuMs: cpuMax, cpuEndUs }),
    stop() {
      clearInterval(timer);
    },
  };
}
