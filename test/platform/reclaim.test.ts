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

test('no collection while work is in hand; one due runs once nothing has been in hand for SETTLE_MS', async () => {
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
  assert.equal(reclaimState().due, true);
  // another piece of work in hand ends first: still one in hand, nothing collected
  const other = workUnderWay();
  end();
  end(); // a second end is nothing: the count stays right
  assert.deepEqual(
    { underWay: reclaimState().underWay, due: reclaimState().due, settling: reclaimState().settling, collections: reclaimState().collections },
    { underWay: 1, due: true, settling: false, collections: begun },
  );
  // the last one ends: the collection due runs once nothing has been in hand for SETTLE_MS, not another quiet spell
  other();
  assert.deepEqual({ armed: reclaimState().armed, settling: reclaimState().settling }, { armed: false, settling: true });
  // work taken in hand meanwhile stops the count; its end starts it again
  const third = workUnderWay();
  assert.equal(reclaimState().settling, false);
  third();
  assert.equal(reclaimState().settling, true);
  await waitFor(() => reclaimState().collections > begun && ref.deref() === undefined, { what: 'the collection once nothing is in hand' });
  assert.deepEqual({ owed: reclaimState().owed, due: reclaimState().due }, { owed: 0, due: false });
});

test('work in hand that ends with no collection due starts nothing', () => {
  const begun = reclaimState().collections;
  const end = workUnderWay();
  end();
  assert.deepEqual(reclaimState(), { owed: 0, underWay: 0, armed: false, due: false, settling: false, collections: begun });
});

test('large work reported while work is in hand restarts the spell; a request ending does not', async () => {
  const end = workUnderWay();
  largeWorkDone(WORTH_BYTES);
  const short = workUnderWay();
  short();
  // a request that came and went is not large work: the spell is the one largeWorkDone started, due within QUIET_MS
  await waitFor(() => reclaimState().due, { timeoutMs: QUIET_MS + 10_000, what: 'the collection to be due' });
  const begun = reclaimState().collections;
  end();
  await waitFor(() => reclaimState().collections > begun, { what: 'the collection once nothing is in hand' });
});

test('large work while a collection is due puts it off: the spell counts again from the last large work', async () => {
  const end = workUnderWay();
  largeWorkDone(WORTH_BYTES);
  await waitFor(() => reclaimState().due, { timeoutMs: QUIET_MS + 10_000, what: 'the collection to be due' });
  largeWorkDone(WORTH_BYTES);
  assert.deepEqual({ due: reclaimState().due, armed: reclaimState().armed }, { due: false, armed: true });
  const begun = reclaimState().collections;
  end();
  assert.deepEqual(
    { collections: reclaimState().collections, settling: reclaimState().settling },
    { collections: begun, settling: false },
    'nothing counted before the new spell ends',
  );
  await waitFor(() => reclaimState().collections > begun, { timeoutMs: QUIET_MS + 10_000, what: 'the collection after the new spell' });
  assert.deepEqual({ owed: reclaimState().owed, due: reclaimState().due, armed: reclaimState().armed }, { owed: 0, due: false, armed: false });
});
