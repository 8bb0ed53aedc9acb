import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { INFER, MGMT, assertOk, assertOpenAIError, assertPortalError, caller, expireInDb, nowS, type Caller } from './util.js';

for (const db of testDatabases()) {
  describe(`management keys, every validation rule and error (${db})`, () => {
    let t: TestApp;
    let call: Caller;
    let alice: string;
    before(async () => {
      t = await buildTestApp({ db });
      call = caller(t);
      alice = await t.token('alice');
    });
    after(() => t.close());

    const create = (body: unknown, token = alice) => call('POST', MGMT, token, body);

    test('name: missing, empty, whitespace-only and 101 characters -> 400; 100 characters OK', async () => {
      assertPortalError(await create({}), 400, /name/, 40000);
      assertPortalError(await create({ name: '' }), 400, /name/, 40000);
      assertPortalError(await create({ name: '   \t ' }), 400, /name/, 40000);
      assertPortalError(
        await create({ name: 'x'.repeat(101) }),
        400,
        "Invalid 'name': string too long. Expected a string with maximum length 100, but got a string with length 101 instead.",
        40000,
      );
      assertPortalError(await create({ name: 42 }), 400, /name/, 40000);
      const ok = assertOk(await create({ name: 'x'.repeat(100) }));
      assert.equal(ok.name.length, 100);
    });

    test('name length counts characters, not UTF-16 units or bytes', async () => {
      // 100 emoji = 200 UTF-16 units = 400 bytes: still 100 characters
      const emoji = assertOk(await create({ name: '😀'.repeat(100) }));
      assert.equal(emoji.name, '😀'.repeat(100));
      assertOk(await create({ name: '中'.repeat(100) }));
      assertPortalError(await create({ name: '😀'.repeat(101) }), 400, /name/, 40000);
      assertPortalError(await create({ name: '中'.repeat(101) }), 400, /name/, 40000);
      // description: 500 multi-byte characters are fine
      assertOk(await create({ name: 'd', description: 'é'.repeat(500) }));
      // clean up the active-limit budget for later tests
      const list = assertOk(await call('GET', `${MGMT}?per_page=100`, alice));
      for (const k of list.list) assertOk(await call('DELETE', `${MGMT}/${k.id}`, alice));
    });

    test('description: 501 characters -> 400, 500 OK', async () => {
      assertPortalError(
        await create({ name: 'd', description: 'x'.repeat(501) }),
        400,
        /^Invalid 'description': string too long\. Expected a string with maximum length 500/,
        40000,
      );
      const ok = assertOk(await create({ name: 'd', description: 'x'.repeat(500) }, await t.token('desc-user')));
      assert.equal(ok.description.length, 500);
    });

    test('expires_at: past, now, a string, negative, milliseconds by mistake -> 400; 0 OK', async () => {
      const u = await t.token('exp-user');
      assertPortalError(await create({ name: 'e', expires_at: nowS() - 60 }, u), 400, /expires_at/, 40002);
      assertPortalError(await create({ name: 'e', expires_at: nowS() }, u), 400, /expires_at/, 40002);
      assertPortalError(await create({ name: 'e', expires_at: String(nowS() + 3600) }, u), 400, /expires_at/, 40000);
      assertPortalError(await create({ name: 'e', expires_at: -1 }, u), 400, /expires_at/, 40000);
      assertPortalError(await create({ name: 'e', expires_at: Date.now() + 3_600_000 }, u), 400, /expires_at/, 40000);
      assertPortalError(await create({ name: 'e', expires_at: 1.5 + nowS() + 3600 }, u), 400, /expires_at/, 40000);
      const zero = assertOk(await create({ name: 'e', expires_at: 0 }, u));
      assert.equal(zero.expires_at, 0);
      const later = nowS() + 3600;
      assert.equal(assertOk(await create({ name: 'e', expires_at: later }, u)).expires_at, later);
      // nothing was created by the refused calls
      assert.equal(assertOk(await call('GET', MGMT, u)).total, 2);
    });

    test('scopes: 11 items, an empty item, 51 characters, not an array -> 400; 10 x 50 OK', async () => {
      const u = await t.token('scope-user');
      assertPortalError(
        await create({ name: 's', scopes: Array.from({ length: 11 }, (_, i) => `s${i}`) }, u),
        400,
        "Invalid 'scopes': array too long. Expected an array with maximum length 10, but got an array with length 11 instead.",
        40000,
      );
      assertPortalError(await create({ name: 's', scopes: ['usage:read', ''] }, u), 400, /scopes/, 40000);
      assertPortalError(await create({ name: 's', scopes: ['x'.repeat(51)] }, u), 400, /'scopes\[0\]': string too long\. Expected a string with maximum length 50/, 40000);
      assertPortalError(await create({ name: 's', scopes: 'usage:read' }, u), 400, /scopes/, 40000);
      assertPortalError(await create({ name: 's', scopes: [1] }, u), 400, /scopes/, 40000);
      // 10 items of 50 characters: model scopes of an inference key (a Management API Key has two scope values)
      const scopes = Array.from({ length: 10 }, (_, i) => `model:${String(i).padEnd(44, 'y')}`);
      assert.equal(scopes[0].length, 50);
      assert.deepEqual(assertOk(await call('POST', INFER, u, { name: 's', scopes })).scopes, scopes);
    });

    test('an unknown body field -> 400 naming it', async () => {
      const b = assertPortalError(await create({ name: 'n', status: 'disabled' }), 400, /status/, 40000);
      assert.match(b.meta.message, /Unknown parameter/);
      assertPortalError(await create({ name: 'n', api_key: 'mk-chosen' }), 400, /api_key/, 40000);
    });

    test('not JSON -> 400; wrong content type -> 415; a JSON array or string body -> 400', async () => {
      assertPortalError(await call('POST', MGMT, alice, '{"name": "x"', { 'content-type': 'application/json' }), 400, 'request body is not valid JSON', 40005);
      assertPortalError(await call('POST', MGMT, alice, 'name=x', { 'content-type': 'text/plain' }), 415, /content type/, 41500);
      assertPortalError(await call('POST', MGMT, alice, 'name=x', { 'content-type': 'application/x-www-form-urlencoded' }), 415, /content type/, 41500);
      assertPortalError(await call('POST', MGMT, alice, '[]', { 'content-type': 'application/json' }), 400, undefined, 40000);
      assertPortalError(await call('POST', MGMT, alice, '"x"', { 'content-type': 'application/json' }), 400, undefined, 40000);
      assertPortalError(await call('POST', MGMT, alice), 400, undefined, 40000);
    });

    test('NUL characters in JSON strings and in the URL -> 400, never 500', async () => {
      const u = await t.token('nul-user');
      assertPortalError(await create({ name: 'a\u0000b' }, u), 400, /NUL/, 40000);
      assertPortalError(await create({ name: 'ok', description: '\u0000' }, u), 400, /NUL/, 40000);
      assertPortalError(await create({ name: 'ok', scopes: ['a\u0000'] }, u), 400, /NUL/, 40000);
      assertPortalError(await create({ name: 'ok', org_id: '\u0000' }, u), 400, /NUL/, 40000);
      assertPortalError(await call('PUT', `${MGMT}/abc%00`, u, { name: 'x' }), 400, /NUL/, 40000);
      assertPortalError(await call('DELETE', `${MGMT}/%00`, u), 400, /NUL/, 40000);
      assertPortalError(await call('GET', `${MGMT}?status=%00`, u), 400, /NUL/, 40000);
      assertPortalError(await call('POST', `${MGMT}/revoke`, u, { api_key_id: 'x\u0000' }), 400, /NUL/, 40000);
      // an escaped backslash before u0000 is just text, not a NUL
      const lit = assertOk(await create({ name: 'a\\u0000b' }, u));
      assert.equal(lit.name, 'a\\u0000b');
      assert.equal(assertOk(await call('GET', MGMT, u)).total, 1);
    });

    test('list: per_page 0/101/abc, page 0/-1/abc, a bad status, an unknown parameter -> 400', async () => {
      for (const q of ['per_page=0', 'per_page=101', 'per_page=abc', 'page=0', 'page=-1', 'page=abc', 'status=deleted', 'status=ACTIVE', 'sort=name']) {
        assertPortalError(await call('GET', `${MGMT}?${q}`, alice), 400, undefined, 40000);
      }
      assert.equal(assertOk(await call('GET', `${MGMT}?per_page=100&page=1`, alice)).per_page, 100);
    });

    test('update: another field -> 400 "only name and description can be changed"; empty or invalid body -> 400', async () => {
      const u = await t.token('upd-user');
      const k = assertOk(await create({ name: 'orig', scopes: ['usage:read'] }, u));
      assertPortalError(await call('PUT', `${MGMT}/${k.id}`, u, { scopes: [] }), 400, /^only name and description can be changed/, 40000);
      assertPortalError(await call('PUT', `${MGMT}/${k.id}`, u, { name: 'n', status: 'revoked' }), 400, /^only name and description can be changed/, 40000);
      assertPortalError(await call('PUT', `${MGMT}/${k.id}`, u, { expires_at: 0 }), 400, /^only name and description can be changed/, 40000);
      assertPortalError(await call('PUT', `${MGMT}/${k.id}`, u, {}), 400, /name and\/or description/, 40000);
      assertPortalError(await call('PUT', `${MGMT}/${k.id}`, u), 400, undefined, 40000);
      assertPortalError(await call('PUT', `${MGMT}/${k.id}`, u, { name: '' }), 400, /name/, 40000);
      assertPortalError(await call('PUT', `${MGMT}/${k.id}`, u, { name: ' ' }), 400, /name/, 40000);
      assertPortalError(await call('PUT', `${MGMT}/${k.id}`, u, { name: 'x'.repeat(101) }), 400, /name/, 40000);
      assertPortalError(await call('PUT', `${MGMT}/${k.id}`, u, { description: 'x'.repeat(501) }), 400, /description/, 40000);
      // unchanged
      const after = assertOk(await call('GET', MGMT, u)).list[0];
      assert.equal(after.name, 'orig');
      assert.deepEqual(after.scopes, ['usage:read']);
      assert.equal(after.status, 'active');
    });

    test('revoke/restore without api_key_id -> 400 "api_key_id is required"', async () => {
      for (const action of ['revoke', 'restore']) {
        const url = `${MGMT}/${action}`;
        assertPortalError(await call('POST', url, alice), 400, 'api_key_id is required', 40001);
        assertPortalError(await call('POST', url, alice, {}), 400, 'api_key_id is required', 40001);
        assertPortalError(await call('POST', url, alice, ''), 400, 'api_key_id is required', 40001);
        assertPortalError(await call('POST', url, alice, '', { 'content-type': 'application/json' }), 400, 'api_key_id is required', 40001);
        assertPortalError(await call('POST', url, alice, 'null', { 'content-type': 'application/json' }), 400, 'api_key_id is required', 40001);
        assertPortalError(await call('POST', url, alice, { api_key_id: null }), 400, 'api_key_id is required', 40001);
        assertPortalError(await call('POST', url, alice, { api_key_id: '' }), 400, 'api_key_id is required', 40001);
        assertPortalError(await call('POST', url, alice, { api_key_id: 12 }), 400, /api_key_id/, 40000);
        // one validation policy: an extra field is refused as on create and update
        const extra = assertPortalError(await call('POST', url, alice, { api_key_id: 'mkey_x', force: true }), 400, "Unknown parameter: 'force'.", 40000);
        assert.equal(extra.meta.detail, 'unknown_parameter');
      }
    });

    test('an unknown id -> 404 on update, delete, revoke and restore', async () => {
      const id = 'mkey_doesnotexist';
      assertPortalError(await call('PUT', `${MGMT}/${id}`, alice, { name: 'x' }), 404, 'API key not found', 40401);
      assertPortalError(await call('DELETE', `${MGMT}/${id}`, alice), 404, 'API key not found', 40401);
      assertPortalError(await call('POST', `${MGMT}/revoke`, alice, { api_key_id: id }), 404, 'API key not found', 40401);
      assertPortalError(await call('POST', `${MGMT}/restore`, alice, { api_key_id: id }), 404, 'API key not found', 40401);
      // an unknown route under the portal is a 404 envelope too
      assertPortalError(await call('GET', '/v1/portal/nothing-here', alice), 404, undefined, 40400);
    });

    test('restore of an active (or disabled) key -> 409', async () => {
      const u = await t.token('restore-user');
      const k = assertOk(await create({ name: 'r' }, u));
      assertPortalError(await call('POST', `${MGMT}/restore`, u, { api_key_id: k.id }), 409, 'only revoked keys can be restored', 40901);
      await t.services.managementKeys.setDisabled(k.id, true);
      assertPortalError(await call('POST', `${MGMT}/restore`, u, { api_key_id: k.id }), 409, 'only revoked keys can be restored', 40901);
    });

    test('the 11th active key -> 409; revoked, deleted, expired and disabled keys do not count; restore over the limit -> 409', async () => {
      const u = await t.token('limit-user');
      const ids: string[] = [];
      for (let i = 0; i < 10; i++) ids.push(assertOk(await create({ name: `k${i}` }, u)).id);
      assertPortalError(await create({ name: 'k10' }, u), 409, /^active API key limit reached/, 40900);
      // revoke one: a place frees up
      assertOk(await call('POST', `${MGMT}/revoke`, u, { api_key_id: ids[0] }));
      const r1 = assertOk(await create({ name: 'after revoke' }, u));
      assertPortalError(await create({ name: 'again' }, u), 409, /limit/, 40900);
      // restoring the revoked key now would make 11
      assertPortalError(await call('POST', `${MGMT}/restore`, u, { api_key_id: ids[0] }), 409, /limit/, 40900);
      // delete one: a place frees up
      assertOk(await call('DELETE', `${MGMT}/${ids[1]}`, u));
      assertOk(await create({ name: 'after delete' }, u));
      assertPortalError(await create({ name: 'again' }, u), 409, /limit/, 40900);
      // an expired key no longer holds a place
      await expireInDb(t, ids[2]);
      assertOk(await create({ name: 'after expiry' }, u));
      assertPortalError(await create({ name: 'again' }, u), 409, /limit/, 40900);
      // a disabled key is not active either (only the operator sets it, and enables it again at will)
      await t.services.managementKeys.setDisabled(ids[3], true);
      assertOk(await create({ name: 'after disable' }, u));
      assertPortalError(await create({ name: 'again' }, u), 409, /limit/, 40900);
      // revoke one, then the old revoked key can be restored into its place
      assertOk(await call('POST', `${MGMT}/revoke`, u, { api_key_id: r1.id }));
      assert.equal(assertOk(await call('POST', `${MGMT}/restore`, u, { api_key_id: ids[0] })).status, 'active');
      // the limit is per kind: inference keys have their own
      assertOk(await call('POST', '/v1/portal/api-keys', u, { name: 'inference' }));
    });

    test("an org key by a non-admin (member, other org's admin, no role) -> 403 permission denied", async () => {
      const member = await t.token('m', { acme: 'member' });
      const otherAdmin = await t.token('o', { globex: 'admin' });
      const nobody = await t.token('n');
      for (const tok of [member, otherAdmin, nobody]) {
        assertPortalError(await create({ name: 'org', org_id: 'acme' }, tok), 403, /^permission denied/, 40300);
      }
      // a role claim that is not a string or an odd org name does not grant anything
      const weird = await t.token('w', { acme: 'Admin' });
      assertPortalError(await create({ name: 'org', org_id: 'acme' }, weird), 403, /^permission denied/, 40300);
      assertPortalError(await create({ name: 'org', org_id: '__proto__' }, nobody), 403, /^permission denied/, 40300);
      assertPortalError(await create({ name: 'org', org_id: 'constructor' }, nobody), 403, /^permission denied/, 40300);
      // and the same admin succeeds in its own org
      assert.equal(assertOk(await create({ name: 'org', org_id: 'globex' }, otherAdmin)).org_id, 'globex');
      // nothing was created in acme
      const rows = await t.services.db.db.selectFrom('api_keys').select('id').where('org_id', '=', 'acme').execute();
      assert.equal(rows.length, 0);
    });

    test('scopes: unknown values and repeats -> 400 naming the item and listing the allowed values of that kind of key (en, zh)', async () => {
      const u = await t.token('scope-words');
      let b = assertPortalError(await create({ name: 's', scopes: ['usage.read'] }, u), 400, undefined, 40000);
      assert.equal(b.meta.message, "Invalid value for 'scopes[0]': 'usage.read' is not a scope of Management API Keys. Allowed values: 'usage:read', 'balance:read', 'admin'.");
      assert.equal(b.meta.detail, 'invalid_value');
      b = assertPortalError(
        await create({ name: 's', scopes: ['balance:read', 'usage:read', 'usage:read'] }, u),
        400,
        /'scopes\[2\]': 'usage:read' is listed twice\. Allowed values: 'usage:read', 'balance:read', 'admin'\./,
        40000,
      );
      // an inference-key scope on a Management API Key, and the other way round
      assertPortalError(await create({ name: 's', scopes: ['responses'] }, u), 400, /'responses' is not a scope of Management API Keys/, 40000);
      b = assertPortalError(await call('POST', INFER, u, { name: 's', scopes: ['usage:read'] }), 400, undefined, 40000);
      assert.equal(
        b.meta.message,
        "Invalid value for 'scopes[0]': 'usage:read' is not a scope of inference keys. Allowed values: 'responses', 'chat', 'embeddings', 'audio', 'anthropic-messages', 'realtime', 'models', '*', 'model:NAME'.",
      );
      assertPortalError(await call('POST', INFER, u, { name: 's', scopes: ['respones'] }), 400, /'respones' is not a scope of inference keys/, 40000);
      assertPortalError(await call('POST', INFER, u, { name: 's', scopes: ['model:a b'] }), 400, /'model:a b' is not a scope/, 40000);
      assertPortalError(await call('POST', INFER, u, { name: 's', scopes: ['model:x', 'model:x'] }), 400, /listed twice/, 40000);
      b = assertPortalError(await create({ name: 's', scopes: ['usage.read'] }, u), 400, undefined, 40000);
      const zh = (await call('POST', MGMT, u, { name: 's', scopes: ['usage.read'] }, { 'accept-language': 'zh-CN' })).json();
      assert.equal(zh.meta.message, "'scopes[0]' 的值无效：'usage.read' 不是管理 API 密钥的作用域。允许的值：'usage:read'、'balance:read'、'admin'。");
      // nothing was made; every allowed value is accepted
      assert.equal(assertOk(await call('GET', MGMT, u)).total, 0);
      assert.deepEqual(assertOk(await create({ name: 's', scopes: ['usage:read', 'balance:read'] }, u)).scopes, ['usage:read', 'balance:read']);
      const all = ['responses', 'chat', 'embeddings', 'audio', 'anthropic-messages', 'realtime', 'models', '*', 'model:gpt-4o-mini'];
      assert.deepEqual(assertOk(await call('POST', INFER, u, { name: 's', scopes: all })).scopes, all);
    });

    test('validation messages say what is allowed in words, never a pattern or "must be equal to constant" (en, zh)', async () => {
      const cases: Array<[string, string, unknown, RegExp, RegExp]> = [
        ['POST', MGMT, { name: '   ' }, /Expected a name with at least one visible character/, /至少包含一个可见字符/],
        ['PUT', `${MGMT}/mkey_x`, { name: ' ' }, /Expected a name with at least one visible character/, /至少包含一个可见字符/],
        ['GET', `${MGMT}?status=gone`, undefined, /Supported values are: 'active', 'disabled', 'revoked'/, /支持的值/],
        ['GET', '/v1/portal/query/usage?group_by=week', undefined, /Expected a comma-separated list of 'day', 'model', 'key', 'operation'/, /以逗号分隔/],
      ];
      for (const [method, url, body, en, zh] of cases) {
        for (const [lang, want] of [
          ['en', en],
          ['zh-CN', zh],
        ] as const) {
          const m = assertPortalError(await call(method, url, alice, body, { 'accept-language': lang }), 400, want, 40000).meta.message;
          assert.doesNotMatch(m, /must be equal to constant|must match pattern|\\S|\^\(|expected format/, m);
        }
      }
    });

    test('a wrong method on a known path -> 405 with Allow in the portal envelope; an unknown path stays 404', async () => {
      for (const [method, url, allow] of [
        ['PATCH', MGMT, 'GET, HEAD, POST'],
        ['DELETE', MGMT, 'GET, HEAD, POST'],
        ['GET', `${MGMT}/revoke`, 'DELETE, POST, PUT'],
        ['GET', `${MGMT}/restore`, 'DELETE, POST, PUT'],
        ['POST', `${MGMT}/mkey_x`, 'DELETE, PUT'],
        ['PUT', INFER, 'GET, HEAD, POST'],
        ['POST', '/v1/portal/query/usage', 'GET, HEAD'],
      ] as const) {
        const res = await call(method, url, alice, method === 'GET' ? undefined : {});
        const b = assertPortalError(res, 405, new RegExp(`^method ${method} is not allowed on`), 40500);
        assert.equal(b.meta.error, 'method_not_allowed');
        assert.equal(res.headers.allow, allow, `${method} ${url}`);
      }
      const nf = await call('GET', '/v1/portal/management/nothing-here', alice);
      assertPortalError(nf, 404, /no route/, 40400);
      assert.equal(nf.headers.allow, undefined);
    });

    test('a wrong method on a known {base_url} path -> 405 with Allow in the OpenAI shape', async () => {
      const sk = await t.inferenceKey('method-user');
      for (const [method, url, allow] of [
        ['DELETE', '/v1/chat/completions', 'POST'],
        ['PUT', '/v1/embeddings', 'POST'],
        ['POST', '/v1/models', 'GET, HEAD'],
        ['PATCH', '/v1/responses/resp_x', 'DELETE, GET, HEAD'],
      ] as const) {
        const res = await call(method, url, sk, {});
        const b = assertOpenAIError(res, 405, 'method_not_allowed', new RegExp(`^method ${method} is not allowed`));
        assert.equal(b.error.type, 'invalid_request_error');
        assert.equal(res.headers.allow, allow, `${method} ${url}`);
      }
      assertOpenAIError(await call('GET', '/v1/nothing-here', sk), 404, 'not_found');
    });
  });
}
