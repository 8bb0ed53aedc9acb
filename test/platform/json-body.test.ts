// JSON request bodies (src/platform/json-body.ts): a large one is parsed in the worker thread and its large arrays
// come back in batches, a turn of the event loop each, to the same value, keys in the same order.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { syncBuiltinESMExports } from 'node:module';
import threads from 'node:worker_threads';
import { parseJsonBody } from '../../src/platform/http/json-body.js';
import { SPLIT_BYTES } from '../../src/platform/http/json-worker.js';

const small = (t: string) => JSON.parse(t);

function body(items: number, chars: number, tag: string) {
  return {
    model: `m-${tag}`,
    input: Array.from({ length: items }, (_, i) => ({
      type: 'message',
      role: i % 2 ? 'assistant' : 'user',
      content: [{ type: 'input_text', text: `${tag}${i} ` + 'é'.repeat(chars) }],
    })),
    tools: [{ type: 'function', name: 'f' }],
    stream: false,
    metadata: { a: '1' },
  };
}

describe('JSON bodies parsed off the event loop', () => {
  test('a large body comes back as JSON.parse makes it (keys in order), its arrays in batches with turns of the event loop between them', async () => {
    const v = body(4096, 1000, 'a');
    const text = JSON.stringify(v);
    assert.ok(Buffer.byteLength(text) > 4 * SPLIT_BYTES);
    // the batches are read one per turn (receiveMessageOnPort); each read is followed by a turn of the event loop
    const original = threads.receiveMessageOnPort;
    const turnsBefore: number[] = [];
    let turns = 0;
    threads.receiveMessageOnPort = (port) => {
      turnsBefore.push(turns);
      return original(port);
    };
    syncBuiltinESMExports();
    const tick = setInterval(() => turns++, 0);
    let got: typeof v;
    try {
      got = (await parseJsonBody(Buffer.from(text), small)) as typeof v;
    } finally {
      clearInterval(tick);
      threads.receiveMessageOnPort = original;
      syncBuiltinESMExports();
    }
    assert.deepEqual(got, v);
    assert.deepEqual(Object.keys(got), Object.keys(v));
    // ~8 M characters of items in batches of ~512 Ki: one read per batch, timers running between reads (not timed)
    assert.ok(turnsBefore.length >= 8, `${turnsBefore.length} batches`);
    assert.ok(turnsBefore[turnsBefore.length - 1]! - turnsBefore[0]! >= 4, `timers ran ${turnsBefore[turnsBefore.length - 1]! - turnsBefore[0]!} times between the reads`);
  });

  test('several large bodies at once each get their own value; a body under the split size and a refused one are as before', async () => {
    const values = ['b', 'c', 'd'].map((t, i) => body(800 + i * 100, 3000, t));
    const got = await Promise.all([
      ...values.map((v) => parseJsonBody(Buffer.from(JSON.stringify(v)), small)),
      parseJsonBody(Buffer.from(JSON.stringify(body(100, 3000, 'e'))), small),
      parseJsonBody(Buffer.from(JSON.stringify(body(800, 3000, 'f')).slice(0, -1)), small).catch((e: { code?: string }) => e.code),
    ]);
    values.forEach((v, i) => assert.deepEqual(got[i], v));
    assert.deepEqual(got[3], body(100, 3000, 'e'));
    assert.equal(got[4], 'invalid_json');
    // an array at the top is not split
    const arr = Array.from({ length: 3000 }, (_, i) => 'x'.repeat(1000) + i);
    assert.deepEqual(await parseJsonBody(Buffer.from(JSON.stringify(arr)), small), arr);
  });
});
