import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { mintSignInLink } from '../../src/web/link.js';
import { SessionService } from '../../src/web/sessions.js';
import { WebSessionStore } from '../../src/web/store.js';

for (const db of testDatabases()) {
  describe(`admin API from the page's session (${db})`, () => {
    let t: TestApp;
    before(async () => {
      t = await buildTestApp({ db });
      await t.core.operators.add('olga', 'cli', 'test');
    });
    after(() => t.close());

    /** signs in with a sign-in link, as the page does: the session cookie and its CSRF token */
    const signIn = async (userId: string, orgRoles: Record<string, string> = {}) => {
      const link = await mintSignInLink({ pepper: t.config.keyPepper, publicUrl: t.config.web.publicUrl, userId, orgRoles });
      const res = await t.app.inject({ method: 'POST', url: '/v1/portal/session/link', payload: { token: link.url.split('#token=')[1] } });
      assert.equal(res.statusCode, 200, res.body);
      const cookie = String(([] as string[]).concat(res.headers['set-cookie'] ?? [])[0]).split(';')[0]!;
      return { cookie, csrf: res.json().data.csrf_token as string };
    };

    test("an operator's session reads, and changes with its CSRF token only", async () => {
      const s = await signIn('olga');
      assert.equal((await t.app.inject({ method: 'GET', url: '/v1/admin/users', headers: { cookie: s.cookie } })).statusCode, 200);
      const noCsrf = await t.app.inject({ method: 'POST', url: '/v1/admin/credits', headers: { cookie: s.cookie }, payload: { user_id: 'zed', amount: 3 } });
      assert.equal(noCsrf.statusCode, 403);
      assert.equal(noCsrf.json().meta.error, 'csrf_failed');
      const other = await t.app.inject({
        method: 'POST',
        url: '/v1/admin/credits',
        headers: { cookie: s.cookie, 'x-csrf-token': s.csrf, origin: 'https://evil.example' },
        payload: { user_id: 'zed', amount: 3 },
      });
      assert.equal(other.statusCode, 403);
      const okRes = await t.app.inject({ method: 'POST', url: '/v1/admin/credits', headers: { cookie: s.cookie, 'x-csrf-token': s.csrf }, payload: { user_id: 'zed', amount: 3 } });
      assert.equal(okRes.statusCode, 200, okRes.body);
      assert.equal((await t.services.usage.balance({ orgId: 'default', userId: 'zed' })).balance, 3);
    });

    test("a member's and an org admin's sessions are refused", async () => {
      for (const [u, roles] of [
        ['mia', {}],
        ['adam', { acme: 'admin' }],
      ] as const) {
        const s = await signIn(u, roles);
        const res = await t.app.inject({ method: 'GET', url: '/v1/admin/users', headers: { cookie: s.cookie } });
        assert.equal(res.statusCode, 403, u);
      }
    });

    test('a session whose ID token named an operator (PORTICO_OPERATOR_CLAIM) keeps it; others do not', async () => {
      const sessions = new SessionService(new WebSessionStore(t.core.db.db), t.config.keyPepper, 3600);
      const op = await sessions.create({ userId: 'oidc-op', orgRoles: {}, operator: true }, 'oidc');
      assert.equal((await sessions.get(op.value))?.principal.operator, true);
      const plain = await sessions.create({ userId: 'oidc-user', orgRoles: {} }, 'oidc');
      assert.equal((await sessions.get(plain.value))?.principal.operator, undefined);
      const who = await t.app.inject({ method: 'GET', url: '/v1/admin/whoami', headers: { cookie: `portico_session=${op.value}` } });
      assert.equal(who.statusCode, 200, who.body);
      assert.equal(who.json().data.user_id, 'oidc-op');
      assert.equal((await t.app.inject({ method: 'GET', url: '/v1/admin/whoami', headers: { cookie: `portico_session=${plain.value}` } })).statusCode, 403);
    });
  });
}
