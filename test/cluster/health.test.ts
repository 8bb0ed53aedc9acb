// The operators' health view across real Portico processes on PostgreSQL and Redis: each instance's traffic is in
// its own row of a deployment and the deployment's figures are their sum, whichever instance answers; an instance
// that closes (SIGTERM) says goodbye and drops out at once, one that dies (SIGKILL) drops out once its last figures
// are 10 s old.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, type Cluster, type Instance } from '../helpers/cluster.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { waitFor } from '../helpers/wait.js';

describe('GET /v1/admin/health across three instances (PostgreSQL + Redis)', () => {
  let up: ScriptedUpstream;
  let c: Cluster;
  let a: Instance;
  let b: Instance;
  let x: Instance;
  let key: string;
  let operator: string;

  before(async () => {
    up = await startScriptedUpstream({ record: false, defaultReply: { text: 'fine', usage: { prompt_tokens: 7, completion_tokens: 3 } } });
    c = await startCluster({ upstreamUrl: up.url, instances: 3, env: { SHUTDOWN_GRACE_MS: '2000' } });
    [a, b, x] = c.instances as [Instance, Instance, Instance];
    key = (await c.createKey(a, 'carol')).key;
    const added = await c.cli(['operators', 'add', 'olga']);
    assert.equal(added.code, 0, added.stderr);
    operator = await c.token('olga');
  });
  after(async () => {
    await c?.close();
    await up?.close();
  });

  const health = async (inst: Instance) => {
    const r = await fetch(`${inst.url}/v1/admin/health`, { headers: { authorization: `Bearer ${operator}` } });
    assert.equal(r.status, 200, await r.clone().text());
    return ((await r.json()) as any).data;
  };
  const chat = async (inst: Instance) => {
    const r = await fetch(`${inst.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm1', messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(r.status, 200, await r.clone().text());
    await r.arrayBuffer();
  };
  const pidOf = (d: any, id: string) => d.instances.find((i: any) => i.id === id)?.pid;

  test("each instance's traffic in its own row, the sum right, from whichever instance answers", async () => {
    for (let i = 0; i < 3; i++) await chat(a);
    for (let i = 0; i < 2; i++) await chat(b);
    for (const inst of [a, b]) {
      // the first ask finds the others (they answer it at once, and keep telling for a minute)
      const d = await waitFor(
        async () => {
          const h = await health(inst);
          const m1 = h.deployments.find((e: any) => e.model === 'm1');
          return h.instances.length === 3 && m1?.requests === 5 ? h : undefined;
        },
        { what: `${inst.name} to list the three instances and their traffic` },
      );
      assert.deepEqual(new Set(d.instances.map((i: any) => i.pid)), new Set([a.pid, b.pid, x.pid]));
      assert.equal(new Set(d.instances.map((i: any) => i.id)).size, 3);
      assert.deepEqual(
        d.instances.filter((i: any) => i.self).map((i: any) => i.pid),
        [inst.pid],
      );
      const m1 = d.deployments.find((e: any) => e.model === 'm1');
      const byPid = new Map(m1.instances.map((r: any) => [pidOf(d, r.instance), r]));
      assert.deepEqual(
        [a.pid, b.pid, x.pid].map((p) => [(byPid.get(p) as any).requests, (byPid.get(p) as any).rpm_used, (byPid.get(p) as any).tpm_used]),
        [
          [3, 3, 30],
          [2, 2, 20],
          [0, 0, 0],
        ],
      );
      assert.deepEqual([m1.requests, m1.failures, m1.error_rate, m1.in_flight, m1.rpm.used, m1.tpm.used, m1.state], [5, 0, 0, 0, 5, 50, 'closed']);
      assert.ok(m1.p50_ms !== null && m1.p95_ms !== null, 'merged latencies');
    }
  });

  test('an instance that closes drops out at once; one that dies drops out once its figures are 10 s old', async () => {
    const before = await health(a);
    const idOf = (pid: number) => before.instances.find((i: any) => i.pid === pid).id;
    const bId = idOf(b.pid);
    const xId = idOf(x.pid);
    // SIGTERM: the instance closes its runtime, which says goodbye on the feed
    const t0 = Date.now();
    b.kill('SIGTERM');
    await b.exited;
    await waitFor(async () => !(await health(a)).instances.some((i: any) => i.id === bId), { what: 'A to drop B', timeoutMs: 20_000, everyMs: 200 });
    assert.ok(Date.now() - t0 < 8_000, `B dropped out after ${Date.now() - t0} ms: by its goodbye, not by age`);
    // SIGKILL: no goodbye; its last figures age out
    x.kill('SIGKILL');
    await x.exited;
    const t1 = Date.now();
    const d = await waitFor(
      async () => {
        const h = await health(a);
        return h.instances.some((i: any) => i.id === xId) ? undefined : h;
      },
      { what: 'A to drop the dead instance', timeoutMs: 30_000, everyMs: 500 },
    );
    assert.ok(Date.now() - t1 >= 7_000, `the dead instance stayed until its figures were old (${Date.now() - t1} ms)`);
    assert.deepEqual(
      d.instances.map((i: any) => [i.pid, i.self]),
      [[a.pid, true]],
    );
    // the deployment is A's alone now
    const m1 = d.deployments.find((e: any) => e.model === 'm1');
    assert.deepEqual([m1.requests, m1.instances.length], [3, 1]);
  });
});
