/**
 * The socket opens before the database (src/platform/http/early.ts): while the start waits on something slow
 * (here: migrations waiting for the advisory lock another instance holds, as in a rolling upgrade), /healthz
 * answers 200 "starting", /readyz 503 with what it waits for, and every other request a 503 in its route group's
 * shape; then the app takes the same socket over and serves. A port in use is found before the database.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { databaseFromTemplate } from '../helpers/db-template.js';
import { freePort, MAIN_JS } from '../helpers/cluster.js';
import { waitFor } from '../helpers/wait.js';
import { TEST_JWT_SECRET } from '../helpers/app.js';

const pgOff = process.env.PORTICO_TEST_PG === 'off';

test('while migrations wait for another instance’s lock, the server answers "starting", then serves on the same socket', { skip: pgOff && 'PORTICO_TEST_PG=off' }, async (t) => {
  const made = await databaseFromTemplate();
  if (!made) return t.skip('the test database user cannot create databases');
  // another instance migrating: it holds the lock every start takes before it migrates
  const holder = new pg.Client({ connectionString: made.url });
  holder.on('error', () => {});
  await holder.connect();
  // cleaned in this order: the server, the lock's session, the database
  await holder.query(`select pg_advisory_lock(hashtext('portico_migrations:' || current_schema()))`);

  // the process's files (its journal, a generated secret) go to a folder of the test's, not the working directory
  const dataDir = mkdtempSync(join(tmpdir(), 'portico-early-'));
  const port = await freePort();
  const child = spawn(process.execPath, [MAIN_JS, 'serve'], {
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      DATABASE_URL: made.url,
      DATA_DIR: dataDir,
      PORT: String(port),
      HOST: '127.0.0.1',
      JWT_SECRET: TEST_JWT_SECRET,
      KEY_PEPPER: 'early-listen-pepper-0123456789abcdef',
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  t.after(async () => {
    if (child.exitCode === null) child.kill('SIGKILL');
    await exited;
    await holder.end().catch(() => {});
    await made.drop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const base = `http://127.0.0.1:${port}`;
  const get = (path: string, headers: Record<string, string> = {}) =>
    fetch(base + path, { headers }).then(async (r) => ({ status: r.status, headers: r.headers, body: (await r.json()) as any }));

  const health = await waitFor(() => get('/healthz').catch(() => undefined), { timeoutMs: 60_000, what: '/healthz to answer' });
  assert.equal(health.status, 200);
  assert.equal(health.body.status, 'starting');
  // it waits at the lock: the phase says so (it may still be connecting when /healthz first answers)
  const waiting = await waitFor(
    async () => {
      const r = await get('/readyz');
      return typeof r.body.checks?.startup === 'string' && r.body.checks.startup.startsWith('migrating the database') ? r : undefined;
    },
    { timeoutMs: 30_000, what: '/readyz to say it is migrating' },
  );
  assert.equal(waiting.status, 503);
  assert.equal(waiting.body.status, 'starting');

  const api = await get('/v1/models', { authorization: 'Bearer sk-whatever' });
  assert.equal(api.status, 503);
  assert.equal(api.headers.get('retry-after'), '2');
  assert.equal(api.body.error.code, 'service_unavailable');
  assert.equal(api.body.error.type, 'server_error');
  assert.match(api.body.error.message, /starting \(migrating the database\)/);
  const portal = await get('/v1/portal/me', { 'accept-language': 'zh-CN' });
  assert.equal(portal.status, 503);
  assert.equal(portal.body.meta.code, 50301);
  assert.equal(portal.body.meta.error, 'service_unavailable');
  assert.match(portal.body.meta.message, /正在启动/);
  assert.match(portal.body.meta.request_id, /^req_/);
  assert.equal(portal.body.data, null);
  // a person opening the page meanwhile gets a page that says so and reloads itself
  const page = await fetch(`${base}/`, { headers: { accept: 'text/html,application/xhtml+xml' } });
  assert.equal(page.status, 503);
  assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
  const html = await page.text();
  assert.match(html, /<meta http-equiv="refresh" content="2">/);
  assert.match(html, /Portico is starting \(migrating the database\)/);
  // a second server on the same port is refused at once, before it touches any database
  const second = spawn(process.execPath, [MAIN_JS, 'serve'], {
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none',
      DATA_DIR: dataDir,
      PORT: String(port),
      HOST: '127.0.0.1',
      JWT_SECRET: TEST_JWT_SECRET,
      LOG_LEVEL: 'silent',
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let secondErr = '';
  second.stderr.on('data', (d: Buffer) => (secondErr += d.toString()));
  const secondCode = await new Promise<number | null>((r) => second.once('exit', (code) => r(code)));
  assert.equal(secondCode, 2, secondErr);
  assert.match(secondErr, new RegExp(`port ${port} .* is in use`));

  // an open connection, kept alive across the hand-over
  const keep = net.connect(port, '127.0.0.1');
  await new Promise((r) => keep.once('connect', r));
  t.after(() => keep.destroy());

  // the other instance is done: this one migrates (nothing left to do) and serves
  await holder.query(`select pg_advisory_unlock(hashtext('portico_migrations:' || current_schema()))`);
  const ready = await waitFor(
    async () => {
      const r = await get('/readyz');
      return r.status === 200 ? r : undefined;
    },
    { timeoutMs: 60_000, what: '/readyz 200' },
  );
  assert.equal(ready.body.status, 'ready');
  assert.deepEqual((await get('/healthz')).body, { status: 'ok' });
  const models = await get('/v1/models');
  assert.equal(models.status, 401, 'the app answers now: a request without a key is refused by the gate');
  // the connection opened while it was starting is served by the app
  const answer = await new Promise<string>((resolve) => {
    let s = '';
    keep.on('data', (d) => {
      s += d.toString();
      if (s.includes('\r\n\r\n') && s.includes('"status"')) resolve(s);
    });
    keep.write(`GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n`);
  });
  assert.match(answer, /^HTTP\/1\.1 200/);
  assert.match(answer, /"status":"ok"/);
  assert.equal(child.exitCode, null, out);
  child.kill('SIGTERM');
  assert.equal(await exited, 0, out);
});
