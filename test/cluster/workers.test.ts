// `portico serve --workers 2` (WORKERS=2): a primary forks two workers sharing one port. Keys, rate limits,
// background work and cancellation must behave as they do across two instances; the primary refuses the
// embedded database, restarts a worker that dies, and shuts everything down on SIGTERM.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startCluster, type Cluster, type Instance } from '../helpers/cluster.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { awayFromMinuteEdge } from '../helpers/minute-window.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** One request on a connection of its own, so the primary hands each to the next worker. */
function freshRequest(url: string, method: string, path: string, headers: Record<string, string>, body?: unknown): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const req = http.request(
      `${url}${path}`,
      { method, agent: false, headers: { ...headers, ...(data ? { 'content-type': 'application/json', 'content-length': String(data.length) } : {}) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let j: any = text;
          try {
            j = JSON.parse(text);
          } catch {
            // not JSON
          }
          resolve({ status: res.statusCode ?? 0, body: j });
        });
      },
    );
    req.on('error', reject);
    req.setTimeout(15_000, () => req.destroy(new Error('timeout')));
    req.end(data);
  });
}

/** The pid that logged each request id (the request log line carries both). */
function pidsByRequest(inst: Instance): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of inst.output().split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const j = JSON.parse(line);
      if (j.reqId && j.pid) out.set(j.reqId, j.pid);
    } catch {
      // not a log line
    }
  }
  return out;
}

async function waitFor(what: string, cond: () => boolean, ms = 30_000) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** Waits until every one of these requests has its log line (written once its answer went out). */
function logged(inst: Instance, ids: string[]): Promise<void> {
  return waitFor(
    `the log lines of ${ids.length} requests`,
    () => {
      const pids = pidsByRequest(inst);
      return ids.every((id) => pids.has(id));
    },
    10_000,
  );
}

describe('serve --workers 2: one port, two processes, the rules of two instances', () => {
  let up: ScriptedUpstream;
  let c: Cluster;
  let p: Instance;
  let jwt: string;

  before(async () => {
    up = await startScriptedUpstream();
    // KEY_CACHE_FRESH_MS of a minute: a key change reaches the other worker through the change feed, or not within
    // the tests (with the default second, a worker would read it again soon whatever the feed did)
    c = await startCluster({
      upstreamUrl: up.url,
      instances: 1,
      env: { WORKERS: '2', LOG_LEVEL: 'info', SHUTDOWN_GRACE_MS: '3000', KEY_CACHE_FRESH_MS: '60000' },
    });
    p = c.instances[0]!;
    await waitFor('both workers listening', () => /2 workers serving on port/.test(p.output()));
    jwt = await c.token('wendy');
  });
  after(async () => {
    await c?.close();
    await up?.close();
  });

  const respond = (key: string, id: string, body: Record<string, unknown> = { model: 'm1', input: 'hi' }) =>
    freshRequest(p.url, 'POST', '/v1/responses', { authorization: `Bearer ${key}`, 'x-request-id': id }, body);

  test('each connection goes to a worker; both workers serve, neither is the primary', async () => {
    const { key } = await c.createKey(p, 'wendy');
    const ids = Array.from({ length: 12 }, (_, i) => `wk-spread-${i}-${Date.now()}`);
    for (const id of ids) assert.equal((await respond(key, id)).status, 200);
    await logged(p, ids);
    const pids = pidsByRequest(p);
    const served = new Set(ids.map((id) => pids.get(id)));
    assert.equal(served.has(undefined), false, 'a request without its log line');
    assert.equal(served.size, 2, `served by ${[...served].join(', ')}`);
    assert.equal(served.has(p.pid), false, 'the primary served a request');
  });

  test('a key revoked through one worker is refused by both at once', async () => {
    const { key, id } = await c.createKey(p, 'wendy');
    for (let i = 0; i < 4; i++) assert.equal((await respond(key, `wk-pre-${i}-${Date.now()}`)).status, 200);
    const rv = await freshRequest(p.url, 'POST', '/v1/portal/api-keys/revoke', { authorization: `Bearer ${jwt}` }, { api_key_id: id });
    assert.equal(rv.status, 200, JSON.stringify(rv.body));
    // the other worker hears it through the change feed (its cached entry is fresh for a minute): until two
    // requests in a row are refused by two different workers (their log lines name the process; connections are
    // handed out in turn, but nothing guarantees that two in a row reach two workers). Any time well under that
    // minute proves the feed: 20 s leaves a busy machine its slack.
    const deadline = Date.now() + 20_000;
    let last: Array<{ id: string; status: number }> = [];
    let both = false;
    for (let i = 0; Date.now() < deadline; i++) {
      const rid = `wk-wait-${i}-${Date.now()}`;
      last = [...last, { id: rid, status: (await respond(key, rid)).status }].slice(-2);
      if (last.length === 2 && last.every((x) => x.status === 401)) {
        await logged(
          p,
          last.map((x) => x.id),
        );
        const pids = pidsByRequest(p);
        if (pids.get(last[0]!.id) !== pids.get(last[1]!.id)) {
          both = true;
          break;
        }
      }
      await sleep(20);
    }
    assert.ok(both, `the revocation did not reach both workers (last answers ${last.map((x) => x.status).join(', ')})`);
    const after = [];
    for (let i = 0; i < 6; i++) after.push((await respond(key, `wk-post-${i}-${Date.now()}`)).status);
    assert.deepEqual(after, [401, 401, 401, 401, 401, 401]);
  });

  test('rpm 5 is counted once for both workers: the 6th request is 429', async () => {
    const { key, id } = await c.createKey(p, 'wendy');
    const lim = await c.cli(['keys', 'limit', id, '--rpm', '5']);
    assert.equal(lim.code, 0, lim.stderr);
    // no wait for the change to spread: neither worker has read the new key yet, each reads it (with its limit)
    // from the database at its first request
    await awayFromMinuteEdge(); // the six requests count in one fixed minute
    const statuses = [];
    const ids = [];
    for (let i = 0; i < 6; i++) {
      const rid = `wk-rpm-${i}-${Date.now()}`;
      ids.push(rid);
      const r = await respond(key, rid);
      statuses.push(r.status);
      if (r.status === 429) assert.equal(r.body.error.code, 'rate_limit_exceeded');
    }
    assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429]);
    await logged(p, ids);
    const pids = pidsByRequest(p);
    assert.equal(new Set(ids.map((i) => pids.get(i))).size, 2, 'the six requests did not reach both workers');
  });

  test('a background response is cancelled from whichever worker takes the cancel', async () => {
    const { key } = await c.createKey(p, 'wendy');
    up.reset();
    up.script({ text: Array.from({ length: 40 }, (_, i) => `w${i} `), delayMs: 250 });
    const created = await respond(key, `wk-bg-${Date.now()}`, { model: 'm1', input: 'a long story', background: true });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    const [upstream] = await up.waitForRequests(1);
    // the job is under way: its answer is streaming (frames 250 ms apart)
    await waitFor('the job to stream', () => upstream!.written >= 3);
    const cancel = await freshRequest(p.url, 'POST', `/v1/responses/${created.body.id}/cancel`, { authorization: `Bearer ${key}` });
    assert.equal(cancel.status, 200, JSON.stringify(cancel.body));
    assert.equal(cancel.body.status, 'cancelled');
    // ends when the upstream request closes; the timeout only bounds a failure
    await Promise.race([upstream!.closed, sleep(15_000)]);
    assert.equal(upstream!.aborted, true, 'the upstream request was not aborted');
    for (let i = 0; i < 4; i++) {
      const g = await freshRequest(p.url, 'GET', `/v1/responses/${created.body.id}`, { authorization: `Bearer ${key}` });
      assert.equal(g.body.status, 'cancelled');
    }
  });

  test('a worker that dies is started again under its id; the port keeps answering', async () => {
    const workerPids = () => [...new Set([...pidsByRequest(p).values()])];
    const { key } = await c.createKey(p, 'wendy');
    const before = workerPids();
    const victim = before[0]!;
    process.kill(victim, 'SIGKILL');
    await waitFor('the worker restarted', () => /worker \d exited; starting it again/.test(p.output()));
    await waitFor('both workers listening again', () => (p.output().match(/2 workers serving on port|"msg":"Portico listening/g) ?? []).length >= 4, 30_000);
    const ids = Array.from({ length: 8 }, (_, i) => `wk-again-${i}-${Date.now()}`);
    for (const id of ids) assert.equal((await respond(key, id)).status, 200);
    await logged(p, ids);
    const pids = pidsByRequest(p);
    const served = new Set(ids.map((id) => pids.get(id)));
    assert.equal(served.has(victim), false);
    assert.equal(served.size, 2, `served by ${[...served].join(', ')}`);
  });

  test('SIGTERM to the primary: every worker shuts down and the primary exits 0', async () => {
    const workers = [...new Set([...pidsByRequest(p).values()])];
    const t0 = Date.now();
    p.kill('SIGTERM');
    const { code } = await p.exited;
    assert.equal(code, 0, p.output().slice(-2000));
    assert.ok(Date.now() - t0 < 8_000, `took ${Date.now() - t0} ms`);
    for (const pid of workers) {
      let alive = true;
      try {
        process.kill(pid, 0);
      } catch {
        alive = false;
      }
      assert.equal(alive, false, `worker ${pid} still running`);
    }
  });

  test('more than one worker on the embedded database, or without Redis, is refused with what to set', async () => {
    const pglite = await c.cli(['serve', '--workers', '2'], { DATABASE_URL: '', PORT: '0' });
    assert.equal(pglite.code, 2);
    assert.match(pglite.stderr, /WORKERS=2 needs PostgreSQL \(DATABASE_URL\)/);
    const noRedis = await c.cli(['serve'], { WORKERS: '2', REDIS_URL: '', PORT: '0' });
    assert.equal(noRedis.code, 2);
    assert.match(noRedis.stderr, /needs Redis \(REDIS_URL\)/);
    const bad = await c.cli(['serve'], { WORKERS: 'many', PORT: '0' });
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /WORKERS must be a number of processes from 1 to 256, or auto/);
  });
});
