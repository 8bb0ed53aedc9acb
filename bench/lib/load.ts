import http from 'node:http';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

export interface LoadOptions {
  url: string;
  /** GET without a body, POST with one */
  body?: string;
  headers?: Record<string, string>;
  /** an SSE answer: it counts as failed unless it ends with [DONE] */
  stream?: boolean;
  /** requests in flight at once (one keep-alive connection each) */
  connections: number;
  /** measured time, after warm-up */
  durationMs: number;
  warmupMs: number;
}

export interface LoadResult {
  /** answers completed within the measured time */
  requests: number;
  /** answers with a status outside 2xx */
  non2xx: number;
  /** requests that failed without a complete answer (connection or stream errors) */
  errors: number;
  /** errors, answers other than 200, and streams that did not end with [DONE] */
  failures: number;
  seconds: number;
  rps: number;
  /** latency to the end of the answer (ms) */
  p50: number;
  p99: number;
  /** time to the first body bytes (ms): for a stream, the time to the first event (TTFE) */
  ttfe50: number;
  ttfe99: number;
}

interface WorkerData extends LoadOptions {
  porticoBenchLoad: true;
}

/**
 * A small keep-alive load generator (instead of autocannon): `connections` loops, each sending the next
 * request when the previous answer is in. It runs in a worker thread so the server under test keeps the
 * main thread's event loop to itself.
 */
export function runLoad(opts: LoadOptions): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL(import.meta.url), { workerData: { ...opts, porticoBenchLoad: true } satisfies WorkerData });
    let result: LoadResult | undefined;
    w.once('message', (r: LoadResult) => (result = r));
    w.once('error', reject);
    // resolved once the thread is gone, not at its message: a benchmark that reads the CPU time of this process's
    // threads right after the load would otherwise find the load thread still alive and charge all its CPU to the
    // server under test (bench/lib/threads.ts counts a thread it did not see before from zero)
    w.once('exit', (code) => (code === 0 && result ? resolve(result) : reject(new Error(`load worker exited ${code}`))));
  });
}

function pct(s: number[], q: number) {
  return s.length ? s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] : 0;
}

async function work(o: LoadOptions): Promise<LoadResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: o.connections });
  const u = new URL(o.url);
  const method = o.body === undefined ? 'GET' : 'POST';
  const headers = o.body === undefined ? o.headers : { ...o.headers, 'content-length': String(Buffer.byteLength(o.body)) };
  let measuring = false;
  let stop = false;
  let requests = 0;
  let non2xx = 0;
  let errors = 0;
  let failures = 0;
  const lat: number[] = [];
  const first: number[] = [];
  const failed = () => {
    if (measuring) {
      errors++;
      failures++;
    }
  };
  const one = () =>
    new Promise<void>((resolve) => {
      const t0 = process.hrtime.bigint();
      let t1: bigint | undefined;
      const req = http.request(u, { method, headers, agent }, (res) => {
        const status = res.statusCode ?? 0;
        let tail = '';
        res.on('data', (c: Buffer) => {
          t1 ??= process.hrtime.bigint();
          if (o.stream) tail = (tail + c.toString('latin1')).slice(-64);
        });
        res.on('end', () => {
          const t2 = process.hrtime.bigint();
          if (measuring) {
            requests++;
            if (status < 200 || status >= 300) non2xx++;
            if (status !== 200 || (o.stream && !tail.includes('[DONE]'))) failures++;
            lat.push(Number(t2 - t0) / 1e6);
            if (t1) first.push(Number(t1 - t0) / 1e6);
          }
          resolve();
        });
        res.on('error', () => {
          failed();
          resolve();
        });
      });
      req.on('error', () => {
        failed();
        resolve();
      });
      if (o.body === undefined) req.end();
      else req.end(o.body);
    });
  const loop = async () => {
    while (!stop) await one();
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
  first.sort((a, b) => a - b);
  return { requests, non2xx, errors, failures, seconds, rps: requests / seconds, p50: pct(lat, 0.5), p99: pct(lat, 0.99), ttfe50: pct(first, 0.5), ttfe99: pct(first, 0.99) };
}

if (!isMainThread && (workerData as WorkerData | undefined)?.porticoBenchLoad) {
  work(workerData as WorkerData).then((r) => parentPort!.postMessage(r));
}
