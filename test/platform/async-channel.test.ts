import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { abortError, AsyncChannel } from '../../src/platform/async-channel.js';
import { waitFor } from '../helpers/wait.js';

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const v of it) out.push(v);
  return out;
}

/** Lets queued callbacks and promise reactions run. */
const tick = () => new Promise<void>((r) => setImmediate(r));

describe('AsyncChannel', () => {
  test('values come out in the order they were pushed, queued before reading or handed to a waiting reader', async () => {
    const ch = new AsyncChannel<number>();
    assert.equal(ch.push(1), true);
    assert.equal(ch.push(2), true);
    assert.equal(ch.size, 2);
    const got = collect(ch);
    await tick();
    assert.equal(ch.size, 0);
    ch.push(3);
    await tick();
    ch.push(4);
    ch.push(5);
    ch.end();
    assert.deepEqual(await got, [1, 2, 3, 4, 5]);
  });

  test('end: the queued values are delivered first, then the iteration ends; later pushes are dropped', async () => {
    const ch = new AsyncChannel<string>();
    ch.push('a');
    ch.push('b');
    ch.end();
    assert.equal(ch.push('c'), false);
    ch.end(); // twice is harmless
    assert.deepEqual(await collect(ch), ['a', 'b']);
    assert.deepEqual(await ch.next(), { value: undefined, done: true });
  });

  test('end wakes a waiting reader', async () => {
    const ch = new AsyncChannel<number>();
    const pending = ch.next();
    await tick();
    ch.end();
    assert.deepEqual(await pending, { value: undefined, done: true });
  });

  test('fail: the queued values are delivered, then the error; a waiting reader gets it at once', async () => {
    const boom = new Error('boom');
    const ch = new AsyncChannel<number>();
    ch.push(1);
    ch.fail(boom);
    ch.end(); // no effect after fail
    assert.equal(ch.push(2), false);
    const got: number[] = [];
    await assert.rejects(async () => {
      for await (const v of ch) got.push(v);
    }, boom);
    assert.deepEqual(got, [1]);
    await assert.rejects(ch.next(), boom); // stays failed

    const ch2 = new AsyncChannel<number>();
    const pending = ch2.next();
    await tick();
    ch2.fail(boom);
    await assert.rejects(pending, boom);
  });

  test('fail with undefined still fails (an error is whatever was thrown)', async () => {
    const ch = new AsyncChannel<number>();
    ch.fail(undefined);
    await assert.rejects(ch.next(), (e) => e === undefined);
  });

  test('abort: a waiting reader rejects at once with the reason, and so does every later read', async () => {
    const ac = new AbortController();
    const ch = new AsyncChannel<number>({ signal: ac.signal });
    const pending = ch.next();
    await tick();
    const reason = new Error('client went away');
    ac.abort(reason);
    await assert.rejects(pending, (e) => e === reason);
    await assert.rejects(ch.next(), (e) => e === reason);
  });

  test('abort: values still queued are dropped, the abort comes first', async () => {
    const ac = new AbortController();
    const ch = new AsyncChannel<number>({ signal: ac.signal });
    ch.push(1);
    ch.push(2);
    assert.deepEqual(await ch.next(), { value: 1, done: false });
    ac.abort();
    await assert.rejects(ch.next(), (e: unknown) => e instanceof Error && e.name === 'AbortError');
    assert.equal(ch.size, 0);
  });

  test('abort before the end (or the error) was read wins over it; a signal aborted from the start rejects the first read', async () => {
    const ac = new AbortController();
    const ch = new AsyncChannel<number>({ signal: ac.signal });
    ch.end();
    ac.abort();
    await assert.rejects(ch.next(), (e: unknown) => e instanceof Error && e.name === 'AbortError');

    const ac3 = new AbortController();
    const failed = new AsyncChannel<number>({ signal: ac3.signal });
    failed.fail(new Error('upstream failed'));
    ac3.abort();
    await assert.rejects(failed.next(), (e: unknown) => e instanceof Error && e.name === 'AbortError');
    assert.equal(failed.push(1), false);

    const ch2 = new AsyncChannel<number>({ signal: AbortSignal.abort('gone') });
    ch2.push(1);
    await assert.rejects(ch2.next(), (e: unknown) => e instanceof DOMException && e.name === 'AbortError');
  });

  test('abortError: the reason when it is an Error, else an AbortError DOMException', () => {
    const ac = new AbortController();
    const reason = new TypeError('x');
    ac.abort(reason);
    assert.equal(abortError(ac.signal), reason);
    const e = abortError(AbortSignal.abort('a string'));
    assert.ok(e instanceof DOMException);
    assert.equal((e as DOMException).name, 'AbortError');
    assert.equal((abortError(undefined) as DOMException).name, 'AbortError');
  });

  test('an abort after the reader had the end changes nothing, and the listener is gone', async () => {
    const ac = new AbortController();
    let added = 0;
    let removed = 0;
    const signal = ac.signal;
    const add = signal.addEventListener.bind(signal);
    const remove = signal.removeEventListener.bind(signal);
    signal.addEventListener = ((...a: Parameters<typeof add>) => (added++, add(...a))) as typeof add;
    signal.removeEventListener = ((...a: Parameters<typeof remove>) => (removed++, remove(...a))) as typeof remove;
    const ch = new AsyncChannel<number>({ signal });
    ch.push(7);
    ch.end();
    assert.deepEqual(await collect(ch), [7]);
    assert.equal(added, 1);
    assert.equal(removed, 1);
    ac.abort();
    assert.deepEqual(await ch.next(), { value: undefined, done: true });
  });

  test('early return: break tells the producer once (onReturn), drops the queue, later pushes are refused', async () => {
    let returned = 0;
    const ch = new AsyncChannel<number>({ onReturn: () => returned++ });
    for (let i = 1; i <= 5; i++) ch.push(i);
    const got: number[] = [];
    for await (const v of ch) {
      got.push(v);
      if (v === 2) break;
    }
    assert.deepEqual(got, [1, 2]);
    assert.equal(returned, 1);
    assert.equal(ch.consumerLeft, true);
    assert.equal(ch.size, 0);
    assert.equal(ch.push(6), false);
    assert.deepEqual(await ch.next(), { value: undefined, done: true });
    await ch.return();
    assert.equal(returned, 1);
  });

  test('early return by an exception in the loop body tells the producer too', async () => {
    let returned = 0;
    const ch = new AsyncChannel<number>({ onReturn: () => returned++ });
    ch.push(1);
    await assert.rejects(async () => {
      for await (const _ of ch) throw new Error('consumer failed');
    }, /consumer failed/);
    assert.equal(returned, 1);
  });

  test('early return releases a waiting reader and removes the abort listener; no onReturn once the end was read', async () => {
    const ac = new AbortController();
    let returned = 0;
    const ch = new AsyncChannel<number>({ signal: ac.signal, onReturn: () => returned++ });
    const pending = ch.next();
    await tick();
    await ch.return();
    assert.deepEqual(await pending, { value: undefined, done: true });
    ac.abort();
    assert.deepEqual(await ch.next(), { value: undefined, done: true });
    assert.equal(returned, 1);

    let returned2 = 0;
    const done = new AsyncChannel<number>({ onReturn: () => returned2++ });
    done.end();
    assert.deepEqual(await done.next(), { value: undefined, done: true });
    await done.return();
    assert.equal(returned2, 0);
  });

  test('a producer beside the reader: generator pattern with cleanup on early return', async () => {
    let stopped = false;
    const ch = new AsyncChannel<number>({ onReturn: () => (stopped = true) });
    let i = 0;
    let refused = false;
    const timer = setInterval(() => {
      if (!ch.push(i++)) {
        refused = true;
        clearInterval(timer);
      }
    }, 1);
    const got: number[] = [];
    for await (const v of ch) {
      got.push(v);
      if (got.length === 3) break;
    }
    assert.deepEqual(got, [0, 1, 2]);
    assert.equal(stopped, true);
    // the producer's next push after the reader left is refused, and leaves nothing queued
    await waitFor(() => refused, { what: 'a push refused' });
    clearInterval(timer);
    assert.equal(ch.size, 0);
  });
});
