import http from 'node:http';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { request } from './http.js';

export interface LoadOptions {
  url: string;
  headers?: Record<string, string>;
  /** requests in flight at once (one keep-alive connection each) */
  connections: number;
  /** measured time, after warm-up */
  durationMs: number;
  warmupMs: number;
}

export interface LoadResult {
  requests: number;
  non2xx: number;
  errors: number;
  seconds: number;
  rps: number;
  p50: number;
  p99: number;
}

/**
 * A small keep-alive load generator (instead of autocannon): `connections` loops, each sending the next
 * request when the previous answer is in. It runs in a worker thread so the server under test keeps the
 * main thread's event loop to itself.
 */
export function runLoad(opts: LoadOptions): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL(import.meta.url), { workerData: opts });
    w.once('message', resolve);
    w.once('error', reject);
    w.once('exit', (code) => code !== 0 && reject(new Error(`load worker exited ${code}`)));
  });
}

async function work(o: LoadOptions): Promise<LoadResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: o.connections });
  let measuring = false;
  let stop = false;
  let requests = 0;
  let non2xx = 0;
  let errors = 0;
  const lat: number[] = [];
  const loop = async () => {
    while (!stop) {
      const t0 = process.hrtime.bigint();
      try {
        const r = await request(agent, o.url, { headers: o.headers });
        if (measuring) {
          requests++;
          if (r.status < 200 || r.status >= 300) non2xx++;
          lat.push(Number(process.hrtime.bigint() - t0) / 1e6);
        }
      } catch {
        if (measuring) errors++;
      }
    }
  };
  const loops = Array.from({ length: o.connections }, loop);
  await new Promise((r) => setTimeout(r, o.warmupMs));
  measuring = true;
  const start = process.hrtime.bigint();
  await new Promise((r) => setTimeout(r, o.durationMs));
  measuring = false;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  stop = true;
  await Promise.all(loops);
  agent.destroy();
  lat.sort((a, b) => a - b);
  const at = (q: number) => lat[Math.min(lat.length - 1, Math.ceil(q * lat.length) - 1)] ?? 0;
  return { requests, non2xx, errors, seconds, rps: requests / seconds, p50: at(0.5), p99: at(0.99) };
}

if (!isMainThread && workerData && (workerData as LoadOptions).url) {
  work(workerData as LoadOptions).then((r) => parentPort!.postMessage(r));
}
