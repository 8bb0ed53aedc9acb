import { createHistogram, type RecordableHistogram } from 'node:perf_hooks';
import { Gauge, type Registry } from 'prom-client';

/**
 * Resolution of the event-loop lag series (ms): how often an idle process wakes to sample its event loop.
 * prom-client's own series (collectDefaultMetrics) sample every 10 ms: an idle Portico woke ~90 times a second
 * for them (docs/performance.md, 2026-11-29).
 */
export const LOOP_LAG_RESOLUTION_MS = 100;

/** the names prom-client's collectDefaultMetrics gives its event-loop lag series (lib/metrics/eventLoopLag.js) */
const SERIES: ReadonlyArray<{ name: string; help: string; aggregator: 'min' | 'max' | 'average' }> = [
  { name: 'nodejs_eventloop_lag_seconds', help: 'Lag of event loop in seconds.', aggregator: 'average' },
  { name: 'nodejs_eventloop_lag_min_seconds', help: 'The minimum recorded event loop delay.', aggregator: 'min' },
  { name: 'nodejs_eventloop_lag_max_seconds', help: 'The maximum recorded event loop delay.', aggregator: 'max' },
  { name: 'nodejs_eventloop_lag_mean_seconds', help: 'The mean of the recorded event loop delays.', aggregator: 'average' },
  { name: 'nodejs_eventloop_lag_stddev_seconds', help: 'The standard deviation of the recorded event loop delays.', aggregator: 'average' },
  { name: 'nodejs_eventloop_lag_p50_seconds', help: 'The 50th percentile of the recorded event loop delays.', aggregator: 'average' },
  { name: 'nodejs_eventloop_lag_p90_seconds', help: 'The 90th percentile of the recorded event loop delays.', aggregator: 'average' },
  { name: 'nodejs_eventloop_lag_p99_seconds', help: 'The 99th percentile of the recorded event loop delays.', aggregator: 'average' },
];
export const LOOP_LAG_SERIES: readonly string[] = SERIES.map((s) => s.name);

/**
 * One timer for the process, however many registries read it (tests build several applications in one process):
 * each tick records how late it fired, past the moment it was due, into every registry's window. A loop held for
 * H ms reads between H - resolution and H (the hold begins anywhere between two ticks); an idle loop reads ~0.
 * Node's monitorEventLoopDelay records the time between two ticks instead (the resolution included: an idle loop
 * reads the resolution), and its reset() drops the interval in progress (a hold that begins before the next tick
 * after a scrape is not recorded at all).
 */
const windows = new Set<WeakRef<RecordableHistogram>>(); // a registry that is gone takes its window with it
let timer: NodeJS.Timeout | undefined;
let due = 0;

function tick(): void {
  const now = performance.now();
  // a timer fires at the loop's cached millisecond clock, up to ~1 ms before `due` by this clock: not a lag
  const lateNs = Math.max(1, Math.round((now - due) * 1e6));
  for (const w of windows) {
    const h = w.deref();
    if (h === undefined) windows.delete(w);
    else h.record(lateNs);
  }
  due = now + LOOP_LAG_RESOLUTION_MS;
  timer!.refresh();
}

function sampler(): RecordableHistogram {
  const h = createHistogram();
  windows.add(new WeakRef(h));
  if (timer === undefined) {
    due = performance.now() + LOOP_LAG_RESOLUTION_MS;
    timer = setTimeout(tick, LOOP_LAG_RESOLUTION_MS).unref();
  }
  return h;
}

/**
 * Registers the event-loop lag series of prom-client's default metrics under their names and help texts, with
 * `prefix`, fed by the sampler above; each scrape reads the window since the previous scrape and starts a new one.
 * `nodejs_eventloop_lag_seconds` is, as in prom-client, the time a setImmediate queued at the previous scrape
 * waited.
 */
export function registerLoopLag(registry: Registry, prefix: string): LoopLag {
  const h = sampler();
  const g = new Map<string, Gauge>();
  let immediateLag = 0;
  for (const s of SERIES) {
    const collect =
      s.name === 'nodejs_eventloop_lag_seconds'
        ? () => {
            const start = process.hrtime.bigint();
            setImmediate(() => (immediateLag = Number(process.hrtime.bigint() - start) / 1e9));
            const empty = h.count === 0; // scraped twice within a resolution: nothing recorded in between
            const v = (ns: number) => (empty ? 0 : ns / 1e9);
            g.get('nodejs_eventloop_lag_seconds')!.set(immediateLag);
            g.get('nodejs_eventloop_lag_min_seconds')!.set(v(h.min));
            g.get('nodejs_eventloop_lag_max_seconds')!.set(v(h.max));
            g.get('nodejs_eventloop_lag_mean_seconds')!.set(v(h.mean));
            g.get('nodejs_eventloop_lag_stddev_seconds')!.set(v(h.stddev));
            g.get('nodejs_eventloop_lag_p50_seconds')!.set(v(h.percentile(50)));
            g.get('nodejs_eventloop_lag_p90_seconds')!.set(v(h.percentile(90)));
            g.get('nodejs_eventloop_lag_p99_seconds')!.set(v(h.percentile(99)));
            h.reset();
          }
        : undefined;
    g.set(s.name, new Gauge({ name: prefix + s.name, help: s.help, aggregator: s.aggregator, registers: [registry], ...(collect ? { collect } : {}) }));
  }
  return { samples: () => h.count };
}

export interface LoopLag {
  /** how many samples the window since the last scrape holds */
  samples(): number;
}
