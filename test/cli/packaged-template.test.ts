/**
 * `build.mjs --pglite-template` (an image's or a package's build) puts a dump of an empty, migrated embedded database
 * in dist/; a new DATA_DIR then starts as a copy of it instead of initdb, with nothing of another installation in it
 * (each gets its own installation id at its first start); PORTICO_PGLITE_TEMPLATE=off goes back to initdb.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { freePort } from '../helpers/cluster.js';
import { waitFor } from '../helpers/wait.js';
import { TEST_JWT_SECRET } from '../helpers/app.js';
import { copyApp } from '../helpers/app-copy.js';

/** `portico serve` from `app` on `dataDir` until /readyz, then stopped; its log lines */
async function serveOnce(app: string, dataDir: string, extra: Record<string, string> = {}): Promise<Array<Record<string, unknown>>> {
  const port = await freePort();
  const child = spawn(process.execPath, [join(app, 'dist', 'src', 'cli', 'main.js'), 'serve'], {
    env: {
      PATH: process.env.PATH ?? '',
      HOME: dataDir,
      DATA_DIR: dataDir,
      PORT: String(port),
      HOST: '127.0.0.1',
      JWT_SECRET: TEST_JWT_SECRET,
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
      ...extra,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  try {
    await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.status === 200 || child.exitCode !== null, {
      timeoutMs: 120_000,
      what: '/readyz 200',
    });
    assert.equal(child.exitCode, null, out);
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
  return out
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** the rows of settings and the applied migrations of a data directory, or of a dump */
async function contents(from: { dir: string } | { dump: string }): Promise<{ settings: string[]; migrations: string[] }> {
  const db = 'dir' in from ? await PGlite.create(join(from.dir, 'pglite')) : await PGlite.create({ loadDataDir: new Blob([readFileSync(from.dump)]) });
  try {
    const settings = (await db.query<{ key: string; value: string }>(`select key, value from settings order by key`)).rows.map((r) => `${r.key}=${r.value}`);
    const migrations = (await db.query<{ name: string }>(`select name from portico_migrations order by name`)).rows.map((r) => r.name);
    return { settings, migrations };
  } finally {
    await db.close();
  }
}

test('a build with --pglite-template: new data directories start as copies of it, each its own installation', async (t) => {
  const base = mkdtempSync(join(tmpdir(), 'portico-tpl-'));
  t.after(() => rmSync(base, { recursive: true, force: true }));
  const app = join(base, 'app');
  mkdirSync(app);
  copyApp(app, ['--app', '--pglite-template', '--quiet']);
  const template = join(app, 'dist', 'pglite-template.tar.gz');
  assert.ok(existsSync(template));

  const created = (lines: Array<Record<string, unknown>>) => lines.find((l) => typeof l.msg === 'string' && l.msg.startsWith('created the embedded database'));
  const a = join(base, 'a');
  const b = join(base, 'b');
  const first = created(await serveOnce(app, a));
  assert.ok(first, 'the creation is said');
  assert.equal(first.template, template);
  assert.match(String(first.msg), /as a copy of .*pglite-template\.tar\.gz$/);
  await serveOnce(app, b);
  // the template is this build's migrations on an empty database: nothing of an installation (no settings row: the
  // key pepper's check, the installation id are each start's own)
  const dump = await contents({ dump: template });
  assert.deepEqual(dump.settings, []);
  const ca = await contents({ dir: a });
  const cb = await contents({ dir: b });
  assert.deepEqual(dump.migrations, ca.migrations, 'the template holds every migration of this build');
  assert.ok(ca.settings.length > 0, 'the first start wrote its own settings');
  // no KEY_PEPPER set: each data directory generated its own, and recorded its own check of it
  const check = (x: string[]) => x.find((s) => s.startsWith('key_pepper_fingerprint='));
  assert.ok(check(ca.settings) && check(cb.settings));
  assert.notEqual(check(ca.settings), check(cb.settings), 'two installations made from one template share no secret');
  // a restart opens the database it has: nothing is created again
  assert.equal(created(await serveOnce(app, a)), undefined);

  const c = join(base, 'c');
  const off = created(await serveOnce(app, c, { PORTICO_PGLITE_TEMPLATE: 'off' }));
  assert.ok(off);
  assert.equal(off.template, null);
  assert.match(String(off.msg), /with initdb$/);
});
