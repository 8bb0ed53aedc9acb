import http from 'node:http';
import { latency, type Latency } from './stats.js';

export interface RateLoadOptions {
  /** base URLs; requests alternate between them (round robin, like a load balancer) */
  targets: string[];
  path: string;
  method: 'POST' | 'GET';
  headers: Record<string, string>;
  body?: string;
  /** requests started per second (open loop: a slow answer does not slow the arrivals) */
  rate: number;
  durationMs: number;
  warmupMs: number;
  /** requests in flight at most per target (beyond it a request counts as an error: "overloaded") */
  maxInFlight?: number;
}

export interface RateLoadResult {
  sent: number;
  ok: number;
  non2xx: number;
  errors: number;
  dropped: number;
  seconds: number;
  rps: number;
  latency: Latency;
  statuses: Record<string, number>;
  perTarget: number[];
}

/**
 * A steady-rate load generator: `rate` requests per second, started on a timer whatever the answers do,
 * spread round-robin over the targets with one keep-alive agent each. Latency is measured from the moment
 * a request was due, so queueing inside the client is counted too.
 */
export async function runRateLoad(o: RateLoadOptions): Promise<RateLoadResult> {
  const agents = o.targets.map(() => new http.Agent({ keepAlive: true, maxSockets: o.maxInFlight ?? 256 }));
  const inFlight = o.targets.map(() => 0);
  const perTarget = o.targets.map(() => 0);
  const lat: number[] = [];
  const statuses: Record<string, number> = {};
  let sent = 0;
  let ok = 0;
  let non2xx = 0;
  let errors = 0;
  let dropped = 0;
  let next = 0;
  const start = performance.now();
  const measureFrom = start + o.warmupMs;
  const end = measureFrom + o.durationMs;
  const pending = new Set<Promise<void>>();

  const one = (due: number) => {
    const i = next++ % o.targets.length;
    const measured = due >= measureFrom;
    if (measured) {
      sent++;
      perTarget[i]++;
    }
    if (inFlight[i] >= (o.maxInFlight ?? 256)) {
      if (measured) dropped++;
      return;
    }
    inFlight[i]++;
    const p = new Promise<void>((resolve) => {
      const u = new URL(o.path, o.targets[i]);
      const req = http.request(u, { method: o.method, agent: agents[i], headers: { ...o.headers, ...(o.body ? { 'content-length': Buffer.byteLength(o.body) } : {}) } }, (res) => {
        res.resume();
        res.on('end', () => {
          if (measured) {
            const s = res.statusCode ?? 0;
            statuses[s] = (statuses[s] ?? 0) + 1;
            if (s >= 200 && s < 300) ok++;
            else non2xx++;
            lat.push(performance.now() - due);
          }
          resolve();
        });
      });
      req.setTimeout(30_000, () => req.destroy(new Error('timeout')));
      req.on('error', () => {
        if (measured) errors++;
        resolve();
      });
      if (o.body) req.write(o.body);
      req.end();
    }).finally(() => {
      inFlight[i]--;
      pending.delete(p);
    });
    pending.add(p);
  };

  const interval = 1000 / o.rate;
  let due = start;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = performance.now();
      while (due <= now && due < end) {
        one(due);
        due += interval;
      }
      if (due >= end) return resolve();
      setTimeout(tick, Math.max(0, Math.min(5, due - performance.now())));
    };
    tick();
  });
  await Promise.all(pending);
  for (const a of agents) a.destroy();
  const seconds = o.durationMs / 1000;
  return { sent, ok, non2xx, errors, dropped, seconds, rps: ok / seconds, latency: latency(lat.length ? lat : [0]), statuses, perTarget };
}
