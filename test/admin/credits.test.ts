import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { adminKey, bearer, callers, type Callers } from './helpers.js';

for (const db of testDatabases()) {
  describe(`admin API: credits and the audit log (${db})`, () => {
    let t: TestApp;
    let c: Callers;
    before(async () => {
      t = await buildTestApp({ db });
      c = await callers(t);
    });
    after(() => t.close());

    const grant = (payload: unknown, headers = c.operator) => t.app.inject({ method: 'POST', url: '/v1/admin/credits', headers, payload: payload as never });
    const balance = async (user: string) => (await t.app.inject({ method: 'GET', url: '/v1/portal/query/balance', headers: bearer(await t.token(user)) })).json().data;
    const grants = () => t.core.db.db.selectFrom('credit_grants').selectAll().orderBy('id').execute();

    test("grant and remove a user's credits with a note: the ledger, the user's balance and the audit log agree", async () => {
      const res = await grant({ user_id: 'vera', amount: 25.5, note: 'welcome' });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.json().data.balance.balance, 25.5);
      assert.equal((await balance('vera')).balance, 25.5);
      const removed = await grant({ user_id: 'vera', amount: -5.5, note: 'refund reversed' });
      assert.equal(removed.json().data.balance.balance, 20);
      assert.equal((await balance('vera')).balance, 20);
      const rows = (await grants()).filter((g) => g.user_id === 'vera');
      assert.deepEqual(
        rows.map((g) => [g.org_id, Number(g.amount_micros), g.note]),
        [
          ['default', 25_500_000, 'welcome'],
          ['default', -5_500_000, 'refund reversed'],
        ],
      );
      const audit = (await t.app.inject({ method: 'GET', url: '/v1/admin/audit?target=user:vera', headers: c.operator })).json().data;
      assert.equal(audit.total, 2);
      const [last, first] = audit.list;
      assert.equal(first.action, 'credits.grant');
      assert.equal(first.actor, 'olga');
      assert.equal(first.before.balance, 0);
      assert.equal(first.after.balance, 25.5);
      assert.equal(first.after.note, 'welcome');
      assert.equal(last.action, 'credits.remove');
      assert.equal(last.before.balance, 25.5);
      assert.equal(last.after.balance, 20);
      assert.equal(typeof first.request_id, 'string');
      assert.ok(first.at >= Math.floor(Date.now() / 1000) - 60);
    });

    test("an organization's credits; its members' org balance reads them", async () => {
      const res = await grant({ org_id: 'acme', amount: 100 });
      assert.equal(res.statusCode, 200, res.body);
      const own = (await t.app.inject({ method: 'GET', url: '/v1/portal/query/balance?org_id=acme', headers: c.orgAdmin })).json().data;
      assert.equal(own.balance, 100);
      const row = (await grants()).find((g) => g.org_id === 'acme');
      assert.equal(row?.user_id, '');
    });

    test('bad grants are 400s naming the field, and change nothing', async () => {
      const before = (await grants()).length;
      const cases: Array<[unknown, string]> = [
        [{ amount: 5 }, 'user_id'],
        [{ user_id: 'a', org_id: 'b', amount: 5 }, 'user_id'],
        [{ org_id: 'default', amount: 5 }, 'org_id'],
        [{ user_id: 'a', amount: 0 }, 'amount'],
        [{ user_id: 'a', amount: 0.0000001 }, 'amount'],
        [{ user_id: 'a', amount: 1.1234567 }, 'amount'],
        [{ user_id: 'a', amount: 2e12 }, 'amount'],
        [{ user_id: 'a', amount: '5' }, 'amount'],
        [{ user_id: 'a', amount: 5, extra: true }, 'extra'],
        [{ user_id: '', amount: 5 }, 'user_id'],
      ];
      for (const [payload, field] of cases) {
        const res = await grant(payload);
        assert.equal(res.statusCode, 400, `${JSON.stringify(payload)}: ${res.body}`);
        assert.equal(res.json().meta.error, 'validation_error');
        assert.match(res.json().meta.message, new RegExp(field), `${JSON.stringify(payload)} names ${field}: ${res.json().meta.message}`);
      }
      assert.equal((await grants()).length, before);
      const zh = await t.app.inject({ method: 'POST', url: '/v1/admin/credits', headers: { ...c.operator, 'accept-language': 'zh' }, payload: { user_id: 'a', amount: 0 } });
      assert.match(zh.json().meta.message, /额度/);
    });

    test('the audit log: filtered by actor and action, paged, newest first; a change by key names the key; no secret', async () => {
      const made = await adminKey(t, c.operator);
      const key = made.body.data;
      const viaKey = await grant({ user_id: 'walt', amount: 1 }, bearer(key.api_key));
      assert.equal(viaKey.statusCode, 200, viaKey.body);
      await t.core.operators.add('otto', 'cli', 'test');
      await grant({ user_id: 'walt', amount: 2 }, bearer(await t.token('otto')));
      const list = (q: string) => t.app.inject({ method: 'GET', url: `/v1/admin/audit?${q}`, headers: c.operator });
      const byOtto = (await list('actor=otto')).json().data;
      assert.equal(byOtto.total, 1);
      assert.equal(byOtto.list[0].after.amount, 2);
      const byKey = (await list('target=user:walt&actor=olga')).json().data.list;
      assert.equal(byKey.length, 1);
      assert.equal(byKey[0].actor_key_id, key.id);
      const grantsOnly = (await list('action=credits.grant&per_page=2')).json().data;
      assert.equal(grantsOnly.list.length, 2);
      assert.ok(grantsOnly.total >= 4);
      assert.ok(grantsOnly.list[0].id > grantsOnly.list[1].id || grantsOnly.list[0].at >= grantsOnly.list[1].at);
      const page2 = (await list('action=credits.grant&per_page=2&page=2')).json().data.list;
      assert.notEqual(page2[0].id, grantsOnly.list[0].id);
      const everything = (await list('per_page=100')).body;
      assert.ok(!everything.includes(key.api_key), 'no key in the audit log');
      assert.equal((await list('start_time=10&end_time=5')).statusCode, 200, 'an empty range is empty, not an error');
      assert.equal((await list('per_page=101')).statusCode, 400);
    });

    test('operators through the API: add, list, remove (not oneself), audited', async () => {
      const add = await t.app.inject({ method: 'POST', url: '/v1/admin/operators', headers: c.operator, payload: { user_id: 'pat' } });
      assert.equal(add.statusCode, 200, add.body);
      assert.equal(add.json().data.added_by, 'olga');
      assert.equal((await t.app.inject({ method: 'GET', url: '/v1/admin/whoami', headers: bearer(await t.token('pat')) })).statusCode, 200);
      const again = await t.app.inject({ method: 'POST', url: '/v1/admin/operators', headers: c.operator, payload: { user_id: 'pat' } });
      assert.equal(again.statusCode, 409);
      const list = (await t.app.inject({ method: 'GET', url: '/v1/admin/operators', headers: c.operator })).json().data.list;
      assert.ok(list.some((o: any) => o.user_id === 'pat' && o.source === 'api'));
      const self = await t.app.inject({ method: 'DELETE', url: '/v1/admin/operators/olga', headers: c.operator });
      assert.equal(self.statusCode, 409);
      const rm = await t.app.inject({ method: 'DELETE', url: '/v1/admin/operators/pat', headers: c.operator });
      assert.equal(rm.statusCode, 200);
      assert.equal((await t.app.inject({ method: 'GET', url: '/v1/admin/whoami', headers: bearer(await t.token('pat')) })).statusCode, 403);
      assert.equal((await t.app.inject({ method: 'DELETE', url: '/v1/admin/operators/pat', headers: c.operator })).json().meta.error, 'operator_not_found');
      const audit = (await t.app.inject({ method: 'GET', url: '/v1/admin/audit?target=pat', headers: c.operator })).json().data.list;
      assert.deepEqual(
        audit.map((a: any) => [a.action, a.before?.user_id ?? null, a.after?.user_id ?? null]),
        [
          ['operator.remove', 'pat', null],
          ['operator.add', null, 'pat'],
        ],
      );
    });
  });
}
