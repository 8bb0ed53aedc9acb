import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';

for (const db of testDatabases()) {
  describe(`a real listening server (${db})`, () => {
    let t: TestApp & { url?: string };
    before(async () => {
      t = await buildTestApp({ db, listen: true });
    });
    after(() => t.close());

    test('create a key over HTTP, use it, revoke it, then 401', async () => {
      assert.match(t.url!, /^http:\/\/127\.0\.0\.1:\d+$/);
      const jwt = await t.token('net-user');
      const h = { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' };
      const created = await fetch(`${t.url}/v1/portal/api-keys`, { method: 'POST', headers: h, body: JSON.stringify({ name: 'over the wire' }) });
      assert.equal(created.status, 200);
      assert.match(created.headers.get('content-type')!, /application\/json/);
      const rid = created.headers.get('x-request-id');
      const body = await created.json();
      assert.equal(body.meta.request_id, rid);
      const key = body.data.api_key as string;
      const use = await fetch(`${t.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
      assert.equal(use.status, 200);
      assert.equal((await use.json()).object, 'list');
      // a client-chosen request id is echoed when it is well-formed, replaced when not
      const mine = await fetch(`${t.url}/v1/models`, { headers: { authorization: `Bearer ${key}`, 'x-request-id': 'trace-123' } });
      assert.equal(mine.headers.get('x-request-id'), 'trace-123');
      await mine.arrayBuffer();
      const evil = await fetch(`${t.url}/v1/models`, { headers: { authorization: `Bearer ${key}`, 'x-request-id': 'a b<script>' } });
      assert.match(evil.headers.get('x-request-id')!, /^req_[0-9a-f]{32}$/);
      await evil.arrayBuffer();
      const rev = await fetch(`${t.url}/v1/portal/api-keys/revoke`, { method: 'POST', headers: h, body: JSON.stringify({ api_key_id: body.data.id }) });
      assert.equal(rev.status, 200);
      assert.equal((await rev.json()).data.status, 'revoked');
      const after = await fetch(`${t.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
      assert.equal(after.status, 401);
      const err = await after.json();
      assert.equal(err.error.code, 'api_key_revoked');
      assert.equal(err.error.type, 'authentication_error');
    });

    test('errors over the wire keep the envelope; the portal answers JSON for a bad body', async () => {
      const jwt = await t.token('net-user-2');
      const bad = await fetch(`${t.url}/v1/portal/management/api-keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
        body: '{"name":',
      });
      assert.equal(bad.status, 400);
      const b = await bad.json();
      assert.equal(b.meta.code, 40005);
      assert.equal(b.data, null);
      const noAuth = await fetch(`${t.url}/v1/portal/management/api-keys`);
      assert.equal(noAuth.status, 401);
      assert.equal((await noAuth.json()).meta.message, 'unauthorized');
    });
  });
}
