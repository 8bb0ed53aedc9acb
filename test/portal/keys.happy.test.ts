import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { assertOk } from './util.js';

for (const db of testDatabases()) {
  describe(`management keys, happy paths (${db})`, () => {
    let t: TestApp;
    let alice: string;
    before(async () => {
      t = await buildTestApp({ db });
      alice = await t.token('alice');
    });
    after(() => t.close());

    const call = (method: string, url: string, token: string, payload?: unknown) =>
      t.app.inject({ method: method as any, url: `/v1/portal/management${url}`, headers: { authorization: `Bearer ${token}` }, payload: payload as any });

    test('create returns the whole record with the full key once, in the envelope', async () => {
      const future = Math.floor(Date.now() / 1000) + 3600;
      const res = await call('POST', '/api-keys', alice, { name: 'reporting', description: 'for the dashboard', expires_at: future, scopes: ['usage:read'] });
      assert.equal(res.statusCode, 200);
      const body = res.json();
      assert.equal(body.meta.code, 0);
      assert.equal(body.meta.message, 'success');
      assert.equal(body.meta.request_id, res.headers['x-request-id']);
      const k = body.data;
      assert.match(k.api_key, /^mk-[0-9A-Za-z]{38}$/);
      assert.equal(k.name, 'reporting');
      assert.equal(k.description, 'for the dashboard');
      assert.equal(k.status, 'active');
      assert.equal(k.org_id, 'default');
      assert.equal(k.expires_at, future);
      assert.deepEqual(k.scopes, ['usage:read']);
      assert.equal(k.last_used_at, 0);
      assert.ok(Math.abs(k.created_at - Date.now() / 1000) < 5);
      assert.equal(k.display, `${k.api_key.slice(0, 7)}...${k.api_key.slice(-4)}`);
      assert.equal(typeof k.id, 'string');
      // the list never shows the key again
      const list = (await call('GET', '/api-keys', alice)).json();
      const listed = list.data.list.find((x: any) => x.id === k.id);
      assert.ok(listed);
      assert.equal(listed.api_key, undefined);
      assert.ok(!JSON.stringify(list).includes(k.api_key));
      const { api_key, ...rest } = k;
      assert.deepEqual(listed, rest);
    });

    test('list pages, filters by status and counts total', async () => {
      const bob = await t.token('bob');
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) ids.push((await call('POST', '/api-keys', bob, { name: `k${i}` })).json().data.id);
      await call('POST', '/api-keys/revoke', bob, { api_key_id: ids[0] });
      const all = (await call('GET', '/api-keys', bob)).json().data;
      assert.equal(all.total, 5);
      assert.equal(all.list.length, 5);
      assert.equal(all.page, 1);
      assert.equal(all.per_page, 20);
      const p1 = (await call('GET', '/api-keys?per_page=2&page=1', bob)).json().data;
      const p3 = (await call('GET', '/api-keys?per_page=2&page=3', bob)).json().data;
      assert.equal(p1.list.length, 2);
      assert.equal(p3.list.length, 1);
      assert.equal(p1.total, 5);
      const p4 = (await call('GET', '/api-keys?per_page=2&page=4', bob)).json().data;
      assert.equal(p4.list.length, 0);
      assert.equal(p4.total, 5);
      const seen = new Set([...p1.list, ...(await call('GET', '/api-keys?per_page=2&page=2', bob)).json().data.list, ...p3.list].map((k: any) => k.id));
      assert.equal(seen.size, 5);
      const revoked = (await call('GET', '/api-keys?status=revoked', bob)).json().data;
      assert.equal(revoked.total, 1);
      assert.equal(revoked.list[0].id, ids[0]);
      const active = (await call('GET', '/api-keys?status=active', bob)).json().data;
      assert.equal(active.total, 4);
      assert.equal((await call('GET', '/api-keys?status=disabled', bob)).json().data.total, 0);
    });

    test('update changes name and description only; answers the record', async () => {
      const id = (await call('POST', '/api-keys', alice, { name: 'old', scopes: ['balance:read'] })).json().data.id;
      const res = await call('PUT', `/api-keys/${id}`, alice, { name: 'new name', description: 'new desc' });
      assert.equal(res.statusCode, 200);
      const d = res.json().data;
      assert.equal(d.name, 'new name');
      assert.equal(d.description, 'new desc');
      assert.deepEqual(d.scopes, ['balance:read']);
      const only = (await call('PUT', `/api-keys/${id}`, alice, { description: '' })).json().data;
      assert.equal(only.name, 'new name');
      assert.equal(only.description, '');
    });

    test('revoke then restore; revoke is idempotent', async () => {
      const id = (await call('POST', '/api-keys', alice, { name: 'cycle' })).json().data.id;
      const r1 = await call('POST', '/api-keys/revoke', alice, { api_key_id: id });
      assert.equal(r1.statusCode, 200);
      assert.equal(r1.json().data.status, 'revoked');
      const r2 = await call('POST', '/api-keys/revoke', alice, { api_key_id: id });
      assert.equal(r2.statusCode, 200);
      assert.equal(r2.json().data.status, 'revoked');
      const rs = await call('POST', '/api-keys/restore', alice, { api_key_id: id });
      assert.equal(rs.statusCode, 200);
      assert.equal(rs.json().data.status, 'active');
    });

    test('delete is soft: the key leaves the list, its operations answer 404, the row stays', async () => {
      const id = (await call('POST', '/api-keys', alice, { name: 'to delete' })).json().data.id;
      const del = await call('DELETE', `/api-keys/${id}`, alice);
      assert.equal(del.statusCode, 200);
      assert.equal(del.json().data.id, id);
      const list = (await call('GET', '/api-keys', alice)).json().data.list;
      assert.ok(!list.some((k: any) => k.id === id));
      assert.equal((await call('PUT', `/api-keys/${id}`, alice, { name: 'x' })).statusCode, 404);
      assert.equal((await call('DELETE', `/api-keys/${id}`, alice)).statusCode, 404);
      assert.equal((await call('POST', '/api-keys/restore', alice, { api_key_id: id })).statusCode, 404);
      const row = await t.services.db.db.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirst();
      assert.ok(row);
      assert.ok(row.deleted_at! > 0);
    });

    test('an org admin creates an org key; org_id "default" is the personal scope', async () => {
      const admin = await t.token('carol', { acme: 'admin' });
      const res = await call('POST', '/api-keys', admin, { name: 'org key', org_id: 'acme' });
      assert.equal(res.statusCode, 200);
      assert.equal(res.json().data.org_id, 'acme');
      const personal = await call('POST', '/api-keys', admin, { name: 'mine', org_id: 'default' });
      assert.equal(personal.json().data.org_id, 'default');
      const list = (await call('GET', '/api-keys?org_id=acme', admin)).json().data;
      assert.equal(list.total, 1);
      assert.equal(list.list[0].org_id, 'acme');
    });

    test('the full key is stored only as a digest', async () => {
      const k = (await call('POST', '/api-keys', alice, { name: 'digest check' })).json().data;
      const row = await t.services.db.db.selectFrom('api_keys').selectAll().where('id', '=', k.id).executeTakeFirstOrThrow();
      assert.ok(!JSON.stringify(row).includes(k.api_key));
      assert.ok(!JSON.stringify(row).includes(k.api_key.slice(7, -4)));
      assert.match(row.digest, /^[0-9a-f]{64}$/);
    });

    test('keys made in the same second list newest first, exactly', async () => {
      const u = await t.token('same-second');
      const made: string[] = [];
      for (let i = 0; i < 10; i++) made.push(assertOk(await call('POST', '/api-keys', u, { name: `k${i}` })).id);
      const rows = await t.services.db.db.selectFrom('api_keys').select('id').where('user_id', '=', 'same-second').execute();
      // all in one second, so created_at alone cannot order them
      await t.services.db.db.updateTable('api_keys').set({ created_at: 1_800_000_000 }).where('user_id', '=', 'same-second').execute();
      assert.equal(rows.length, 10);
      const newestFirst = [...made].reverse();
      for (let round = 0; round < 3; round++) {
        assert.deepEqual(
          assertOk(await call('GET', '/api-keys?per_page=100', u)).list.map((k: any) => k.id),
          newestFirst,
        );
      }
      // pages cut the same order
      const page2 = assertOk(await call('GET', '/api-keys?per_page=4&page=2', u)).list.map((k: any) => k.id);
      assert.deepEqual(page2, newestFirst.slice(4, 8));
    });
  });
}
