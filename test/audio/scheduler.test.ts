/**
 * The fair scheduler of the embedded audio engines (src/audio/scheduler.ts) on its own, with a clock the test
 * moves: per-key FIFO served round robin, the per-key cap on queued work (429), the wait estimate and its limit
 * (503 with retry-after), a turn that leaves at once when its signal aborts, and the measured speed.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { FairScheduler, fill, type FairSchedulerOptions, type Lane, type Turn } from '../../src/audio/scheduler.js';
import { AppError } from '../../src/platform/errors.js';

function scheduler(o: Partial<FairSchedulerOptions> = {}) {
  const clock = { t: 0 };
  const s = new FairScheduler({
    what: 'transcription',
    unit: 'seconds of audio',
    slots: 1,
    maxQueuedPerKey: 1000,
    maxQueuedSetting: 'AUDIO_MAX_QUEUED_SECONDS_PER_KEY',
    maxWaitMs: 3_600_000,
    initialSpeed: 1,
    now: () => clock.t,
    ...o,
  });
  return { s, clock };
}

/** Starts a turn and records, in `log`, its name when it gets the slot. */
function turn(log: string[], ticket: { step(c: number, s?: AbortSignal): Promise<Turn> }, name: string, cost: number, signal?: AbortSignal) {
  const p = ticket.step(cost, signal).then((t) => {
    log.push(name);
    return t;
  });
  p.catch(() => {});
  return p;
}

const tick = () => new Promise((r) => setImmediate(r));

function refusal(f: () => unknown): AppError {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof AppError, String(e));
    return e;
  }
  assert.fail('expected a refusal');
}

describe('FairScheduler', () => {
  test("keys are served in turn: another key's turn comes before the rest of one key's queue", async () => {
    const { s } = scheduler();
    const log: string[] = [];
    const a = s.admit('A', 40);
    const b = s.admit('B', 2);
    const a1 = turn(log, a, 'A1', 10);
    const a2 = turn(log, a, 'A2', 10);
    const a3 = turn(log, a, 'A3', 10);
    const b1 = turn(log, b, 'B1', 2);
    const a4 = turn(log, a, 'A4', 10);
    await tick();
    assert.deepEqual(log, ['A1'], 'one slot');
    for (const p of [a1, a2, b1, a3, a4]) {
      (await p).done(true);
      await tick();
    }
    // A was in line (its next turn, A2) when B came: B's turn comes after that one, before the rest of A's queue
    assert.deepEqual(log, ['A1', 'A2', 'B1', 'A3', 'A4']);
  });

  test('round robin over three keys, each key first in first out', async () => {
    const { s } = scheduler({ slots: 1 });
    const log: string[] = [];
    const hold = await s.admit('H', 1).step(1);
    const t: Record<string, ReturnType<typeof turn>> = {};
    const a = s.admit('A', 30);
    const b = s.admit('B', 20);
    const c = s.admit('C', 10);
    for (const n of ['A1', 'A2', 'A3']) t[n] = turn(log, a, n, 10);
    for (const n of ['B1', 'B2']) t[n] = turn(log, b, n, 10);
    t.C1 = turn(log, c, 'C1', 10);
    await tick();
    assert.deepEqual(log, []);
    hold.done(true);
    for (let i = 0; i < 6; i++) {
      await tick();
      (await t[log[log.length - 1]!]!).done(true);
    }
    assert.deepEqual(log, ['A1', 'B1', 'C1', 'A2', 'B2', 'A3']);
  });

  test('a key holding fewer slots goes first: a key that comes while another holds both slots gets the next one', async () => {
    const { s, clock } = scheduler({ slots: 2, initialSpeed: 1 });
    const log: string[] = [];
    const a = s.admit('A', 40);
    const a1 = turn(log, a, 'A1', 10);
    const a2 = turn(log, a, 'A2', 10);
    const a3 = turn(log, a, 'A3', 10);
    await tick();
    clock.t += 4000;
    // B is next in line: it waits only for the first slot to free (6 s of the 10 of A's running turns)
    assert.equal(s.estimateWaitMs('B'), 6000);
    const b = s.admit('B', 2);
    const b1 = turn(log, b, 'B1', 2);
    (await a1).done(true);
    await tick();
    assert.deepEqual(log, ['A1', 'A2', 'B1']);
    (await a2).done(true);
    await tick();
    assert.deepEqual(log, ['A1', 'A2', 'B1', 'A3']);
    for (const p of [b1, a3]) (await p).done(true);
    a.close();
    b.close();
  });

  test('the work a key may have queued is capped (429 with retry-after); a key with nothing queued may queue one request of any size', async () => {
    const { s } = scheduler({ maxQueuedPerKey: 100 });
    const big = s.admit('A', 250);
    assert.equal(s.snapshot().keys.find((k) => k.key === 'A')!.queued, 250);
    const e = refusal(() => s.admit('A', 10));
    assert.equal(e.status, 429);
    assert.equal(e.code, 'rate_limit_exceeded');
    assert.match(e.message, /already has 250 seconds of audio of transcription waiting.*at most 100 may wait \(AUDIO_MAX_QUEUED_SECONDS_PER_KEY\)/);
    assert.ok(Number(e.headers!['retry-after']) >= 1);
    assert.equal(Number(e.headers!['retry-after']), Math.ceil(Number(e.headers!['retry-after-ms']) / 1000));
    // before the cost is known (an upload not yet decoded): refused as soon as the queue is over the cap
    assert.equal(refusal(() => s.check('A')).status, 429);
    // other keys are not affected
    s.admit('B', 60).close();
    // once A's work has started, it fits again
    const turnA = await big.step(250);
    const again = s.admit('A', 90);
    assert.equal(refusal(() => s.admit('A', 20)).status, 429, '90 + 20 is over 100');
    turnA.done(true);
    again.close();
    big.close();
    assert.deepEqual(s.snapshot().keys, [], 'nothing kept once every ticket is closed');
  });

  test('a request whose wait would pass the limit is refused with 503 engine_overloaded and retry-after; a short one of another key is not', async () => {
    const { s, clock } = scheduler({ slots: 2, maxWaitMs: 30_000, initialSpeed: 2 });
    const a = s.admit('A', 600);
    const running = [await a.step(30), await a.step(30)];
    void turn([], a, 'A3', 30);
    // A's own 540 s of audio queued ahead of its next request, at 2 s a second on each of 2 slots: ~135 s + the running turns
    const e = refusal(() => s.admit('A', 30));
    assert.equal(e.status, 503);
    assert.equal(e.code, 'engine_overloaded');
    assert.match(e.message, /would wait about \d+ s for its turn, longer than the 30 s allowed \(AUDIO_MAX_WAIT_MS\)/);
    const wait = s.estimateWaitMs('A');
    assert.ok(wait > 135_000 && wait < 160_000, `estimate ${wait}`);
    assert.equal(Number(e.headers!['retry-after-ms']), Math.ceil(wait - 30_000));
    assert.equal(e.headers!['retry-after'], String(Math.ceil((wait - 30_000) / 1000)));
    // B waits for a slot (the first running turn's rest) and one turn of A: ~15 s + 7.5 s
    const b = s.admit('B', 2);
    const wb = s.estimateWaitMs('B');
    assert.ok(wb >= 15_000 && wb <= 30_000, `B's estimate ${wb}`);
    // the estimate follows the clock: 10 s later the running turns have 10 s less to go
    clock.t += 10_000;
    assert.ok(Math.abs(s.estimateWaitMs('B') - (wb - 10_000)) < 1, `${s.estimateWaitMs('B')} vs ${wb - 10_000}`);
    for (const r of running) r.done(false);
    b.close();
    a.close();
  });

  test('a waiting turn whose signal aborts leaves the queue at once; closing a ticket gives its reservation back', async () => {
    const { s } = scheduler();
    const log: string[] = [];
    const hold = await s.admit('H', 1).step(1);
    const a = s.admit('A', 30);
    const ac = new AbortController();
    const a1 = turn(log, a, 'A1', 10, ac.signal);
    const a2 = turn(log, a, 'A2', 10, ac.signal);
    const b = s.admit('B', 5);
    const b1 = turn(log, b, 'B1', 5);
    assert.deepEqual(
      s.snapshot().keys.map((k) => [k.key, k.queued, k.waitingTurns]),
      [
        ['H', 0, 0],
        ['A', 30, 2],
        ['B', 5, 1],
      ],
    );
    ac.abort(new Error('client disconnected'));
    await assert.rejects(a1, /client disconnected/);
    await assert.rejects(a2, /client disconnected/);
    assert.equal(s.snapshot().keys.find((k) => k.key === 'A')!.waitingTurns, 0, 'left the queue before any slot freed');
    a.close();
    assert.equal(
      s.snapshot().keys.find((k) => k.key === 'A'),
      undefined,
      'nothing of A left',
    );
    hold.done(true);
    (await b1).done(true);
    assert.deepEqual(log, ['B1']);
    b.close();
    // a turn asked on a closed ticket, or with an aborted signal, is refused at once
    await assert.rejects(b.step(1), /over/);
    await assert.rejects(s.admit('C', 1).step(1, AbortSignal.abort(new Error('gone'))), /gone/);
  });

  test('closing a ticket refuses its turns still waiting, and never frees a slot it does not hold', async () => {
    const { s } = scheduler();
    const hold = await s.admit('H', 1).step(1);
    const a = s.admit('A', 20);
    const w = a.step(10);
    a.close();
    await assert.rejects(w, /over/);
    assert.equal(s.snapshot().running, 1);
    hold.done(true);
    hold.done(true);
    assert.equal(s.snapshot().running, 0);
  });

  test('the speed is measured from completed turns (not from aborted ones), and the estimate uses it', async () => {
    const { s, clock } = scheduler({ initialSpeed: 1 });
    assert.equal(s.speed, 1);
    const a = s.admit('A', 1000);
    for (let i = 0; i < 30; i++) {
      const t = await a.step(10);
      clock.t += 2000; // 10 s of audio in 2 s: 5 a second
      t.done(true);
    }
    assert.ok(Math.abs(s.speed - 5) < 0.1, `speed ${s.speed}`);
    const t = await a.step(10);
    clock.t += 100_000;
    t.done(false);
    assert.ok(Math.abs(s.speed - 5) < 0.1, 'an aborted turn is not measured');
    a.close();
  });

  test('unchecked work (spoken answers) is never refused, and its waiting turns count for others', async () => {
    const { s } = scheduler({ maxQueuedPerKey: 10, maxWaitMs: 1000 });
    const hold = await s.admit('H', 1).step(1);
    const u = s.admit('U', 0, { unchecked: true });
    const waiting = u.step(5000);
    waiting.catch(() => {});
    s.admit('U', 999, { unchecked: true }).close();
    assert.equal(refusal(() => s.admit('B', 1)).code, 'engine_overloaded');
    u.close();
    hold.done(true);
  });

  describe('lanes: an engine that runs fewer jobs at once than the slots (whisper, one)', () => {
    // two slots; the "whisper" lane runs one turn at a time, the other engine as many as it is given
    const whisper: Lane = { id: {}, limit: 1 };

    test("a turn on a full lane waits holding no slot: a later turn on another engine (another key's, or its own key's) takes the free slot; the lane's next turn starts when its running one ends", async () => {
      const { s } = scheduler({ slots: 2 });
      const log: string[] = [];
      const a = s.admit('A', 30, { lane: whisper });
      const w1 = turn(log, a, 'W1', 10);
      const w2 = turn(log, a, 'W2', 10);
      await tick();
      assert.deepEqual(log, ['W1'], 'the second whisper turn waits, although a slot is free');
      assert.equal(s.snapshot().running, 1);
      const b = s.admit('B', 5);
      const p1 = turn(log, b, 'P1', 5);
      await tick();
      assert.deepEqual(log, ['W1', 'P1'], 'the other engine runs beside the first whisper turn');
      // A's own turn on the other engine, queued behind its waiting whisper turn, starts too when a slot frees
      const a2 = s.admit('A', 5);
      const ap = turn(log, a2, 'AP', 5);
      (await p1).done(true);
      await tick();
      assert.deepEqual(log, ['W1', 'P1', 'AP'], 'the free slot went to a turn that may start, not to the whisper turn');
      (await w1).done(true);
      await tick();
      assert.deepEqual(log, ['W1', 'P1', 'AP', 'W2'], 'the next whisper turn once the first ended');
      for (const p of [ap, w2]) (await p).done(true);
      for (const x of [a, a2, b]) x.close();
      assert.deepEqual(s.snapshot(), { slots: 2, running: 0, speed: s.speed, keys: [] });
    });

    test("the turns waiting for a lane are served in the keys' fair order, not first come first served", async () => {
      const { s } = scheduler({ slots: 2 });
      const log: string[] = [];
      const t: Record<string, ReturnType<typeof turn>> = {};
      const a = s.admit('A', 40, { lane: whisper });
      for (const n of ['A1', 'A2', 'A3', 'A4']) t[n] = turn(log, a, n, 10);
      const b = s.admit('B', 10, { lane: whisper });
      t.B1 = turn(log, b, 'B1', 10);
      const c = s.admit('C', 10, { lane: whisper });
      t.C1 = turn(log, c, 'C1', 10);
      // meanwhile the other slot serves another engine's turns
      const d = s.admit('D', 20);
      t.D1 = turn(log, d, 'D1', 10);
      t.D2 = turn(log, d, 'D2', 10);
      await tick();
      assert.deepEqual(log, ['A1', 'D1']);
      (await t.D1!).done(true);
      await tick();
      assert.deepEqual(log, ['A1', 'D1', 'D2'], 'the free slot goes to the other engine, the lane being full');
      for (let i = 0; i < 5; i++) {
        (await t[log.filter((n) => !n.startsWith('D')).pop()!]!).done(true);
        await tick();
      }
      // A was in line (A2) when B and C came: then B, C, and the rest of A's; a queue of the engine's own would
      // have run A's four first
      assert.deepEqual(
        log.filter((n) => !n.startsWith('D')),
        ['A1', 'A2', 'B1', 'C1', 'A3', 'A4'],
      );
      for (const n of ['A4', 'D2']) (await t[n]!).done(true);
      for (const x of [a, b, c, d]) x.close();
      assert.deepEqual(s.snapshot().keys, []);
    });

    test('a waiting turn on a full lane whose client leaves frees nothing it did not hold: the lane stays full until its running turn ends, and no slot is lost', async () => {
      const { s } = scheduler({ slots: 2 });
      const log: string[] = [];
      const a = s.admit('A', 10, { lane: whisper });
      const w1 = turn(log, a, 'W1', 10);
      const gone = new AbortController();
      const b = s.admit('B', 10, { lane: whisper });
      const w2 = turn(log, b, 'W2', 10, gone.signal);
      const c = s.admit('C', 10, { lane: whisper });
      const w3 = turn(log, c, 'W3', 10);
      await tick();
      gone.abort(new Error('client disconnected'));
      await assert.rejects(w2, /client disconnected/);
      b.close();
      assert.equal(
        s.snapshot().keys.find((k) => k.key === 'B'),
        undefined,
        'nothing of B left',
      );
      await tick();
      assert.deepEqual(log, ['W1'], 'the lane is still full: W3 waits for W1, not for the turn that left');
      assert.equal(s.snapshot().running, 1);
      // the other slot is free for another engine
      const pt = s.admit('P', 1);
      const p = await pt.step(1);
      pt.close();
      assert.equal(s.snapshot().running, 2);
      (await w1).done(true);
      await tick();
      assert.deepEqual(log, ['W1', 'W3']);
      // the first turn's end counted once
      (await w1).done(true);
      const w4 = turn(log, a, 'W4', 1);
      await tick();
      assert.deepEqual(log, ['W1', 'W3'], 'W3 still holds the lane');
      (await w3).done(true);
      p.done(true);
      await tick();
      assert.deepEqual(log, ['W1', 'W3', 'W4']);
      (await w4).done(true);
      a.close();
      c.close();
      assert.deepEqual(s.snapshot(), { slots: 2, running: 0, speed: s.speed, keys: [] });
      // both slots and the lane are whole: two turns on another engine and one on the lane start at once
      const free = s.admit('E', 3);
      const ew = s.admit('F', 1, { lane: whisper });
      const started = await Promise.all([free.step(1), ew.step(1)]);
      assert.equal(s.snapshot().running, 2);
      for (const x of started) x.done(true);
      free.close();
      ew.close();
    });

    test("the wait estimate on a lane counts the lane's own turns on as many slots as it runs (503 when that is too long), the estimate off it does not", async () => {
      const { s } = scheduler({ slots: 2, initialSpeed: 1, maxWaitMs: 12_000 });
      const a = s.admit('A', 20, { lane: whisper });
      const running = await a.step(10);
      const waiting = a.step(10);
      const c = s.admit('C', 5, { lane: whisper });
      const cw = c.step(5);
      // B on another engine: a slot is free; only C's head turn (5 s) is counted ahead, on the two slots
      assert.equal(s.estimateWaitMs('B'), 5000);
      // B on the lane: A's running turn (10 s) and C's turn (5 s), one at a time
      assert.equal(s.estimateWaitMs('B', whisper), 15_000);
      s.admit('B', 1).close();
      const e = refusal(() => s.admit('B', 1, { lane: whisper }));
      assert.equal(e.code, 'engine_overloaded');
      assert.equal(e.headers!['retry-after-ms'], '3000');
      assert.equal(refusal(() => s.check('B', 0, whisper)).code, 'engine_overloaded', 'refused before the cost is known too');
      running.done(true);
      (await waiting).done(true);
      (await cw).done(true);
      a.close();
      c.close();
    });

    test('lanes are told apart by their id: a full lane does not hold another one', async () => {
      const { s } = scheduler({ slots: 2 });
      const one = await s.admit('A', 1, { lane: whisper }).step(1);
      const other = await s.admit('B', 1, { lane: { id: {}, limit: 1 } }).step(1);
      assert.equal(s.snapshot().running, 2);
      one.done(true);
      other.done(true);
    });
  });

  test('fill: work poured into slots as they free', () => {
    assert.equal(fill([0, 0], 0), 0);
    assert.equal(fill([5, 10], 0), 5);
    assert.equal(fill([5, 10], 4), 9);
    assert.equal(fill([5, 10], 10), 12.5);
    assert.equal(fill([0, 0], 10), 5);
  });
});
