import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import { buildTestApp, testDatabases, TEST_JWT_SECRET, type TestApp } from '../helpers/app.js';
import { INFER, MGMT, assertOk, assertOpenAIError, assertPortalError, caller, type Caller } from './util.js';

// docs/api.md, "Organization keys": org keys are managed by the org's current administrators (any of them), an
// org key works only while the user who made it is one, and every change (restore included) needs the role now.

const USAGE = '/v1/portal/query/usage?org_id=acme';
const secret = new TextEncoder().encode(TEST_JWT_SECRET);

for (const db of testDatabases()) {
  describe(`organization keys follow the organization's current administrators (${db})`, () => {
    let t: TestApp;
    let call: Caller;
    before(async () => {
      t = await buildTestApp({ db });
      call = caller(t);
    });
    after(() => t.close());

    /** a token for `user` issued `ago` seconds ago (roles as of then) */
    const tokenAt = (user: string, orgRoles: Record<string, string>, ago: number) =>
      new SignJWT({ org_roles: orgRoles })
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject(user)
        .setIssuedAt(Math.floor(Date.now() / 1000) - ago)
        .setExpirationTime('1h')
        .sign(secret);

    test('another administrator of the org sees, renames, revokes and restores the org keys; a member and outsiders do not', async () => {
      const ann = await t.token('ann', { acme: 'admin' });
      const bob = await t.token('bob', { acme: 'admin' });
      const carl = await t.token('carl', { acme: 'member' });
      const dora = await t.token('dora', { other: 'admin' });
      for (const base of [MGMT, INFER]) {
        const k = assertOk(await call('POST', base, ann, { name: 'ann org key', org_id: 'acme' }));
        const personal = assertOk(await call('POST', base, ann, { name: 'ann personal' }));
        const seen = assertOk(await call('GET', `${base}?org_id=acme`, bob));
        assert.deepEqual(
          seen.list.map((x: any) => x.id),
          [k.id],
        );
        // without org_id: bob's personal keys (none) and the keys of the orgs he administers
        assert.deepEqual(
          assertOk(await call('GET', base, bob)).list.map((x: any) => x.id),
          [k.id],
        );
        assert.equal(assertOk(await call('PUT', `${base}/${k.id}`, bob, { description: 'seen by bob' })).description, 'seen by bob');
        assert.equal(assertOk(await call('POST', `${base}/revoke`, bob, { api_key_id: k.id })).status, 'revoked');
        assert.equal(assertOk(await call('POST', `${base}/restore`, bob, { api_key_id: k.id })).status, 'active');
        // the personal key stays its owner's alone
        assertPortalError(await call('POST', `${base}/revoke`, bob, { api_key_id: personal.id }), 404, 'API key not found');
        // a member of the org and an admin of another org: not listed to them, 404 on the key
        assertPortalError(await call('GET', `${base}?org_id=acme`, carl), 403, /current administrators/, 40300);
        assert.equal(assertOk(await call('GET', base, carl)).total, 0);
        for (const who of [carl, dora]) {
          assertPortalError(await call('POST', `${base}/revoke`, who, { api_key_id: k.id }), 404, 'API key not found');
          assertPortalError(await call('PUT', `${base}/${k.id}`, who, { name: 'taken' }), 404, 'API key not found');
          assertPortalError(await call('DELETE', `${base}/${k.id}`, who), 404, 'API key not found');
        }
        // bob deletes it: gone for ann too
        assertOk(await call('DELETE', `${base}/${k.id}`, bob));
        assert.ok(!assertOk(await call('GET', base, ann)).list.some((x: any) => x.id === k.id));
      }
    });

    test('a demoted administrator loses the org keys: no org-wide usage, no spending, no managing, no restoring', async () => {
      const eve = await t.token('eve', { acme: 'admin' });
      const mk = assertOk(await call('POST', MGMT, eve, { name: 'eve usage', org_id: 'acme' }));
      const sk = assertOk(await call('POST', INFER, eve, { name: 'eve spend', org_id: 'acme' }));
      const revoked = assertOk(await call('POST', MGMT, eve, { name: 'eve revoked', org_id: 'acme' }));
      assertOk(await call('POST', `${MGMT}/revoke`, eve, { api_key_id: revoked.id }));
      // while an admin: the keys work (and are cached as verified)
      assertOk(await call('GET', USAGE, mk.api_key));
      assert.equal((await call('GET', '/v1/models', sk.api_key)).statusCode, 200);

      // the identity provider makes eve a plain member; her next token says so
      const demoted = await t.token('eve', { acme: 'member' });
      const mine = assertOk(await call('GET', MGMT, demoted));
      assert.equal(mine.total, 0, 'a former admin no longer lists the org keys');
      assertPortalError(await call('GET', USAGE, mk.api_key), 403, /no longer one of its administrators/, 40300);
      assertOpenAIError(await call('GET', '/v1/models', sk.api_key), 403, 'permission_denied', /no longer one of its administrators/);
      // every change needs the role now: restore, revoke, rename, delete
      assertPortalError(await call('POST', `${MGMT}/restore`, demoted, { api_key_id: revoked.id }), 403, /current administrators/, 40300);
      assertPortalError(await call('POST', `${MGMT}/revoke`, demoted, { api_key_id: mk.id }), 403, /current administrators/, 40300);
      assertPortalError(await call('PUT', `${MGMT}/${mk.id}`, demoted, { name: 'still mine' }), 403, /current administrators/, 40300);
      assertPortalError(await call('DELETE', `${INFER}/${sk.id}`, demoted), 403, /current administrators/, 40300);
      // and with a JWT the org's usage is refused to her as before
      assertPortalError(await call('GET', USAGE, demoted), 403, /only an administrator/, 40300);

      // a token issued before the demotion (still unexpired) does not bring the role back
      const stale = await tokenAt('eve', { acme: 'admin' }, 120);
      assertOk(await call('GET', MGMT, stale));
      assertPortalError(await call('GET', USAGE, mk.api_key), 403, /no longer one of its administrators/, 40300);

      // the other admins still manage her keys
      const frank = await t.token('frank', { acme: 'admin' });
      const listed = assertOk(await call('GET', `${MGMT}?org_id=acme`, frank)).list.map((x: any) => x.id);
      assert.ok(listed.includes(mk.id) && listed.includes(revoked.id));
      assert.equal(assertOk(await call('POST', `${INFER}/revoke`, frank, { api_key_id: sk.id })).status, 'revoked');

      // promoted again (a newer token): her keys work again, except the one frank revoked
      const again = await t.token('eve', { acme: 'admin' });
      assertOk(await call('GET', MGMT, again));
      assertOk(await call('GET', USAGE, mk.api_key));
      assertOpenAIError(await call('GET', '/v1/models', sk.api_key), 401, 'api_key_revoked');
      assert.equal(assertOk(await call('POST', `${MGMT}/restore`, again, { api_key_id: revoked.id })).status, 'active');
    });

    test('personal keys do not depend on org roles', async () => {
      const gil = await t.token('gil', { acme: 'admin' });
      const mk = assertOk(await call('POST', MGMT, gil, { name: 'gil personal' }));
      assertOk(await call('GET', MGMT, await t.token('gil', {})));
      assertOk(await call('GET', '/v1/portal/query/usage', mk.api_key));
      assertOk(await call('POST', `${MGMT}/revoke`, await t.token('gil', {}), { api_key_id: mk.id }));
    });
  });
}
