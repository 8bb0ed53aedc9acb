import { describe, test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { buildTestApp, TEST_JWT_SECRET } from '../helpers/app.js';
import { loadConfig } from '../../src/platform/config.js';
import { createJwtVerifier } from '../../src/platform/auth/jwt.js';
import { cleanTmp, portico, tmp } from './helpers.js';

describe('portico CLI: token and bad arguments', () => {
  after(() => {
    cleanTmp();
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
    const payload = JSON.parse(Buffer.from(r.stdout.trim().split('.')[1], 'base64url').toString());
    assert.deepEqual(p, { userId: 'dev', orgRoles: { acme: 'member' }, issuedAt: payload.iat });
    assert.equal(payload.exp - payload.iat, 900);
    // another DATA_DIR has another secret
    await assert.rejects(createJwtVerifier(loadConfig({ DATA_DIR: tmp() }).jwt).verify(r.stdout.trim()));
  });

  test('bad arguments exit 2 with one line that says what is wrong, never a stack trace', async () => {
    const env = { JWT_SECRET: TEST_JWT_SECRET, DATA_DIR: tmp() };
    const cases: Array<[string[], RegExp, Record<string, string>?]> = [
      [['token'], /required option '--user <id>'/],
      [['token', '--user', 'u', '--admin'], /--admin needs --org/],
      [['token', '--user', 'u', '--role', 'x'], /--role needs --org/],
      [['token', '--user', 'u', '--ttl', 'forever'], /invalid TTL/],
      [['token', '--user', 'u', '--ttl', '8d'], /--ttl is longer than JWT_MAX_AGE_SECONDS \(604800 s\)/],
      [['token', '--user', 'u', '--bogus'], /unknown option '--bogus'/],
      [['token', '--user'], /argument missing/],
      [['token', '--user', ' '], /--user must be 1-256 printable characters/],
      [['keys', 'disable'], /missing required argument 'id'/],
      [['keys', 'delete', 'key_x'], /unknown command 'delete'/],
      [['keys', 'disable', 'nonsense'], /"nonsense" is not a key id/],
      [['keys', 'limit', 'key_x', '--rpm', '-3'], /--rpm must be a whole number/],
      [['keys', 'limit', 'key_x', '--concurrency', 'lots'], /--concurrency must be a whole number/],
      [['credits', 'grant', '--user', 'u', '--amount', 'abc'], /the amount must be a positive number/],
      [['credits', 'grant', '--user', 'u', '--amount', '-1'], /the amount must be a positive number/],
      [['credits', 'grant', '--user', 'u', '--amount', '1e308'], /the amount must be a positive number/],
      [['credits', 'grant', '--user', 'u', '--amount', '10000000000000'], /at most 1000000000000 credits/],
      [['credits', 'grant', '--user', 'u', '--amount', '0.0000001'], /at least 0.000001 credits/],
      [['credits', 'grant', '--user', 'u', '--amount', '0.1234567'], /more than 6 decimals/],
      [['credits', 'grant', '--user', 'u', '--org', 'o', '--amount', '5'], /'--user <id>' cannot be used with option '--org <org>'/],
      [['credits', 'grant', '--user', 'u'], /required option '--amount <credits>'/],
      [['credits', 'grant', '--amount', '5'], /give --user ID/],
      [['credits', 'take'], /unknown command 'take'/],
      [['frobnicate'], /unknown command 'frobnicate'/],
      [['token', '--user', 'u'], /PORT must be/, { PORT: 'abc' }],
      [['token', '--user', 'u'], /JWT_SECRET must be at least 32 characters/, { JWT_SECRET: 'short' }],
    ];
    const results = await Promise.all(cases.map(([args, , extra]) => portico(args, { ...env, ...(extra ?? {}) })));
    results.forEach((r, i) => {
      const [args, msg] = cases[i]!;
      assert.equal(r.code, 2, `portico ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
      assert.match(r.stderr, msg, `portico ${args.join(' ')}`);
      const lines = r.stderr
        .trim()
        .split('\n')
        .filter((l) => l.trim() && !/^\(Did you mean/.test(l));
      assert.equal(lines.length, 1, `portico ${args.join(' ')}: one line, got ${JSON.stringify(r.stderr)}`);
      assert.doesNotMatch(r.stderr, /\bat .*\.js:\d+/, 'no stack trace');
      assert.equal(r.stdout, '');
    });
    // help exits 0 and lists the commands
    const help = await portico(['help'], env);
    assert.equal(help.code, 0);
    for (const c of ['serve', 'login', 'token', 'keys disable', 'credits grant', 'migrate', 'backup FILE', 'migrate-data']) assert.ok(help.stdout.includes(c), c);
  });

  test('--help and --version on every command do nothing else (no migration, no server, no token)', async () => {
    const dir = tmp();
    // a database made as a first start makes it (not from the suite's migrated template): `migrate` has work to do
    const env = { JWT_SECRET: TEST_JWT_SECRET, DATA_DIR: dir, PORT: '0', PORTICO_PGLITE_TEMPLATE: '' };
    const commands = [
      [],
      ['serve'],
      ['token'],
      ['keys'],
      ['keys', 'disable'],
      ['keys', 'enable'],
      ['keys', 'limit'],
      ['credits'],
      ['credits', 'grant'],
      ['models', 'reload'],
      ['migrate'],
      ['backup'],
      ['restore'],
      ['migrate-data'],
    ];
    const version = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')).version as string;
    const runs = await Promise.all(commands.flatMap((c) => [portico([...c, '--help'], env), portico([...c, '--version'], env)]));
    commands.forEach((c, i) => {
      const h = runs[2 * i]!;
      const v = runs[2 * i + 1]!;
      assert.equal(h.code, 0, `${c.join(' ')} --help: ${h.stderr}`);
      assert.match(h.stdout, /Usage: portico/, `${c.join(' ')} --help`);
      assert.equal(v.code, 0, `${c.join(' ')} --version: ${v.stderr}`);
      assert.equal(v.stdout.trim(), version);
    });
    // nothing was created: no database, no lock, no generated secret
    assert.deepEqual(readdirSync(dir), []);
    const dry = await portico(['migrate', '--dry-run'], env);
    assert.equal(dry.code, 0, dry.stderr);
    assert.match(dry.stdout, /pending migrations: 0001_/);
    const applied = await portico(['migrate'], env);
    assert.equal(applied.code, 0, applied.stderr);
    assert.match(applied.stdout, /migrations applied: 0001_/);
    const again = await portico(['migrate', '--dry-run'], env);
    assert.match(again.stdout, /no pending migrations/);
  });

  test('a busy port is one line saying so', async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
    const port = (blocker.address() as { port: number }).port;
    try {
      const r = await portico(['serve'], { JWT_SECRET: TEST_JWT_SECRET, DATA_DIR: tmp(), PORT: String(port), PORTICO_DB: 'memory' });
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, new RegExp(`portico: port ${port} on 127.0.0.1 is in use by another program`));
      assert.doesNotMatch(r.stderr, /\bat .*\.js:\d+/);
    } finally {
      blocker.close();
    }
  });
});
