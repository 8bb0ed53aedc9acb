/**
 * A production install runs from a folder it cannot write (docs/deployment.md, "A read-only application folder"):
 * `npm start` (scripts/start.mjs) on a current build writes nothing there and serves; on a stale build it serves
 * the build it has and says how to rebuild; with no build it says so and exits 1. Run as an unprivileged user
 * (root ignores file modes: as root the test drops to uid/gid 65534 with setpriv).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../helpers/cluster.js';
import { pgliteTemplate } from '../helpers/db-template.js';
import { waitFor } from '../helpers/wait.js';
import { TEST_JWT_SECRET } from '../helpers/app.js';
import { CHECKOUT, copyApp } from '../helpers/app-copy.js';

const isRoot = process.getuid?.() === 0;
const NOBODY = 65534;
const setpriv = spawnSync('setpriv', ['--version']).status === 0;

/** every folder 0555 and file 0444 (executables 0555): nobody may write */
function readOnly(p: string) {
  const st = statSync(p);
  if (st.isDirectory()) {
    for (const n of readdirSync(p)) if (n !== 'node_modules') readOnly(join(p, n));
    chmodSync(p, 0o555);
  } else chmodSync(p, st.mode & 0o111 ? 0o555 : 0o444);
}

/** a copy of the application as an install has it, built or not */
const install = (dir: string, opts: { built: boolean }) => copyApp(dir, opts.built ? ['--app', '--quiet'] : undefined);

function start(app: string, env: Record<string, string>) {
  const args = ['scripts/start.mjs'];
  const [cmd, argv] = isRoot ? ['setpriv', ['--reuid', String(NOBODY), '--regid', String(NOBODY), '--clear-groups', process.execPath, ...args]] : [process.execPath, args];
  const child = spawn(cmd, argv, { cwd: app, env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'warn', JWT_SECRET: TEST_JWT_SECRET, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return { child, exited, output: () => out };
}

/** as root: can uid 65534 reach the checkout's node_modules (a checkout under /root cannot be)? */
const reachable =
  !isRoot ||
  spawnSync('setpriv', ['--reuid', String(NOBODY), '--regid', String(NOBODY), '--clear-groups', 'test', '-r', join(CHECKOUT, 'node_modules', 'fastify', 'package.json')]).status ===
    0;

test(
  'npm start from a folder its user cannot write',
  {
    skip:
      (isRoot && !setpriv && 'running as root without setpriv: cannot drop to an unprivileged user') || (!reachable && `an unprivileged user cannot read ${CHECKOUT}/node_modules`),
  },
  async (t) => {
    const base = mkdtempSync(join(tmpdir(), 'portico-ro-'));
    chmodSync(base, 0o755);
    t.after(() => {
      spawnSync('chmod', ['-R', 'u+w', base]);
      rmSync(base, { recursive: true, force: true });
    });
    // the data folder is the user's; the database starts from the suite's template (a copy the user can read)
    const data = join(base, 'data');
    mkdirSync(data);
    const template = join(base, 'template.tar');
    copyFileSync(await pgliteTemplate(), template);
    chmodSync(template, 0o444);
    if (isRoot) chownSync(data, NOBODY, NOBODY);
    const env = (port: number) => ({ DATA_DIR: data, HOME: data, PORT: String(port), HOST: '127.0.0.1', PORTICO_PGLITE_TEMPLATE: template });

    await t.test('a current build: serves, writes nothing in the folder', async () => {
      const app = join(base, 'app');
      mkdirSync(app);
      install(app, { built: true });
      readOnly(app);
      const port = await freePort();
      const s = start(app, env(port));
      try {
        await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.status === 200 || s.child.exitCode !== null, {
          timeoutMs: 90_000,
          what: '/readyz 200',
        });
        assert.equal(s.child.exitCode, null, s.output());
        assert.doesNotMatch(s.output(), /building|read-only/, 'nothing is built');
        const models = await fetch(`http://127.0.0.1:${port}/v1/models`);
        assert.equal(models.status, 401, 'the app serves (a request without a key is refused by it)');
      } finally {
        s.child.kill('SIGTERM');
        assert.equal(await s.exited, 0, s.output());
      }
    });

    await t.test('a build older than the sources: serves it and says how to rebuild', async () => {
      const app = join(base, 'stale');
      mkdirSync(app);
      install(app, { built: true });
      writeFileSync(join(app, 'src', 'changed-after-the-build.ts'), 'export const x = 1;\n');
      readOnly(app);
      const port = await freePort();
      const s = start(app, env(port));
      try {
        await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.status === 200 || s.child.exitCode !== null, {
          timeoutMs: 90_000,
          what: '/readyz 200',
        });
        assert.equal(s.child.exitCode, null, s.output());
        assert.match(s.output(), /older than the sources, and this folder is read-only: serving the build as it is/);
      } finally {
        s.child.kill('SIGTERM');
        await s.exited;
      }
    });

    await t.test('no build at all: says what to run, exits 1', async () => {
      const app = join(base, 'unbuilt');
      mkdirSync(app);
      install(app, { built: false });
      readOnly(app);
      const s = start(app, env(await freePort()));
      assert.equal(await s.exited, 1, s.output());
      assert.match(s.output(), /no build in dist\/ and this folder is read-only: run `node scripts\/build\.mjs --app`/);
    });
  },
);
