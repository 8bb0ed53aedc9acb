import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { adminKey, bearer, tokenWith } from './helpers.js';
import { ConfigError, loadConfig } from '../../src/platform/config.js';
import { operatorFromClaims } from '../../src/platform/auth/jwt.js';

test('PORTICO_OPERATOR_CLAIM: NAME or NAME=VALUE, anything else refused at start with what it takes', () => {
  const jwt = (v: string) => loadConfig({ JWT_SECRET: 'x'.repeat(32), KEY_PEPPER: 'p'.repeat(32), PORTICO_OPERATOR_CLAIM: v }).jwt.operatorClaim;
  assert.deepEqual(jwt('portico_operator'), { name: 'portico_operator' });
  assert.deepEqual(jwt(' groups = ops team '), { name: 'groups', value: 'ops team' });
  assert.equal(jwt(''), undefined);
  for (const bad of ['groups=', 'a b', '=x', 'x'.repeat(101)]) {
    assert.throws(
      () => jwt(bad),
      (e: Error) => e instanceof ConfigError && /PORTICO_OPERATOR_CLAIM must be/.test(e.message),
      bad,
    );
  }
  assert.equal(operatorFromClaims({ groups: ['ops'] }, undefined), false);
  assert.equal(operatorFromClaims({ groups: [['ops']] }, { name: 'groups', value: 'ops' }), false);
});

for (const db of testDatabases()) {
  describe(`who is an operator: the identity provider's claim (${db})`, () => {
    let t: TestApp;
    before(async () => {
      t = await buildTestApp({ db, env: { PORTICO_OPERATOR_CLAIM: 'groups=portico-operators' } });
    });
    after(() => t.close());
    const whoami = (headers: Record<string, string>) => t.app.inject({ method: 'GET', url: '/v1/admin/whoami', headers });

    test('a token whose groups hold the value is an operator; another group, a string claim or none is not', async () => {
      assert.equal((await whoami(bearer(await tokenWith(t, 'gina', { groups: ['staff', 'portico-operators'] })))).statusCode, 200);
      assert.equal((await whoami(bearer(await tokenWith(t, 'gina', { groups: 'portico-operators' })))).statusCode, 200);
      assert.equal((await whoami(bearer(await tokenWith(t, 'hal', { groups: ['staff'] })))).statusCode, 403);
      assert.equal((await whoami(bearer(await tokenWith(t, 'hal', { portico_operator: true })))).statusCode, 403);
      // an organization admin's role is not the operator's
      assert.equal((await whoami(bearer(await tokenWith(t, 'hal', {}, { 'portico-operators': 'admin' })))).statusCode, 403);
    });

    test('an operator by claim makes an admin key, recorded as such; a token without the claim ends the record and the key', async () => {
      const op = bearer(await tokenWith(t, 'ivy', { groups: ['portico-operators'] }));
      const made = await adminKey(t, op);
      assert.equal(made.status, 200, JSON.stringify(made.body));
      assert.equal((await t.core.operators.get('ivy'))?.source, 'claim');
      const key = bearer(made.body.data.api_key);
      assert.equal((await whoami(key)).statusCode, 200);
      // ivy's newest token no longer says so: she is refused, and her key with her
      assert.equal((await whoami(bearer(await tokenWith(t, 'ivy', { groups: [] })))).statusCode, 403);
      assert.equal(await t.core.operators.get('ivy'), undefined);
      assert.equal((await whoami(key)).statusCode, 403);
    });
  });

  describe(`who is an operator: a boolean claim (${db})`, () => {
    let t: TestApp;
    before(async () => {
      t = await buildTestApp({ db, env: { PORTICO_OPERATOR_CLAIM: 'portico_operator' } });
    });
    after(() => t.close());
    test('true or "true" makes an operator; false, "yes" or a missing claim does not', async () => {
      for (const [v, status] of [
        [true, 200],
        ['true', 200],
        [false, 403],
        ['yes', 403],
        [undefined, 403],
      ] as const) {
        const res = await t.app.inject({ method: 'GET', url: '/v1/admin/whoami', headers: bearer(await tokenWith(t, 'jo', v === undefined ? {} : { portico_operator: v })) });
        assert.equal(res.statusCode, status, `claim ${String(v)}`);
      }
    });
  });

  describe(`who is an operator: the first user of a fresh embedded install (${db})`, () => {
    let t: TestApp;
    before(async () => {
      // no JWT_SECRET and no identity provider: Portico signs its own tokens (the embedded default)
      t = await buildTestApp({ db, env: { JWT_SECRET: '' } });
    });
    after(() => t.close());
    test('the first user seen is an operator, the second is not, and a restart changes nothing', async () => {
      assert.equal(t.config.jwt.secretGenerated, true);
      const first = bearer(await t.token('first'));
      // signing in and asking who they are (the page's first calls) is enough
      assert.equal((await t.app.inject({ method: 'GET', url: '/v1/portal/me', headers: first })).statusCode, 200);
      assert.equal((await t.core.operators.get('first'))?.source, 'first_user');
      const second = bearer(await t.token('second'));
      assert.equal((await t.app.inject({ method: 'GET', url: '/v1/portal/me', headers: second })).statusCode, 200);
      assert.equal((await t.app.inject({ method: 'GET', url: '/v1/admin/whoami', headers: second })).statusCode, 403);
      assert.equal((await t.app.inject({ method: 'GET', url: '/v1/admin/whoami', headers: first })).statusCode, 200);
      // once an operator removed the first one, nobody new becomes one by signing in first
      await t.core.operators.remove('first');
      const third = bearer(await t.token('third'));
      assert.equal((await t.app.inject({ method: 'GET', url: '/v1/portal/me', headers: third })).statusCode, 200);
      assert.deepEqual(await t.core.operators.list(), []);
    });
  });

  describe(`the first user, seen at once by many requests (${db})`, () => {
    let t: TestApp;
    before(async () => {
      t = await buildTestApp({ db, env: { JWT_SECRET: '' } });
    });
    after(() => t.close());
    test('exactly one of them becomes the operator', async () => {
      const users = ['u1', 'u2', 'u3', 'u4', 'u5'];
      const res = await Promise.all(users.map(async (u) => t.app.inject({ method: 'GET', url: '/v1/portal/me', headers: bearer(await t.token(u)) })));
      assert.deepEqual(
        res.map((r) => r.statusCode),
        users.map(() => 200),
      );
      const ops = await t.core.operators.list();
      assert.equal(ops.length, 1);
      assert.ok(users.includes(ops[0]!.user_id));
      assert.equal(ops[0]!.source, 'first_user');
    });
  });

  describe(`no first-user operator where the identity provider names users (${db})`, () => {
    let t: TestApp;
    before(async () => {
      t = await buildTestApp({ db });
    });
    after(() => t.close());
    test('with JWT_SECRET set, the first user is an ordinary user', async () => {
      const h = bearer(await t.token('early'));
      assert.equal((await t.app.inject({ method: 'GET', url: '/v1/portal/me', headers: h })).statusCode, 200);
      assert.equal((await t.app.inject({ method: 'GET', url: '/v1/admin/whoami', headers: h })).statusCode, 403);
      assert.deepEqual(await t.core.operators.list(), []);
    });
  });
}
