import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pgliteTemplate } from '../helpers/db-template.js';

const CLI = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
/** the new embedded database starts from the suite's migrated template (test/helpers/db-template.ts), not initdb */
const template = await pgliteTemplate();
const env = (dataDir: string) => ({
  ...process.env,
  DATA_DIR: dataDir,
  PORT: '0',
  LOG_LEVEL: 'info',
  JWT_SECRET: 'lock-test-secret-0123456789abcdef0123456789',
  DATABASE_URL: '',
  REDIS_URL: '',
  PORTICO_PGLITE_TEMPLATE: template,
});

test('an operator command on the embedded database of a running server is refused, and works once it stops', { timeout: 175_000 }, async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'portico-lock-'));
  const server = spawn(process.execPath, [CLI, 'serve'], { env: env(dataDir), stdio: ['ignore', 'pipe', 'pipe'] });
  try {
    let out = '';
    // waits for the server's own line; the bound is only a net under the file's timeout (a first start on a new
    // DATA_DIR creates the embedded database, which took over 60 s on a machine loaded 13 deep)
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`server did not start: ${out}`)), 150_000);
      server.stdout.on('data', (d) => {
        out += d;
        if (out.includes('Portico listening')) {
          clearTimeout(t);
          resolve();
        }
      });
      server.on('exit', (code) => reject(new Error(`server exited ${code}: ${out}`)));
    });
    const refused = spawnSync(process.execPath, [CLI, 'keys', 'disable', 'key_nope'], { env: env(dataDir), encoding: 'utf8' });
    assert.equal(refused.status, 2, refused.stderr);
    assert.match(refused.stderr, /in use by process \d+ \(a running Portico\)/);
    server.kill('SIGTERM');
    await new Promise((r) => server.once('exit', r));
    // the lock went with the server: the command now runs (and says the key does not exist)
    const ran = spawnSync(process.execPath, [CLI, 'keys', 'disable', 'key_nope'], { env: env(dataDir), encoding: 'utf8' });
    assert.equal(ran.status, 1, ran.stderr);
    assert.match(ran.stderr, /^portico: API key not found\n$/);
  } finally {
    // a server still running (a failed start) would write into the folder while it is removed
    if (server.exitCode === null && server.signalCode === null) {
      server.kill('SIGKILL');
      await new Promise((r) => server.once('exit', r));
    }
    rmSync(dataDir, { recursive: true, force: true });
  }
});
