// POST /v1/admin/models/{name}/test: one small real request to a deployment, against a scripted upstream: an
// answer with its latency; a refused connection, garbage and a hang are ok:false with the error (HTTP 200), the
// hang within the deployment's timeout; the upstream gets the decrypted key as Bearer; nothing is charged.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { freePort } from '../helpers/cluster.js';
import { stallWatch } from '../helpers/wait.js';
import { callers, type Callers } from './helpers.js';
import type { ModelSpec } from '../../src/models/config.js';

const KEY = 'sk-tested-upstream-key-777';

for (const db of testDatabases()) {
  describe(`admin API: testing a deployment (${db})`, () => {
    let t: TestApp;
    let c: Callers;
    let up: ScriptedUpstream;
    before(async () => {
      up = await startScriptedUpstream({ apiKey: KEY });
      const models = [{ name: 'from-code', provider: 'openai-compatible', base_url: up.url, type: 'text' }] as ModelSpec[];
      t = await buildTestApp({ db, models });
      c = await callers(t);
    });
    after(async () => {
      await t.close();
      await up.close();
    });

    const call = (method: 'POST' | 'DELETE', url: string, payload?: unknown) =>
      t.app.inject({ method, url: `/v1/admin${url}`, headers: c.operator, ...(payload !== undefined ? { payload: payload as never } : {}) });
    const add = async (entry: Record<string, unknown>) => {
      const res = await call('POST', '/models', { entry });
      assert.equal(res.statusCode, 201, res.body);
    };
    const records = async () =>
      Number(
        (
          await t.core.db.db
            .selectFrom('usage_records')
            .select((eb) => eb.fn.countAll<number>().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      );

    test('ok: the answer and the latency; the upstream got the decrypted key; nothing charged, no breaker touched', async () => {
      await add({ name: 'good', provider: 'openai-compatible', base_url: up.url, upstream_model: 'up-good', api_key: KEY });
      up.reset();
      up.script({ text: 'OK from upstream' });
      const before = await records();
      const res = await call('POST', '/models/good/test', {});
      assert.equal(res.statusCode, 200, res.body);
      const d = res.json().data;
      assert.equal(d.ok, true, res.body);
      assert.equal(d.model, 'good');
      assert.equal(d.deployment, 'good');
      assert.equal(d.output, 'OK from upstream');
      assert.ok(Number.isInteger(d.latency_ms) && d.latency_ms >= 0);
      assert.equal(d.error, undefined);
      assert.equal(up.requests.length, 1);
      assert.equal(up.requests[0]!.headers.authorization, `Bearer ${KEY}`);
      assert.equal(up.requests[0]!.body.model, 'up-good');
      await t.services.usage.flush();
      assert.equal(await records(), before, 'never charged');
      // no body at all asks for the first deployment too
      up.script({ text: 'again' });
      const bare = await t.app.inject({ method: 'POST', url: '/v1/admin/models/good/test', headers: c.operator });
      assert.equal(bare.statusCode, 200, bare.body);
      assert.equal(bare.json().data.output, 'again');
    });

    test('two deployments, two upstreams that each take only their own key: removed, reordered, renamed, each is tested with its own key or none', async () => {
      const KEY2 = 'sk-second-upstream-key-888';
      const up2 = await startScriptedUpstream({ apiKey: KEY2 });
      try {
        const one = { id: 'tk-1', provider: 'openai-compatible', base_url: up.url };
        const two = { id: 'tk-2', provider: 'openai-compatible', base_url: up2.url };
        await add({
          name: 'two-keys',
          deployments: [
            { ...one, api_key: KEY },
            { ...two, api_key: KEY2 },
          ],
        });
        const tested = async (id: string) => {
          up.reset();
          up2.reset();
          const res = await call('POST', '/models/two-keys/test', { deployment: id });
          assert.equal(res.statusCode, 200, res.body);
          const seen = [...up.requests, ...up2.requests].map((r) => r.headers.authorization);
          return { ok: res.json().data.ok as boolean, code: res.json().data.error?.code as string | undefined, seen };
        };
        const put = async (deployments: unknown[]) => {
          const res = await t.app.inject({ method: 'PUT', url: '/v1/admin/models/two-keys', headers: c.operator, payload: { entry: { deployments } } });
          assert.equal(res.statusCode, 200, res.body);
        };
        assert.deepEqual(await tested('tk-1'), { ok: true, code: undefined, seen: [`Bearer ${KEY}`] });
        assert.deepEqual(await tested('tk-2'), { ok: true, code: undefined, seen: [`Bearer ${KEY2}`] });
        // tk-1 removed: tk-2 (now first) keeps its own key; by index it would have taken tk-1's and been refused
        await put([two]);
        assert.deepEqual(await tested('tk-2'), { ok: true, code: undefined, seen: [`Bearer ${KEY2}`] });
        // back (typed again) and reordered with no key given: each keeps its own
        await put([two, { ...one, api_key: KEY }]);
        await put([one, two]);
        assert.deepEqual(await tested('tk-1'), { ok: true, code: undefined, seen: [`Bearer ${KEY}`] });
        assert.deepEqual(await tested('tk-2'), { ok: true, code: undefined, seen: [`Bearer ${KEY2}`] });
        // a new id where tk-1 was: no key sent (the upstream refuses), tk-2 untouched
        await put([{ ...one, id: 'tk-new' }, two]);
        assert.deepEqual(await tested('tk-new'), { ok: false, code: 'upstream_auth_failed', seen: [undefined] });
        assert.deepEqual(await tested('tk-2'), { ok: true, code: undefined, seen: [`Bearer ${KEY2}`] });
        assert.equal((await call('DELETE', '/models/two-keys')).statusCode, 200);
      } finally {
        await up2.close();
      }
    });

    test('a model not stored here (given by code, like a file model) is tested too; its key missing: ok:false with the upstream refusal', async () => {
      up.reset();
      const res = await call('POST', '/models/from-code/test', {});
      assert.equal(res.statusCode, 200, res.body);
      const d = res.json().data;
      assert.equal(d.ok, false);
      assert.equal(d.error.code, 'upstream_auth_failed');
      assert.equal(up.requests.length, 1);
    });

    test('refused connection: ok:false with the error', async () => {
      const port = await freePort();
      await add({ name: 'refused', provider: 'openai-compatible', base_url: `http://127.0.0.1:${port}/v1`, api_key: KEY });
      const res = await call('POST', '/models/refused/test', {});
      assert.equal(res.statusCode, 200, res.body);
      const d = res.json().data;
      assert.equal(d.ok, false);
      assert.equal(typeof d.error.code, 'string');
      assert.match(d.error.message, /refused|connect|unavailable/i);
      assert.equal(d.output, undefined);
    });

    test('garbage: ok:false with the error', async () => {
      await add({ name: 'garbage', provider: 'openai-compatible', base_url: up.url, api_key: KEY });
      up.reset();
      up.script({ rawJson: '<html>not json</html>' });
      const res = await call('POST', '/models/garbage/test', {});
      assert.equal(res.statusCode, 200, res.body);
      const d = res.json().data;
      assert.equal(d.ok, false, res.body);
      assert.ok(d.error.message.length > 0);
    });

    test("a hang: ok:false with a timeout within the deployment's first_byte_ms", async () => {
      await add({ name: 'hangs', provider: 'openai-compatible', base_url: up.url, api_key: KEY, timeouts: { first_byte_ms: 500 } });
      up.reset();
      up.script({ hang: true });
      const stalls = stallWatch();
      const t0 = performance.now();
      const res = await call('POST', '/models/hangs/test', {});
      const took = performance.now() - t0;
      assert.equal(res.statusCode, 200, res.body);
      const d = res.json().data;
      assert.equal(d.ok, false);
      assert.equal(d.error.code, 'upstream_timeout');
      assert.match(d.error.message, /no answer within 500 ms/);
      assert.ok(d.latency_ms >= 450, `latency ${d.latency_ms}`);
      assert.ok(took < 500 + 1500 + stalls.stop(), `took ${took} ms`);
    });

    test('embeddings: a summary of the vector', async () => {
      await add({ name: 'emb', type: 'embeddings', provider: 'openai-compatible', base_url: up.url, api_key: KEY });
      up.reset();
      const res = await call('POST', '/models/emb/test', {});
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.json().data.ok, true, res.body);
      assert.match(res.json().data.output, /^1 vector of \d+ dimensions$/);
      assert.equal(up.requests[0]!.headers.authorization, `Bearer ${KEY}`);
    });
  });
}
