/**
 * The pace of the batching writers (src/platform/pacer.ts; the usage shipment and the request log use it, and their
 * own tests hold them to it under load): a write delayMs after a quiet spell's first row, no sooner than intervalMs
 * after the last write began, one at a time, and what came during a write next. Lower bounds on time only.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Pacer } from '../../src/platform/pacer.js';
import { waitFor } from '../helpers/wait.js';

/** a timer counts from the event loop's cached whole-ms clock, so against performance.now() it can fire up to ~1-2 ms early */
const TIMER_SLACK_MS = 2;

function writer(o: { delayMs: number; intervalMs: number }) {
  const starts: number[] = [];
  let pending = 0;
  let inFlight = 0;
  let most = 0;
  let release: (() => void) | undefined;
  let hold = false;
  const pacer = new Pacer(
    async () => {
      starts.push(performance.now());
      inFlight++;
      most = Math.max(most, inFlight);
      pending = 0;
      if (hold) await new Promise<void>((r) => (release = r));
      inFlight--;
    },
    { ...o, again: () => pending > 0 },
  );
  return {
    pacer,
    starts,
    most: () => most,
    add() {
      pending++;
      pacer.schedule();
    },
    hold(on: boolean) {
      hold = on;
      if (!on) release?.();
    },
  };
}

test('a row after a quiet spell is written delayMs after it came, with the rows that came meanwhile', async () => {
  const w = writer({ delayMs: 60, intervalMs: 100 });
  const at = performance.now();
  w.add();
  w.add();
  w.add();
  await waitFor(() => w.starts.length === 1, { what: 'the first write' });
  assert.ok(w.starts[0]! - at >= 60 - TIMER_SLACK_MS, `written ${w.starts[0]! - at} ms after the row`);
  await w.pacer.running;
  assert.equal(w.starts.length, 1, 'three rows, one write');
});

test('one write at a time; rows that come during a write go with the next, no sooner than the interval after the last began', async () => {
  const w = writer({ delayMs: 10, intervalMs: 150 });
  w.hold(true);
  w.add();
  await waitFor(() => w.starts.length === 1, { what: 'the first write' });
  // rows while the write runs: nothing starts beside it, whatever is asked
  w.add();
  w.add();
  const during = w.pacer.now();
  assert.equal(during, w.pacer.running, 'now() gives the write under way');
  w.hold(false);
  await during;
  await waitFor(() => w.starts.length === 2, { what: 'the next write' });
  assert.equal(w.most(), 1, 'never two writes at once');
  assert.ok(w.starts[1]! - w.starts[0]! >= 150 - TIMER_SLACK_MS, `the next began ${w.starts[1]! - w.starts[0]!} ms after the last`);
});

test('now() writes at once and drops the write that was due; cancel() drops it too', async () => {
  const w = writer({ delayMs: 50, intervalMs: 0 });
  w.add();
  await w.pacer.now();
  assert.equal(w.starts.length, 1);
  w.add();
  w.pacer.cancel();
  // a later, unrelated write shows the cancelled one never came
  const marker = writer({ delayMs: 150, intervalMs: 0 });
  marker.add();
  await waitFor(() => marker.starts.length === 1, { what: 'a later write elsewhere' });
  assert.equal(w.starts.length, 1, 'the cancelled write did not happen');
});
