import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { bearer, callers, use, type Callers } from './helpers.js';
import { periodBounds } from '../../src/admin/budgets.js';

test('periods reset at 00:00 UTC: each day, each Monday, the first of the month', () => {
  const at = new Date('2026-11-28T15:30:00Z'); // a Saturday
  assert.deepEqual(periodBounds('daily', at), { start: Date.parse('2026-11-28T00:00:00Z') / 1000, end: Date.parse('2026-11-29T00:00:00Z') / 1000 });
  assert.deepEqual(periodBounds('weekly', at), { start: Date.parse('2026-11-23T00:00:00Z') / 1000, end: Date.parse('2026-11-30T00:00:00Z') / 1000 });
  assert.deepEqual(periodBounds('monthly', at), { start: Date.parse('2026-11-01T00:00:00Z') / 1000, end: Date.parse('2026-12-01T00:00:00Z') / 1000 });
  assert.equal(periodBounds('weekly', new Date('2026-11-30T00:00:00Z')).start, Date.parse('2026-11-30T00:00:00Z') / 1000, 'a Monday starts its own week');
  assert.equal(periodBounds('monthly', new Date('2026-12-31T23:59:59Z')).end, Date.parse('2027-01-01T00:00:00Z') / 1000);
});

for (const db of testDatabases()) {
  describe(`admin API: budgets per key, user and organization (${db})`, () => {
    let t: TestApp;
    let c: Callers;
    const posted: Array<{ url: string; body: any }> = [];
    before(async () => {
      t = await buildTestApp({ db, runtime: { postWebhook: async (url, body) => void posted.push({ url, body }) } });
      c = await callers(t);
    });
    after(() => t.close());

    const set = (payload: unknown, headers = c.operator) => t.app.inject({ method: 'POST', url: '/v1/admin/budgets', headers, payload: payload as never });
    const models = (key: string, lang?: string) => t.app.inject({ method: 'GET', url: '/v1/models', headers: { ...bearer(key), ...(lang ? { 'accept-language': lang } : {}) } });
    const keyOf = async (user: string) => {
      const res = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: bearer(await t.token(user)), payload: { name: 'b' } });
      return { id: res.json().data.id as string, key: res.json().data.api_key as string };
    };

    test("a key's daily budget: the soft limit warns once through the webhook, the hard limit refuses naming the budget and its reset", async () => {
      const k = await keyOf('bea');
      const other = await keyOf('bea');
      const res = await set({ scope: 'key', target: k.id, period: 'daily', limit: 2, soft_limit: 1, webhook_url: 'https://hooks.example/budget' });
      assert.equal(res.statusCode, 200, res.body);
      const budget = res.json().data;
      assert.equal((await models(k.key)).statusCode, 200);
      await use(t, { keyId: k.id, userId: 'bea' }, { cost: 1.5 });
      assert.equal((await models(k.key)).statusCode, 200, 'past the soft limit, still served');
      assert.equal((await models(k.key)).statusCode, 200);
      assert.equal(posted.length, 1, 'the webhook is told once per period');
      assert.equal(posted[0]!.url, 'https://hooks.example/budget');
      assert.equal(posted[0]!.body.type, 'budget.soft_limit');
      assert.equal(posted[0]!.body.budget_id, budget.id);
      assert.equal(posted[0]!.body.spent, 1.5);
      await use(t, { keyId: k.id, userId: 'bea' }, { cost: 0.5 });
      const refused = await models(k.key);
      assert.equal(refused.statusCode, 429, refused.body);
      const err = refused.json().error;
      assert.equal(err.code, 'budget_exceeded');
      assert.equal(err.type, 'insufficient_quota');
      const { end } = periodBounds('daily');
      assert.match(err.message, new RegExp(`daily budget of key ${k.id} is 2 credits and 2 are spent; it resets at ${new Date(end * 1000).toISOString()}`));
      assert.ok(Number(refused.headers['retry-after']) > 0);
      assert.match((await models(k.key, 'zh')).json().error.message, /每日预算/);
      assert.equal((await models(other.key)).statusCode, 200, "the owner's other key has no budget");
      const listed = (await t.app.inject({ method: 'GET', url: '/v1/admin/budgets', headers: c.operator })).json().data.list;
      const row = listed.find((b: any) => b.id === budget.id);
      assert.equal(row.spent, 2);
      assert.equal(row.resets_at, end);
      // removed: served again at once
      const rm = await t.app.inject({ method: 'DELETE', url: `/v1/admin/budgets/${budget.id}`, headers: c.operator });
      assert.equal(rm.statusCode, 200);
      assert.equal((await models(k.key)).statusCode, 200);
      const audit = (await t.app.inject({ method: 'GET', url: `/v1/admin/audit?target=${budget.id}`, headers: c.operator })).json().data.list;
      assert.deepEqual(
        audit.map((a: any) => [a.action, a.before?.limit ?? null, a.after?.limit ?? null]),
        [
          ['budget.remove', 2, null],
          ['budget.set', null, 2],
        ],
      );
    });

    test("a user's and an organization's budgets cover all their keys; raising the limit lets them through", async () => {
      const k1 = await keyOf('cal');
      const k2 = await keyOf('cal');
      await set({ scope: 'user', target: 'cal', period: 'monthly', limit: 1 });
      await use(t, { keyId: k1.id, userId: 'cal' }, { cost: 1 });
      assert.equal((await models(k2.key)).json().error?.code, 'budget_exceeded');
      const raised = await set({ scope: 'user', target: 'cal', period: 'monthly', limit: 3 });
      assert.equal(raised.statusCode, 200);
      assert.equal((await models(k2.key)).statusCode, 200);
      const org = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: c.orgAdmin, payload: { name: 'o', org_id: 'acme' } });
      const ok = org.json().data;
      await set({ scope: 'org', target: 'acme', period: 'weekly', limit: 0.5 });
      await use(t, { keyId: ok.id, userId: 'adam', orgId: 'acme' }, { cost: 0.5 });
      assert.match((await models(ok.api_key)).json().error.message, /weekly budget of organization acme/);
    });

    test('bad budgets are 400s; budgets are for operators only', async () => {
      const cases: Array<[unknown, string]> = [
        [{ scope: 'team', target: 'x', period: 'daily', limit: 1 }, 'scope'],
        [{ scope: 'user', target: 'x', period: 'hourly', limit: 1 }, 'period'],
        [{ scope: 'user', target: 'x', period: 'daily', limit: 0 }, 'limit'],
        [{ scope: 'user', target: 'x', period: 'daily', limit: -1 }, 'limit'],
        [{ scope: 'user', target: 'x', period: 'daily', limit: 1, soft_limit: 1 }, 'soft_limit'],
        [{ scope: 'user', target: 'x', period: 'daily', limit: 1, webhook_url: 'ftp://x' }, 'webhook_url'],
        [{ scope: 'org', target: 'default', period: 'daily', limit: 1 }, 'org_id'],
      ];
      for (const [payload, field] of cases) {
        const res = await set(payload);
        assert.equal(res.statusCode, 400, `${JSON.stringify(payload)}: ${res.body}`);
        assert.match(res.json().meta.message, new RegExp(field), JSON.stringify(payload));
      }
      assert.equal((await set({ scope: 'user', target: 'x', period: 'daily', limit: 1 }, c.orgAdmin)).statusCode, 403);
      assert.equal((await set({ scope: 'user', target: 'x', period: 'daily', limit: 1 }, c.member)).statusCode, 403);
      assert.equal((await set({ scope: 'user', target: 'x', period: 'daily', limit: 1 }, {})).statusCode, 401);
      assert.equal((await t.app.inject({ method: 'DELETE', url: '/v1/admin/budgets/budget_nope', headers: c.operator })).statusCode, 404);
    });
  });
}
