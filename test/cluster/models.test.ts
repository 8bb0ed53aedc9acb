// Models at run time across two `portico serve` processes on one PostgreSQL and one Redis (issue 25, part A): a
// model added through the admin API on A serves on B within a second without a restart (the change feed), its
// edits, disabling and removal reach B, it survives a restart of both, and an instance started with another
// PORTICO_SECRETS_KEY lists it with a clear error and answers 503 without calling the upstream.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, type Cluster, type Instance } from '../helpers/cluster.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { waitFor } from '../helpers/wait.js';

const SECRETS_KEY = 'cluster-secrets-key-0123456789abcdef0123456789';
const OTHER_KEY = 'another-secrets-key-0123456789abcdef0123456789';
const UPSTREAM_KEY = 'sk-cluster-upstream-key-31415926';

describe('stored models on two instances (PostgreSQL + Redis)', () => {
  let up: ScriptedUpstream;
  let c: Cluster;
  let a: Instance;
  let b: Instance;
  let key: string;
  let op: Record<string, string>;

  const admin = async (inst: Instance, method: string, path: string, body?: unknown) => {
    const r = await fetch(`${inst.url}/v1/admin${path}`, {
      method,
      headers: { ...op, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    return { status: r.status, body: (await r.json()) as any };
  };
  const chat = async (inst: Instance, model: string) => {
    const r = await fetch(`${inst.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
    });
    return { status: r.status, body: (await r.json()) as any };
  };
  const stop = async (inst: Instance) => {
    inst.kill('SIGTERM');
    await inst.exited;
  };

  before(async () => {
    up = await startScriptedUpstream();
    c = await startCluster({ upstreamUrl: up.url, env: { PORTICO_SECRETS_KEY: SECRETS_KEY } });
    [a, b] = c.instances as [Instance, Instance];
    const added = await c.cli(['operators', 'add', 'olga']);
    assert.equal(added.code, 0, added.stderr);
    op = { authorization: `Bearer ${await c.token('olga')}` };
    key = (await c.createKey(a, 'ann')).key;
  });
  after(async () => {
    await c?.close();
    await up?.close();
  });

  test('added on A: B serves it within 1 s of the 201, with the decrypted key', async (t) => {
    assert.equal((await chat(b, 'runtime')).status, 404, 'not there before');
    const made = await admin(a, 'POST', '/models', {
      entry: { name: 'runtime', provider: 'openai-compatible', base_url: up.url, upstream_model: 'rt-1', api_key: UPSTREAM_KEY },
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const t201 = performance.now();
    await waitFor(async () => (await chat(b, 'runtime')).status === 200, { what: 'B to serve the model added on A' });
    const ms = performance.now() - t201;
    t.diagnostic(`B served it ${Math.round(ms)} ms after A's 201`);
    assert.ok(ms < 1000, `B served it ${Math.round(ms)} ms after A's 201`);
    const last = up.requests.at(-1)!;
    assert.equal(last.headers.authorization, `Bearer ${UPSTREAM_KEY}`);
    assert.equal(last.body.model, 'rt-1');
    // B lists it as A made it
    const listed = (await admin(b, 'GET', '/models')).body.data.list.find((m: any) => m.name === 'runtime');
    assert.equal(listed.source, 'stored');
    assert.deepEqual(listed.secrets, { api_key: true });
  });

  test('an edit, disabling and enabling on A reach B', async () => {
    const edited = await admin(a, 'PUT', '/models/runtime', { entry: { name: 'runtime', provider: 'openai-compatible', base_url: up.url, upstream_model: 'rt-2' } });
    assert.equal(edited.status, 200, JSON.stringify(edited.body));
    await waitFor(
      async () => {
        up.reset();
        return (await chat(b, 'runtime')).status === 200 && up.requests.at(-1)?.body.model === 'rt-2';
      },
      { what: 'B to serve the edited model' },
    );
    assert.equal(up.requests.at(-1)!.headers.authorization, `Bearer ${UPSTREAM_KEY}`, 'the key was kept');
    assert.equal((await admin(a, 'POST', '/models/runtime/disable')).status, 200);
    await waitFor(async () => (await chat(b, 'runtime')).status === 404, { what: 'B to stop serving the disabled model' });
    assert.equal((await chat(b, 'runtime')).body.error.code, 'model_not_found');
    assert.equal((await admin(a, 'POST', '/models/runtime/enable')).status, 200);
    await waitFor(async () => (await chat(b, 'runtime')).status === 200, { what: 'B to serve it again' });
  });

  test('both restarted: still served (read at start); another PORTICO_SECRETS_KEY: listed with the error, 503, nothing sent upstream', async () => {
    await Promise.all([stop(a), stop(b)]);
    const [c1, c2] = await Promise.all([c.startInstance(), c.startInstance()]);
    for (const inst of [c1!, c2!]) {
      const r = await chat(inst, 'runtime');
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    assert.equal(up.requests.at(-1)!.headers.authorization, `Bearer ${UPSTREAM_KEY}`);
    await stop(c2!);

    const wrong = await c.startInstance({ PORTICO_SECRETS_KEY: OTHER_KEY });
    const item = (await admin(wrong, 'GET', '/models')).body.data.list.find((m: any) => m.name === 'runtime');
    assert.ok(item, 'listed');
    assert.match(item.error, /stored api_key cannot be decrypted \(it was encrypted with another PORTICO_SECRETS_KEY/);
    up.reset();
    const refused = await chat(wrong, 'runtime');
    assert.equal(refused.status, 503, JSON.stringify(refused.body));
    assert.equal(refused.body.error.code, 'engine_unavailable');
    assert.match(refused.body.error.message, /PORTICO_SECRETS_KEY/);
    const tested = await admin(wrong, 'POST', '/models/runtime/test', {});
    assert.equal(tested.status, 200);
    assert.equal(tested.body.data.ok, false);
    assert.equal(tested.body.data.error.code, 'engine_unavailable');
    assert.equal(up.requests.length, 0, 'nothing was sent upstream without the key');
    assert.ok(!wrong.output().includes(UPSTREAM_KEY));

    // removed on the instance with the right key: gone on the other one too
    assert.equal((await admin(c1!, 'DELETE', '/models/runtime')).status, 200);
    await waitFor(async () => (await chat(wrong, 'runtime')).status === 404, { what: 'the removal to reach the other instance' });
  });
});
