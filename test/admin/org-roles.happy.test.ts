import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { mintSignInLink } from '../../src/web/link.js';
import { bearer } from './helpers.js';

for (const db of testDatabases()) {
  // roles are Portico's own: no JWT_SECRET, no JWKS, no OpenID Connect (Portico signs its tokens and links)
  describe(`admin API: PUT /orgs/{org_id}/members/{user_id} where roles are Portico's own (${db})`, () => {
    let t: TestApp;
    let op: Record<string, string>;
    before(async () => {
      t = await buildTestApp({ db, models: [], env: { JWT_SECRET: '' } });
      assert.equal(t.config.jwt.secretGenerated, true);
      await t.core.operators.add('olga', 'cli', 'test');
      op = bearer(await t.token('olga'));
    });
    after(() => t.close());

    const signIn = async (userId: string, orgRoles: Record<string, string>) => {
      const link = await mintSignInLink({ pepper: t.config.keyPepper, publicUrl: t.config.web.publicUrl, userId, orgRoles });
      const res = await t.app.inject({ method: 'POST', url: '/v1/portal/session/link', payload: { token: link.url.split('#token=')[1] } });
      assert.equal(res.statusCode, 200, res.body);
      const cookie = String(([] as string[]).concat(res.headers['set-cookie'] ?? [])[0]).split(';')[0]!;
      return { cookie, csrf: res.json().data.csrf_token as string };
    };
    const setRole = (org: string, user: string, role: string) => t.app.inject({ method: 'PUT', url: `/v1/admin/orgs/${org}/members/${user}`, headers: op, payload: { role } });

    test("making a member admin: their session and /me say so at once, and they manage the organization's keys", async () => {
      const s = await signIn('mia', { acme: 'member' });
      const session = { cookie: s.cookie, 'x-csrf-token': s.csrf };
      const make = () => t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: session, payload: { name: 'team', org_id: 'acme' } });
      assert.equal((await make()).statusCode, 403, 'a member makes no organization key');

      const res = await setRole('acme', 'mia', 'admin');
      assert.equal(res.statusCode, 200, res.body);
      assert.deepEqual(res.json().data, { org_id: 'acme', user_id: 'mia', role: 'admin' });

      const me = (await t.app.inject({ method: 'GET', url: '/v1/portal/me', headers: { cookie: s.cookie } })).json().data;
      assert.equal(me.org_roles.acme, t.config.jwt.adminRole);
      assert.deepEqual(me.admin_orgs, ['acme']);
      const sess = (await t.app.inject({ method: 'GET', url: '/v1/portal/session', headers: { cookie: s.cookie } })).json().data;
      assert.equal(sess.org_roles.acme, t.config.jwt.adminRole);
      // a token Portico minted before the change says member: the role set here wins there too
      const tokenMe = (await t.app.inject({ method: 'GET', url: '/v1/portal/me', headers: bearer(await t.token('mia', { acme: 'member' })) })).json().data;
      assert.deepEqual(tokenMe.admin_orgs, ['acme']);

      const made = await make();
      assert.equal(made.statusCode, 200, made.body);
      assert.equal(made.json().data.org_id, 'acme');

      // audited, with the role before and after
      const audit = (await t.app.inject({ method: 'GET', url: '/v1/admin/audit?action=org.member.role', headers: op })).json().data.list;
      assert.equal(audit[0].target, 'org:acme/user:mia');
      assert.equal(audit[0].actor, 'olga');
      assert.equal(audit[0].before, null);
      assert.deepEqual(audit[0].after, { org_id: 'acme', user_id: 'mia', role: 'admin' });
    });

    test('demoting an admin: their organization keys stop working at once, their personal ones do not', async () => {
      const adam = bearer(await t.token('adam', { acme: 'admin' }));
      const org = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: adam, payload: { name: 'org', org_id: 'acme' } });
      assert.equal(org.statusCode, 200, org.body + ' (adam)');
      const orgKey = org.json().data.api_key as string;
      // (a token without the role would itself say adam is no admin of acme: the newest token wins where no role is set)
      const own = (await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: adam, payload: { name: 'own' } })).json().data.api_key as string;
      const models = (k: string) => t.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(k) });
      const first = await models(orgKey);
      assert.equal(first.statusCode, 200, first.body);

      assert.equal((await setRole('acme', 'adam', 'member')).statusCode, 200);
      const refused = await models(orgKey);
      assert.equal(refused.statusCode, 403, 'the organization key stops working at once');
      assert.equal(refused.json().error.code, 'permission_denied');
      assert.equal((await models(own)).statusCode, 200, 'a personal key is not touched');
      const list = await t.app.inject({ method: 'GET', url: '/v1/portal/api-keys?org_id=acme', headers: adam });
      assert.equal(list.statusCode, 403, 'nor can they manage the organization keys with a token that still says admin');

      // made admin again: the key works again
      assert.equal((await setRole('acme', 'adam', 'admin')).statusCode, 200);
      assert.equal((await models(orgKey)).statusCode, 200);
      const audit = (await t.app.inject({ method: 'GET', url: '/v1/admin/audit?action=org.member.role&target=org:acme/user:adam', headers: op })).json().data.list;
      assert.deepEqual(
        audit.map((a: any) => [a.before?.role ?? null, a.after.role]),
        [
          ['member', 'admin'],
          [null, 'member'],
        ],
      );
    });
  });
}
