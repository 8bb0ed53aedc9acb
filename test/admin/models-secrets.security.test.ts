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
  });
}
