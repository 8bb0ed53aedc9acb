import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { bearer } from './helpers.js';

describe('admin API: PUT /orgs/{org_id}/members/{user_id}: refusals', () => {
  let idp: TestApp;
  let own: TestApp;
  before(async () => {
    // JWT_SECRET set: tokens come from elsewhere (an identity provider of the operator's), which owns the roles
    idp = await buildTestApp({ models: [] });
    own = await buildTestApp({ models: [], env: { JWT_SECRET: '' } });
    for (const t of [idp, own]) await t.core.operators.add('olga', 'cli', 'test');
  });
  after(async () => {
    await idp.close();
    await own.close();
  });
  const put = async (t: TestApp, url: string, payload: unknown, lang?: string) =>
    t.app.inject({ method: 'PUT', url, headers: { ...bearer(await t.token('olga')), ...(lang ? { 'accept-language': lang } : {}) }, payload: payload as never });

  test('where the identity provider issues roles: 409 roles_from_identity_provider (English and Chinese), nothing recorded', async () => {
    const res = await put(idp, '/v1/admin/orgs/acme/members/mia', { role: 'admin' });
    assert.equal(res.statusCode, 409);
    assert.equal(res.json().meta.error, 'roles_from_identity_provider');
    assert.match(res.json().meta.message, /identity provider/);
    assert.ok(res.json().meta.request_id);
    const zh = await put(idp, '/v1/admin/orgs/acme/members/mia', { role: 'admin' }, 'zh-CN');
    assert.match(zh.json().meta.message, /身份提供方/);
    const rows = await idp.core.db.db.selectFrom('org_members').selectAll().execute();
    assert.deepEqual(rows, []);
    const audit = await idp.core.db.db.selectFrom('audit_log').selectAll().where('action', '=', 'org.member.role').execute();
    assert.deepEqual(audit, []);
  });

  test('bad input: 400 in the envelope (role, missing role, extra field, not JSON, the default organization, a long id)', async () => {
    for (const [url, body, param] of [
      ['/v1/admin/orgs/acme/members/mia', { role: 'owner' }, 'role'],
      ['/v1/admin/orgs/acme/members/mia', {}, 'role'],
      ['/v1/admin/orgs/acme/members/mia', { role: 'admin', extra: 1 }, 'extra'],
      ['/v1/admin/orgs/default/members/mia', { role: 'admin' }, 'org_id'],
    ] as const) {
      const res = await put(own, url, body);
      assert.equal(res.statusCode, 400, `${url} ${JSON.stringify(body)}: ${res.body}`);
      assert.equal(res.json().meta.error, 'validation_error');
      assert.ok(String(res.json().meta.message).length > 0);
      if (param === 'org_id') assert.match(res.json().meta.message, /default/);
    }
    const notJson = await own.app.inject({
      method: 'PUT',
      url: '/v1/admin/orgs/acme/members/mia',
      headers: { ...bearer(await own.token('olga')), 'content-type': 'application/json' },
      payload: '{role',
    });
    assert.equal(notJson.statusCode, 400);
    const long = await put(own, `/v1/admin/orgs/${'o'.repeat(300)}/members/mia`, { role: 'admin' });
    assert.ok([400, 414].includes(long.statusCode), long.body);
    assert.deepEqual(await own.core.db.db.selectFrom('org_members').selectAll().execute(), []);
  });
});
