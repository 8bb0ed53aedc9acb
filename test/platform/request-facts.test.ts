/**
 * RequestFacts.keep: work kept for a request (a stream whose close is waited for) may fail; its failure is the
 * work's own, and a request that no one asks settled() of must not leave an unhandled rejection behind (the speech
 * route keeps once(stream, 'close'), which rejects when the stream is destroyed with an error, e.g. an engine closed
 * at shutdown while a client still holds the answer).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RequestFacts } from '../../src/platform/ops/facts.js';

test('a kept work that fails leaves no unhandled rejection; settled() still waits for it', async () => {
  const unhandled: unknown[] = [];
  const onUnhandled = (e: unknown) => unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  try {
    const facts = new RequestFacts();
    let fail!: (e: Error) => void;
    const work = new Promise<void>((_, reject) => (fail = reject));
    facts.keep(work);
    fail(new Error('the engine is closed'));
    // unhandled rejections are reported after the microtasks of the turn: two macrotask turns are enough
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(unhandled, []);
    const all = (await facts.settled()) as PromiseSettledResult<unknown>[];
    assert.equal(all.length, 1);
    assert.equal(all[0]!.status, 'rejected');
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});
