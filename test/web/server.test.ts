import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { gunzipSync, brotliDecompressSync } from 'node:zlib';
import { SignJWT } from 'jose';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { pgliteTemplate } from '../helpers/db-template.js';
import { assertOk, assertPortalError, INFER, MGMT } from '../portal/util.js';
import { linkKey, mintSignInLink } from '../../src/web/link.js';
import { sql } from '../../src/platform/db/index.js';
import type { LightMyRequestResponse } from 'fastify';

const run = promisify(execFile);
const cookieOf = (res: LightMyRequestResponse) => {
  const c = ([] as string[]).concat(res.headers['set-cookie'] ?? []);
  return c.find((x) => /portico_session=/.test(x));
};
const cookieValue = (setCookie: string) => setCookie.split(';')[0];

for (const db of testDatabases()) {
  describe(`web page, sessions and sign-in links (${db})`, () => {
    let t: TestApp & { url?: string };
    before(async () => {
      t = await buildTestApp({ db, env: { PUBLIC_URL: 'http://portico.test:8080' } });
    });
    after(() => t.close());

    const link = async (userId = 'alice', orgRoles: Record<string, string> = {}, ttlSeconds?: number) => {
      const { url } = await mintSignInLink({ pepper: t.config.keyPepper, publicUrl: 'http://portico.test:8080', userId, orgRoles, ttlSeconds });
      assert.match(url, /^http:\/\/portico\.test:8080\/signin#token=/);
      return url.split('#token=')[1];
    };
    const redeem = (token: unknown, headers: Record<string, string> = {}) => t.app.inject({ method: 'POST', url: '/v1/portal/session/link', payload: { token }, headers });
    const signIn = async (userId = 'alice', orgRoles: Record<string, string> = {}) => {
      const res = await redeem(await link(userId, orgRoles));
      const data = assertOk(res);
      return { cookie: cookieValue(cookieOf(res)!), csrf: data.csrf_token as string, data };
    };

    test('the page and its assets: HTML on the page paths, hashed assets cached for a year, compressed, strict headers', async () => {
      const html = await t.app.inject({ url: '/' });
      assert.equal(html.statusCode, 200);
      assert.match(String(html.headers['content-type']), /^text\/html/);
      assert.equal(html.headers['cache-control'], 'no-cache');
      const csp = String(html.headers['content-security-policy']);
      assert.match(csp, /default-src 'none'/);
      assert.match(csp, /script-src 'self'(;|$)/);
      assert.match(csp, /style-src 'self'(;|$)/);
      assert.match(csp, /frame-ancestors 'none'/);
      assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|https?:/, 'no inline code, no other origin');
      assert.doesNotMatch(csp, /upgrade-insecure-requests/, 'plain http deployments must not be upgraded');
      assert.equal(html.headers['x-frame-options'], 'DENY');
      assert.equal(html.headers['x-content-type-options'], 'nosniff');
      assert.equal(html.headers['referrer-policy'], 'no-referrer');
      assert.equal(html.headers['strict-transport-security'], undefined);
      assert.match(String(html.headers['permissions-policy']), /microphone=\(self\)/);
      for (const p of ['/signin', '/keys', '/usage', '/playground', '/keys/']) {
        const r = await t.app.inject({ url: p });
        assert.equal(r.statusCode, 200, p);
        assert.equal(r.body, html.body);
      }
      const assets = [...html.body.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1]);
      assert.equal(assets.length, 3, 'icon, stylesheet and script');
      for (const a of assets) {
        assert.match(a, /-[A-Za-z0-9]{8}\.(js|css|svg)$/, 'content-hashed names');
        const plain = await t.app.inject({ url: a });
        assert.equal(plain.statusCode, 200);
        assert.equal(plain.headers['cache-control'], 'public, max-age=31536000, immutable');
        assert.equal(plain.headers['content-encoding'], undefined);
        const disk = readFileSync(`dist/web${a}`);
        assert.deepEqual(plain.rawPayload, disk);
        const gz = await t.app.inject({ url: a, headers: { 'accept-encoding': 'gzip' } });
        assert.equal(gz.headers['content-encoding'], 'gzip');
        assert.deepEqual(gunzipSync(gz.rawPayload), disk);
        const br = await t.app.inject({ url: a, headers: { 'accept-encoding': 'gzip, deflate, br' } });
        assert.equal(br.headers['content-encoding'], 'br');
        assert.deepEqual(brotliDecompressSync(br.rawPayload), disk);
        const refused = await t.app.inject({ url: a, headers: { 'accept-encoding': 'br;q=0, gzip;q=0' } });
        assert.equal(refused.headers['content-encoding'], undefined);
        const again = await t.app.inject({ url: a, headers: { 'if-none-match': String(plain.headers.etag) } });
        assert.equal(again.statusCode, 304);
      }
      assert.equal((await t.app.inject({ url: '/assets/nothing-here.js' })).statusCode, 404);
      assert.equal((await t.app.inject({ url: '/assets/..%2fpackage.json' })).statusCode, 404);
      assert.equal((await t.app.inject({ method: 'HEAD', url: '/keys' })).statusCode, 200);
      // the API keeps its paths and its error shapes
      const api404 = await t.app.inject({ url: '/nothing' });
      assert.equal(api404.statusCode, 404);
      assert.equal(api404.json().error.code, 'not_found');
      assert.equal((await t.app.inject({ url: '/v1/portal/nothing', headers: { authorization: `Bearer ${await t.token('alice')}` } })).json().meta.error, 'not_found');
    });

    test('a sign-in link starts a session: HttpOnly SameSite=Strict cookie, the session answers the user and a CSRF token', async () => {
      const res = await redeem(await link('alice', { acme: 'admin' }));
      const data = assertOk(res);
      assert.equal(data.user_id, 'alice');
      assert.deepEqual(data.org_roles, { acme: 'admin' });
      assert.equal(data.method, 'link');
      assert.ok(data.csrf_token.length >= 32);
      assert.ok(data.expires_at - data.created_at === 8 * 3600, 'SESSION_TTL_MS default: 8 hours');
      const set = cookieOf(res)!;
      // the cookie lives as long as the session: its whole seconds left when the cookie is set (one less when a second
      // boundary falls between the session's clock reading and the cookie's)
      assert.match(set, /^portico_session=[A-Za-z0-9_-]{43}; Path=\/; Max-Age=(28800|28799); HttpOnly; SameSite=Strict$/);
      assert.equal(res.headers['cache-control'], 'no-store');
      assert.ok(!JSON.stringify(data).includes(cookieValue(set).split('=')[1]), 'the cookie value is not in the body');
      const s = assertOk(await t.app.inject({ url: '/v1/portal/session', headers: { cookie: cookieValue(set) } }));
      assert.equal(s.user_id, 'alice');
      assert.equal(s.csrf_token, data.csrf_token);
      // only a digest of the cookie value is stored
      const rows = await t.services.db.db.selectFrom('web_sessions').selectAll().execute();
      assert.ok(rows.length > 0);
      assert.ok(rows.every((r) => r.id !== cookieValue(set).split('=')[1]));
    });

    test('a link works once, and only while it lives; forged, foreign and mistyped tokens are refused', async () => {
      const token = await link('carol');
      assertOk(await redeem(token));
      const again = await redeem(token);
      assertPortalError(again, 401, /already been used/, 40110);
      assert.equal(cookieOf(again), undefined);
      // expired: signed with the right key but past its exp
      const expired = await new SignJWT({ org_roles: {} })
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject('carol')
        .setAudience('portico:sign-in-link')
        .setJti('j-expired')
        .setIssuedAt(Math.floor(Date.now() / 1000) - 900)
        .setExpirationTime(Math.floor(Date.now() / 1000) - 60)
        .sign(linkKey(t.config.keyPepper));
      assertPortalError(await redeem(expired), 401, /invalid or has expired/, 40109);
      // a link may not live longer than an hour, even when signed with the right key
      const long = await new SignJWT({})
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject('carol')
        .setAudience('portico:sign-in-link')
        .setJti('j-long')
        .setIssuedAt()
        .setExpirationTime('1d')
        .sign(linkKey(t.config.keyPepper));
      assertPortalError(await redeem(long), 401, undefined, 40109);
      // another installation's pepper, a tampered payload, a portal JWT, garbage
      const foreign = await mintSignInLink({ pepper: Buffer.from('another pepper, 32 characters long!!'), publicUrl: 'http://x', userId: 'carol' });
      assertPortalError(await redeem(foreign.url.split('#token=')[1]), 401, undefined, 40109);
      const [h, , s] = (await link('carol')).split('.');
      const tampered = `${h}.${Buffer.from(JSON.stringify({ sub: 'admin', aud: 'portico:sign-in-link', jti: 'x', exp: 9999999999 })).toString('base64url')}.${s}`;
      assertPortalError(await redeem(tampered), 401, undefined, 40109);
      assertPortalError(await redeem(await t.token('carol')), 401, undefined, 40109);
      assertPortalError(await redeem('not-a-token'), 401, undefined, 40109);
      // and a link is not a portal JWT
      assertPortalError(await t.app.inject({ url: INFER, headers: { authorization: `Bearer ${await link('carol')}` } }), 401, 'unauthorized: invalid token');
      // bad bodies are 4xx
      assertPortalError(await redeem(undefined), 400);
      assertPortalError(await t.app.inject({ method: 'POST', url: '/v1/portal/session/link', payload: { token: 'x', extra: 1 } }), 400);
      assertPortalError(
        await t.app.inject({ method: 'POST', url: '/v1/portal/session/link', payload: 'token=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } }),
        415,
      );
      assertPortalError(await redeem('x'.repeat(5000)), 400);
      // from another site: refused before the link is used
      const token2 = await link('carol');
      assertPortalError(await redeem(token2, { origin: 'https://evil.example' }), 403, /another site/, 40302);
      assertOk(await redeem(token2, { origin: 'http://portico.test:8080' }));
    });

    test('the session authenticates the portal; state changes need the CSRF token and the own origin; bearer JWTs work as before', async () => {
      const { cookie, csrf } = await signIn('dave');
      const list = assertOk(await t.app.inject({ url: INFER, headers: { cookie } }));
      assert.equal(list.total, 0);
      const create = (headers: Record<string, string>) => t.app.inject({ method: 'POST', url: INFER, payload: { name: 'from the page' }, headers: { cookie, ...headers } });
      assertPortalError(await create({}), 403, /CSRF/, 40302);
      assertPortalError(await create({ 'x-csrf-token': 'wrong' }), 403, undefined, 40302);
      assertPortalError(await create({ 'x-csrf-token': csrf.slice(0, -1) + (csrf.endsWith('A') ? 'B' : 'A') }), 403, undefined, 40302);
      assertPortalError(await create({ 'x-csrf-token': csrf, origin: 'https://evil.example' }), 403, undefined, 40302);
      const key = assertOk(await create({ 'x-csrf-token': csrf }));
      assert.match(key.api_key, /^sk-/);
      assert.equal(assertOk(await t.app.inject({ url: INFER, headers: { cookie } })).total, 1);
      // revoke / restore / update / delete all go through the same check
      assertPortalError(await t.app.inject({ method: 'POST', url: `${INFER}/revoke`, payload: { api_key_id: key.id }, headers: { cookie } }), 403, undefined, 40302);
      assertPortalError(await t.app.inject({ method: 'DELETE', url: `${INFER}/${key.id}`, headers: { cookie } }), 403, undefined, 40302);
      assert.equal(
        assertOk(await t.app.inject({ method: 'POST', url: `${INFER}/revoke`, payload: { api_key_id: key.id }, headers: { cookie, 'x-csrf-token': csrf } })).status,
        'revoked',
      );
      // a bearer JWT needs no CSRF token (it is not sent by the browser on its own)
      assertOk(await t.app.inject({ method: 'POST', url: MGMT, payload: { name: 'script' }, headers: { authorization: `Bearer ${await t.token('dave')}` } }));
      // the header wins over the cookie: a bad bearer is refused even with a good cookie
      assertPortalError(await t.app.inject({ url: INFER, headers: { cookie, authorization: 'Bearer nope' } }), 401, 'unauthorized: invalid token');
      // nothing at all, an unknown session, a malformed cookie
      assertPortalError(await t.app.inject({ url: INFER }), 401, 'unauthorized');
      assertPortalError(await t.app.inject({ url: INFER, headers: { cookie: 'portico_session=' + 'A'.repeat(43) } }), 401, /session has expired/, 40108);
      assertPortalError(await t.app.inject({ url: INFER, headers: { cookie: 'portico_session=../../etc' } }), 401, undefined, 40108);
      // query APIs take the session too
      assert.equal(assertOk(await t.app.inject({ url: '/v1/portal/query/balance', headers: { cookie } })).currency, 'credits');
      assert.ok(Array.isArray(assertOk(await t.app.inject({ url: '/v1/portal/query/usage', headers: { cookie } })).list));
      assertPortalError(await t.app.inject({ url: '/v1/portal/query/usage?org_id=acme', headers: { cookie } }), 403, undefined, 40300);
    });

    test('GET /me: the user, admin organizations, limits with what is used, scope values and models', async () => {
      const { cookie, csrf } = await signIn('erin', { acme: 'admin', beta: 'member' });
      const me = assertOk(await t.app.inject({ url: '/v1/portal/me', headers: { cookie } }));
      assert.equal(me.user_id, 'erin');
      assert.deepEqual(me.admin_orgs, ['acme']);
      assert.deepEqual(me.api_keys.active, {});
      assert.equal(me.api_keys.limit, 10);
      assert.ok(me.api_keys.scopes.includes('responses') && me.api_keys.scopes.includes('audio') && me.api_keys.scopes.includes('model:tts-1'));
      assert.deepEqual(me.management_api_keys.scopes, ['usage:read', 'balance:read']);
      assert.ok(me.models.some((m: any) => m.id === 'whisper-1' && m.type === 'transcription'));
      // every voice the speech models speak (the thirteen OpenAI voices on the embedded ones), for the playground
      const tts = me.models.find((m: any) => m.id === 'tts-1');
      assert.deepEqual(tts.voices, ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'onyx', 'nova', 'sage', 'shimmer', 'verse', 'marin', 'cedar']);
      assert.equal(me.models.find((m: any) => m.id === 'whisper-1').voices, undefined, 'only speech models have voices');
      for (const org of [undefined, 'acme', 'acme']) {
        assertOk(await t.app.inject({ method: 'POST', url: INFER, payload: { name: 'k', ...(org ? { org_id: org } : {}) }, headers: { cookie, 'x-csrf-token': csrf } }));
      }
      // an expired key does not hold a place under the limit
      const soon = Math.floor(Date.now() / 1000) + 2;
      assertOk(await t.app.inject({ method: 'POST', url: INFER, payload: { name: 'short', expires_at: soon }, headers: { cookie, 'x-csrf-token': csrf } }));
      await sql`update api_keys set expires_at = 1 where name = 'short' and user_id = 'erin'`.execute(t.services.db.db);
      const after = assertOk(await t.app.inject({ url: '/v1/portal/me', headers: { authorization: `Bearer ${await t.token('erin', { acme: 'admin' })}` } }));
      assert.deepEqual(after.api_keys.active, { default: 1, acme: 2 });
      assert.deepEqual(after.management_api_keys.active, {});
      assertPortalError(await t.app.inject({ url: '/v1/portal/me' }), 401, 'unauthorized');
    });

    test('search in the key list: name, description, id and display form; LIKE wildcards match themselves', async () => {
      const token = await t.token('frank');
      const make = async (name: string, description = '') =>
        assertOk(await t.app.inject({ method: 'POST', url: INFER, payload: { name, description }, headers: { authorization: `Bearer ${token}` } }));
      const alpha = await make('Alpha laptop');
      await make('beta', 'used by the ALPHA team');
      await make('50% off');
      await make('gamma_ray');
      await make('x-ray');
      const search = async (q: string, extra = '') =>
        assertOk(await t.app.inject({ url: `${INFER}?search=${encodeURIComponent(q)}${extra}`, headers: { authorization: `Bearer ${token}` } }))
          .list.map((k: any) => k.name)
          .sort();
      assert.deepEqual(await search('alpha'), ['Alpha laptop', 'beta']);
      assert.deepEqual(await search('%'), ['50% off']);
      assert.deepEqual(await search('_ray'), ['gamma_ray']);
      assert.deepEqual(await search('ray'), ['gamma_ray', 'x-ray']);
      assert.deepEqual(await search(alpha.display.slice(-4)), ['Alpha laptop']);
      assert.deepEqual(await search(alpha.id), ['Alpha laptop']);
      assert.deepEqual(await search('  '), ['50% off', 'Alpha laptop', 'beta', 'gamma_ray', 'x-ray']);
      assert.deepEqual(await search('alpha', '&status=revoked'), []);
      const paged = assertOk(await t.app.inject({ url: `${INFER}?search=ray&per_page=1&page=2`, headers: { authorization: `Bearer ${token}` } }));
      assert.equal(paged.total, 2);
      assert.equal(paged.list.length, 1);
      assertPortalError(await t.app.inject({ url: `${INFER}?search=${'x'.repeat(101)}`, headers: { authorization: `Bearer ${token}` } }), 400);
    });

    test('signing out ends the session everywhere and clears the cookie; it needs the CSRF token', async () => {
      const { cookie, csrf } = await signIn('gina');
      assertPortalError(await t.app.inject({ method: 'DELETE', url: '/v1/portal/session', headers: { cookie } }), 403, undefined, 40302);
      const out = await t.app.inject({ method: 'DELETE', url: '/v1/portal/session', headers: { cookie, 'x-csrf-token': csrf } });
      assert.equal(assertOk(out).signed_out, true);
      assert.match(cookieOf(out)!, /^portico_session=; Path=\/; Max-Age=0; HttpOnly; SameSite=Strict$/);
      assertPortalError(await t.app.inject({ url: '/v1/portal/session', headers: { cookie } }), 401, undefined, 40108);
      assertPortalError(await t.app.inject({ url: INFER, headers: { cookie } }), 401, undefined, 40108);
      // signing out again, or without a session, is harmless
      assert.equal(assertOk(await t.app.inject({ method: 'DELETE', url: '/v1/portal/session', headers: { cookie } })).signed_out, false);
      assert.equal(assertOk(await t.app.inject({ method: 'DELETE', url: '/v1/portal/session' })).signed_out, false);
      assertPortalError(await t.app.inject({ url: '/v1/portal/session' }), 401, 'unauthorized');
    });

    test('a session past its expiry is refused with session_expired (localized)', async () => {
      const { cookie } = await signIn('hank');
      await sql`update web_sessions set expires_at = 1 where user_id = 'hank'`.execute(t.services.db.db);
      assertPortalError(await t.app.inject({ url: INFER, headers: { cookie } }), 401, /session has expired/, 40108);
      const zh = await t.app.inject({ url: '/v1/portal/session', headers: { cookie, 'accept-language': 'zh-CN' } });
      assertPortalError(zh, 401, '未授权：会话已过期或已退出，请重新登录', 40108);
      assert.equal(
        await t.services.db.db.selectFrom('web_sessions').select('id').where('user_id', '=', 'hank').executeTakeFirst(),
        undefined,
        'an expired row is removed when met',
      );
    });

    test('sign-in methods: links always; OpenID Connect only when configured; its routes say so when it is not', async () => {
      assert.deepEqual(assertOk(await t.app.inject({ url: '/v1/portal/session/methods' })), { link: true, oidc: false, oidc_login_url: null });
      const login = await t.app.inject({ url: '/auth/oidc/login' });
      assert.equal(login.statusCode, 303);
      assert.equal(login.headers.location, '/signin?error=oidc_off');
      assert.equal((await t.app.inject({ url: '/auth/oidc/callback?code=x&state=y' })).headers.location, '/signin?error=oidc_off');
    });
  });
}

describe('web page settings and the CLI', () => {
  test('https deployments: Secure __Host- cookie, HSTS and upgrade-insecure-requests', async () => {
    const t = await buildTestApp({ env: { PUBLIC_URL: 'https://portico.example.com' } });
    try {
      const { url } = await mintSignInLink({ pepper: t.config.keyPepper, publicUrl: t.config.web.publicUrl, userId: 'alice' });
      assert.match(url, /^https:\/\/portico\.example\.com\/signin#token=/);
      const res = await t.app.inject({ method: 'POST', url: '/v1/portal/session/link', payload: { token: url.split('#token=')[1] } });
      const set = cookieOf(res)!;
      assert.match(set, /^__Host-portico_session=[A-Za-z0-9_-]{43}; Path=\/; Max-Age=\d+; HttpOnly; Secure; SameSite=Strict$/);
      assertOk(await t.app.inject({ url: '/v1/portal/session', headers: { cookie: cookieValue(set) } }));
      const page = await t.app.inject({ url: '/' });
      assert.match(String(page.headers['strict-transport-security']), /max-age=31536000/);
      assert.match(String(page.headers['content-security-policy']), /upgrade-insecure-requests/);
    } finally {
      await t.close();
    }
  });

  test('CORS for {base_url}: off by default; allowed origins answered, preflight included; never on the portal', async () => {
    const off = await buildTestApp();
    const on = await buildTestApp({ env: { CORS_ORIGINS: 'https://app.example.com, http://localhost:5173' } });
    const any = await buildTestApp({ env: { CORS_ORIGINS: '*' } });
    try {
      const preflight = (t: TestApp, origin: string, url = '/v1/responses') =>
        t.app.inject({ method: 'OPTIONS', url, headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' } });
      const none = await preflight(off, 'https://app.example.com');
      assert.equal(none.headers['access-control-allow-origin'], undefined);
      const ok = await preflight(on, 'https://app.example.com');
      assert.equal(ok.statusCode, 204);
      assert.equal(ok.headers['access-control-allow-origin'], 'https://app.example.com');
      assert.match(String(ok.headers['access-control-allow-methods']), /POST/);
      assert.match(String(ok.headers['access-control-allow-headers']), /authorization/i);
      assert.equal(ok.headers['access-control-allow-credentials'], undefined);
      assert.equal(ok.headers['access-control-max-age'], '600');
      assert.equal((await preflight(on, 'http://localhost:5173', '/v1/audio/speech')).headers['access-control-allow-origin'], 'http://localhost:5173');
      const other = await preflight(on, 'https://evil.example');
      assert.equal(other.headers['access-control-allow-origin'], undefined);
      // a real request from an allowed origin carries the headers a browser app may read
      const key = await on.inferenceKey('alice');
      const models = await on.app.inject({ url: '/v1/models', headers: { origin: 'https://app.example.com', authorization: `Bearer ${key}` } });
      assert.equal(models.statusCode, 200);
      assert.equal(models.headers['access-control-allow-origin'], 'https://app.example.com');
      assert.match(String(models.headers['access-control-expose-headers']), /x-request-id/);
      const refused = await on.app.inject({ url: '/v1/models', headers: { origin: 'https://app.example.com' } });
      assert.equal(refused.statusCode, 401);
      assert.equal(refused.headers['access-control-allow-origin'], 'https://app.example.com', 'errors are readable by the app too');
      assert.equal((await preflight(any, 'https://anything.example')).headers['access-control-allow-origin'], '*');
      // the portal is for the page on Portico's own origin
      const portal = await preflight(on, 'https://app.example.com', '/v1/portal/api-keys');
      assert.equal(portal.headers['access-control-allow-origin'], undefined);
    } finally {
      await Promise.all([off.close(), on.close(), any.close()]);
    }
  });

  test('npm start (portico serve) says in its first lines how to get into the page, with the address the command needs', async () => {
    /** the first lines of `portico serve` with this environment, until the sign-in hint */
    const firstLines = async (extra: Record<string, string>) => {
      const dir = mkdtempSync(join(tmpdir(), 'portico-serve-'));
      const child = spawn(process.execPath, ['dist/src/cli/main.js', 'serve'], {
        env: { ...process.env, DATA_DIR: dir, PORT: '0', PORTICO_DB: 'memory', LOG_LEVEL: 'info', PORTICO_PGLITE_TEMPLATE: await pgliteTemplate(), ...extra },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      try {
        const lines: string[] = [];
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`no sign-in hint within 90 s: ${lines.join('\n')}`)), 90_000);
          let buf = '';
          child.stdout!.on('data', (d) => {
            buf += d;
            let i;
            while ((i = buf.indexOf('\n')) >= 0) {
              // the lines that say a slow start goes on (a busy machine) are not counted
              const line = JSON.parse(buf.slice(0, i)) as { msg: string; phase?: string };
              if (line.phase === undefined) lines.push(line.msg);
              buf = buf.slice(i + 1);
              if (/portico login --user/.test(lines.at(-1)!)) {
                clearTimeout(timer);
                resolve();
              }
            }
          });
          child.on('exit', (code) => reject(new Error(`serve exited (${code}): ${lines.join('\n')}`)));
        });
        return { lines, dir };
      } finally {
        child.kill('SIGTERM');
        await new Promise((r) => child.once('exit', r));
        rmSync(dir, { recursive: true, force: true });
      }
    };
    {
      const { lines, dir } = await firstLines({ PUBLIC_URL: 'http://portico.test:8080' });
      const at = lines.findIndex((l) => /portico login --user/.test(l));
      // before it at most the two notices about what serves the models (no text model; which recognizer serves
      // whisper-1) and the two listening lines: the first screen of a terminal
      assert.ok(at >= 0 && at < 5, `among the first lines: ${lines.join(' | ')}`);
      // the command is told the page's address: its link points at this server whatever its own shell has set
      assert.match(
        lines[at],
        new RegExp(
          `^Open the web page at http://portico\\.test:8080/ and sign in with a link printed by: DATA_DIR=${dir} PUBLIC_URL=http://portico\\.test:8080 portico login --user alice$`,
        ),
      );
    }
    {
      // no PUBLIC_URL and PORT=0: the address it listens on, with the port it was given (not ":0")
      const { lines } = await firstLines({});
      const listening = /Portico listening on (http:\/\/[^ ]+:(\d+)) /.exec(lines.find((l) => l.startsWith('Portico listening on')) ?? '');
      assert.ok(listening && listening[2] !== '0', lines.join(' | '));
      const hint = lines.find((l) => /portico login --user/.test(l))!;
      assert.ok(hint.startsWith(`Open the web page at ${listening[1]}/ `) && hint.includes(`PUBLIC_URL=${listening[1]} portico login`), hint);
    }
  });

  test('portico login prints a single-use link the server redeems (no database needed to mint it)', async () => {
    const pepper = 'cli-test-pepper-0123456789abcdef0123456789';
    const t = await buildTestApp({ env: { KEY_PEPPER: pepper } });
    try {
      const env = { ...process.env, KEY_PEPPER: pepper, DATA_DIR: t.config.dataDir, PUBLIC_URL: 'http://portal.example:9000/', JWT_SECRET: 'x'.repeat(32) };
      const { stdout, stderr } = await run(process.execPath, ['dist/src/cli/main.js', 'login', '--user', 'ivy', '--org', 'acme', '--admin', '--ttl', '5m'], { env });
      const url = stdout.trim();
      assert.match(url, /^http:\/\/portal\.example:9000\/signin#token=[\w-]+\.[\w-]+\.[\w-]+$/);
      assert.match(stderr, /within 5m.*works once/);
      const res = await t.app.inject({ method: 'POST', url: '/v1/portal/session/link', payload: { token: url.split('#token=')[1] } });
      const s = assertOk(res);
      assert.equal(s.user_id, 'ivy');
      assert.deepEqual(s.org_roles, { acme: 'admin' });
      const fail = async (args: string[], message: RegExp) => {
        await assert.rejects(run(process.execPath, ['dist/src/cli/main.js', 'login', ...args], { env }), (e: any) => {
          assert.equal(e.code, 2);
          assert.match(e.stderr, message);
          return true;
        });
      };
      await fail([], /required option '--user <id>'/);
      await fail(['--user', 'ivy', '--admin'], /--admin needs --org/);
      await fail(['--user', 'ivy', '--ttl', '2h'], /at most 60 minutes/);
      await fail(['--user', 'ivy', '--ttl', 'soon'], /invalid TTL/);
    } finally {
      await t.close();
    }
  });
});
