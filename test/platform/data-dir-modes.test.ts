// The data directory is private (issue 9, §4): DATA_DIR 0700, PGlite's files and the usage journal without any
// group or other permission whatever the umask the process was started with (000 here, the worst), an open
// one made private at start with a log line, and another local user cannot read what it holds.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setup, MODEL } from '../responses/util.js';
import { createCore } from '../../src/compose/core.js';
import { loadConfig } from '../../src/platform/config.js';
import { Writable } from 'node:stream';

/** every path under dir (dir included) that group or others may read, write or enter */
function openPaths(dir: string): string[] {
  const out: string[] = [];
  const walk = (p: string) => {
    const st = lstatSync(p);
    if (st.isSymbolicLink()) return;
    if (st.mode & 0o077) out.push(`${p} ${(st.mode & 0o777).toString(8)}`);
    if (st.isDirectory()) for (const n of readdirSync(p)) walk(join(p, n));
  };
  walk(dir);
  return out;
}

/** a user other than this process's, when there is one to run as (root can run as nobody) */
function otherUser(): string | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const r = spawnSync('runuser', ['-u', 'nobody', '--', 'true']);
  return r.status === 0 ? 'nobody' : undefined;
}

test('with umask 000: DATA_DIR, PGlite files and the usage journal are private, and another user reads nothing', async (t) => {
  process.umask(0o000);
  const env = await setup('pglite', [], { PORTICO_DB: '' });
  try {
    const res = await env.client.responses.create({ model: MODEL, input: 'secret prompt' });
    assert.equal(res.status, 'completed');
    const dir = env.t.config.dataDir;
    assert.ok(existsSync(join(dir, 'pglite', 'PG_VERSION')), 'PGlite keeps its files in DATA_DIR');
    assert.equal(lstatSync(dir).mode & 0o777, 0o700);
    const journal = join(dir, 'usage-journal.ndjson');
    assert.ok(existsSync(journal), 'the request was journaled');
    assert.equal(lstatSync(journal).mode & 0o777, 0o600);
    // a checkpoint writes the WAL and data files anew
    await env.t.core.db.db.executeQuery({ sql: 'checkpoint', parameters: [], query: { kind: 'RawNode' } } as any).catch(() => {});
    assert.deepEqual(openPaths(dir), [], 'nothing under DATA_DIR is open to group or others');
    const user = otherUser();
    if (!user) {
      t.diagnostic('not root or no "nobody" user: the read as another user is not tried (the modes above are)');
      return;
    }
    for (const p of [journal, join(dir, 'pglite', 'PG_VERSION'), join(dir, 'pglite', 'global', 'pg_control')]) {
      const r = spawnSync('runuser', ['-u', user, '--', 'cat', p], { encoding: 'utf8' });
      assert.notEqual(r.status, 0, `${user} read ${p}`);
      assert.match(r.stderr, /Permission denied/);
    }
  } finally {
    await env.close();
  }
});

test('an existing DATA_DIR open to others is made private at start, with a log line', async () => {
  process.umask(0o000);
  const dir = mkdtempSync(join(tmpdir(), 'portico-open-'));
  try {
    chmodSync(dir, 0o755);
    mkdirSync(join(dir, 'pglite'), { mode: 0o777 });
    writeFileSync(join(dir, 'usage-journal.ndjson'), '', { mode: 0o666 });
    writeFileSync(join(dir, 'not-ours.txt'), 'x', { mode: 0o644 });
    const lines: any[] = [];
    const stream = new Writable({ write: (c, _e, cb) => (lines.push(JSON.parse(String(c))), cb()) });
    const config = loadConfig({ DATA_DIR: dir, PORTICO_DB: '', DATABASE_URL: '', JWT_SECRET: 'test-secret-0123456789abcdef0123456789abcdef', LOG_LEVEL: 'info' });
    const core = await createCore(config, { role: 'serve', models: [], logDestination: stream });
    try {
      assert.equal(lstatSync(dir).mode & 0o777, 0o700);
      assert.equal(lstatSync(join(dir, 'usage-journal.ndjson')).mode & 0o777, 0o600);
      assert.deepEqual(
        openPaths(dir).filter((p) => !p.includes('not-ours.txt')),
        [],
      );
      // what Portico does not own is left alone (DATA_DIR may be pointed at a shared place)
      assert.equal(lstatSync(join(dir, 'not-ours.txt')).mode & 0o777, 0o644);
      const line = lines.find((l) => /made private/.test(l.msg));
      assert.ok(line, JSON.stringify(lines.map((l) => l.msg)));
      assert.equal(line.dirWasOpen, true);
    } finally {
      await core.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
