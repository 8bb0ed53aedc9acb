import { describe, test, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig } from '../../src/platform/config.js';
import { fastifyTrustProxy, isTrustedProxy, trustedProxyCheck } from '../../src/platform/http/proxy.js';

const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'portico-cfg-'));
  dirs.push(d);
  return d;
};
const SECRET = 'x'.repeat(32);

describe('configuration from the environment', () => {
  after(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  const bad = (env: Record<string, string>, message: RegExp) =>
    assert.throws(
      () => loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, ...env }),
      (e: unknown) => {
        assert.ok(e instanceof ConfigError, `expected a ConfigError, got ${e}`);
        assert.match((e as Error).message, message);
        return true;
      },
    );

  test('defaults', () => {
    const c = loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET });
    assert.equal(c.port, 8080);
    assert.equal(c.host, '127.0.0.1');
    assert.equal(c.databaseUrl, undefined);
    assert.equal(c.limits.activeManagementKeys, 10);
    assert.equal(c.limits.activeInferenceKeys, 10);
    assert.equal(c.jwt.orgRolesClaim, 'org_roles');
    assert.equal(c.jwt.adminRole, 'admin');
    assert.equal(c.jwt.secretGenerated, false);
    assert.deepEqual(Buffer.from(c.jwt.secret!).toString(), SECRET);
  });

  test('a bad PORT -> ConfigError naming PORT and the allowed range', () => {
    bad({ PORT: 'abc' }, /^PORT must be a whole number from 0 to 65535, got "abc"$/);
    bad({ PORT: '65536' }, /^PORT must be from 0 to 65535, got 65536$/);
    bad({ PORT: '-1' }, /^PORT must be a whole number/);
    bad({ PORT: '80.5' }, /^PORT must be a whole number/);
    assert.equal(loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, PORT: '9000' }).port, 9000);
  });

  test('a short JWT_SECRET -> ConfigError', () => {
    bad({ JWT_SECRET: 'short' }, /^JWT_SECRET must be at least 32 characters/);
    bad({ JWT_SECRET: 'x'.repeat(31) }, /^JWT_SECRET must be at least 32 characters/);
  });

  test('a bad DATABASE_URL, JWT_JWKS_URL or REDIS_URL -> ConfigError', () => {
    bad({ DATABASE_URL: 'not a url' }, /^DATABASE_URL is not a valid URL$/);
    bad({ DATABASE_URL: 'mysql://localhost/db' }, /^DATABASE_URL must start with postgres:\/\/ or postgresql:\/\//);
    bad({ JWT_JWKS_URL: 'ftp://idp/jwks' }, /^JWT_JWKS_URL must start with http:\/\/ or https:\/\//);
    bad({ REDIS_URL: 'http://x' }, /^REDIS_URL must start with redis:\/\//);
    assert.equal(loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, DATABASE_URL: 'postgresql://u@h/db' }).databaseUrl, 'postgresql://u@h/db');
  });

  test('REDIS_PREFIX: unset by default (made from the database), checked, a trailing colon dropped', () => {
    const load = (v?: string) => loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, ...(v === undefined ? {} : { REDIS_PREFIX: v }) }).redisPrefix;
    assert.equal(load(), undefined);
    assert.equal(load(''), undefined);
    assert.equal(load('staging'), 'staging');
    assert.equal(load('team-a:prod::'), 'team-a:prod');
    bad({ REDIS_PREFIX: 'has space' }, /^REDIS_PREFIX must be 1 to 100 letters, digits or ":._-"/);
    bad({ REDIS_PREFIX: ':leading' }, /^REDIS_PREFIX must be/);
    bad({ REDIS_PREFIX: 'x'.repeat(101) }, /^REDIS_PREFIX must be/);
    bad({ REDIS_PREFIX: 'a*b' }, /^REDIS_PREFIX must be/);
  });

  test('other values are checked too', () => {
    bad({ LOG_LEVEL: 'verbose' }, /^LOG_LEVEL must be one of/);
    bad({ KEY_PEPPER: 'short' }, /^KEY_PEPPER must be at least 32 characters/);
    bad({ PORTICO_SECRETS_KEY: 'short' }, /^PORTICO_SECRETS_KEY must be at least 32 characters/);
    bad({ MAX_ACTIVE_MANAGEMENT_KEYS: '0' }, /^MAX_ACTIVE_MANAGEMENT_KEYS must be from 1/);
    bad({ LAST_USED_WRITE_INTERVAL_MS: 'soon' }, /^LAST_USED_WRITE_INTERVAL_MS must be a whole number/);
    assert.equal(loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, MAX_ACTIVE_INFERENCE_KEYS: '25' }).limits.activeInferenceKeys, 25);
  });

  test('PGLITE_SHARED_BUFFERS_MB: 8 by default, a whole number of MB from 1 to 4096', () => {
    assert.equal(loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET }).pgliteSharedBuffersMb, 8);
    assert.equal(loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, PGLITE_SHARED_BUFFERS_MB: '64' }).pgliteSharedBuffersMb, 64);
    bad({ PGLITE_SHARED_BUFFERS_MB: '0' }, /^PGLITE_SHARED_BUFFERS_MB must be from 1 to 4096, got 0$/);
    bad({ PGLITE_SHARED_BUFFERS_MB: '16MB' }, /^PGLITE_SHARED_BUFFERS_MB must be a whole number/);
  });

  test("WHISPER_TIMEOUT_MS and WHISPER_TIMEOUT_PER_AUDIO_SECOND_MS: unset, the engine's defaults; whole numbers in range", () => {
    assert.deepEqual(loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET }).whisperTimeout, {});
    assert.deepEqual(loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, WHISPER_TIMEOUT_MS: '90000', WHISPER_TIMEOUT_PER_AUDIO_SECOND_MS: '0' }).whisperTimeout, {
      floorMs: 90_000,
      perAudioSecondMs: 0,
    });
    bad({ WHISPER_TIMEOUT_MS: '0' }, /^WHISPER_TIMEOUT_MS must be from 1 to 86400000, got 0$/);
    bad({ WHISPER_TIMEOUT_MS: '10m' }, /^WHISPER_TIMEOUT_MS must be a whole number/);
    bad({ WHISPER_TIMEOUT_PER_AUDIO_SECOND_MS: '-1' }, /^WHISPER_TIMEOUT_PER_AUDIO_SECOND_MS must be a whole number/);
  });

  test('stored conversations: RESPONSES_MAX_CHAIN_BYTES 64 MiB, 4 chain loads per key (1 on PGlite) and 16 waiting by default, checked', () => {
    assert.deepEqual(loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET }).responses, { maxChainBytes: 64 * 1024 * 1024, maxChainLoadsPerKey: 1, maxQueuedChainLoadsPerKey: 16 });
    assert.equal(loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, DATABASE_URL: 'postgres://h/db' }).responses.maxChainLoadsPerKey, 4);
    const c = loadConfig({
      DATA_DIR: tmp(),
      JWT_SECRET: SECRET,
      RESPONSES_MAX_CHAIN_BYTES: '1048576',
      RESPONSES_MAX_CHAIN_LOADS_PER_KEY: '3',
      RESPONSES_MAX_QUEUED_CHAIN_LOADS_PER_KEY: '0',
    });
    assert.deepEqual(c.responses, { maxChainBytes: 1048576, maxChainLoadsPerKey: 3, maxQueuedChainLoadsPerKey: 0 });
    bad({ RESPONSES_MAX_CHAIN_BYTES: '64MiB' }, /^RESPONSES_MAX_CHAIN_BYTES must be a whole number/);
    bad({ RESPONSES_MAX_CHAIN_BYTES: '10' }, /^RESPONSES_MAX_CHAIN_BYTES must be from 1024/);
    bad({ RESPONSES_MAX_CHAIN_LOADS_PER_KEY: '0' }, /^RESPONSES_MAX_CHAIN_LOADS_PER_KEY must be from 1/);
  });

  test('issue 22 §1 limits: KEY_MAX_CONCURRENCY 64, MAX_CONNECTIONS_PER_ADDRESS 256, WS_IDLE_MS 5 minutes; 0 turns the first two off', () => {
    const d = loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET });
    assert.equal(d.keyMaxConcurrency, 64);
    assert.equal(d.http.maxConnectionsPerAddress, 256);
    assert.equal(d.ws.idleMs, 300_000);
    const c = loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, KEY_MAX_CONCURRENCY: '0', MAX_CONNECTIONS_PER_ADDRESS: '0', WS_IDLE_MS: '1500' });
    assert.equal(c.keyMaxConcurrency, 0);
    assert.equal(c.http.maxConnectionsPerAddress, 0);
    assert.equal(c.ws.idleMs, 1500);
    bad({ KEY_MAX_CONCURRENCY: 'many' }, /^KEY_MAX_CONCURRENCY must be a whole number/);
    bad({ MAX_CONNECTIONS_PER_ADDRESS: '-1' }, /^MAX_CONNECTIONS_PER_ADDRESS must be a whole number/);
    bad({ WS_IDLE_MS: '0' }, /^WS_IDLE_MS must be from 100 to 86400000, got 0$/);
  });

  test('without JWT_SECRET or JWT_JWKS_URL a secret is generated once under DATA_DIR (0600) and kept', () => {
    const dir = tmp();
    const a = loadConfig({ DATA_DIR: dir });
    assert.equal(a.jwt.secretGenerated, true);
    assert.ok(a.jwt.secret && a.jwt.secret.length >= 32);
    const file = join(dir, 'jwt-secret');
    assert.ok(existsSync(file));
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.match(readFileSync(file, 'utf8').trim(), /^[0-9a-f]{64}$/);
    const b = loadConfig({ DATA_DIR: dir });
    assert.deepEqual(Buffer.from(b.jwt.secret!), Buffer.from(a.jwt.secret!));
    assert.deepEqual(b.keyPepper, a.keyPepper);
    // a JWKS alone: no HS256 secret at all
    const j = loadConfig({ DATA_DIR: tmp(), JWT_JWKS_URL: 'https://idp.example/jwks.json', JWT_ISSUER: 'https://idp.example/', JWT_AUDIENCE: 'portico' });
    assert.equal(j.jwt.secret, undefined);
    assert.equal(j.jwt.issuer, 'https://idp.example/');
    assert.equal(j.jwt.audience, 'portico');
  });

  test('a damaged secret file -> ConfigError telling what to do', () => {
    const dir = tmp();
    loadConfig({ DATA_DIR: dir });
    writeFileSync(join(dir, 'jwt-secret'), 'not hex!');
    assert.throws(
      () => loadConfig({ DATA_DIR: dir }),
      (e: unknown) => e instanceof ConfigError && /damaged.*delete it/.test((e as Error).message),
    );
  });

  test('TRUST_PROXY: off by default; a hop count or a list of IPv4/IPv6 addresses and networks; bad values refused at start', () => {
    const trust = (v: string) => loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, TRUST_PROXY: v }).trustProxy;
    assert.equal(loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET }).trustProxy, undefined);
    for (const off of ['', ' ', 'false', 'FALSE', '0', 'no']) assert.equal(trust(off), undefined, off);
    assert.deepEqual(trust('1'), { hops: 1 });
    assert.deepEqual(trust(' 2 '), { hops: 2 });
    assert.deepEqual(trust('10.0.0.5'), { cidrs: ['10.0.0.5'] });
    assert.deepEqual(trust('10.0.0.0/8, 192.168.1.0/24,::1, fd00::/8,2001:db8::/032'), { cidrs: ['10.0.0.0/8', '192.168.1.0/24', '::1', 'fd00::/8', '2001:db8::/32'] });
    assert.deepEqual(trust('loopback,10.1.2.3'), { cidrs: ['127.0.0.0/8', '::1/128', '10.1.2.3'] });
    assert.deepEqual(trust('uniquelocal'), { cidrs: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', 'fc00::/7'] });
    bad({ TRUST_PROXY: 'true' }, /TRUST_PROXY=true would believe the X-Forwarded-For of any client.*number of proxies/);
    bad({ TRUST_PROXY: '*' }, /TRUST_PROXY/);
    bad({ TRUST_PROXY: '33' }, /TRUST_PROXY must be a number of proxies from 1 to 32/);
    bad({ TRUST_PROXY: '-1' }, /TRUST_PROXY must be .*"-1" is not one/);
    bad({ TRUST_PROXY: '10.0.0.256' }, /"10\.0\.0\.256" is not one/);
    bad({ TRUST_PROXY: '10.0.0.0/33' }, /"10\.0\.0\.0\/33" is not one/);
    bad({ TRUST_PROXY: 'fd00::/129' }, /"fd00::\/129" is not one/);
    bad({ TRUST_PROXY: '0.0.0.0/0' }, /a \/0 network would trust every client/);
    bad({ TRUST_PROXY: '10.0.0.1,,10.0.0.2' }, /"" is not one/);
    bad({ TRUST_PROXY: 'proxy.internal' }, /"proxy\.internal" is not one/);
    bad({ TRUST_PROXY: '10.0.0.1/8/8' }, /is not one/);
  });

  test('trusted proxies as Fastify and a per-address limit see them (isTrustedProxy)', () => {
    assert.equal(fastifyTrustProxy(undefined), false);
    assert.deepEqual(fastifyTrustProxy({ cidrs: ['10.0.0.0/8'] }), ['10.0.0.0/8']);
    const hops = fastifyTrustProxy({ hops: 2 }) as (a: string, i: number) => boolean;
    assert.deepEqual(
      [0, 1, 2].map((i) => hops('198.51.100.1', i)),
      [true, true, false],
    );
    const list = { cidrs: ['10.0.0.0/8', '192.0.2.7', 'fd00::/8'] };
    assert.equal(isTrustedProxy(list, '10.200.0.1'), true);
    assert.equal(isTrustedProxy(list, '::ffff:10.200.0.1'), true, 'an IPv4 peer on a dual-stack socket');
    assert.equal(isTrustedProxy(list, '192.0.2.7'), true);
    assert.equal(isTrustedProxy(list, '192.0.2.8'), false);
    assert.equal(isTrustedProxy(list, 'fd12::1'), true);
    assert.equal(isTrustedProxy(list, 'fe80::1'), false);
    assert.equal(isTrustedProxy(list, 'not an address'), false);
    assert.equal(isTrustedProxy(list, undefined), false);
    assert.equal(isTrustedProxy(undefined, '10.0.0.1'), false);
    assert.equal(isTrustedProxy({ hops: 1 }, '203.0.113.1'), true, 'with a hop count the peer is always the nearest proxy');
    const check = trustedProxyCheck({ cidrs: ['127.0.0.0/8', '::1/128'] });
    assert.equal(check('127.0.0.1'), true);
    assert.equal(check('::1'), true);
    assert.equal(check('8.8.8.8'), false);
  });

  test('web page settings: public address, sessions, OpenID Connect, CORS origins', () => {
    const d = loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, PORT: '9000' }).web;
    assert.equal(d.publicUrl, 'http://127.0.0.1:9000');
    assert.equal(d.sessionTtlMs, 8 * 3_600_000);
    assert.equal(d.oidc, undefined);
    assert.deepEqual(d.corsOrigins, []);
    assert.equal(loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, HOST: '0.0.0.0' }).web.publicUrl, 'http://127.0.0.1:8080');
    assert.equal(loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, HOST: '::1' }).web.publicUrl, 'http://[::1]:8080');
    const c = loadConfig({
      DATA_DIR: tmp(),
      JWT_SECRET: SECRET,
      PUBLIC_URL: 'https://ai.example.com/',
      OIDC_ISSUER: 'https://id.example.com/realms/x',
      OIDC_CLIENT_ID: 'portico',
      OIDC_CLIENT_SECRET: 's3cret',
      SESSION_TTL_MS: '3600000',
      CORS_ORIGINS: 'https://a.example.com, http://localhost:5173/',
    }).web;
    assert.equal(c.publicUrl, 'https://ai.example.com');
    assert.deepEqual(c.oidc, {
      issuer: 'https://id.example.com/realms/x',
      clientId: 'portico',
      clientSecret: 's3cret',
      redirectUrl: 'https://ai.example.com/auth/oidc/callback',
      scopes: 'openid profile email',
    });
    assert.equal(c.sessionTtlMs, 3_600_000);
    assert.deepEqual(c.corsOrigins, ['https://a.example.com', 'http://localhost:5173']);
    assert.deepEqual(loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, CORS_ORIGINS: 'https://a.example.com,*' }).web.corsOrigins, ['*']);
    assert.equal(
      loadConfig({ DATA_DIR: tmp(), JWT_SECRET: SECRET, OIDC_ISSUER: 'http://127.0.0.1:4000', OIDC_CLIENT_ID: 'p', OIDC_REDIRECT_URL: 'http://127.0.0.1:8080/auth/oidc/callback' })
        .web.oidc?.issuer,
      'http://127.0.0.1:4000',
    );
    bad({ OIDC_ISSUER: 'https://id.example.com' }, /OIDC_CLIENT_ID/);
    bad({ OIDC_CLIENT_ID: 'portico' }, /OIDC_ISSUER/);
    bad({ OIDC_ISSUER: 'http://id.example.com', OIDC_CLIENT_ID: 'p' }, /https:\/\/.*only on this machine/);
    bad({ OIDC_ISSUER: 'https://id.example.com', OIDC_CLIENT_ID: 'p', OIDC_SCOPES: 'profile email' }, /include openid/);
    bad({ PUBLIC_URL: 'ftp://x' }, /PUBLIC_URL must start with/);
    bad({ CORS_ORIGINS: 'https://a.example.com/app' }, /CORS_ORIGINS/);
    bad({ CORS_ORIGINS: 'a.example.com' }, /CORS_ORIGINS/);
    bad({ SESSION_TTL_MS: '10' }, /SESSION_TTL_MS/);
  });
});
