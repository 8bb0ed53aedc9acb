// Background responses on the BullMQ queue shared by two Portico processes: cancel from the other instance,
// replay from the other instance (live and after the end), and a killed instance's job never stays in_progress.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, createResponse, instanceOwningPort, parseSse, type Cluster, type Instance } from '../helpers/cluster.js';
import { startScriptedUpstream, type ScriptedUpstream, type RecordedRequest } from '../helpers/scripted-upstream.js';
import { waitFor, quietFor } from '../helpers/wait.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function getResponse(inst: Instance, key: string, id: string) {
  const r = await fetch(`${inst.url}/v1/responses/${id}`, { headers: { authorization: `Bearer ${key}` } });
  return { status: r.status, body: (await r.json()) as any };
}

async function replay(inst: Instance, key: string, id: string, startingAfter?: number) {
  const q = startingAfter === undefined ? '' : `&starting_after=${startingAfter}`;
  const r = await fetch(`${inst.url}/v1/responses/${id}?stream=true${q}`, { headers: { authorization: `Bearer ${key}` }, signal: AbortSignal.timeout(30_000) });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type') ?? '', /text\/event-stream/);
  return parseSse(await r.text());
}

function assertContiguous(events: any[], from: number) {
  assert.ok(events.length > 0, 'no events');
  events.forEach((e, i) => assert.equal(e.sequence_number, from + i, `event ${i} (${e.type}) has sequence_number ${e.sequence_number}, expected ${from + i}`));
}

describe('background responses across two instances (BullMQ on Redis)', () => {
  let up: ScriptedUpstream;
  let c: Cluster;
  let key: string;

  before(async () => {
    up = await startScriptedUpstream();
    c = await startCluster({ upstreamUrl: up.url, env: { BACKGROUND_STALE_MS: '3000', SHUTDOWN_GRACE_MS: '2000' } });
    key = (await c.createKey(c.instances[0], 'bob')).key;
  });
  after(async () => {
    await c?.close();
    await up?.close();
  });

  /** Creates a background response on A and waits until some instance has sent it upstream. */
  async function startJob(delayMs: number, chunks: number): Promise<{ id: string; upstream: RecordedRequest; runner: Instance; other: Instance }> {
    const [a, b] = c.instances;
    up.reset();
    up.script({ text: Array.from({ length: chunks }, (_, i) => `w${i} `), delayMs });
    const r = await createResponse(a.url, key, { model: 'm1', input: 'a long story', background: true });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.status, 'in_progress');
    const [upstream] = await up.waitForRequests(1);
    const runner = instanceOwningPort([a, b], upstream.remotePort);
    assert.ok(runner, 'could not tell which instance runs the job');
    return { id: r.body.id, upstream, runner, other: runner === a ? b : a };
  }

  test('cancelled on the instance that does not run it: status cancelled, the upstream request aborted', async () => {
    const { id, upstream, runner, other } = await startJob(300, 40);
    // the job is under way: its answer is streaming (frames are 300 ms apart)
    await waitFor(() => upstream.written >= 3, { timeoutMs: 20_000, what: 'the job to stream' });
    const t0 = Date.now();
    const res = await fetch(`${other.url}/v1/responses/${id}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${key}` } });
    const body = (await res.json()) as any;
    assert.equal(res.status, 200, JSON.stringify(body));
    assert.equal(body.status, 'cancelled', `cancel on ${other.name} (job on ${runner.name}) answered ${body.status}`);
    assert.ok(Date.now() - t0 < 5000);
    // ends when the upstream request closes; the timeout only bounds a failure
    await Promise.race([upstream.closed, sleep(15_000)]);
    assert.equal(upstream.aborted, true, 'the upstream request was not aborted');
    // both instances agree, and it stays cancelled: a short pause proving a negative (no late status overwrites it)
    await quietFor(300);
    for (const inst of c.instances) assert.equal((await getResponse(inst, key, id)).body.status, 'cancelled');
  });

  test('replayed on the other instance while it runs and after it ended: every event once, in order', async () => {
    const { id, other, runner, upstream } = await startJob(120, 16);
    // the second replay starts while the job runs, once its first deltas went out (16 frames 120 ms apart)
    const midway = async () => (await waitFor(() => upstream.written >= 5, { timeoutMs: 20_000, what: 'the first deltas' }), replay(other, key, id, 5));
    const [live, resumed] = await Promise.all([replay(other, key, id), midway()]);
    assertContiguous(live, 0);
    assert.equal(live[0].type, 'response.created');
    assert.equal(live.at(-1).type, 'response.completed', `last event ${live.at(-1).type} (job on ${runner.name}, replay on ${other.name})`);
    assertContiguous(resumed, 6);
    assert.equal(resumed.at(-1).type, 'response.completed');
    const text = live
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
    assert.equal(text, Array.from({ length: 16 }, (_, i) => `w${i} `).join(''));
    // after the end, from either instance, the same events
    for (const inst of c.instances) {
      const again = await replay(inst, key, id);
      assert.deepEqual(
        again.map((e) => [e.sequence_number, e.type]),
        live.map((e) => [e.sequence_number, e.type]),
      );
      const tail = await replay(inst, key, id, live.length - 3);
      assertContiguous(tail, live.length - 2);
    }
    const final = await getResponse(other, key, id);
    assert.equal(final.body.status, 'completed');
    assert.equal(final.body.output_text, text);
  });

  test('the instance running a job is killed (SIGKILL): the job ends failed on the survivor, never stuck in_progress', async () => {
    const { id, runner, other, upstream } = await startJob(500, 60);
    await waitFor(() => upstream.written >= 2, { timeoutMs: 20_000, what: 'the job to stream' });
    assert.equal((await getResponse(other, key, id)).body.status, 'in_progress');
    const t0 = Date.now();
    runner.kill('SIGKILL');
    await runner.exited;
    let status = 'in_progress';
    let body: any;
    while (Date.now() - t0 < 20_000) {
      body = (await getResponse(other, key, id)).body;
      status = body.status;
      if (status !== 'in_progress') break;
      await sleep(200);
    }
    const ms = Date.now() - t0;
    assert.ok(status === 'failed' || status === 'completed', `still ${status} ${ms} ms after ${runner.name} was killed`);
    assert.ok(ms < 10_000, `took ${ms} ms (BACKGROUND_STALE_MS 3000)`);
    if (status === 'failed') assert.equal(body.error.code, 'server_error');
    // a replay on the survivor ends too (it does not wait forever for events of a dead instance)
    const events = await replay(other, key, id);
    assertContiguous(events, 0);
    // and the survivor still takes new background work
    up.script({ text: 'after the crash' });
    const r = await createResponse(other.url, key, { model: 'm1', input: 'again', background: true });
    assert.equal(r.status, 200);
    const t1 = Date.now();
    let s2 = r.body.status;
    while (s2 !== 'completed' && Date.now() - t1 < 10_000) {
      await sleep(100);
      s2 = (await getResponse(other, key, r.body.id)).body.status;
    }
    assert.equal(s2, 'completed');
  });
});
