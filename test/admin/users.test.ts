import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { bearer, callers, use, type Callers } from './helpers.js';

for (const db of testDatabases()) {
  describe(`admin API: users, organizations and their keys (${db})`, () => {
    let t: TestApp;
    let c: Callers;
    let una: { id: string; key: string }[];
    before(async () => {
      t = await buildTestApp({ db });
      c = await callers(t);
      // una: two personal inference keys, usage on one, personal credits; an org key of acme made by adam
      const h = bearer(await t.token('una'));
      una = [];
      for (const name of ['a', 'b']) {
        const res = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: h, payload: { name } });
        una.push({ id: res.json().data.id, key: res.json().data.api_key });
      }
      await use(t, { keyId: una[0]!.id, userId: 'una' }, { cost: 1.25 });
      await use(t, { keyId: una[0]!.id, userId: 'una' }, { cost: 0.75 });
      await t.services.usage.grant('una', 'default', 10);
      const org = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: c.orgAdmin, payload: { name: 'org', org_id: 'acme' } });
      await use(t, { keyId: org.json().data.id, userId: 'adam', orgId: 'acme' }, { cost: 2 });
      await t.services.usage.grant('', 'acme', 50);
    });
    after(() => t.close());

    const get = (url: string, headers = c.operator) => t.app.inject({ method: 'GET', url, headers });
    const post = (url: string, payload: unknown, headers = c.operator) => t.app.inject({ method: 'POST', url, headers, payload: payload as never });
    const models = (key: string) => t.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(key) });

    test('the list: every user with keys, balance, usage this month and last activity; search and paging', async () => {
      const res = await get('/v1/admin/users?per_page=100');
      assert.equal(res.statusCode, 200, res.body);
      const list = res.json().data.list as any[];
      const ids = list.map((u) => u.user_id);
      for (const u of ['una', 'adam', 'olga']) assert.ok(ids.includes(u), `${u} listed: ${ids.join(',')}`);
      const u = list.find((x) => x.user_id === 'una');
      assert.deepEqual(u.keys, { total: 2, active: 2, disabled: 0 });
      assert.deepEqual(u.balance, { granted: 10, used: 2, balance: 8 });
      assert.equal(u.period.requests, 2);
      assert.equal(u.period.tokens, 30);
      assert.equal(u.period.cost, 2);
      assert.ok(u.last_activity >= Math.floor(Date.now() / 1000) - 60);
      assert.equal(u.operator, false);
      assert.equal(list.find((x) => x.user_id === 'olga').operator, true);
      // the balance agrees with the user's own query API
      const own = (await get('/v1/portal/query/balance', bearer(await t.token('una')))).json().data;
      assert.equal(own.balance, u.balance.balance);
      const found = (await get('/v1/admin/users?search=UN')).json().data;
      assert.deepEqual(
        found.list.map((x: any) => x.user_id),
        ['una'],
      );
      const page = (await get('/v1/admin/users?per_page=1&page=2')).json().data;
      assert.equal(page.list.length, 1);
      assert.equal(page.total, res.json().data.total);
      // LIKE's wildcards are searched as text
      assert.equal((await get('/v1/admin/users?search=%25')).json().data.total, 0);
    });

    test('one user: their keys of both kinds, no secret', async () => {
      const res = await get('/v1/admin/users/una');
      assert.equal(res.statusCode, 200, res.body);
      const d = res.json().data;
      assert.equal(d.api_keys.length, 2);
      assert.deepEqual(
        d.api_keys.map((k: any) => k.kind),
        ['inference', 'inference'],
      );
      assert.ok(!res.body.includes(una[0]!.key), 'the key itself is never shown');
      assert.ok(!res.body.includes('digest'));
      const adam = (await get('/v1/admin/users/adam')).json().data;
      assert.deepEqual(adam.admin_orgs, ['acme']);
      const olga = (await get('/v1/admin/users/olga')).json().data;
      assert.equal(olga.operator_record.source, 'cli');
    });

    test('an unknown user is a 404 in the envelope; a bad page a 400', async () => {
      const res = await get('/v1/admin/users/nobody');
      assert.equal(res.statusCode, 404);
      assert.equal(res.json().meta.error, 'user_not_found');
      assert.equal(res.json().meta.code, 40405);
      const zh = await t.app.inject({ method: 'GET', url: '/v1/admin/users/nobody', headers: { ...c.operator, 'accept-language': 'zh' } });
      assert.match(zh.json().meta.message, /没有用户/);
      assert.equal((await get('/v1/admin/users?per_page=0')).statusCode, 400);
      assert.equal((await get('/v1/admin/users?bogus=1')).statusCode, 400);
    });

    test('organizations: members, keys, balance, usage this month; one organization with its keys', async () => {
      const res = await get('/v1/admin/orgs');
      assert.equal(res.statusCode, 200, res.body);
      const acme = res.json().data.list.find((o: any) => o.org_id === 'acme');
      assert.ok(acme, res.body);
      assert.equal(acme.admins, 1);
      assert.ok(acme.members >= 1);
      assert.deepEqual(acme.keys, { total: 1, active: 1, disabled: 0 });
      assert.deepEqual(acme.balance, { granted: 50, used: 2, balance: 48 });
      assert.equal(acme.period.cost, 2);
      assert.ok(!res.json().data.list.some((o: any) => o.org_id === 'default'), 'the personal scope is no organization');
      const one = (await get('/v1/admin/orgs/acme')).json().data;
      assert.equal(one.api_keys.length, 1);
      assert.equal(one.api_keys[0].user_id, 'adam');
      // its members by id with the role last recorded: as many as `members` counts, the administrator among them
      assert.equal(one.member_list.length, acme.members);
      assert.deepEqual(
        one.member_list.filter((m: any) => m.role === 'admin'),
        [{ user_id: 'adam', role: 'admin' }],
      );
      assert.ok(one.member_list.every((m: any) => m.role === 'admin' || m.role === 'member'));
      assert.deepEqual(
        one.member_list.map((m: any) => m.user_id),
        [...one.member_list.map((m: any) => m.user_id)].sort(),
        'ordered by user id',
      );
      assert.equal((await get('/v1/admin/orgs/nope')).json().meta.error, 'organization_not_found');
      assert.equal((await get('/v1/admin/orgs/default')).statusCode, 404);
    });

    test('disable one key, then all, then enable: the database, the API and the gate agree, each change audited', async () => {
      const one = await post('/v1/admin/users/una/keys/disable', { api_key_id: una[0]!.id });
      assert.equal(one.statusCode, 200, one.body);
      assert.deepEqual(
        one.json().data.api_keys.map((k: any) => [k.id, k.status]),
        [[una[0]!.id, 'disabled']],
      );
      const row = await t.core.db.db.selectFrom('api_keys').select('status').where('id', '=', una[0]!.id).executeTakeFirstOrThrow();
      assert.equal(row.status, 'disabled');
      assert.equal((await models(una[0]!.key)).json().error.code, 'api_key_disabled');
      assert.equal((await models(una[1]!.key)).statusCode, 200);
      const all = await post('/v1/admin/users/una/keys/disable', {});
      assert.deepEqual(
        all.json().data.api_keys.map((k: any) => k.id),
        [una[1]!.id],
        'only the active ones change',
      );
      assert.equal((await models(una[1]!.key)).statusCode, 401);
      assert.deepEqual((await get('/v1/admin/users/una')).json().data.keys, { total: 2, active: 0, disabled: 2 });
      // the owner cannot lift it
      const revoke = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys/revoke', headers: bearer(await t.token('una')), payload: { api_key_id: una[1]!.id } });
      assert.equal(revoke.statusCode, 409);
      const enabled = await post('/v1/admin/users/una/keys/enable', {});
      assert.equal(enabled.json().data.api_keys.length, 2);
      assert.deepEqual(enabled.json().data.failed, []);
      assert.equal((await models(una[0]!.key)).statusCode, 200);
      const audit = (await get('/v1/admin/audit?target=' + una[0]!.id)).json().data.list;
      assert.deepEqual(
        audit.map((a: any) => [a.action, a.before.status, a.after.status, a.actor]),
        [
          ['key.enable', 'disabled', 'active', 'olga'],
          ['key.disable', 'active', 'disabled', 'olga'],
        ],
      );
    });

    test("keys: another user's key is a 404, a revoked key 409, an unknown user 404", async () => {
      const other = await post('/v1/admin/users/adam/keys/disable', { api_key_id: una[0]!.id });
      assert.equal(other.statusCode, 404);
      assert.match(other.json().meta.message, /not a key of user 'adam'/);
      assert.equal((await models(una[0]!.key)).statusCode, 200, 'nothing changed');
      await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys/revoke', headers: bearer(await t.token('una')), payload: { api_key_id: una[1]!.id } });
      const revoked = await post('/v1/admin/users/una/keys/enable', { api_key_id: una[1]!.id });
      assert.equal(revoked.statusCode, 409);
      assert.equal(revoked.json().meta.error, 'invalid_state');
      assert.equal((await post('/v1/admin/users/ghost/keys/disable', {})).json().meta.error, 'user_not_found');
      assert.equal((await post('/v1/admin/users/una/keys/disable', { api_key_id: 'key_nope' })).json().meta.error, 'api_key_not_found');
      assert.equal((await post('/v1/admin/users/una/keys/disable', { api_key_id: 'x', extra: 1 })).statusCode, 400);
    });
  });
}
