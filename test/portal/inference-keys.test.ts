import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import type { ModelSpec } from '../../src/models/config.js';
import { INFER, assertOk, assertOpenAIError, assertPortalError, caller, eventually, nowS, sleep, type Caller } from './util.js';

const models = ['m1', 'm2', 'm3'].map((name) => ({ name, provider: 'openai-compatible', base_url: 'http://127.0.0.1:9/v1', type: 'text' }) as ModelSpec);

for (const db of testDatabases()) {
  describe(`inference keys (${db})`, () => {
    let t: TestApp;
    let call: Caller;
    let alice: string;
    before(async () => {
      t = await buildTestApp({ db, models });
      call = caller(t);
      alice = await t.token('alice');
    });
    after(() => t.close());

    const models$ = (key: string, headers?: Record<string, string>) => call('GET', '/v1/models', key, undefined, headers);

    test('the six operations under /v1/portal/api-keys create and manage sk- keys', async () => {
      const u = await t.token('ops');
      const k = assertOk(await call('POST', INFER, u, { name: 'svc', description: 'd', scopes: ['responses'] }));
      assert.match(k.api_key, /^sk-[0-9A-Za-z]{38}$/);
      assert.equal(k.display, `${k.api_key.slice(0, 7)}...${k.api_key.slice(-4)}`);
      assert.match(k.id, /^key_/);
      assert.equal(k.status, 'active');
      const list = assertOk(await call('GET', INFER, u));
      assert.equal(list.total, 1);
      assert.equal(list.list[0].api_key, undefined);
      assert.equal(assertOk(await call('PUT', `${INFER}/${k.id}`, u, { name: 'svc2' })).name, 'svc2');
      assertPortalError(await call('PUT', `${INFER}/${k.id}`, u, { scopes: [] }), 400, /^only name, description and max_concurrency can be changed/);
      assert.equal(assertOk(await call('POST', `${INFER}/revoke`, u, { api_key_id: k.id })).status, 'revoked');
      assert.equal(assertOk(await call('GET', `${INFER}?status=revoked`, u)).total, 1);
      assert.equal(assertOk(await call('POST', `${INFER}/restore`, u, { api_key_id: k.id })).status, 'active');
      assertPortalError(await call('POST', `${INFER}/restore`, u, { api_key_id: k.id }), 409);
      assertPortalError(await call('POST', `${INFER}/revoke`, u, {}), 400, 'api_key_id is required');
      assert.equal(assertOk(await call('DELETE', `${INFER}/${k.id}`, u)).id, k.id);
      assert.equal(assertOk(await call('GET', INFER, u)).total, 0);
      // the active limit applies to inference keys too (default 10)
      for (let i = 0; i < 10; i++) assertOk(await call('POST', INFER, u, { name: `k${i}` }));
      assertPortalError(await call('POST', INFER, u, { name: 'k10' }), 409, /limit/, 40900);
    });

    test('GET /v1/models with an inference key -> 200 in the OpenAI list shape', async () => {
      const key = await t.inferenceKey('alice');
      const res = await models$(key);
      assert.equal(res.statusCode, 200);
      const body = res.json();
      assert.equal(body.object, 'list');
      assert.deepEqual(
        body.data.map((m: any) => m.id),
        ['m1', 'm2', 'm3'],
      );
      for (const m of body.data) {
        assert.equal(m.object, 'model');
        assert.equal(typeof m.created, 'number');
        assert.equal(typeof m.owned_by, 'string');
        assert.deepEqual([m.type, m.engine], ['text', 'openai-compatible']);
      }
      assert.match(res.headers['x-request-id'] as string, /^req_/);
      const one = await call('GET', '/v1/models/m2', key);
      assert.equal(one.statusCode, 200);
      assert.equal(one.json().id, 'm2');
      assertOpenAIError(await call('GET', '/v1/models/nope', key), 404, 'model_not_found');
    });

    test('malformed keys -> 401 invalid_format in English and Simplified Chinese, without a database read', async () => {
      const key = await t.inferenceKey('alice');
      const store = (t.services.verifier as any).store;
      const orig = store.findByDigest;
      let reads = 0;
      store.findByDigest = (...a: unknown[]) => {
        reads++;
        return orig.apply(store, a);
      };
      try {
        const missesBefore = t.services.verifier.misses;
        const flip = (c: string) => (c === 'a' ? 'b' : 'a');
        const malformed = [
          key.slice(0, -1) + flip(key.slice(-1)), // checksum character changed
          key.slice(0, 10) + flip(key[10]) + key.slice(11), // body character changed
          'pk-' + key.slice(3), // wrong prefix
          'sk_' + key.slice(3),
          key + 'x', // too long
          key.slice(0, -1), // too short
          'hello-world', // random text
          'sk-' + 'A'.repeat(38),
          'mk-' + key.slice(3), // right body, prefix changed: the checksum covers the prefix
        ];
        for (const bad of malformed) {
          const en = assertOpenAIError(await models$(bad), 401, 'invalid_format', 'invalid API key format');
          assert.equal(en.error.type, 'authentication_error');
          assertOpenAIError(await models$(bad, { 'accept-language': 'zh-CN' }), 401, 'invalid_format', 'API 密钥格式无效');
          assertOpenAIError(await models$(bad, { 'accept-language': 'fr-FR, zh;q=0.8, en;q=0.5' }), 401, 'invalid_format', 'API 密钥格式无效');
          assertOpenAIError(await models$(bad, { 'accept-language': 'de' }), 401, 'invalid_format', 'invalid API key format');
        }
        assert.equal(reads, 0, 'a malformed key must be refused without a database read');
        assert.equal(t.services.verifier.misses, missesBefore);
        // a well-formed but unknown key does read the database, once
        const { generateApiKey } = await import('../../src/platform/auth/api-key-format.js');
        assertOpenAIError(await models$(generateApiKey('inference')), 401, 'invalid_api_key');
        assert.equal(reads, 1);
        // the query APIs give the same i18n error in the portal envelope
        assertPortalError(await call('GET', '/v1/portal/query/usage', 'mk-' + 'A'.repeat(38), undefined, { 'accept-language': 'zh-CN' }), 401, 'API 密钥格式无效', 40103);
      } finally {
        store.findByDigest = orig;
      }
    });

    test('missing or non-Bearer authorization on {base_url} -> 401', async () => {
      assertOpenAIError(await call('GET', '/v1/models'), 401, 'unauthorized', 'unauthorized');
      assertOpenAIError(
        await call('GET', '/v1/models', undefined, undefined, { authorization: 'Basic x' }),
        401,
        'invalid_authorization_format',
        'unauthorized: invalid authorization format',
      );
      assertOpenAIError(await call('GET', '/v1/models', undefined, undefined, { authorization: 'Bearer a b' }), 401, 'invalid_authorization_format');
    });

    test('revoked -> 401 on the very next request; restored -> works; deleted -> 401', async () => {
      const k = assertOk(await call('POST', INFER, alice, { name: 'lifecycle' }));
      for (let i = 0; i < 3; i++) assert.equal((await models$(k.api_key)).statusCode, 200); // now cached
      assertOk(await call('POST', `${INFER}/revoke`, alice, { api_key_id: k.id }));
      assertOpenAIError(await models$(k.api_key), 401, 'api_key_revoked');
      assertOpenAIError(await models$(k.api_key, { 'accept-language': 'zh-CN' }), 401, 'api_key_revoked', '未授权：API 密钥已被吊销');
      assertOk(await call('POST', `${INFER}/restore`, alice, { api_key_id: k.id }));
      assert.equal((await models$(k.api_key)).statusCode, 200);
      assertOk(await call('DELETE', `${INFER}/${k.id}`, alice));
      assertOpenAIError(await models$(k.api_key), 401, 'invalid_api_key');
      assertOpenAIError(await models$(k.api_key), 401, 'invalid_api_key');
    });

    test('disabled via the service -> 401; enabled again -> works', async () => {
      const k = assertOk(await call('POST', INFER, alice, { name: 'disable me' }));
      assert.equal((await models$(k.api_key)).statusCode, 200);
      assert.equal((await t.services.inferenceKeys.setDisabled(k.id, true)).status, 'disabled');
      assertOpenAIError(await models$(k.api_key), 401, 'api_key_disabled');
      const listed = assertOk(await call('GET', `${INFER}?status=disabled`, alice));
      assert.deepEqual(
        listed.list.map((x: any) => x.id),
        [k.id],
      );
      await t.services.inferenceKeys.setDisabled(k.id, false);
      assert.equal((await models$(k.api_key)).statusCode, 200);
      await call('DELETE', `${INFER}/${k.id}`, alice);
    });

    test('expired -> 401 once expires_at passes (also when cached)', async () => {
      // +4: 3 s at least for the create and the first request (a SQL expiry would not prove the cached case: the
      // cached row keeps its expires_at, the clock alone must expire it)
      const exp = nowS() + 4;
      const k = assertOk(await call('POST', INFER, alice, { name: 'short lived', expires_at: exp }));
      assert.equal((await models$(k.api_key)).statusCode, 200);
      // waits for the clock the code compares with (expires_at is in its seconds), not for the machine
      const wait = exp * 1000 - Date.now() + 20;
      if (wait > 0) await sleep(wait);
      assertOpenAIError(await models$(k.api_key), 401, 'api_key_expired');
      await call('DELETE', `${INFER}/${k.id}`, alice);
    });

    test('a Management API Key on /v1/models -> 401', async () => {
      const mk = assertOk(await call('POST', '/v1/portal/management/api-keys', alice, { name: 'mgmt' })).api_key;
      assertOpenAIError(await models$(mk), 401, 'invalid_api_key', /inference key/);
    });

    test('scopes: route scopes gate endpoints, model:NAME scopes filter the models', async () => {
      let n = 0;
      const get = async (scopes: string[]) => models$(await t.inferenceKey(`scoper${n++}`, { scopes, name: scopes.join(' ') || 'none' }));
      const ids = (r: Awaited<ReturnType<typeof get>>) => (assert.equal(r.statusCode, 200, r.body), r.json().data.map((m: any) => m.id));
      // no scopes: everything
      assert.deepEqual(ids(await get([])), ['m1', 'm2', 'm3']);
      // every valid key may list the models it may use (clients call /v1/models to check a key), even one
      // limited to other endpoints; model scopes still filter the list
      assert.deepEqual(ids(await get(['audio'])), ['m1', 'm2', 'm3']);
      assert.deepEqual(ids(await get(['responses'])), ['m1', 'm2', 'm3']);
      assert.deepEqual(ids(await get(['audio', 'model:m1'])), ['m1']);
      // route scope that names models, or '*'
      assert.deepEqual(ids(await get(['models'])), ['m1', 'm2', 'm3']);
      assert.deepEqual(ids(await get(['audio', 'models'])), ['m1', 'm2', 'm3']);
      assert.deepEqual(ids(await get(['*'])), ['m1', 'm2', 'm3']);
      // model scopes filter
      assert.deepEqual(ids(await get(['model:m1'])), ['m1']);
      assert.deepEqual(ids(await get(['models', 'model:m2', 'model:m3'])), ['m2', 'm3']);
      assert.deepEqual(ids(await get(['model:nope'])), []);
      const k = await t.inferenceKey('scoper2', { scopes: ['model:m1'] });
      assert.equal((await call('GET', '/v1/models/m1', k)).statusCode, 200);
      assertOpenAIError(await call('GET', '/v1/models/m2', k), 404, 'model_not_found');
    });

    test('last_used_at is set after use', async () => {
      const k = assertOk(await call('POST', INFER, alice, { name: 'used' }));
      assert.equal(k.last_used_at, 0);
      const before = nowS();
      assert.equal((await models$(k.api_key)).statusCode, 200);
      const rec = await eventually(async () => assertOk(await call('GET', INFER, alice)).list.find((x: any) => x.id === k.id && x.last_used_at > 0));
      assert.ok(rec.last_used_at >= before && rec.last_used_at <= nowS());
      await call('DELETE', `${INFER}/${k.id}`, alice);
    });

    test('last_used_at writes are throttled (at most once per interval per key)', async () => {
      const k = assertOk(await call('POST', INFER, alice, { name: 'busy' }));
      const store = (t.services.verifier as any).store;
      const orig = store.touchLastUsed;
      let writes = 0;
      store.touchLastUsed = (...a: unknown[]) => {
        writes++;
        return orig.apply(store, a);
      };
      try {
        for (let i = 0; i < 20; i++) assert.equal((await models$(k.api_key)).statusCode, 200);
        assert.equal(writes, 1, 'the default interval (60 s) allows one write');
        await eventually(async () => {
          const r = await t.services.db.db.selectFrom('api_keys').select('last_used_at').where('id', '=', k.id).executeTakeFirstOrThrow();
          return r.last_used_at > 0;
        });
      } finally {
        store.touchLastUsed = orig;
      }
      await call('DELETE', `${INFER}/${k.id}`, alice);
    });
  });

  describe(`last_used_at with LAST_USED_WRITE_INTERVAL_MS (${db})`, () => {
    let t: TestApp;
    // ten requests in a row must fit in one interval: 1 s leaves room for a stall of a loaded machine
    before(async () => {
      t = await buildTestApp({ db, env: { LAST_USED_WRITE_INTERVAL_MS: '1000' } });
    });
    after(() => t.close());

    test('a write per interval, not per request', async () => {
      const key = await t.inferenceKey('u');
      const store = (t.services.verifier as any).store;
      const orig = store.touchLastUsed;
      let writes = 0;
      store.touchLastUsed = (...a: unknown[]) => {
        writes++;
        return orig.apply(store, a);
      };
      try {
        const call = caller(t);
        for (let i = 0; i < 10; i++) assert.equal((await call('GET', '/v1/models', key)).statusCode, 200);
        assert.equal(writes, 1);
        await sleep(1020); // the write interval (1 s, the code's own clock): timed behaviour, a lower bound
        for (let i = 0; i < 10; i++) assert.equal((await call('GET', '/v1/models', key)).statusCode, 200);
        assert.equal(writes, 2);
      } finally {
        store.touchLastUsed = orig;
      }
    });
  });
}
