import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import { buildTestApp, testDatabases, TEST_JWT_SECRET, TEST_PG_URL, type TestApp } from '../helpers/app.js';
import { closeServices, createServices } from '../../src/app.js';
import { loadConfig } from '../../src/platform/config.js';
import { createJwtVerifier } from '../../src/platform/auth/jwt.js';

const CLI = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function portico(args: string[], env: Record<string, string>): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', LOG_LEVEL: 'silent', ...env }, timeout: 60_000 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as any).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'portico-cli-'));
  dirs.push(d);
  return d;
};

describe('portico CLI: token and bad arguments', () => {
  after(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  test('token --user u --org o --admin prints a JWT the app accepts (same JWT_SECRET)', async () => {
    const r = await portico(['token', '--user', 'u', '--org', 'o', '--admin'], { JWT_SECRET: TEST_JWT_SECRET, DATA_DIR: tmp() });
    assert.equal(r.code, 0, r.stderr);
    const jwt = r.stdout.trim();
    assert.match(jwt, /^[\w-]+\.[\w-]+\.[\w-]+$/);
    const payload = JSON.parse(Buffer.from(jwt.split('.')[1], 'base64url').toString());
    assert.equal(payload.sub, 'u');
    assert.deepEqual(payload.org_roles, { o: 'admin' });
    assert.ok(payload.exp - payload.iat === 3600);
    const t = await buildTestApp();
    try {
      const res = await t.app.inject({ method: 'POST', url: '/v1/portal/management/api-keys', headers: { authorization: `Bearer ${jwt}` }, payload: { name: 'cli', org_id: 'o' } });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.json().data.org_id, 'o');
    } finally {
      await t.close();
    }
  });

  test('token with a generated secret: the same DATA_DIR verifies it; --ttl and --org without --admin', async () => {
    const dir = tmp();
    const r = await portico(['token', '--user', 'dev', '--org', 'acme', '--ttl', '15m'], { DATA_DIR: dir });
    assert.equal(r.code, 0, r.stderr);
    const cfg = loadConfig({ DATA_DIR: dir });
    assert.equal(cfg.jwt.secretGenerated, true);
    const p = await createJwtVerifier(cfg.jwt).verify(r.stdout.trim());
    assert.deepEqual(p, { userId: 'dev', orgRoles: { acme: 'member' } });
    const payload = JSON.parse(Buffer.from(r.stdout.trim().split('.')[1], 'base64url').toString());
    assert.equal(payload.exp - payload.iat, 900);
    // another DATA_DIR has another secret
    await assert.rejects(createJwtVerifier(loadConfig({ DATA_DIR: tmp() }).jwt).verify(r.stdout.trim()));
  });

  test('bad arguments exit 2 with a message', async () => {
    const env = { JWT_SECRET: TEST_JWT_SECRET, DATA_DIR: tmp() };
    const cases: Array<[string[], RegExp, Record<string, string>?]> = [
      [['token'], /token needs --user/],
      [['token', '--user', 'u', '--admin'], /--admin needs --org/],
      [['token', '--user', 'u', '--ttl', 'forever'], /invalid TTL/],
      [['token', '--user', 'u', '--bogus'], /bogus/],
      [['keys'], /usage: portico keys disable ID/],
      [['keys', 'disable'], /usage: portico keys disable ID/],
      [['keys', 'delete', 'key_x'], /usage: portico keys disable ID/],
      [['credits', 'grant', '--user', 'u', '--amount', 'abc'], /--amount must be a non-zero number/],
      [['credits', 'grant', '--user', 'u'], /--amount/],
      [['credits', 'grant', '--amount', '5'], /--user/],
      [['credits', 'take'], /usage: portico credits grant/],
      [['frobnicate'], /unknown command "frobnicate"/],
      [['token', '--user', 'u'], /PORT must be/, { PORT: 'abc' }],
      [['token', '--user', 'u'], /JWT_SECRET must be at least 32 characters/, { JWT_SECRET: 'short' }],
    ];
    const results = await Promise.all(cases.map(([args, , extra]) => portico(args, { ...env, ...(extra ?? {}) })));
    results.forEach((r, i) => {
      const [args, msg] = cases[i];
      assert.equal(r.code, 2, `portico ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
      assert.match(r.stderr, msg, `portico ${args.join(' ')}`);
      assert.equal(r.stdout, '');
    });
    // help exits 0 and lists the commands
    const help = await portico(['help'], env);
    assert.equal(help.code, 0);
    for (const c of ['serve', 'token', 'keys disable', 'credits grant']) assert.ok(help.stdout.includes(c));
  });
});

for (const db of testDatabases()) {
  describe(`portico keys disable/enable and credits grant against ${db === 'pglite' ? 'a PGlite DATA_DIR' : 'a PostgreSQL schema'}`, () => {
    after(() => {
      for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
    });

    if (db === 'pglite') {
      test('a DATA_DIR no server has open', async () => {
        const dir = tmp();
        const env = { DATA_DIR: dir, JWT_SECRET: TEST_JWT_SECRET };
        const open = () => createServices(loadConfig(env), { models: [] });
        let s = await open();
        const user = { userId: 'op-user', orgRoles: {} };
        const sk = await s.inferenceKeys.create(user, { name: 'cli target' });
        const mk = await s.managementKeys.create(user, { name: 'cli target' });
        await closeServices(s);

        for (const id of [sk.id, mk.id]) {
          const r = await portico(['keys', 'disable', id], env);
          assert.equal(r.code, 0, r.stderr);
          assert.match(r.stdout, new RegExp(`${id}: disabled`));
        }
        const grant = await portico(['credits', 'grant', '--user', 'op-user', '--amount', '12.5', '--note', 'welcome'], env);
        assert.equal(grant.code, 0, grant.stderr);
        assert.match(grant.stdout, /granted 12.5; balance 12.5/);
        const unknown = await portico(['keys', 'enable', 'key_nope'], env);
        assert.notEqual(unknown.code, 0);
        assert.match(unknown.stderr, /API key not found/);

        s = await open();
        try {
          await assert.rejects(s.verifier.verify(sk.api_key, 'inference'), (e: any) => e.code === 'api_key_disabled');
          await assert.rejects(s.verifier.verify(mk.api_key, 'management'), (e: any) => e.code === 'api_key_disabled');
          assert.deepEqual(await s.usage.balance({ orgId: 'default', userId: 'op-user' }), { granted: 12.5, used: 0, balance: 12.5, currency: 'credits' });
        } finally {
          await closeServices(s);
        }
        const en = await portico(['keys', 'enable', sk.id], env);
        assert.equal(en.code, 0, en.stderr);
        s = await open();
        try {
          assert.equal((await s.verifier.verify(sk.api_key, 'inference')).keyId, sk.id);
        } finally {
          await closeServices(s);
        }
      });
    } else {
      let t: TestApp;
      let env: Record<string, string>;
      before(async () => {
        t = await buildTestApp({ db });
        const schema = (await sql<{ s: string }>`select current_schema() as s`.execute(t.services.db.db)).rows[0].s;
        env = { DATABASE_URL: `${TEST_PG_URL}?options=${encodeURIComponent(`-c search_path=${schema}`)}`, JWT_SECRET: TEST_JWT_SECRET, DATA_DIR: tmp() };
      });
      after(() => t.close());

      test('disable and enable a key while the server runs; credits grant changes the balance', async () => {
        const key = await t.inferenceKey('op-user');
        const id = (await t.services.db.db.selectFrom('api_keys').select('id').where('user_id', '=', 'op-user').executeTakeFirstOrThrow()).id;
        const r = await portico(['keys', 'disable', id], env);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.stdout, new RegExp(`${id}: disabled`));
        const models = () => t.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${key}` } });
        const res = await models();
        assert.equal(res.statusCode, 401);
        assert.equal(res.json().error.code, 'api_key_disabled');
        const jwt = await t.token('op-user');
        const listed = (await t.app.inject({ method: 'GET', url: '/v1/portal/api-keys?status=disabled', headers: { authorization: `Bearer ${jwt}` } })).json();
        assert.deepEqual(listed.data.list.map((k: any) => k.id), [id]);
        const en = await portico(['keys', 'enable', id], env);
        assert.equal(en.code, 0, en.stderr);
        // another process changed it: this one sees it once its cached entry is older than KEY_CACHE_FRESH_MS (1 s)
        const end = Date.now() + 3000;
        let status = 0;
        while (Date.now() < end && (status = (await models()).statusCode) !== 200) await new Promise((r) => setTimeout(r, 100));
        assert.equal(status, 200);

        const before = (await t.app.inject({ method: 'GET', url: '/v1/portal/query/balance', headers: { authorization: `Bearer ${jwt}` } })).json().data;
        assert.equal(before.granted, 0);
        const g = await portico(['credits', 'grant', '--user', 'op-user', '--amount', '7'], env);
        assert.equal(g.code, 0, g.stderr);
        const orgGrant = await portico(['credits', 'grant', '--org', 'acme', '--amount', '100'], env);
        assert.equal(orgGrant.code, 0, orgGrant.stderr);
        const after = (await t.app.inject({ method: 'GET', url: '/v1/portal/query/balance', headers: { authorization: `Bearer ${jwt}` } })).json().data;
        assert.deepEqual(after, { granted: 7, used: 0, balance: 7, currency: 'credits' });
        const admin = await t.token('boss', { acme: 'admin' });
        const org = (await t.app.inject({ method: 'GET', url: '/v1/portal/query/balance?org_id=acme', headers: { authorization: `Bearer ${admin}` } })).json().data;
        assert.equal(org.granted, 100);
      });
    }
  });
}
