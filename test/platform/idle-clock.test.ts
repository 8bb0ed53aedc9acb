/**
 * The idle bound of long-lived connections (src/platform/idle-clock.ts), the one rule the WebSocket mode and the
 * realtime sessions share: silence of `idleMs` with nothing in progress ends the connection, a stall of this
 * process's own event loop is not the peer's silence, and busy work is never idle. Only lower bounds on time here:
 * a loaded machine makes every timer later, never earlier.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { idleClock } from '../../src/platform/idle-clock.js';
import { waitFor } from '../helpers/wait.js';

/** a timer counts from the event loop's cached whole-ms clock, so against performance.now() it can fire up to ~1-2 ms early */
const TIMER_SLACK_MS = 2;

function clock(idleMs: number, opts: { busy?: () => boolean; activity?: () => number } = {}) {
  let idleAt: number | undefined;
  const start = performance.now();
  const stop = idleClock(
    {
      lastActivity: opts.activity ?? (() => start),
      busy: opts.busy ?? (() => false),
      onIdle: () => (idleAt ??= performance.now()),
    },
    idleMs,
  );
  return { start, stop, idleAt: () => idleAt };
}

test('silence of idleMs with nothing in progress is idle, and not before', async () => {
  const c = clock(120);
  await waitFor(() => c.idleAt() !== undefined, { what: 'idle' });
  assert.ok(c.idleAt()! - c.start >= 120 - TIMER_SLACK_MS, `idle after ${c.idleAt()! - c.start} ms`);
  c.stop();
});

test('a stall of the event loop is given back: the bound moves by the stall, and the late timer decides nothing', async () => {
  const c = clock(100);
  // the loop held for 300 ms from the start: the timer due at 100 ms fires ~200 ms late
  const until = performance.now() + 300;
  while (performance.now() < until) {
    // held
  }
  const stallEnd = performance.now();
  await waitFor(() => c.idleAt() !== undefined, { what: 'idle' });
  // without the rule the late timer would close at once, right after the stall
  assert.ok(c.idleAt()! - stallEnd >= 190, `idle ${c.idleAt()! - stallEnd} ms after the stall ended`);
  c.stop();
});

test('busy work is never idle; the spell starts again at the activity that ends it', async () => {
  let busy = true;
  let polls = 0;
  let activity = performance.now();
  const c = clock(60, {
    busy: () => {
      if (busy) polls++;
      return busy;
    },
    activity: () => activity,
  });
  await waitFor(() => polls >= 3, { what: 'three looks while busy' });
  assert.equal(c.idleAt(), undefined, 'busy for three spells and more: not idle');
  activity = performance.now();
  busy = false;
  const ended = activity;
  await waitFor(() => c.idleAt() !== undefined, { what: 'idle' });
  assert.ok(c.idleAt()! - ended >= 60 - TIMER_SLACK_MS, `idle ${c.idleAt()! - ended} ms after the work ended`);
  c.stop();
});

test('activity during the spell moves it; stopping the clock ends it', async () => {
  let activity = performance.now();
  let moves = 0;
  const c = clock(80, {
    // every look finds a newer activity for the first three: the spell starts again each time
    activity: () => {
      if (moves < 3) {
        moves++;
        activity = performance.now();
      }
      return activity;
    },
  });
  await waitFor(() => c.idleAt() !== undefined, { what: 'idle' });
  assert.ok(c.idleAt()! - activity >= 80 - TIMER_SLACK_MS, `idle ${c.idleAt()! - activity} ms after the last activity`);
  c.stop();

  const stopped = clock(20);
  stopped.stop();
  // a clock started after it with three times its bound has reached its own
  const marker = clock(60);
  await waitFor(() => marker.idleAt() !== undefined, { what: 'a later clock idle' });
  assert.equal(stopped.idleAt(), undefined, 'a stopped clock never calls onIdle');
  marker.stop();
});
