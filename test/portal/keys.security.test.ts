import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { Writable } from 'node:stream';
import { SignJWT, exportJWK, exportSPKI, generateKeyPair } from 'jose';
import { buildTestApp, testDatabases, TEST_JWT_SECRET, type TestApp } from '../helpers/app.js';
import { signToken } from '../../src/platform/auth/jwt.js';
import { INFER, MGMT, assertOk, assertOpenAIError, assertPortalError, caller, type Caller } from './util.js';

const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');

for (const db of testDatabases()) {
  describe(`key isolation between users and collections (${db})`, () => {
    let t: TestApp;
    let call: Caller;
    before(async () => {
      t = await buildTestApp({ db });
      call = caller(t);
    });
    after(() => t.close());

    for (const base of [MGMT, INFER]) {
      test(`user B cannot see, update, delete, revoke or restore A's keys (${base})`, async () => {
        const a = await t.token(`a${base.length}`);
        const b = await t.token(`b${base.length}`, { acme: 'admin' });
        const key = assertOk(await call('POST', base, a, { name: 'A key', description: 'mine' }));
        const revoked = assertOk(await call('POST', base, a, { name: 'A revoked' }));
        assertOk(await call('POST', `${base}/revoke`, a, { api_key_id: revoked.id }));
        const before = assertOk(await call('GET', base, a));

        const listB = assertOk(await call('GET', base, b));
        assert.equal(listB.total, 0);
        assert.equal(assertOk(await call('GET', `${base}?org_id=default`, b)).total, 0);
        assertPortalError(await call('PUT', `${base}/${key.id}`, b, { name: 'hijacked' }), 404, 'API key not found');
        assertPortalError(await call('DELETE', `${base}/${key.id}`, b), 404, 'API key not found');
        assertPortalError(await call('POST', `${base}/revoke`, b, { api_key_id: key.id }), 404, 'API key not found');
        assertPortalError(await call('POST', `${base}/restore`, b, { api_key_id: revoked.id }), 404, 'API key not found');

        const afterList = assertOk(await call('GET', base, a));
        assert.deepEqual(afterList, before);
        const k = afterList.list.find((x: any) => x.id === key.id);
        assert.equal(k.name, 'A key');
        assert.equal(k.status, 'active');
        assert.equal(afterList.list.find((x: any) => x.id === revoked.id).status, 'revoked');
      });
    }

    // who may see and manage organization keys: test/portal/org-keys.security.test.ts

    test('management keys and inference keys are separate collections', async () => {
      const u = await t.token('two-kinds');
      const mk = assertOk(await call('POST', MGMT, u, { name: 'mgmt' }));
      const sk = assertOk(await call('POST', INFER, u, { name: 'infer' }));
      assert.match(mk.api_key, /^mk-/);
      assert.match(sk.api_key, /^sk-/);
      const ml = assertOk(await call('GET', MGMT, u));
      const il = assertOk(await call('GET', INFER, u));
      assert.deepEqual(
        ml.list.map((k: any) => k.id),
        [mk.id],
      );
      assert.deepEqual(
        il.list.map((k: any) => k.id),
        [sk.id],
      );
      // an id of one kind is unknown to the other's operations
      assertPortalError(await call('PUT', `${MGMT}/${sk.id}`, u, { name: 'x' }), 404);
      assertPortalError(await call('DELETE', `${MGMT}/${sk.id}`, u), 404);
      assertPortalError(await call('POST', `${MGMT}/revoke`, u, { api_key_id: sk.id }), 404);
      assertPortalError(await call('PUT', `${INFER}/${mk.id}`, u, { name: 'x' }), 404);
      assertPortalError(await call('POST', `${INFER}/revoke`, u, { api_key_id: mk.id }), 404);
      assertPortalError(await call('DELETE', `${INFER}/${mk.id}`, u), 404);
      // a management key does not call {base_url}; an inference key does not call the query APIs
      assertOpenAIError(await call('GET', '/v1/models', mk.api_key), 401, 'invalid_api_key');
      assertPortalError(await call('GET', '/v1/portal/query/usage', sk.api_key), 401);
      // and neither is a portal JWT
      assertPortalError(await call('GET', MGMT, mk.api_key), 401, /^unauthorized/);
      assertPortalError(await call('GET', INFER, sk.api_key), 401, /^unauthorized/);
    });

    test('the full key appears in the create answer only', async () => {
      const u = await t.token('show-once');
      for (const base of [MGMT, INFER]) {
        const k = assertOk(await call('POST', base, u, { name: 'once' }));
        const answers = [
          await call('GET', base, u),
          await call('GET', `${base}?status=active`, u),
          await call('PUT', `${base}/${k.id}`, u, { name: 'renamed' }),
          await call('POST', `${base}/revoke`, u, { api_key_id: k.id }),
          await call('POST', `${base}/restore`, u, { api_key_id: k.id }),
          await call('POST', `${base}/restore`, u, { api_key_id: k.id }), // 409
          await call('DELETE', `${base}/${k.id}`, u),
          await call('GET', base === MGMT ? '/v1/portal/query/usage' : '/v1/models', k.api_key), // 401 deleted
          await call('GET', '/openapi.json'),
        ];
        for (const r of answers) {
          assert.ok(!r.body.includes(k.api_key), `the key leaked in ${r.body.slice(0, 200)}`);
          assert.ok(!r.body.includes(k.api_key.slice(7, -4)), 'the secret body leaked');
          assert.ok(!JSON.stringify(r.headers).includes(k.api_key));
        }
      }
    });
  });

  describe(`no secret in any log line (${db})`, () => {
    const lines: string[] = [];
    let t: TestApp;
    let call: Caller;
    before(async () => {
      const stream = new Writable({
        write(chunk, _enc, cb) {
          lines.push(chunk.toString());
          cb();
        },
      });
      t = await buildTestApp({ db, env: { LOG_LEVEL: 'trace' }, logDestination: stream });
      call = caller(t);
    });
    after(() => t.close());

    test('keys and JWTs never reach the log, on success and on every error path', async () => {
      const jwt = await t.token('logger-user', { acme: 'admin' });
      const secrets: string[] = [jwt, TEST_JWT_SECRET];
      const mk = assertOk(await call('POST', MGMT, jwt, { name: 'log test', scopes: ['usage:read'] }));
      const sk = assertOk(await call('POST', INFER, jwt, { name: 'log test' }));
      secrets.push(mk.api_key, sk.api_key);
      assertOk(await call('GET', MGMT, jwt));
      assert.equal((await call('GET', '/v1/models', sk.api_key)).statusCode, 200);
      assertOk(await call('GET', '/v1/portal/query/usage', mk.api_key));
      assertPortalError(await call('GET', '/v1/portal/query/balance', mk.api_key), 403);
      // errors: a key of the wrong kind, bad checksum, revoked, a bad JWT
      const bad = sk.api_key.slice(0, -1) + (sk.api_key.endsWith('A') ? 'B' : 'A');
      secrets.push(bad);
      assertOpenAIError(await call('GET', '/v1/models', bad), 401, 'invalid_format');
      assertOpenAIError(await call('GET', '/v1/models', mk.api_key), 401);
      assertOk(await call('POST', `${INFER}/revoke`, jwt, { api_key_id: sk.id }));
      assertOpenAIError(await call('GET', '/v1/models', sk.api_key), 401, 'api_key_revoked');
      const forged = jwt.slice(0, -4) + 'AAAA';
      secrets.push(forged);
      assertPortalError(await call('GET', MGMT, forged), 401);
      // a key sent in the body of a create (refused as unknown field) and invalid JSON containing a key
      assertPortalError(await call('POST', MGMT, jwt, { name: 'x', api_key: sk.api_key }), 400);
      assertPortalError(await call('POST', MGMT, jwt, `{"name": "${mk.api_key}"`, { 'content-type': 'application/json' }), 400);
      // a key in a query string
      await call('GET', `/v1/models?key=${sk.api_key}`, sk.api_key);
      await call('GET', `/v1/nowhere`, sk.api_key);
      assert.ok(lines.length > 10, 'the logger wrote lines');
      assert.ok(lines.some((l) => l.includes('"level":10') || l.includes('"level":20') || l.includes('"level":30')));
      for (const l of lines) {
        for (const s of secrets) assert.ok(!l.includes(s), `a secret leaked into the log: ${l.slice(0, 300)}`);
        assert.ok(!/\b[sm]k-[0-9A-Za-z]{38}\b/.test(l), `something key-shaped in the log: ${l.slice(0, 300)}`);
        assert.ok(!/eyJ[A-Za-z0-9_-]+\.eyJ/.test(l), `something JWT-shaped in the log: ${l.slice(0, 300)}`);
      }
      // every request has its line with a request id
      const reqLines = lines.map((l) => JSON.parse(l)).filter((o) => o.msg === 'request');
      assert.ok(reqLines.length >= 10);
      for (const o of reqLines) assert.ok(typeof o.reqId === 'string' && o.reqId.length > 0);
    });
  });

  describe(`portal JWT attacks (${db})`, () => {
    let t: TestApp;
    let call: Caller;
    before(async () => {
      t = await buildTestApp({ db });
      call = caller(t);
    });
    after(() => t.close());

    const secret = new TextEncoder().encode(TEST_JWT_SECRET);

    test('missing header -> 401 unauthorized', async () => {
      assertPortalError(await call('GET', MGMT), 401, 'unauthorized', 40100);
      assertPortalError(await call('POST', MGMT, undefined, { name: 'x' }), 401, 'unauthorized', 40100);
      assertPortalError(await call('GET', MGMT, undefined, undefined, { authorization: '' }), 401, 'unauthorized', 40100);
    });

    test('a header not in Bearer form -> 401 unauthorized: invalid authorization format', async () => {
      const good = await t.token('x');
      for (const h of ['Basic x', 'Basic dXNlcjpwYXNz', 'Bearer', 'Bearer a b', `Token ${good}`, good, `Bearer${good}`]) {
        assertPortalError(await call('GET', MGMT, undefined, undefined, { authorization: h }), 401, 'unauthorized: invalid authorization format', 40101);
      }
      // the scheme name is case-insensitive (RFC 7235)
      assertOk(await call('GET', MGMT, undefined, undefined, { authorization: `bearer ${good}` }));
    });

    test('expired token, wrong secret, alg none, no sub, nbf in the future, garbage -> 401', async () => {
      const expired = await signToken(secret, { userId: 'x', ttlSeconds: -60 });
      assertPortalError(await call('GET', MGMT, expired), 401, /^unauthorized: token has expired/, 40102);
      const other = await signToken(new TextEncoder().encode('another-secret-0123456789abcdef0123456789'), { userId: 'x' });
      assertPortalError(await call('GET', MGMT, other), 401, /^unauthorized/, 40102);
      const exp = Math.floor(Date.now() / 1000) + 3600;
      const none = `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ sub: 'x', exp })}.`;
      assertPortalError(await call('GET', MGMT, none), 401, /^unauthorized/, 40102);
      const noneSigned = `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ sub: 'x', exp })}.${Buffer.from('sig').toString('base64url')}`;
      assertPortalError(await call('GET', MGMT, noneSigned), 401, /^unauthorized/, 40102);
      // HS256 header with a payload changed after signing
      const good = await t.token('x');
      const [h, , s] = good.split('.');
      const tampered = `${h}.${b64({ sub: 'admin', exp, org_roles: { acme: 'admin' } })}.${s}`;
      assertPortalError(await call('GET', MGMT, tampered), 401, /^unauthorized/, 40102);
      const noSub = await new SignJWT({ org_roles: {} }).setProtectedHeader({ alg: 'HS256' }).setIssuedAt().setExpirationTime(exp).sign(secret);
      assertPortalError(await call('GET', MGMT, noSub), 401, /^unauthorized/, 40102);
      const emptySub = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject('').setIssuedAt().setExpirationTime(exp).sign(secret);
      assertPortalError(await call('GET', MGMT, emptySub), 401, /^unauthorized/, 40102);
      const nbf = await new SignJWT({})
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject('x')
        .setIssuedAt()
        .setNotBefore(exp - 1800)
        .setExpirationTime(exp)
        .sign(secret);
      assertPortalError(await call('GET', MGMT, nbf), 401, /^unauthorized/, 40102);
      const hs512 = await new SignJWT({}).setProtectedHeader({ alg: 'HS512' }).setSubject('x').setIssuedAt().setExpirationTime(exp).sign(new Uint8Array(64).fill(7));
      assertPortalError(await call('GET', MGMT, hs512), 401, /^unauthorized/, 40102);
      for (const g of ['x', 'a.b.c', 'eyJ.eyJ.', `${b64({ alg: 'HS256' })}.notjson.x`]) {
        assertPortalError(await call('GET', MGMT, g), 401, /^unauthorized/);
      }
      // nothing got through: nothing was written
      const rows = await t.services.db.db.selectFrom('api_keys').select('id').execute();
      assert.equal(rows.length, 0);
    });

    test('a subject with NUL, another control character or a lone surrogate -> 401 on every portal route, nothing stored', async () => {
      const exp = Math.floor(Date.now() / 1000) + 3600;
      const routes: Array<[string, string, unknown?]> = [
        ['GET', MGMT],
        ['POST', MGMT, { name: 'x' }],
        ['PUT', `${MGMT}/mkey_x`, { name: 'y' }],
        ['DELETE', `${MGMT}/mkey_x`],
        ['POST', `${MGMT}/revoke`, { api_key_id: 'mkey_x' }],
        ['POST', `${MGMT}/restore`, { api_key_id: 'mkey_x' }],
        ['GET', INFER],
        ['POST', INFER, { name: 'x' }],
        ['GET', '/v1/portal/query/usage'],
        ['GET', '/v1/portal/query/balance'],
        ['GET', '/v1/portal/me'],
      ];
      for (const [sub, why] of [
        ['a\u0000b', /control character/],
        ['\u0000', /control character/],
        ['a\u001bb', /control character/],
        ['a\u007fb', /control character/],
        ['a\u0085b', /control character/],
        ['a\ud800b', /unpaired UTF-16 surrogate/],
        ['\udc00', /unpaired UTF-16 surrogate/],
      ] as const) {
        const tok = await new SignJWT({ org_roles: { acme: 'admin' } }).setProtectedHeader({ alg: 'HS256' }).setSubject(sub).setIssuedAt().setExpirationTime(exp).sign(secret);
        for (const [method, url, body] of routes) {
          const b = assertPortalError(await call(method, url, tok, body), 401, why, 40102);
          assert.match(b.meta.message, /^unauthorized: /);
        }
      }
      // a well-formed pair (an emoji) and U+FFFD itself are ordinary, distinct subjects
      const emoji = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject('u\ud83d\ude00').setIssuedAt().setExpirationTime(exp).sign(secret);
      const fffd = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject('a\ufffdb').setIssuedAt().setExpirationTime(exp).sign(secret);
      assertOk(await call('POST', MGMT, emoji, { name: 'emoji' }));
      assertOk(await call('POST', MGMT, fffd, { name: 'fffd' }));
      assert.deepEqual(
        (await t.services.db.db.selectFrom('api_keys').select('user_id').orderBy('user_id').execute()).map((r) => r.user_id),
        ['a\ufffdb', 'u\ud83d\ude00'],
      );
      // a subject of at most 255 characters: counted in code points (255 emoji are 510 UTF-16 units), and the message
      // of one longer says the limit in both languages
      const sign = (sub: string) => new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject(sub).setIssuedAt().setExpirationTime(exp).sign(secret);
      assertOk(await call('GET', MGMT, await sign('😀'.repeat(255))));
      const long = await sign('😀'.repeat(256));
      assertPortalError(await call('GET', MGMT, long), 401, 'unauthorized: the subject (sub) is longer than 255 characters', 40102);
      assertPortalError(await call('GET', MGMT, long, undefined, { 'accept-language': 'zh-CN' }), 401, '未授权：主体（sub）超过 255 个字符', 40102);
      // an org id in the roles claim with a control character grants nothing (and breaks nothing)
      const badOrg = await new SignJWT({ org_roles: { 'ac\u0000me': 'admin', acme: 'admin' } })
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject('org-nul')
        .setIssuedAt()
        .setExpirationTime(exp)
        .sign(secret);
      assert.deepEqual(assertOk(await call('GET', '/v1/portal/me', badOrg)).org_roles, { acme: 'admin' });
      assertOk(await call('GET', MGMT, badOrg));
      await t.services.db.db.deleteFrom('api_keys').execute();
    });

    test('a token without exp -> 401 (it would be valid forever)', async () => {
      const noExp = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject('forever').setIssuedAt().sign(secret);
      assertPortalError(await call('GET', MGMT, noExp), 401, 'unauthorized: the token has no expiry (exp)', 40102);
      assertPortalError(await call('POST', MGMT, noExp, { name: 'x' }), 401, /no expiry/, 40102);
      assertPortalError(await call('GET', '/v1/portal/query/usage', noExp), 401, /no expiry/, 40102);
    });

    test('the token subject and org roles come only from a verified token', async () => {
      const admin = await t.token('root', { acme: 'admin' });
      assert.equal(assertOk(await call('POST', MGMT, admin, { name: 'o', org_id: 'acme' })).org_id, 'acme');
      // org roles as an array or a non-object claim grant nothing
      const arr = await new SignJWT({ org_roles: ['acme'] }).setProtectedHeader({ alg: 'HS256' }).setSubject('y').setIssuedAt().setExpirationTime('1h').sign(secret);
      assertPortalError(await call('POST', MGMT, arr, { name: 'o', org_id: 'acme' }), 403, /^permission denied/);
      const str = await new SignJWT({ org_roles: 'admin' }).setProtectedHeader({ alg: 'HS256' }).setSubject('y').setIssuedAt().setExpirationTime('1h').sign(secret);
      assertPortalError(await call('POST', MGMT, str, { name: 'o', org_id: 'acme' }), 403, /^permission denied/);
    });
  });

  describe(`JWKS (RS256) tokens and algorithm confusion (${db})`, () => {
    let t: TestApp;
    let call: Caller;
    let jwks: Server;
    let priv: CryptoKey;
    let otherPriv: CryptoKey;
    let publicPem: string;
    let jwksHits = 0;
    const ISS = 'https://idp.example.test/';
    const AUD = 'portico';
    before(async () => {
      const kp = await generateKeyPair('RS256', { extractable: true });
      priv = kp.privateKey;
      otherPriv = (await generateKeyPair('RS256')).privateKey;
      publicPem = await exportSPKI(kp.publicKey);
      const jwk = { ...(await exportJWK(kp.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' };
      jwks = createServer((req, res) => {
        jwksHits++;
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ keys: [jwk] }));
      });
      await new Promise<void>((r) => jwks.listen(0, '127.0.0.1', r));
      const port = (jwks.address() as any).port;
      t = await buildTestApp({ db, env: { JWT_SECRET: '', JWT_JWKS_URL: `http://127.0.0.1:${port}/.well-known/jwks.json`, JWT_ISSUER: ISS, JWT_AUDIENCE: AUD } });
      call = caller(t);
    });
    after(async () => {
      await t.close();
      await new Promise((r) => jwks.close(r));
    });

    const rs = (claims: { sub?: string; iss?: string; aud?: string; org_roles?: unknown }, key: CryptoKey = priv, kid = 'k1') => {
      const j = new SignJWT(claims.org_roles ? { org_roles: claims.org_roles } : {}).setProtectedHeader({ alg: 'RS256', kid }).setIssuedAt().setExpirationTime('1h');
      if (claims.sub) j.setSubject(claims.sub);
      if (claims.iss) j.setIssuer(claims.iss);
      if (claims.aud) j.setAudience(claims.aud);
      return j.sign(key);
    };

    test('a valid RS256 token from the JWKS works, with issuer and audience checked', async () => {
      const tok = await rs({ sub: 'idp-user', iss: ISS, aud: AUD, org_roles: { acme: 'admin' } });
      const k = assertOk(await call('POST', MGMT, tok, { name: 'from idp', org_id: 'acme' }));
      assert.equal(k.org_id, 'acme');
      assert.equal(assertOk(await call('GET', `${MGMT}?org_id=acme`, tok)).total, 1);
      assert.ok(jwksHits >= 1);
      assertPortalError(await call('GET', MGMT, await rs({ sub: 'u', iss: 'https://evil.test/', aud: AUD })), 401, /^unauthorized/, 40102);
      assertPortalError(await call('GET', MGMT, await rs({ sub: 'u', aud: AUD })), 401, /^unauthorized/, 40102);
      assertPortalError(await call('GET', MGMT, await rs({ sub: 'u', iss: ISS, aud: 'other' })), 401, /^unauthorized/, 40102);
      assertPortalError(await call('GET', MGMT, await rs({ sub: 'u', iss: ISS })), 401, /^unauthorized/, 40102);
      assertPortalError(await call('GET', MGMT, await rs({ iss: ISS, aud: AUD })), 401, /^unauthorized/, 40102);
    });

    test('a token signed by another RSA key (same kid) -> 401', async () => {
      assertPortalError(await call('GET', MGMT, await rs({ sub: 'u', iss: ISS, aud: AUD }, otherPriv)), 401, /^unauthorized/, 40102);
      assertPortalError(await call('GET', MGMT, await rs({ sub: 'u', iss: ISS, aud: AUD }, otherPriv, 'unknown-kid')), 401, /^unauthorized/, 40102);
    });

    test('algorithm confusion: an HS256 token signed with the public key bytes -> 401', async () => {
      const exp = Math.floor(Date.now() / 1000) + 3600;
      for (const material of [
        publicPem,
        publicPem.trim(),
        Buffer.from(JSON.stringify(await exportJWK(await import('node:crypto').then((c) => c.createPublicKey(publicPem))))).toString(),
      ]) {
        const hs = await new SignJWT({ org_roles: { acme: 'admin' } })
          .setProtectedHeader({ alg: 'HS256', kid: 'k1' })
          .setSubject('attacker')
          .setIssuer(ISS)
          .setAudience(AUD)
          .setExpirationTime(exp)
          .sign(new TextEncoder().encode(material));
        assertPortalError(await call('GET', MGMT, hs), 401, /^unauthorized/, 40102);
      }
      // and HS256 tokens with the test secret do not work either when only a JWKS is configured
      const hsSecret = await signToken(new TextEncoder().encode(TEST_JWT_SECRET), { userId: 'u', issuer: ISS, audience: AUD });
      assertPortalError(await call('GET', MGMT, hsSecret), 401, /^unauthorized/, 40102);
      const none = `${b64({ alg: 'none' })}.${b64({ sub: 'u', iss: ISS, aud: AUD, exp })}.`;
      assertPortalError(await call('GET', MGMT, none), 401, /^unauthorized/, 40102);
    });
  });
}
