// Models and deployments at run time (issue 25, admin contract part A): add, list, edit, disable, enable and remove
// stored models through /v1/admin/models; the database and the API agree, the engine gets the decrypted key, the
// model file's models are listed read-only.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { bearer, callers, type Callers } from './helpers.js';
import { SecretBox } from '../../src/platform/secrets.js';

const SECRET = 'sk-upstream-first-secret-0001';
const SECRET2 = 'sk-upstream-second-secret-0002';

for (const db of testDatabases()) {
  describe(`admin API: stored models, listed, added, changed, disabled and removed (${db})`, () => {
    let t: TestApp;
    let c: Callers;
    let up: ScriptedUpstream;
    let key: string;
    let dir: string;
    let file: string;
    before(async () => {
      up = await startScriptedUpstream();
      dir = mkdtempSync(join(tmpdir(), 'portico-models-'));
      file = join(dir, 'models.yaml');
      writeFileSync(file, `models:\n  - name: filemodel\n    provider: openai-compatible\n    base_url: ${up.url}\n    upstream_model: file-up\n`);
      t = await buildTestApp({ db, env: { PORTICO_CONFIG: file, PORTICO_SECRETS_KEY: 'secrets-key-0123456789abcdef0123456789abcdef' } });
      c = await callers(t);
      key = await t.inferenceKey('carl');
    });
    after(async () => {
      await t.close();
      await up.close();
      rmSync(dir, { recursive: true, force: true });
    });

    const call = (method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: unknown) =>
      t.app.inject({ method, url: `/v1/admin${url}`, headers: c.operator, ...(payload !== undefined ? { payload: payload as never } : {}) });
    const chat = (model: string) =>
      t.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(key), payload: { model, messages: [{ role: 'user', content: 'hi' }] } });
    const row = (name: string) => t.core.db.db.selectFrom('stored_models').selectAll().where('name', '=', name).executeTakeFirst();
    const listed = async (name: string) => ((await call('GET', '/models')).json().data.list as any[]).find((m) => m.name === name);

    test('the list: the file model read-only from the file, built-in models read-only, every field of the contract', async () => {
      const res = await call('GET', '/models');
      assert.equal(res.statusCode, 200, res.body);
      const list = res.json().data.list as any[];
      const file = list.find((m) => m.name === 'filemodel');
      assert.deepEqual(file, {
        name: 'filemodel',
        type: 'text',
        source: 'file',
        read_only: true,
        enabled: true,
        entry: { name: 'filemodel', provider: 'openai-compatible', base_url: up.url, upstream_model: 'file-up' },
        secrets: {},
        updated_at: null,
        updated_by: null,
        error: null,
      });
      const tts = list.find((m) => m.name === 'tts-1');
      assert.equal(tts.source, 'builtin');
      assert.equal(tts.read_only, true);
      assert.equal(tts.type, 'speech');
    });

    test('added: 201 with the item, the row holds the key sealed, /v1 serves it with the decrypted key as Bearer', async () => {
      const entry = { name: 'stored-a', provider: 'openai-compatible', base_url: up.url, upstream_model: 'up-a', api_key: SECRET, pricing: { input_per_million: 1 } };
      const res = await call('POST', '/models', { entry });
      assert.equal(res.statusCode, 201, res.body);
      const item = res.json().data;
      assert.equal(item.name, 'stored-a');
      assert.equal(item.source, 'stored');
      assert.equal(item.read_only, false);
      assert.equal(item.enabled, true);
      assert.equal(item.type, 'text');
      assert.deepEqual(item.entry, { name: 'stored-a', provider: 'openai-compatible', base_url: up.url, upstream_model: 'up-a', pricing: { input_per_million: 1 } });
      assert.deepEqual(item.secrets, { api_key: true });
      assert.equal(item.updated_by, 'olga');
      assert.ok(Math.abs(item.updated_at - Date.now() / 1000) < 60);
      assert.equal(item.error, null);
      // the database agrees, and holds the key only sealed (under PORTICO_SECRETS_KEY)
      const r = await row('stored-a');
      assert.ok(r);
      assert.deepEqual(JSON.parse(r.entry), item.entry);
      assert.equal(r.enabled, true);
      assert.ok(!JSON.stringify(r).includes(SECRET), 'no clear secret in the row');
      const sealed = JSON.parse(r.secrets).api_key as string;
      assert.equal(new SecretBox(t.config.secretsKey.material).open(sealed, 'model:stored-a\u0000api_key'), SECRET);
      assert.deepEqual(await listed('stored-a'), item);
      up.reset();
      const served = await chat('stored-a');
      assert.equal(served.statusCode, 200, served.body);
      assert.equal(up.requests.at(-1)!.headers.authorization, `Bearer ${SECRET}`);
      assert.equal(up.requests.at(-1)!.body.model, 'up-a');
      // GET /v1/models lists it too
      const models = await t.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(key) });
      assert.ok((models.json().data as any[]).some((m) => m.id === 'stored-a'));
    });

    test('edited: api_key left out keeps it, a new one replaces it, null removes it; each change served at once', async () => {
      const base = { name: 'stored-a', provider: 'openai-compatible', base_url: up.url, upstream_model: 'up-b' };
      let res = await call('PUT', '/models/stored-a', { entry: base });
      assert.equal(res.statusCode, 200, res.body);
      assert.deepEqual(res.json().data.secrets, { api_key: true });
      assert.deepEqual(res.json().data.entry, base);
      up.reset();
      assert.equal((await chat('stored-a')).statusCode, 200);
      assert.equal(up.requests.at(-1)!.headers.authorization, `Bearer ${SECRET}`, 'kept');
      assert.equal(up.requests.at(-1)!.body.model, 'up-b', 'the new keys serve at once');

      res = await call('PUT', '/models/stored-a', { entry: { ...base, api_key: SECRET2 } });
      assert.equal(res.statusCode, 200, res.body);
      up.reset();
      assert.equal((await chat('stored-a')).statusCode, 200);
      assert.equal(up.requests.at(-1)!.headers.authorization, `Bearer ${SECRET2}`, 'replaced');

      // the name may be left out of a PUT: it is the path's
      const { name: _n, ...noName } = base;
      res = await call('PUT', '/models/stored-a', { entry: { ...noName, api_key: null } });
      assert.equal(res.statusCode, 200, res.body);
      assert.deepEqual(res.json().data.secrets, {});
      assert.deepEqual(JSON.parse((await row('stored-a'))!.secrets), {});
      up.reset();
      assert.equal((await chat('stored-a')).statusCode, 200);
      assert.equal(up.requests.at(-1)!.headers.authorization, undefined, 'removed: no key sent');
    });

    test('disabled: 404 model_not_found to a /v1 client, listed enabled:false; enabled again: served', async () => {
      let res = await call('POST', '/models/stored-a/disable');
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.json().data.enabled, false);
      assert.equal((await row('stored-a'))!.enabled, false);
      const refused = await chat('stored-a');
      assert.equal(refused.statusCode, 404, refused.body);
      assert.equal(refused.json().error.code, 'model_not_found');
      assert.equal((await listed('stored-a')).enabled, false);
      // disabling twice changes nothing
      assert.equal((await call('POST', '/models/stored-a/disable')).json().data.enabled, false);
      res = await call('POST', '/models/stored-a/enable');
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.json().data.enabled, true);
      assert.equal((await chat('stored-a')).statusCode, 200);
    });

    test('removed: gone from the list, the database and /v1', async () => {
      const res = await call('DELETE', '/models/stored-a');
      assert.equal(res.statusCode, 200, res.body);
      assert.deepEqual(res.json().data, { name: 'stored-a', deleted: true });
      assert.equal(await row('stored-a'), undefined);
      assert.equal(await listed('stored-a'), undefined);
      assert.equal((await chat('stored-a')).statusCode, 404);
      assert.equal((await call('DELETE', '/models/stored-a')).statusCode, 404, 'unknown now');
    });

    test('every change is audited, secrets only as (set)/(changed)/(removed)', async () => {
      const audit = (await call('GET', '/audit?target=stored-a&per_page=100')).json().data.list as any[];
      assert.deepEqual(audit.map((a) => a.action).reverse(), ['model.create', 'model.update', 'model.update', 'model.update', 'model.disable', 'model.enable', 'model.remove']);
      const [create, keep, change, remove] = [...audit].reverse();
      assert.equal(create.actor, 'olga');
      assert.equal(create.before, null);
      assert.equal(create.after.entry.api_key, '(set)');
      assert.equal(keep.after.entry.api_key, '(set)');
      assert.equal(keep.after.entry.upstream_model, 'up-b');
      assert.equal(keep.before.entry.upstream_model, 'up-a');
      assert.equal(change.after.entry.api_key, '(changed)');
      assert.equal(remove.after.entry.api_key, '(removed)');
      const text = JSON.stringify(audit);
      assert.ok(!text.includes(SECRET) && !text.includes(SECRET2));
    });

    test('a model with deployments: each deployment its own key, listed by place; a deployment can be tested by id', async () => {
      const entry = {
        name: 'stored-d',
        routing: 'weighted',
        deployments: [
          { id: 'sd-1', provider: 'openai-compatible', base_url: up.url, api_key: 'sk-dep-one-0000001' },
          { id: 'sd-2', provider: 'openai-compatible', base_url: up.url, api_key: 'sk-dep-two-0000002', weight: 0 },
        ],
      };
      const res = await call('POST', '/models', { entry });
      assert.equal(res.statusCode, 201, res.body);
      assert.deepEqual(res.json().data.secrets, { 'deployments.sd-1.api_key': true, 'deployments.sd-2.api_key': true });
      assert.equal(res.json().data.entry.deployments[0].api_key, undefined);
      up.reset();
      const tested = await call('POST', '/models/stored-d/test', { deployment: 'sd-2' });
      assert.equal(tested.statusCode, 200, tested.body);
      assert.equal(tested.json().data.ok, true, tested.body);
      assert.equal(tested.json().data.deployment, 'sd-2');
      assert.equal(up.requests.at(-1)!.headers.authorization, 'Bearer sk-dep-two-0000002');
      up.reset();
      assert.equal((await chat('stored-d')).statusCode, 200);
      assert.equal(up.requests.at(-1)!.headers.authorization, 'Bearer sk-dep-one-0000001', 'weight 0: the first deployment serves');
      // an edit that leaves the keys out keeps both, each at its place
      const { deployments } = entry;
      const edited = await call('PUT', '/models/stored-d', {
        entry: { name: 'stored-d', deployments: deployments.map(({ api_key: _k, ...d }) => ({ ...d, timeouts: { first_byte_ms: 5000 } })) },
      });
      assert.equal(edited.statusCode, 200, edited.body);
      assert.deepEqual(edited.json().data.secrets, { 'deployments.sd-1.api_key': true, 'deployments.sd-2.api_key': true });
      const sealed = JSON.parse((await row('stored-d'))!.secrets);
      assert.deepEqual(Object.keys(sealed).sort(), ['deployment:sd-1', 'deployment:sd-2'], 'stored by deployment id');
      up.reset();
      assert.equal((await chat('stored-d')).statusCode, 200);
      assert.equal(up.requests.at(-1)!.headers.authorization, 'Bearer sk-dep-one-0000001');
      assert.equal((await call('DELETE', '/models/stored-d')).statusCode, 200);
    });

    test('keys follow their deployment by id: one removed, the list reordered, a new id, each deployment sends its own key', async () => {
      const A = 'sk-key-of-k1-aaaaaaaa';
      const B = 'sk-key-of-k2-bbbbbbbb';
      const dep = (id: string, k?: string) => ({ id, provider: 'openai-compatible', base_url: up.url, upstream_model: `up-${id}`, ...(k ? { api_key: k } : {}) });
      const sent = async (id: string) => {
        up.reset();
        const res = await call('POST', '/models/stored-k/test', { deployment: id });
        assert.equal(res.json().data.ok, true, res.body);
        assert.equal(up.requests.at(-1)!.body.model, `up-${id}`);
        return up.requests.at(-1)!.headers.authorization;
      };
      const put = async (deployments: unknown[]) => {
        const res = await call('PUT', '/models/stored-k', { entry: { name: 'stored-k', deployments } });
        assert.equal(res.statusCode, 200, res.body);
        return res.json().data.secrets;
      };
      assert.equal((await call('POST', '/models', { entry: { name: 'stored-k', deployments: [dep('k-1', A), dep('k-2', B)] } })).statusCode, 201);
      assert.equal(await sent('k-1'), `Bearer ${A}`);
      assert.equal(await sent('k-2'), `Bearer ${B}`);
      // the first removed: the one left (now first) keeps ITS key, not the removed one's
      assert.deepEqual(await put([dep('k-2')]), { 'deployments.k-2.api_key': true });
      assert.equal(await sent('k-2'), `Bearer ${B}`);
      up.reset();
      assert.equal((await chat('stored-k')).statusCode, 200);
      assert.equal(up.requests.at(-1)!.headers.authorization, `Bearer ${B}`);
      // k-1 back, after k-2, its key typed again; then the list reordered with no key given: each keeps its own
      assert.deepEqual(await put([dep('k-2'), dep('k-1', A)]), { 'deployments.k-1.api_key': true, 'deployments.k-2.api_key': true });
      assert.deepEqual(await put([dep('k-1'), dep('k-2')]), { 'deployments.k-1.api_key': true, 'deployments.k-2.api_key': true });
      assert.equal(await sent('k-1'), `Bearer ${A}`);
      assert.equal(await sent('k-2'), `Bearer ${B}`);
      // a new id where k-1 was, no key typed: it gets none (not k-1's), k-2 keeps its own
      assert.deepEqual(await put([dep('k-3'), dep('k-2')]), { 'deployments.k-2.api_key': true });
      assert.equal(await sent('k-3'), undefined, 'no key sent for a new deployment');
      assert.equal(await sent('k-2'), `Bearer ${B}`);
      // a renamed id is a new deployment too: k-2's key does not follow to k-2b
      assert.deepEqual(await put([dep('k-3'), dep('k-2b')]), {});
      assert.equal(await sent('k-2b'), undefined);
      const audit = (await call('GET', '/audit?target=stored-k&per_page=100')).json().data.list as any[];
      assert.equal(audit[0].before.entry.deployments[1].api_key, '(set)', 'the audit marks the key at its deployment (k-2)');
      assert.equal(audit[0].after.entry.deployments[1].api_key, undefined, 'k-2b has none');
      assert.ok(!JSON.stringify(audit).includes(A) && !JSON.stringify(audit).includes(B));
      assert.equal((await call('DELETE', '/models/stored-k')).statusCode, 200);
    });

    test('a key follows only to the same upstream origin: base_url moved elsewhere is refused until the key is typed again or removed', async () => {
      const other = await startScriptedUpstream();
      try {
        const K = 'sk-key-for-first-origin-1';
        const K2 = 'sk-key-for-other-origin-2';
        assert.equal((await call('POST', '/models', { entry: { name: 'stored-o', provider: 'openai-compatible', base_url: up.url, api_key: K } })).statusCode, 201);
        // the same origin, another path: the key stays
        const samePlace = await call('PUT', '/models/stored-o', { entry: { provider: 'openai-compatible', base_url: `${up.url}/` } });
        assert.equal(samePlace.statusCode, 200, samePlace.body);
        assert.deepEqual(samePlace.json().data.secrets, { api_key: true });
        // another origin, no key typed: 400 naming the place, nothing changed, nothing sent to the other upstream
        const moved = await call('PUT', '/models/stored-o', { entry: { provider: 'openai-compatible', base_url: other.url } });
        assert.equal(moved.statusCode, 400, moved.body);
        assert.equal(moved.json().meta.error, 'invalid_model_entry');
        assert.match(moved.json().meta.message, /^'entry\.api_key': the stored api_key was given for http:\/\/127\.0\.0\.1:\d+, and the base_url now goes to /);
        assert.ok(moved.json().meta.message.includes(new URL(other.url).origin), moved.body);
        assert.ok(!moved.body.includes(K));
        assert.equal(JSON.parse((await row('stored-o'))!.entry).base_url, `${up.url}/`);
        assert.equal(other.requests.length, 0);
        // null: moved without a key, and the answer says no key is stored
        const bare = await call('PUT', '/models/stored-o', { entry: { provider: 'openai-compatible', base_url: other.url, api_key: null } });
        assert.equal(bare.statusCode, 200, bare.body);
        assert.deepEqual(bare.json().data.secrets, {});
        other.reset();
        assert.equal((await call('POST', '/models/stored-o/test', {})).json().data.ok, true);
        assert.equal(other.requests.at(-1)!.headers.authorization, undefined);
        // typed again for the new origin: sent there
        const typed = await call('PUT', '/models/stored-o', { entry: { provider: 'openai-compatible', base_url: other.url, api_key: K2 } });
        assert.deepEqual(typed.json().data.secrets, { api_key: true });
        other.reset();
        assert.equal((await call('POST', '/models/stored-o/test', {})).json().data.ok, true);
        assert.equal(other.requests.at(-1)!.headers.authorization, `Bearer ${K2}`);
        // a deployment of a list: the same rule, by its id
        const listed = await call('PUT', '/models/stored-o', {
          entry: { deployments: [{ id: 'o-1', provider: 'openai-compatible', base_url: other.url, api_key: K2 }] },
        });
        assert.deepEqual(listed.json().data.secrets, { 'deployments.o-1.api_key': true });
        const depMoved = await call('PUT', '/models/stored-o', { entry: { deployments: [{ id: 'o-1', provider: 'openai-compatible', base_url: up.url }] } });
        assert.equal(depMoved.statusCode, 400, depMoved.body);
        assert.match(depMoved.json().meta.message, /'entry\.deployments\.0\.api_key': the stored api_key was given for/);
        assert.equal((await call('DELETE', '/models/stored-o')).statusCode, 200);
      } finally {
        await other.close();
      }
    });

    test('the file later takes a stored name: the file model is served, the stored one listed with why; given up again: the stored one serves', async () => {
      const made = await call('POST', '/models', { entry: { name: 'later', provider: 'openai-compatible', base_url: up.url, upstream_model: 'stored-up', api_key: SECRET } });
      assert.equal(made.statusCode, 201, made.body);
      up.reset();
      assert.equal((await chat('later')).statusCode, 200);
      assert.equal(up.requests.at(-1)!.body.model, 'stored-up');
      const fileText = `models:\n  - name: filemodel\n    provider: openai-compatible\n    base_url: ${up.url}\n    upstream_model: file-up\n`;
      writeFileSync(file, `${fileText}  - name: later\n    provider: openai-compatible\n    base_url: ${up.url}\n    upstream_model: file-later\n`);
      assert.equal((await t.runtime.reloadModels('test')).ok, true);
      up.reset();
      assert.equal((await chat('later')).statusCode, 200);
      assert.equal(up.requests.at(-1)!.body.model, 'file-later', 'the file wins');
      assert.equal(up.requests.at(-1)!.headers.authorization, undefined, "the stored key is not the file model's");
      const list = (await call('GET', '/models')).json().data.list as any[];
      assert.deepEqual(
        list.filter((m) => m.name === 'later').map((m) => [m.source, m.error]),
        [
          ['file', null],
          ['stored', "a model of the model file has the name 'later' and is served instead"],
        ],
      );
      writeFileSync(file, fileText);
      assert.equal((await t.runtime.reloadModels('test')).ok, true);
      up.reset();
      const back = await chat('later');
      assert.equal(back.statusCode, 200, back.body);
      assert.equal(up.requests.at(-1)!.body.model, 'stored-up', 'the stored model serves again');
      assert.equal(up.requests.at(-1)!.headers.authorization, `Bearer ${SECRET}`);
      assert.equal((await call('DELETE', '/models/later')).statusCode, 200);
    });
  });
}
