/**
 * The last resort of a shutdown: a timer on a thread of its own that kills the process (SIGKILL) if it is still
 * alive at the deadline. A timer on the main thread cannot be relied on for this: a main thread stuck in a
 * blocking write (a log line to a pipe nobody reads any more) runs no timer and no signal handler, which is how
 * an instance once stayed alive for minutes after SIGTERM, a second SIGTERM changing nothing (issue 9, §6).
 */
import { Worker } from 'node:worker_threads';

const CODE = `
const { workerData } = require('node:worker_threads');
setTimeout(() => process.kill(workerData.pid, 'SIGKILL'), workerData.ms);
`;

/** Arms the watchdog: the process is killed `ms` from now unless it has exited. It does not keep the process alive. */
export function armWatchdog(ms: number): void {
  const w = new Worker(CODE, { eval: true, workerData: { pid: process.pid, ms } });
  w.unref();
}
