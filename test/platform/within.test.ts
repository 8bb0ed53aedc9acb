/** settledWithin (src/platform/within.ts): how a close waits, at most so long, for a step that may never end. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { settledWithin } from '../../src/platform/within.js';

/** a timer counts from the event loop's cached whole-ms clock, so against performance.now() it can fire up to ~1-2 ms early */
const TIMER_SLACK_MS = 2;

test('true when the promise settles in time, whether it resolves or rejects', async () => {
  assert.equal(await settledWithin(Promise.resolve('x'), 10_000), true);
  assert.equal(await settledWithin(Promise.reject(new Error('refused')), 10_000), true);
});

test('false when the time runs out first, and nothing is left to hold the process', async () => {
  const started = performance.now();
  assert.equal(await settledWithin(new Promise(() => {}), 30), false);
  assert.ok(performance.now() - started >= 30 - TIMER_SLACK_MS);
  // the timer of a promise that settled in time is cleared: no active handle but this test's own
  await settledWithin(Promise.resolve(), 60_000);
  const timers = (process as unknown as { getActiveResourcesInfo(): string[] }).getActiveResourcesInfo().filter((r) => r === 'Timeout');
  assert.equal(timers.length, 0, `timers left: ${timers.length}`);
});
