// Memory back soon after large work (issue 22 §6): once a thread reports enough large work and then does no more
// for QUIET_MS, one full collection runs, without waiting for V8's memory reducer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { largeWorkDone, QUIET_MS, WORTH_BYTES } from '../../src/platform/reclaim.js';

test('after large work and a quiet spell, what it left is collected', async () => {
  // garbage in the old generation, as a large request leaves it, seen through a WeakRef
  let big: string[] | undefined = Array.from({ length: 64 }, (_, i) => `${i}`.padEnd(256 * 1024, 'x'));
  const ref = new WeakRef(big);
  big = undefined;
  largeWorkDone(WORTH_BYTES);
  const deadline = Date.now() + QUIET_MS + 10_000;
  while (ref.deref() !== undefined) {
    assert.ok(Date.now() < deadline, 'not collected within the quiet spell and 10 s');
    await new Promise((r) => setTimeout(r, 50));
  }
});
