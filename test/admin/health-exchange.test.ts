/**
 * The health view's exchange between instances (src/admin/health.ts), on an in-memory feed that delivers like Redis
 * pub/sub (every subscriber, the sender included, a turn later): an idle cluster sends nothing; an ask makes the
 * others answer at once and keep telling for `keepMs`, then stop; a snapshot larger than a part travels in parts; a
 * malformed message is dropped; a silent instance is waited for at most `waitMs` and dropped once its figures are
 * `maxAgeMs` old; the sums merge the histograms, take the worst state and add the limits.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChangeFeed, FeedHandler } from '../../src/platform/cluster/feed.js';
import { ClusterHealth, SNAPSHOT_CHANNEL, type HealthSource } from '../../src/admin/health.js';
import { DeploymentStats } from '../../src/models/router/health.js';
import type { DeploymentReport } from '../../src/models/router/index.js';
import { quietFor, waitFor } from '../helpers/wait.js';

class Bus {
  readonly sent: Array<{ channel: string; message: Record<string, unknown> }> = [];
  private readonly members = new Set<Map<string, FeedHandler[]>>();
  feed(): ChangeFeed & { detach(): void } {
    const handlers = new Map<string, FeedHandler[]>();
    this.members.add(handlers);
    return {
      kind: 'redis',
      publish: async (channel, message) => {
        if (!this.members.has(handlers)) throw new Error('detached');
        this.sent.push({ channel, message });
        const copy = JSON.parse(JSON.stringify(message));
        setImmediate(() => {
          for (const m of this.members) for (const h of m.get(channel) ?? []) h(copy);
        });
      },
      subscribe: async (channel, h) => void handlers.set(channel, [...(handlers.get(channel) ?? []), h]),
      onResync() {},
      close: async () => void this.members.delete(handlers),
      detach: () => void this.members.delete(handlers),
    };
  }
  /** what was sent, and is not an ask */
  snapshots() {
    return this.sent.filter((s) => s.channel === SNAPSHOT_CHANNEL);
  }
}

function report(o: Partial<DeploymentReport> & { deployment: string }): DeploymentReport {
  return {
    model: 'm',
    provider: 'openai-compatible',
    state: 'closed',
    reason: null,
    requests: 0,
    failures: 0,
    latency: [],
    ttft: [],
    inFlight: 0,
    rpmUsed: 0,
    tpmUsed: 0,
    rpmLimit: null,
    tpmLimit: null,
    ...o,
  };
}

/** latencies as the router's window would hold them */
function histogram(samples: Array<[ms: number, n: number]>): number[] {
  const s = new DeploymentStats();
  const now = 1_000_000;
  for (const [ms, n] of samples) for (let i = 0; i < n; i++) s.ended(false, ms, now);
  return s.read(now).latency;
}

function source(id: string, rows: () => DeploymentReport[], startedAt = 1000): HealthSource {
  return { instance: { id, host: `host-${id}`, pid: id.charCodeAt(0), startedAt }, deployments: rows };
}

const fast = { waitMs: 300, everyMs: 20, keepMs: 200, maxAgeMs: 10_000 };

describe('the health exchange between instances', () => {
  test('an idle cluster sends nothing; asked, the others answer at once and keep telling for keepMs, then stop', async () => {
    const bus = new Bus();
    const a = new ClusterHealth(
      source('a', () => [report({ deployment: 'd', requests: 1 })]),
      bus.feed(),
      fast,
    );
    const b = new ClusterHealth(
      source('b', () => [report({ deployment: 'd', requests: 2 })], 2000),
      bus.feed(),
      fast,
    );
    // nothing asked: proves a negative, for ten of the publishing periods
    await quietFor(200);
    assert.equal(bus.sent.length, 0);
    const d = await a.read();
    assert.deepEqual(
      d.instances.map((i) => [i.id, i.self, i.host, i.pid, i.started_at]),
      [
        ['a', true, 'host-a', 97, 1000],
        ['b', false, 'host-b', 98, 2000],
      ],
    );
    assert.deepEqual(
      d.deployments.map((x) => [x.deployment, x.requests, x.instances.map((r) => [r.instance, r.requests])]),
      [
        [
          'd',
          3,
          [
            ['a', 1],
            ['b', 2],
          ],
        ],
      ],
    );
    // B keeps publishing while asked lately, and only B (A was not asked)
    await waitFor(() => bus.snapshots().length >= 4, { what: 'B to publish again on its own' });
    assert.ok(bus.snapshots().every((s) => s.message.from === 'b'));
    // keepMs after the last ask it stops
    await waitFor(
      async () => {
        const n = bus.snapshots().length;
        await quietFor(100);
        return bus.snapshots().length === n;
      },
      { what: 'B to stop publishing' },
    );
    const n = bus.sent.length;
    await quietFor(150);
    assert.equal(bus.sent.length, n, 'nothing more once nobody asks');
    // closing: B, which the others know, says goodbye; A, which never published, says nothing
    await a.close();
    await b.close();
    assert.deepEqual(
      bus.sent.filter((s) => s.message.bye === true).map((s) => s.message.from),
      ['b'],
    );
  });

  test('a feed that fails: the answer has this instance and what was heard already, at once', async () => {
    const bus = new Bus();
    const aFeed = bus.feed();
    const a = new ClusterHealth(
      source('a', () => [report({ deployment: 'd', requests: 1 })]),
      aFeed,
      fast,
    );
    const b = new ClusterHealth(
      source('b', () => [report({ deployment: 'd', requests: 2 })]),
      bus.feed(),
      fast,
    );
    assert.equal((await a.read()).deployments[0]!.requests, 3);
    aFeed.detach();
    const t0 = performance.now();
    const d = await a.read();
    assert.ok(performance.now() - t0 < 250, 'the failed ask is not waited on');
    assert.deepEqual([d.instances.map((i) => i.id), d.deployments[0]!.requests], [['a', 'b'], 3]);
    await a.close();
    await b.close();
  });

  test('a snapshot larger than a part travels in parts; a malformed message is dropped', async () => {
    const bus = new Bus();
    const many = Array.from({ length: 40 }, (_, i) => report({ model: `model-${i}-${'x'.repeat(40)}`, deployment: `dep-${i}`, requests: i, latency: histogram([[50, i + 1]]) }));
    const a = new ClusterHealth(
      source('a', () => []),
      bus.feed(),
      fast,
    );
    const b = new ClusterHealth(
      source('b', () => many),
      bus.feed(),
      { ...fast, partBytes: 600 },
    );
    const d = await a.read();
    const parts = bus.snapshots().filter((s) => s.message.seq === 1);
    assert.ok(parts.length >= 5, `${parts.length} parts`);
    for (const p of parts) assert.ok(Buffer.byteLength(JSON.stringify(p.message)) < 600 + 300, 'each part within its budget (and the head)');
    assert.equal(d.deployments.length, 40);
    assert.deepEqual(
      d.deployments.map((x) => x.requests),
      many.map((r) => r.requests),
    );
    assert.ok(d.deployments[39]!.p50_ms! > 45 && d.deployments[39]!.p50_ms! < 55);
    // garbage on the channel: dropped, nothing breaks, B's figures stay
    const feed = bus.feed();
    for (const bad of [
      { from: 'c' },
      { from: 'c', host: 'h', pid: 1, started: 1, seq: 1, part: 0, parts: 1, d: [['too', 'short']] },
      { from: 'c', host: 'h', pid: 1, started: 1, seq: 1, part: 2, parts: 1, d: [] },
      { from: 'c', host: 'h', pid: -1, started: 1, seq: 1, part: 0, parts: 1, d: [] },
      { from: 'c', host: 'h', pid: 1, started: 1, seq: 1, part: 0, parts: 1, d: [['m', 'd', 'p', 'exploded', null, 0, 0, 0, 0, 0, null, null, [], []]] },
      { from: 'c', host: 'h', pid: 1, started: 1, seq: 1, part: 0, parts: 1, d: [['m', 'd', 'p', 'closed', null, 0, 0, 0, 0, 0, null, null, [999, 1], []]] },
    ])
      await feed.publish(SNAPSHOT_CHANNEL, bad);
    const again = await a.read();
    assert.deepEqual(
      again.instances.map((i) => i.id),
      ['a', 'b'],
    );
    assert.equal(again.deployments.length, 40);
    await a.close();
    await b.close();
  });

  test('a silent instance is waited for at most waitMs, and dropped once its figures are maxAgeMs old; a closing one says so', async () => {
    const bus = new Bus();
    let now = Date.now();
    const clock = () => now;
    const a = new ClusterHealth(
      source('a', () => []),
      bus.feed(),
      { ...fast, now: clock },
    );
    const bFeed = bus.feed();
    const b = new ClusterHealth(
      source('b', () => []),
      bFeed,
      { ...fast, now: clock },
    );
    const c = new ClusterHealth(
      source('c', () => []),
      bus.feed(),
      { ...fast, now: clock },
    );
    assert.equal((await a.read()).instances.length, 3);
    // B stops hearing and telling (a process that died)
    bFeed.detach();
    // a snapshot B sent just before (it was asked, and tells every everyMs) is still on its way: let it land before
    // the clock moves, or it arrives stamped a second later and B is not yet 10 s old below (CI saw that once)
    await new Promise((r) => setImmediate(r));
    now += 1000;
    const t0 = performance.now();
    const d = await a.read();
    const waited = performance.now() - t0;
    assert.ok(waited >= 290 && waited < 5000, `waited ${waited} ms for B`);
    assert.deepEqual(
      d.instances.map((i) => i.id),
      ['a', 'b', 'c'],
      'B is still there: its figures are 1 s old',
    );
    now += 10_000;
    const later = await a.read();
    assert.deepEqual(
      later.instances.map((i) => i.id),
      ['a', 'c'],
    );
    // C closes: a goodbye, gone at once
    await c.close();
    await waitFor(async () => (await a.read()).instances.length === 1, { what: "C's goodbye" });
    // with everyone known to have answered, a read does not wait
    const t1 = performance.now();
    await a.read();
    assert.ok(performance.now() - t1 < 250, 'nobody to wait for');
    await a.close();
    await b.close();
  });

  test('the sums: counts added, histograms merged, the worst state with its reason, limits added (null when one has none)', async () => {
    const bus = new Bus();
    const a = new ClusterHealth(
      source('a', () => [
        report({ deployment: 'd1', requests: 10, failures: 1, inFlight: 2, rpmUsed: 10, tpmUsed: 100, rpmLimit: 60, tpmLimit: 1000, latency: histogram([[50, 10]]) }),
        report({ deployment: 'd2', rpmLimit: 5 }),
      ]),
      bus.feed(),
      fast,
    );
    const b = new ClusterHealth(
      source('b', () => [
        report({
          deployment: 'd1',
          state: 'open',
          reason: 'connection refused',
          requests: 10,
          failures: 9,
          inFlight: 1,
          rpmUsed: 10,
          tpmUsed: 50,
          rpmLimit: 60,
          tpmLimit: 1000,
          latency: histogram([[200, 10]]),
          ttft: histogram([[30, 4]]),
        }),
        report({ deployment: 'd2', state: 'half-open', reason: 'timed out' }),
        report({ model: 'only-b', deployment: 'd3' }),
      ]),
      bus.feed(),
      fast,
    );
    const d = await a.read();
    const [d1, d2, d3] = d.deployments;
    assert.deepEqual([d1!.state, d1!.reason, d1!.requests, d1!.failures, d1!.error_rate, d1!.in_flight], ['open', 'connection refused', 20, 10, 0.5, 3]);
    assert.deepEqual(
      [d1!.rpm, d1!.tpm],
      [
        { used: 20, limit: 120 },
        { used: 150, limit: 2000 },
      ],
    );
    // half the samples at 50 ms, half at 200 ms: the median in the lower half, the 95th in the upper
    assert.ok(d1!.p50_ms! > 45 && d1!.p50_ms! < 55, `p50 ${d1!.p50_ms}`);
    assert.ok(d1!.p95_ms! > 190 && d1!.p95_ms! < 215, `p95 ${d1!.p95_ms}`);
    assert.ok(d1!.ttft_p50_ms! > 28 && d1!.ttft_p50_ms! < 32);
    assert.deepEqual(
      d1!.instances.map((r) => [r.instance, r.state, r.error_rate, r.ttft_p50_ms === null]),
      [
        ['a', 'closed', 0.1, true],
        ['b', 'open', 0.9, false],
      ],
    );
    assert.deepEqual([d2!.state, d2!.reason, d2!.rpm.limit], ['half-open', 'timed out', null]);
    assert.deepEqual([d3!.model, d3!.instances.length], ['only-b', 1], "a deployment only another instance serves is listed after this one's");
    assert.deepEqual(
      (await a.read('only-b')).deployments.map((x) => x.deployment),
      ['d3'],
    );
    await a.close();
    await b.close();
  });
});

describe('DeploymentStats: the last minute in 5 s buckets', () => {
  test('counts and latencies leave the window as their buckets age', () => {
    const s = new DeploymentStats();
    let now = 1_000_000_000;
    s.ended(false, 50, now);
    s.ended(true, undefined, now);
    s.firstOutput(20, now);
    now += 30_000;
    s.ended(false, 400, now);
    let w = s.read(now);
    assert.deepEqual([w.requests, w.failures], [3, 1]);
    assert.equal(
      w.latency.filter((_, i) => i % 2 === 1).reduce((x, y) => x + y, 0),
      2,
    );
    now += 31_000;
    w = s.read(now);
    assert.deepEqual([w.requests, w.failures, w.ttft], [1, 0, []], 'the first bucket is over a minute old');
    now += 60_000;
    s.ended(false, 10, now);
    w = s.read(now);
    assert.deepEqual([w.requests, w.latency.length], [1, 2], 'a reused bucket starts empty');
  });
});
