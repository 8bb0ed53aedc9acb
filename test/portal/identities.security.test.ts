import { describe, test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { Writable } from 'node:stream';
import { SignJWT, exportJWK, generateKeyPair } from 'jose';
import { buildTestApp, TEST_JWT_SECRET } from '../helpers/app.js';
import { MGMT, assertOk, assertPortalError, caller } from './util.js';

// Identity-provider trouble and token lifetimes. Not database-specific: PGlite only.

describe('the identity provider keys (JWT_JWKS_URL) cannot be fetched', () => {
  const servers: Server[] = [];
  after(() => Promise.all(servers.map((s) => new Promise((r) => s.close(r)))));

  test('JWKS down -> 503 with retry-after and a warning in the log, not 401; back up -> the same token works', async () => {
    const kp = await generateKeyPair('RS256', { extractable: true });
    const jwk = { ...(await exportJWK(kp.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' };
    let mode: 'ok' | 'error' = 'ok';
    const handler = (_req: unknown, res: import('node:http').ServerResponse) => {
      if (mode === 'error') {
        res.statusCode = 500;
        return res.end('upstream trouble');
      }
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ keys: [jwk] }));
    };
    // find a free port, then leave it closed: the provider is unreachable from the first request on
    const probe = createServer(handler);
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const port = (probe.address() as { port: number }).port;
    await new Promise((r) => probe.close(r));

    const lines: string[] = [];
    const logs = new Writable({
      write(chunk, _enc, cb) {
        lines.push(chunk.toString());
        cb();
      },
    });
    const t = await buildTestApp({ env: { JWT_SECRET: '', JWT_JWKS_URL: `http://127.0.0.1:${port}/jwks.json`, LOG_LEVEL: 'warn' }, logDestination: logs });
    try {
      const call = caller(t);
      const tok = await new SignJWT({}).setProtectedHeader({ alg: 'RS256', kid: 'k1' }).setSubject('idp-user').setIssuedAt().setExpirationTime('1h').sign(kp.privateKey);

      const down = assertPortalError(await call('GET', MGMT, tok), 503, /identity provider.*JWT_JWKS_URL/, 50301);
      assert.equal(down.meta.error, 'service_unavailable');
      const res = await call('POST', MGMT, tok, { name: 'x' });
      assert.equal(res.statusCode, 503);
      assert.equal(res.headers['retry-after'], '5');
      const warn = lines.map((l) => JSON.parse(l)).find((l) => /JWKS/.test(l.msg));
      assert.ok(warn, `no log line about the JWKS in: ${lines.join('')}`);
      assert.equal(warn.level, 40);
      assert.equal(warn.jwks_url, `http://127.0.0.1:${port}/jwks.json`);

      // the provider answers 500: still the server's trouble
      const server = createServer(handler);
      servers.push(server);
      mode = 'error';
      await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
      assertPortalError(await call('GET', MGMT, tok), 503, /identity provider/, 50301);

      // back: the same token works, and a token signed by another key is still 401
      mode = 'ok';
      assertOk(await call('GET', MGMT, tok));
      const forged = await new SignJWT({})
        .setProtectedHeader({ alg: 'RS256', kid: 'k1' })
        .setSubject('idp-user')
        .setIssuedAt()
        .setExpirationTime('1h')
        .sign((await generateKeyPair('RS256')).privateKey);
      assertPortalError(await call('GET', MGMT, forged), 401, /^unauthorized/, 40102);
    } finally {
      await t.close();
    }
  });
});

describe('JWT_MAX_AGE_SECONDS caps the age of tokens', () => {
  test('by default (7 days): an exp in the year 9999 is refused a week after iat; no iat, or an iat in the future, is refused', async () => {
    const secret = new TextEncoder().encode(TEST_JWT_SECRET);
    const now = Math.floor(Date.now() / 1000);
    const sign = (iat: number | undefined) => {
      const j = new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject('forever').setExpirationTime(253402300799); // 9999-12-31
      if (iat !== undefined) j.setIssuedAt(iat);
      return j.sign(secret);
    };
    const t = await buildTestApp();
    try {
      assert.equal(t.config.jwt.maxAgeSeconds, 7 * 86400);
      const call = caller(t);
      assertOk(await call('GET', MGMT, await sign(now - 6 * 86400)));
      assertPortalError(await call('GET', MGMT, await sign(now - 8 * 86400)), 401, /JWT_MAX_AGE_SECONDS \(604800 s\)/, 40102);
      assertPortalError(await call('GET', MGMT, await sign(undefined)), 401, /no issue time \(iat\)/, 40102);
      assertPortalError(await call('GET', MGMT, await sign(now + 3600)), 401, /^unauthorized/, 40102);
    } finally {
      await t.close();
    }
  });

  test('with the cap: a token older than it, or without iat -> 401; a fresh one works; without the cap an old one with exp works', async () => {
    const secret = new TextEncoder().encode(TEST_JWT_SECRET);
    const now = Math.floor(Date.now() / 1000);
    const sign = (iat: number | undefined) => {
      const j = new SignJWT({})
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject('aged')
        .setExpirationTime(now + 3600);
      if (iat !== undefined) j.setIssuedAt(iat);
      return j.sign(secret);
    };
    const capped = await buildTestApp({ env: { JWT_MAX_AGE_SECONDS: '600' } });
    const open = await buildTestApp({ env: { JWT_MAX_AGE_SECONDS: '0' } });
    try {
      const call = caller(capped);
      assertOk(await call('GET', MGMT, await sign(now - 60)));
      assertPortalError(await call('GET', MGMT, await sign(now - 3000)), 401, /JWT_MAX_AGE_SECONDS \(600 s\)/, 40102);
      assertPortalError(await call('GET', MGMT, await sign(undefined)), 401, /no issue time \(iat\)/, 40102);
      assertOk(await caller(open)('GET', MGMT, await sign(now - 3000)));
    } finally {
      await capped.close();
      await open.close();
    }
  });
});
