import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { adminKey, bearer, callers, type Callers } from './helpers.js';

describe('admin API: PUT /orgs/{org_id}/members/{user_id}: only operators, whatever their organization role', () => {
  let t: TestApp;
  let c: Callers;
  before(async () => {
    t = await buildTestApp({ models: [], env: { JWT_SECRET: '' } });
    c = await callers(t);
  });
  after(() => t.close());
  const put = (headers: Record<string, string>, user = 'mia', role = 'admin') =>
    t.app.inject({ method: 'PUT', url: `/v1/admin/orgs/acme/members/${user}`, headers, payload: { role } });

  test('nobody 401; a member (promoting themselves), an org admin and a key without the admin scope 403; nothing recorded', async () => {
    assert.equal((await put({})).statusCode, 401);
    for (const [who, h] of [
      ['member', c.member],
      ['org admin', c.orgAdmin],
      ['plain key', c.plainKey],
    ] as const) {
      const res = await put(h);
      assert.equal(res.statusCode, 403, `${who}: ${res.body}`);
    }
    // an org admin cannot demote another admin through it either
    assert.equal((await put(c.orgAdmin, 'adam', 'member')).statusCode, 403);
    assert.deepEqual(await t.core.db.db.selectFrom('org_members').selectAll().execute(), []);
  });

  test("an operator's admin key sets roles; its audit entry names the key", async () => {
    const k = await adminKey(t, c.operator);
    assert.equal(k.status, 200);
    const res = await put(bearer(k.body.data.api_key), 'mia', 'member');
    assert.equal(res.statusCode, 200, res.body);
    const entry = await t.core.db.db.selectFrom('audit_log').selectAll().where('action', '=', 'org.member.role').executeTakeFirstOrThrow();
    assert.equal(entry.actor_key_id, k.body.data.id);
    assert.ok(!JSON.stringify(entry).includes(k.body.data.api_key));
  });
});
