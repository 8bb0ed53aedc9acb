// Memory back soon after large work (issue 22 §6): once a thread reports enough large work and then does no more
// for QUIET_MS, one full collection runs, without waiting for V8's memory reducer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { workUnderWay, largeWorkDone, QUIET_MS, reclaimState, WORTH_BYTES } from '../../src/platform/reclaim.js';
import { waitFor } from '../helpers/wait.js';

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

test('no collection while work in hand is under way; the quiet spell counts again from its end', async () => {
  const begun = reclaimState().collections;
  const end = workUnderWay();
  largeWorkDone(WORTH_BYTES);
  assert.equal(reclaimState().armed, true);
  // the spell ends with the work still under way: nothing is collected, and nothing counts until it ends
  await waitFor(() => !reclaimState().armed, { timeoutMs: QUIET_MS + 10_000, what: 'the quiet spell to end' });
  assert.equal(reclaimState().collections, begun);
  assert.equal(reclaimState().owed >= WORTH_BYTES, true, 'the work is still owed');
  let big: string[] | undefined = Array.from({ length: 64 }, (_, i) => `${i}`.padEnd(256 * 1024, 'y'));
  const ref = new WeakRef(big);
  big = undefined;
  end();
  end(); // a second end is nothing: the count stays right
  assert.deepEqual({ underWay: reclaimState().underWay, armed: reclaimState().armed }, { underWay: 0, armed: true });
  await waitFor(() => reclaimState().collections > begun && ref.deref() === undefined, { timeoutMs: QUIET_MS + 10_000, what: 'the collection after the work ended' });
  assert.equal(reclaimState().owed, 0);
});

test('work in hand that ends with no large work owed arms nothing', () => {
  const end = workUnderWay();
  end();
  assert.deepEqual({ underWay: reclaimState().underWay, armed: reclaimState().armed }, { underWay: 0, armed: false });
});
