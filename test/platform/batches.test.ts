// Large arrays from a thread in batches (src/platform/batches.ts): the same array, a batch per turn of the event
// loop, reads served in the order asked for, a batch of an abandoned answer dropped.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MessageChannel } from 'node:worker_threads';
import { BATCH_CHARS, BatchReader, heavy, sendInBatches, weight } from '../../src/platform/batches.js';
import { countTurns } from '../helpers/turns.js';

test('an array sent in batches is read back whole and in order, a batch per turn; reads queue in the order asked for', async () => {
  const { port1, port2 } = new MessageChannel();
  const reader = new BatchReader(port1);
  const big = Array.from({ length: 3000 }, (_, i) => ({ i, text: 'x'.repeat(1000), nested: [i, { k: 'v' }] }));
  const small = ['a', 'b'];
  assert.ok(heavy(big) && !heavy(small));
  assert.equal(weight({ ab: 'xyz' }), 2 + 2 + 5);
  // an abandoned answer's batch first: dropped by the next read
  sendInBatches(port2, 99, 'rows', [{ lost: true }]);
  const n = sendInBatches(port2, 1, 'rows', big);
  const m = sendInBatches(port2, 2, 'items', small);
  assert.ok(n >= (3000 * 1000) / BATCH_CHARS, `${n} batches`);
  assert.equal(m, 1);
  const counter = countTurns();
  const [a, b] = await Promise.all([reader.read(1, 'rows', n), reader.read(2, 'items', m)]);
  const turns = counter.stop();
  assert.deepEqual(a, big);
  assert.deepEqual(b, small);
  assert.ok(turns >= n / 2, `the loop turned ${turns} times over ${n} batches`);
  // a batch that never comes is an error, not a hang
  await assert.rejects(reader.read(3, 'rows', 1), /lost part/);
  reader.close();
  port2.close();
});
