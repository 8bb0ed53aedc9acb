import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { parseModelConfig } from '../../src/models/config.js';
import { callers, type Callers } from './helpers.js';

describe('admin API: the requests and one request, only for operators; no secret in the log', () => {
  let up: ScriptedUpstream;
  let t: TestApp;
  let who: Callers;
  let key: string;
  before(async () => {
    up = await startScriptedUpstream();
    process.env.P25_UPSTREAM_KEY = 'sk-upstream-secret-0123456789';
    const models = parseModelConfig(`
models:
  - { name: m, provider: openai-compatible, base_url: ${up.url}, api_key_env: P25_UPSTREAM_KEY, retries: 0 }
`).models;
    t = await buildTestApp({ models });
    who = await callers(t);
    key = await t.inferenceKey('alice');
    up.script({ status: 401, errorMessage: 'Incorrect API key provided: sk-upstream-secret-0123456789' });
    await t.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${key}`, 'x-request-id': 'req_sec_1' },
      payload: { model: 'm', messages: [{ role: 'user', content: 'hi' }] },
    });
    // a refusal before the key is known is not logged (nobody to list it under)
    await t.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { authorization: 'Bearer sk-nope', 'x-request-id': 'req_sec_nokey' }, payload: {} });
  });
  after(async () => {
    delete process.env.P25_UPSTREAM_KEY;
    await t?.close();
    await up.close();
  });

  test('no credentials 401; a member, an org admin and a key without the admin scope 403', async () => {
    for (const url of ['/v1/admin/requests/req_sec_1', '/v1/admin/requests?status=error', '/v1/admin/requests.csv']) {
      const none = await t.app.inject({ method: 'GET', url });
      assert.equal(none.statusCode, 401, url);
      for (const h of [who.member, who.orgAdmin, who.plainKey]) {
        const res = await t.app.inject({ method: 'GET', url, headers: h });
        assert.equal(res.statusCode, 403, `${url}: ${res.body}`);
      }
      assert.equal((await t.app.inject({ method: 'GET', url, headers: who.operator })).statusCode, 200, url);
    }
  });

  test('neither the inference key nor the upstream key is in the log rows or the answers; an unknown key is not logged', async () => {
    await t.runtime.requestLog.flush();
    const rows = await t.core.db.db.selectFrom('request_log').selectAll().execute();
    assert.deepEqual(
      rows.map((r) => r.request_id),
      ['req_sec_1'],
    );
    const everything =
      JSON.stringify(rows) +
      (await t.app.inject({ method: 'GET', url: '/v1/admin/requests.csv', headers: who.operator })).body +
      (await t.app.inject({ method: 'GET', url: '/v1/admin/requests/req_sec_1', headers: who.operator })).body;
    assert.ok(!everything.includes(key), 'the inference key');
    assert.ok(!everything.includes('sk-upstream-secret-0123456789'), 'the upstream key');
    assert.ok(rows[0]!.status >= 400);
  });
});
