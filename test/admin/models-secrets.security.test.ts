// Models at run time: a secret typed into the admin API (an upstream api_key) never comes back: not in any answer
// (the admin API's, a /v1 client's, an upstream error that repeats it), not in the audit log, not in the log output
// (captured at trace level), not in the database row in clear. (Who may call: test/admin/security.test.ts, ROUTES.)
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { bearer, callers, type Callers } from './helpers.js';
import type { ModelSpec } from '../../src/models/config.js';
import { SecretBox } from '../../src/platform/secrets.js';

const FIRST = 'sk-never-shown-first-4242424242';
const SECOND = 'sk-never-shown-second-5353535353';

for (const db of testDatabases()) {
  describe(`admin API: stored model secrets are never shown (${db})`, () => {
    let t: TestApp;
    let c: Callers;
    let up: ScriptedUpstream;
    const log: string[] = [];
    before(async () => {
      up = await startScriptedUpstream();
      const sink = new Writable({ write: (chunk, _e, cb) => (log.push(chunk.toString()), cb()) });
      t = await buildTestApp({
        db,
        models: [{ name: 'base', provider: 'openai-compatible', base_url: up.url, type: 'text' }] as ModelSpec[],
        logDestination: sink,
        env: { LOG_LEVEL: 'trace' },
      });
      c = await callers(t);
    });
    after(async () => {
      await t.close();
      await up.close();
    });

    test('every answer, the audit log, the log output and the rows hold no secret in clear', async () => {
      const bodies: string[] = [];
      const call = async (method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: unknown) => {
        const res = await t.app.inject({ method, url: `/v1/admin${url}`, headers: c.operator, ...(payload !== undefined ? { payload: payload as never } : {}) });
        bodies.push(res.body, JSON.stringify(res.headers));
        assert.ok(res.statusCode < 300, `${method} ${url}: ${res.body}`);
        return res;
      };
      const entry = { name: 'secretive', provider: 'openai-compatible', base_url: up.url };
      await call('POST', '/models', { entry: { ...entry, api_key: FIRST } });
      // an upstream that repeats the key in its error: redacted before it reaches the operator or a client
      up.script({ status: 500, errorMessage: `invalid key ${FIRST}` });
      const tested = await call('POST', '/models/secretive/test', {});
      assert.equal(tested.json().data.ok, false);
      const key = await t.inferenceKey('sue');
      up.script({ status: 400, errorMessage: `the key ${FIRST} is not allowed here` });
      const client = await t.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: bearer(key),
        payload: { model: 'secretive', messages: [{ role: 'user', content: 'x' }] },
      });
      bodies.push(client.body);
      assert.equal(client.statusCode, 400, client.body);
      await call('PUT', '/models/secretive', { entry });
      await call('PUT', '/models/secretive', { entry: { ...entry, api_key: SECOND } });
      await call('POST', '/models/secretive/disable');
      await call('POST', '/models/secretive/enable');
      await call('GET', '/models');
      const row = await t.core.db.db.selectFrom('stored_models').selectAll().where('name', '=', 'secretive').executeTakeFirstOrThrow();
      assert.notEqual(JSON.parse(row.secrets).api_key, undefined, 'a key is stored');
      await call('GET', '/audit?per_page=100');
      await call('DELETE', '/models/secretive');
      const audit = await t.core.db.db.selectFrom('audit_log').selectAll().execute();
      assert.ok(audit.length >= 5);
      for (const [what, text] of [
        ['answers', bodies.join('\n')],
        ['the audit log', JSON.stringify(audit)],
        ['the log output', log.join('')],
        ['the stored row', JSON.stringify(row)],
      ] as const) {
        for (const secret of [FIRST, SECOND]) assert.ok(!text.includes(secret), `${what} hold ${secret}`);
      }
      assert.ok(log.length > 0, 'the log was captured');
      assert.ok(JSON.stringify(audit).includes('(changed)'), 'the audit says the key changed');
    });

    const admin = async (method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: unknown) =>
      t.app.inject({ method, url: `/v1/admin${url}`, headers: c.operator, ...(payload !== undefined ? { payload: payload as never } : {}) });
    const dep = (id: string, k?: string) => ({ id, provider: 'openai-compatible', base_url: up.url, upstream_model: `up-${id}`, ...(k ? { api_key: k } : {}) });
    const rowOf = (name: string) => t.core.db.db.selectFrom('stored_models').selectAll().where('name', '=', name).executeTakeFirstOrThrow();
    /** the table changed behind the API's back, read again (as a change anywhere makes every instance do) */
    const reread = async (name: string) => {
      assert.equal((await admin('POST', `/models/${name}/disable`)).statusCode, 200);
      assert.equal((await admin('POST', `/models/${name}/enable`)).statusCode, 200);
    };

    test("a sealed key is bound to its deployment's id: moved in the row to another deployment, it does not open and nothing is sent", async () => {
      assert.equal((await admin('POST', '/models', { entry: { name: 'bound', deployments: [dep('b-1', FIRST), dep('b-2')] } })).statusCode, 201);
      const row = await rowOf('bound');
      const sealed = JSON.parse(row.secrets) as Record<string, string>;
      assert.deepEqual(Object.keys(sealed), ['deployment:b-1']);
      await t.core.db.db
        .updateTable('stored_models')
        .set({ secrets: JSON.stringify({ 'deployment:b-2': sealed['deployment:b-1'] }) })
        .where('name', '=', 'bound')
        .execute();
      await reread('bound');
      const item = ((await admin('GET', '/models')).json().data.list as any[]).find((m) => m.name === 'bound');
      assert.match(item.error, /stored api_key cannot be decrypted \(it does not decrypt \(altered, or moved from another record\)\)/);
      up.reset();
      const tested = await admin('POST', '/models/bound/test', { deployment: 'b-2' });
      assert.equal(tested.json().data.ok, false, tested.body);
      assert.ok(!up.requests.some((r) => JSON.stringify(r.headers).includes(FIRST)), 'the key was not sent for another deployment');
      assert.equal((await admin('DELETE', '/models/bound')).statusCode, 200);
    });

    test('a row of the earlier format (keys by index) is still read by the ids its entry had; a change keeps each key with its id', async () => {
      assert.equal((await admin('POST', '/models', { entry: { name: 'older', deployments: [dep('o-1'), dep('o-2')] } })).statusCode, 201);
      const box = new SecretBox(t.config.secretsKey.material);
      // as the earlier format wrote it: the place by index, sealed under that place
      const secrets = {
        'deployments.0.api_key': box.seal(FIRST, 'model:older\u0000deployments.0.api_key'),
        'deployments.1.api_key': box.seal(SECOND, 'model:older\u0000deployments.1.api_key'),
      };
      await t.core.db.db
        .updateTable('stored_models')
        .set({ secrets: JSON.stringify(secrets) })
        .where('name', '=', 'older')
        .execute();
      await reread('older');
      const item = ((await admin('GET', '/models')).json().data.list as any[]).find((m) => m.name === 'older');
      assert.deepEqual([item.error, item.secrets], [null, { 'deployments.o-1.api_key': true, 'deployments.o-2.api_key': true }]);
      const sent = async (id: string) => {
        up.reset();
        const res = await admin('POST', '/models/older/test', { deployment: id });
        assert.equal(res.json().data.ok, true, res.body);
        return up.requests.at(-1)!.headers.authorization;
      };
      assert.equal(await sent('o-2'), `Bearer ${SECOND}`);
      // the first removed: the other keeps its own key, written by id from now on
      const edited = await admin('PUT', '/models/older', { entry: { deployments: [dep('o-2')] } });
      assert.deepEqual(edited.json().data.secrets, { 'deployments.o-2.api_key': true });
      assert.deepEqual(Object.keys(JSON.parse((await rowOf('older')).secrets)), ['deployment:o-2']);
      assert.equal(await sent('o-2'), `Bearer ${SECOND}`);
      assert.equal((await admin('DELETE', '/models/older')).statusCode, 200);
    });
  });
}
