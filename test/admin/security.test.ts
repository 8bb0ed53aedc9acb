import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { adminKey, bearer, callers, ROUTES, type Callers } from './helpers.js';

for (const db of testDatabases()) {
  describe(`admin API: only operators (${db})`, () => {
    let t: TestApp;
    let c: Callers;
    before(async () => {
      t = await buildTestApp({ db });
      c = await callers(t);
    });
    after(() => t.close());

    const call = (r: (typeof ROUTES)[number], headers: Record<string, string>) => t.app.inject({ method: r.method, url: r.url, headers, payload: r.payload as never });

    test('every route: no credentials 401, a member, an org admin and a key without the admin scope 403, nothing changed', async () => {
      const auditBefore = await t.core.db.db
        .selectFrom('audit_log')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .executeTakeFirstOrThrow();
      for (const r of ROUTES) {
        const none = await call(r, {});
        assert.equal(none.statusCode, 401, `${r.method} ${r.url}: ${none.body}`);
        assert.equal(none.json().meta.error, 'unauthorized');
        for (const [who, h] of [
          ['member', c.member],
          ['org admin', c.orgAdmin],
        ] as const) {
          const res = await call(r, h);
          assert.equal(res.statusCode, 403, `${who} ${r.method} ${r.url}: ${res.body}`);
          assert.equal(res.json().meta.error, 'permission_denied');
          assert.equal(res.json().meta.code, 40300);
        }
        const key = await call(r, c.plainKey);
        assert.equal(key.statusCode, 403, `plain key ${r.method} ${r.url}: ${key.body}`);
        assert.equal(key.json().meta.error, 'insufficient_scope');
        const bad = await call(r, { authorization: 'Basic abc' });
        assert.equal(bad.statusCode, 401);
      }
      const auditAfter = await t.core.db.db
        .selectFrom('audit_log')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .executeTakeFirstOrThrow();
      assert.equal(Number(auditAfter.n), Number(auditBefore.n));
      assert.equal(await t.core.operators.get('newop'), undefined, 'the refused add changed nothing');
      const bal = await t.services.usage.balance({ orgId: 'default', userId: 'mia' });
      assert.equal(bal.granted, 0, 'the refused grant changed nothing');
      assert.equal((await t.core.db.db.selectFrom('budgets').selectAll().execute()).length, 0, 'the refused budget changed nothing');
    });

    test('the refusal is in the envelope and in Chinese when asked', async () => {
      const res = await t.app.inject({ method: 'GET', url: '/v1/admin/users', headers: { ...c.member, 'accept-language': 'zh-CN' } });
      assert.equal(res.statusCode, 403);
      assert.match(res.json().meta.message, /运维人员/);
      assert.equal(typeof res.json().meta.request_id, 'string');
      assert.equal(res.json().data, null);
      const en = await t.app.inject({ method: 'GET', url: '/v1/admin/users', headers: c.member });
      assert.match(en.json().meta.message, /only an operator/);
    });

    test('an inference key is refused with 401; an unknown route is the envelope 404', async () => {
      const sk = await t.inferenceKey('olga');
      const res = await t.app.inject({ method: 'GET', url: '/v1/admin/users', headers: bearer(sk) });
      assert.equal(res.statusCode, 401);
      const nf = await t.app.inject({ method: 'GET', url: '/v1/admin/nothing', headers: c.operator });
      assert.equal(nf.statusCode, 404);
      assert.equal(nf.json().meta.error, 'not_found');
    });

    test('an operator passes every gate', async () => {
      for (const r of ROUTES.filter((x) => x.method === 'GET')) {
        const res = await call(r, c.operator);
        assert.equal(res.statusCode, r.url.endsWith('/orgs/acme') ? 404 : 200, `${r.method} ${r.url}: ${res.body}`);
      }
    });

    test('the admin scope: only an operator makes such a key; it works while its owner is an operator', async () => {
      const refused = await adminKey(t, c.orgAdmin);
      assert.equal(refused.status, 403);
      assert.equal(refused.body.meta.error, 'permission_denied');
      assert.match(refused.body.meta.message, /only an operator/);
      assert.equal((await adminKey(t, c.member)).status, 403);
      // an org-level admin key is refused even to an operator
      const org = await t.app.inject({
        method: 'POST',
        url: '/v1/portal/management/api-keys',
        headers: bearer(await t.token('olga', { acme: 'admin' })),
        payload: { name: 'x', org_id: 'acme', scopes: ['admin'] },
      });
      assert.equal(org.statusCode, 400);
      const made = await adminKey(t, c.operator);
      assert.equal(made.status, 200, JSON.stringify(made.body));
      const key = bearer(made.body.data.api_key);
      const who = await t.app.inject({ method: 'GET', url: '/v1/admin/whoami', headers: key });
      assert.equal(who.statusCode, 200);
      assert.deepEqual(who.json().data, { user_id: 'olga', key_id: made.body.data.id });
      // the key does not open the query APIs it was not given
      assert.equal((await t.app.inject({ method: 'GET', url: '/v1/portal/query/usage', headers: key })).statusCode, 403);
      // a key made without scopes (every query API) does not open the admin API
      const all = await t.app.inject({ method: 'POST', url: '/v1/portal/management/api-keys', headers: c.operator, payload: { name: 'all' } });
      assert.equal((await t.app.inject({ method: 'GET', url: '/v1/admin/whoami', headers: bearer(all.json().data.api_key) })).statusCode, 403);
      // once the owner is no operator, the key stops at once
      await t.core.operators.remove('olga');
      const after = await t.app.inject({ method: 'GET', url: '/v1/admin/whoami', headers: key });
      assert.equal(after.statusCode, 403);
      assert.match(after.json().meta.message, /not an operator/);
      await t.core.operators.add('olga', 'cli', 'test');
    });

    test('the admin API is in the OpenAPI document, with both credentials', async () => {
      const doc = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json();
      for (const p of [
        '/v1/admin/users',
        '/v1/admin/users/{user_id}',
        '/v1/admin/credits',
        '/v1/admin/audit',
        '/v1/admin/requests',
        '/v1/admin/requests.csv',
        '/v1/admin/usage',
        '/v1/admin/orgs',
      ]) {
        assert.ok(doc.paths[p], `${p} documented`);
      }
      assert.deepEqual(doc.paths['/v1/admin/users'].get.security, [{ portalJwt: [] }, { apiKey: [] }]);
      assert.ok(doc.paths['/v1/admin/users'].get.responses['4XX'], 'the envelope error is documented');
    });
  });
}
