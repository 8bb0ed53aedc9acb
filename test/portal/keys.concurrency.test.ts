import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { INFER, MGMT, assertOk, caller, type Caller } from './util.js';

for (const db of testDatabases()) {
  describe(`active-key limit under concurrency (${db})`, () => {
    let t: TestApp;
    let call: Caller;
    before(async () => {
      t = await buildTestApp({ db });
      call = caller(t);
    });
    after(() => t.close());

    const countActive = async (userId: string, orgId: string, kind = 'management') => {
      const rows = await t.services.db.db
        .selectFrom('api_keys')
        .select('id')
        .where('user_id', '=', userId)
        .where('org_id', '=', orgId)
        .where('kind', '=', kind as any)
        .where('status', '=', 'active')
        .where('deleted_at', 'is', null)
        .execute();
      return rows.length;
    };

    for (const base of [MGMT, INFER]) {
      test(`30 concurrent creates give exactly 10 keys and 20 answers 409; another org still works (${base})`, async () => {
        const user = `racer${base.length}`;
        const tok = await t.token(user, { acme: 'admin' });
        const res = await Promise.all(Array.from({ length: 30 }, (_, i) => call('POST', base, tok, { name: `k${i}` })));
        const codes = res.map((r) => r.statusCode);
        assert.equal(codes.filter((c) => c === 200).length, 10, `statuses: ${codes.join(',')}`);
        assert.equal(codes.filter((c) => c === 409).length, 20);
        for (const r of res.filter((x) => x.statusCode === 409)) assert.equal(r.json().meta.code, 40900);
        const kind = base === MGMT ? 'management' : 'inference';
        assert.equal(await countActive(user, 'default', kind), 10);
        assert.equal(assertOk(await call('GET', base, tok)).total, 10);
        // the limit is per org: 10 more at once in acme all succeed
        const org = await Promise.all(Array.from({ length: 10 }, (_, i) => call('POST', base, tok, { name: `o${i}`, org_id: 'acme' })));
        assert.deepEqual(
          org.map((r) => r.statusCode),
          Array(10).fill(200),
        );
        assert.equal(await countActive(user, 'acme', kind), 10);
        // and per user: someone else in the same org is not affected
        const other = await t.token(`other${base.length}`, { acme: 'admin' });
        assertOk(await call('POST', base, other, { name: 'x', org_id: 'acme' }));
      });
    }

    test('concurrent restores cannot overshoot the limit', async () => {
      const tok = await t.token('restorer');
      const ids: string[] = [];
      for (let i = 0; i < 10; i++) ids.push(assertOk(await call('POST', MGMT, tok, { name: `r${i}` })).id);
      for (const id of ids) assertOk(await call('POST', `${MGMT}/revoke`, tok, { api_key_id: id }));
      for (let i = 0; i < 6; i++) assertOk(await call('POST', MGMT, tok, { name: `n${i}` }));
      // 6 active, 10 revoked: only 4 restores may succeed, whatever the interleaving
      const res = await Promise.all(ids.map((id) => call('POST', `${MGMT}/restore`, tok, { api_key_id: id })));
      const codes = res.map((r) => r.statusCode);
      assert.equal(codes.filter((c) => c === 200).length, 4, `statuses: ${codes.join(',')}`);
      assert.equal(codes.filter((c) => c === 409).length, 6);
      assert.equal(await countActive('restorer', 'default'), 10);
    });

    test('concurrent creates and restores together cannot overshoot', async () => {
      const tok = await t.token('mixed');
      const ids: string[] = [];
      for (let i = 0; i < 8; i++) ids.push(assertOk(await call('POST', MGMT, tok, { name: `r${i}` })).id);
      for (const id of ids) assertOk(await call('POST', `${MGMT}/revoke`, tok, { api_key_id: id }));
      for (let i = 0; i < 5; i++) assertOk(await call('POST', MGMT, tok, { name: `n${i}` }));
      const res = await Promise.all([
        ...ids.map((id) => call('POST', `${MGMT}/restore`, tok, { api_key_id: id })),
        ...Array.from({ length: 8 }, (_, i) => call('POST', MGMT, tok, { name: `c${i}` })),
      ]);
      assert.equal(res.filter((r) => r.statusCode === 200).length, 5);
      assert.equal(res.filter((r) => r.statusCode === 409).length, 11);
      assert.equal(await countActive('mixed', 'default'), 10);
    });
  });
}
