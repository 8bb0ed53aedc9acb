// Fault tests on two real Portico processes: PostgreSQL, then Redis, go away under a steady load and come back.
// They are reached through TCP proxies the test cuts (open connections reset, new ones refused) and restores:
// the machine's own servers are never stopped. Requests must fail fast with 503 service_unavailable (never 500,
// never hang), service must resume without a restart, and nothing acknowledged may be missing afterwards.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, type Cluster, type Instance } from '../helpers/cluster.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { waitFor } from '../helpers/wait.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** outcomes so far, by phase and status (named when a phase times out) */
function countBy(outcomes: Outcome[]): Record<string, number> {
  const n: Record<string, number> = {};
  for (const o of outcomes) n[`${o.kind} ${o.phase} ${o.status || o.network}`] = (n[`${o.kind} ${o.phase} ${o.status || o.network}`] ?? 0) + 1;
  return n;
}

interface Outcome {
  kind: 'response' | 'key';
  phase: string;
  instance: string;
  requestId: string;
  start: number;
  ms: number;
  status: number;
  code?: string;
  id?: string;
  network?: string;
}

describe('PostgreSQL and Redis going away under load (two instances, through cuttable proxies)', () => {
  let up: ScriptedUpstream;
  let c: Cluster;
  let key: string;
  let jwt: string;

  before(async () => {
    up = await startScriptedUpstream({ record: false });
    c = await startCluster({
      upstreamUrl: up.url,
      proxyPostgres: true,
      proxyRedis: true,
      // every request counts against a (high) per-key limit, so every request needs Redis too
      env: { RATE_LIMIT_RPM: '1000000' },
    });
    key = (await c.createKey(c.instances[0], 'dave')).key;
    jwt = await c.token('dave');
  });
  after(async () => {
    await c?.close();
    await up?.close();
  });

  test('cut PostgreSQL, restore, cut Redis, restore: fast 503s, recovery without restart, nothing acknowledged lost', async () => {
    const outcomes: Outcome[] = [];
    let phase = 'baseline';
    let stop = false;
    let n = 0;

    const call = async (kind: Outcome['kind'], inst: Instance) => {
      const requestId = `flt-${kind}-${++n}-${Date.now()}`;
      const start = Date.now();
      const o: Outcome = { kind, phase, instance: inst.name, requestId, start, ms: 0, status: 0 };
      try {
        const r =
          kind === 'response'
            ? await fetch(`${inst.url}/v1/responses`, {
                method: 'POST',
                headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-request-id': requestId },
                body: JSON.stringify({ model: 'm1', input: 'hello', store: true }),
                signal: AbortSignal.timeout(15_000),
              })
            : await fetch(`${inst.url}/v1/portal/api-keys`, {
                method: 'POST',
                headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json', 'x-request-id': requestId },
                body: JSON.stringify({ name: `k${n}` }),
                signal: AbortSignal.timeout(15_000),
              });
        o.status = r.status;
        const body = (await r.json()) as any;
        if (kind === 'response') {
          o.code = body.error?.code;
          o.id = body.id;
        } else {
          o.code = body.meta?.error;
          o.id = body.data?.id;
          // keep under the 10 active keys per user: revoke right away (best effort; the create is what counts)
          if (r.status === 200) {
            fetch(`${inst.url}/v1/portal/api-keys/revoke`, {
              method: 'POST',
              headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
              body: JSON.stringify({ api_key_id: body.data.id }),
            })
              .then((x) => x.arrayBuffer())
              .catch(() => {});
          }
        }
      } catch (e) {
        o.network = (e as Error).name === 'TimeoutError' ? 'timeout' : `${(e as Error).message} ${(e as any).cause?.code ?? (e as any).cause?.message ?? ''}`.trim();
      }
      o.ms = Date.now() - start;
      outcomes.push(o);
    };

    // 4 response loops and 1 key-create loop, alternating between the instances
    const loops = [
      ...[0, 1, 2, 3].map((i) =>
        (async () => {
          for (let j = 0; !stop; j++) {
            await call('response', c.instances[(i + j) % 2]);
            await sleep(20);
          }
        })(),
      ),
      (async () => {
        for (let j = 0; !stop; j++) {
          await call('key', c.instances[j % 2]);
          await sleep(150);
        }
      })(),
    ];

    const marks: Record<string, number> = {};
    const t0 = Date.now();
    const enter = (p: string) => {
      phase = p;
      marks[p] = Date.now();
    };
    const responses = (p: string) => outcomes.filter((o) => o.kind === 'response' && o.phase === p);
    const keysIn = (p: string) => outcomes.filter((o) => o.kind === 'key' && o.phase === p);
    const both = (f: (inst: string) => boolean) => f('A') && f('B');
    // Each phase lasts until what it is for has happened (answers seen, an outage felt, a recovery steady), not
    // for a fixed time: a busy machine makes fewer requests a second, and each phase waits for as many as it needs.
    const until = async (what: string, cond: () => boolean) => {
      try {
        await waitFor(cond, { timeoutMs: 45_000, everyMs: 50, what });
      } catch (e) {
        throw new Error(`${(e as Error).message}; outcomes so far ${JSON.stringify(countBy(outcomes))}`);
      }
    };
    /** the service is steady again: the last 6 answers on each instance are all 200; then 12 more requests, which all must be */
    const recovered = async (p: string) => {
      await until(`steady answers in ${p}`, () =>
        both((inst) => {
          const last = responses(p)
            .filter((o) => o.instance === inst)
            .slice(-6);
          return last.length === 6 && last.every((o) => o.status === 200);
        }),
      );
      const steady = (marks[`${p}-steady`] = Date.now());
      await until(`12 requests after ${p} got steady`, () => responses(p).filter((o) => o.start >= steady).length >= 12);
    };

    await until('answers on both instances before the first cut', () => both((inst) => responses('baseline').filter((o) => o.instance === inst && o.status === 200).length >= 4));
    enter('pg-down');
    await c.pgProxy!.cut();
    await until('the PostgreSQL outage to be felt', () => responses('pg-down').some((o) => o.status === 503) && responses('pg-down').length >= 8 && keysIn('pg-down').length >= 1);
    await c.pgProxy!.restore();
    enter('pg-back');
    await recovered('pg-back');
    enter('redis-down');
    await c.redisProxy!.cut();
    await until(
      'the Redis outage to be felt',
      () => responses('redis-down').some((o) => o.status === 503) && responses('redis-down').length >= 8 && keysIn('redis-down').length >= 2,
    );
    await c.redisProxy!.restore();
    enter('redis-back');
    await recovered('redis-back');
    // enough acknowledged key creates for the check that none is lost (the key loop is slower than the others)
    await until('more than 10 keys created', () => outcomes.filter((o) => o.kind === 'key' && o.status === 200).length > 10);
    stop = true;
    await Promise.all(loops);

    const summary: Record<string, Record<string, number>> = {};
    for (const o of outcomes) {
      const s = (summary[`${o.kind} ${o.phase}`] ??= {});
      const k = o.network ? `network:${o.instance}:${o.network}` : `${o.status}${o.code ? ' ' + o.code : ''}`;
      s[k] = (s[k] ?? 0) + 1;
    }
    const text = JSON.stringify(summary);
    const dead = c.instances.filter((i) => !i.running);
    assert.deepEqual(
      dead.map((i) => i.name),
      [],
      `instances died: ${dead.map((i) => i.output().slice(-3000)).join('\n')}`,
    );
    console.log(`fault test outcomes: ${text}`);

    // never a 500, never a hanging or broken request
    const bad = outcomes.filter((o) => o.network || (o.status >= 500 && o.status !== 503));
    assert.deepEqual(
      bad.map((o) => `${o.kind} ${o.phase} ${o.instance} ${o.status} ${o.code ?? ''} ${o.network ?? ''}`),
      [],
      text,
    );
    // every failure is 503 service_unavailable, and fast
    for (const o of outcomes.filter((x) => x.status !== 200)) {
      assert.equal(o.status, 503, `${o.kind} ${o.phase}: ${o.status} ${o.code} (${text})`);
      assert.equal(o.code, 'service_unavailable');
      assert.ok(o.ms < 6000, `a failing ${o.kind} request took ${o.ms} ms`);
    }
    // each outage was felt: 503s while PostgreSQL and while Redis were away
    assert.ok(
      responses('pg-down').some((o) => o.status === 503),
      `no 503 while PostgreSQL was away: ${text}`,
    );
    assert.ok(
      responses('redis-down').some((o) => o.status === 503),
      `no 503 while Redis was away: ${text}`,
    );
    // before the first cut (a request still in flight when it came may fail: it belongs to the outage)
    const early = outcomes.filter((o) => o.phase === 'baseline' && o.start + o.ms < marks['pg-down'] && o.status !== 200);
    assert.deepEqual(
      early.map((o) => `${o.instance} +${o.start - t0}ms ${o.status} ${o.code}`),
      [],
      c.instances.map((i) => i.output().slice(-1500)).join('\n'),
    );
    // recovery without a restart: once each "back" phase got steady, every request succeeds, on both instances
    for (const [p, endAt] of [
      ['pg-back', marks['redis-down']],
      ['redis-back', Date.now()],
    ] as const) {
      // a request still in flight when the next cut came belongs to that outage, not to this recovery (one that
      // ended in the millisecond the next phase was marked ended before its cut: the 12 recovered() waited for are
      // all here, however fast the machine answers)
      const late = responses(p).filter((o) => o.start >= marks[`${p}-steady`] && o.start + o.ms <= endAt);
      assert.ok(late.length > 10, `only ${late.length} requests late in ${p}`);
      const lateBad = late.filter((o) => o.status !== 200);
      const logs = c.instances
        .map((i) => i.output())
        .join('\n')
        .split('\n');
      const why = lateBad.slice(0, 5).map((o) => `${o.instance} +${o.start - marks[p]}ms: ${logs.find((l) => l.includes(o.requestId)) ?? '(no log)'}`);
      assert.deepEqual([...new Set(late.map((o) => o.status))], [200], `${p}: ${text}\n${why.join('\n')}`);
      assert.deepEqual(new Set(late.map((o) => o.instance)), new Set(['A', 'B']));
    }
    // key creation depends on PostgreSQL only
    assert.ok(
      outcomes.filter((o) => o.kind === 'key' && o.phase === 'redis-down').every((o) => o.status === 200),
      text,
    );

    // nothing acknowledged is missing: every 200 has its usage record and its stored response; every created key exists
    const ok = outcomes.filter((o) => o.kind === 'response' && o.status === 200);
    // usage records may go through each instance's local journal and reach the ledger a moment later (with
    // retries after an outage): give them a few seconds to arrive, then every 200 must have its record
    let usage = new Set<string>();
    let unrecorded = ok;
    for (const deadline = Date.now() + 15_000; Date.now() < deadline; await sleep(250)) {
      usage = new Set((await c.query<{ request_id: string }>('select request_id from usage_records')).map((r) => r.request_id));
      unrecorded = ok.filter((o) => !usage.has(o.requestId));
      if (!unrecorded.length) break;
    }
    const stored = new Set((await c.query<{ id: string }>('select id from responses')).map((r) => r.id));
    const unstored = ok.filter((o) => !stored.has(o.id!));
    const sample = await c.query<{ request_id: string; n: number }>('select request_id, count(*)::int as n from usage_records group by 1 order by 1 limit 3');
    assert.deepEqual(
      unrecorded.map((o) => `${o.requestId} ${o.phase} ${o.instance}`),
      [],
      `answered 200 without a usage record: ${unrecorded.length} of ${ok.length}; ledger has ${usage.size} ids, e.g. ${JSON.stringify(sample)}`,
    );
    assert.deepEqual(
      unstored.map((o) => o.id),
      [],
      'answered 200 without the stored response',
    );
    const keys = new Set((await c.query<{ id: string }>('select id from api_keys')).map((r) => r.id));
    const createdKeys = outcomes.filter((o) => o.kind === 'key' && o.status === 200);
    assert.ok(createdKeys.length > 10);
    assert.deepEqual(
      createdKeys.filter((o) => !keys.has(o.id!)).map((o) => o.id),
      [],
      'acknowledged key creates missing',
    );
    console.log(`responses ok ${ok.length}, failed ${outcomes.filter((o) => o.kind === 'response' && o.status !== 200).length}; keys created ${createdKeys.length}`);
  });
});
