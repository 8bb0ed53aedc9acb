/**
 * The event-loop lag series of /metrics (src/platform/ops/loop-lag.ts): an idle loop reads ~0 (not the sampling
 * interval), a held loop reads its hold, and an idle process is not woken ~90 times a second to sample it.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { once } from 'node:events';
import { metricValue } from '../helpers/metrics.js';
import { waitFor } from '../helpers/wait.js';
import { Metrics } from '../../src/platform/ops/metrics.js';
import { LOOP_LAG_RESOLUTION_MS } from '../../src/platform/ops/loop-lag.js';

const lag = (text: string, s: string) => metricValue(text, `portico_nodejs_eventloop_lag_${s}_seconds`)!;

describe('event-loop lag series', () => {
  const m = new Metrics();

  test('an idle loop reads ~0, not the sampling interval', async () => {
    await m.registry.metrics(); // a new window
    await waitFor(() => m.loopLag!.samples() >= 5, { what: 'five samples of the idle loop', timeoutMs: 30_000 });
    const text = await m.registry.metrics();
    // prom-client's series read the interval between two samples: never under ~10 ms, its resolution
    assert.ok(lag(text, 'min') < 0.005, `min ${lag(text, 'min')}`);
    assert.ok(lag(text, 'p50') < LOOP_LAG_RESOLUTION_MS / 1000 / 2, `p50 ${lag(text, 'p50')}`);
    for (const s of ['max', 'mean', 'stddev', 'p90', 'p99']) assert.ok(Number.isFinite(lag(text, s)), s);
  });

  test('a loop held 300 ms reads the hold in max and p99 (less at most the resolution)', async () => {
    await m.registry.metrics();
    await waitFor(() => m.loopLag!.samples() >= 1, { what: 'a sample before the hold', timeoutMs: 30_000 });
    const t = performance.now();
    while (performance.now() - t < 300);
    const after = m.loopLag!.samples();
    await waitFor(() => m.loopLag!.samples() > after, { what: 'the sample after the hold', timeoutMs: 30_000 });
    const text = await m.registry.metrics();
    // the hold begins anywhere between two samples: the late sample is 300 ms less up to the resolution
    const floor = (300 - LOOP_LAG_RESOLUTION_MS) / 1000 - 0.002;
    assert.ok(lag(text, 'max') >= floor && lag(text, 'max') < 2, `max ${lag(text, 'max')}`);
    assert.ok(lag(text, 'p99') >= floor, `p99 ${lag(text, 'p99')}`);
  });

  test('scraped twice within a resolution: the empty window reads 0, not an undefined value', async (t) => {
    await m.registry.metrics();
    const text = await m.registry.metrics();
    // a sample fell between the two scrapes (a very slow machine): nothing to check
    if (m.loopLag!.samples() > 0) return t.skip('a sample fell between the two scrapes');
    for (const s of ['min', 'max', 'mean', 'p99']) assert.ok(lag(text, s) >= 0 && lag(text, s) < 1, `${s} ${lag(text, s)}`);
  });

  test("the lag series are registered once, with prom-client's names and help texts", async () => {
    const text = await m.registry.metrics();
    for (const s of ['', '_min', '_max', '_mean', '_stddev', '_p50', '_p90', '_p99'])
      assert.equal(text.match(new RegExp(`^# TYPE portico_nodejs_eventloop_lag${s}_seconds gauge$`, 'gm'))?.length, 1, s);
    assert.match(text, /^# HELP portico_nodejs_eventloop_lag_p99_seconds The 99th percentile of the recorded event loop delays\.$/m);
    assert.match(text, /^portico_process_cpu_user_seconds_total /m, "prom-client's other default series are still there");
  });

  test('an idle process with the metrics wakes its main thread ~10 times a second, not ~90', { skip: !existsSync('/proc/self/status') }, async () => {
    const url = new URL('../../src/platform/ops/metrics.js', import.meta.url).href;
    const c = spawn(
      process.execPath,
      ['--input-type=module', '-e', `const { Metrics } = await import(${JSON.stringify(url)}); new Metrics(); setInterval(() => {}, 1e9); console.log('ready');`],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    try {
      await once(c.stdout!, 'data');
      const woken = () => Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(readFileSync(`/proc/${c.pid}/task/${c.pid}/status`, 'utf8'))![1]);
      const a = woken();
      const t0 = performance.now();
      // a rate needs a window of time: two seconds of the child's idle life (a busy machine delays its wake-ups,
      // it does not add any)
      await new Promise((r) => setTimeout(r, 2000));
      const perSecond = (woken() - a) / ((performance.now() - t0) / 1000);
      // 1000 / LOOP_LAG_RESOLUTION_MS = 10 a second; prom-client's 10 ms sampler: ~90-100
      assert.ok(perSecond < 30, `${perSecond.toFixed(1)} wake-ups a second`);
    } finally {
      c.kill();
    }
  });
});
