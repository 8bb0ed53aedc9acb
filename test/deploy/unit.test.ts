/**
 * deploy/portico.service is `systemd-analyze verify`-clean: a copy with this machine's node and this checkout in
 * place of /usr/bin/node and /opt/portico (verify checks that the program exists) gives no output at all. A copy
 * with a mistake in it gives some, so a silent verify means a checked unit, not a check that did nothing.
 * Without systemd-analyze this file says so and skips. The unit is run by systemd in test/deploy/container.test.ts.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../../src/platform/paths.js';

const ROOT = packageRoot();
const UNIT = readFileSync(join(ROOT, 'deploy/portico.service'), 'utf8');
const hasAnalyze = spawnSync('systemd-analyze', ['--version']).status === 0;

/** the unit's settings: name -> every value given (in order) */
function settings(text: string): Map<string, string[]> {
  const m = new Map<string, string[]>();
  for (const line of text.split('\n')) {
    const s = /^([A-Za-z]+)=(.*)$/.exec(line.trim());
    if (s) m.set(s[1]!, [...(m.get(s[1]!) ?? []), s[2]!]);
  }
  return m;
}

function verify(text: string): { code: number | null; output: string } {
  const dir = mkdtempSync(join(tmpdir(), 'portico-unit-'));
  try {
    const file = join(dir, 'portico.service');
    writeFileSync(file, text);
    const r = spawnSync('systemd-analyze', ['verify', file], { encoding: 'utf8', timeout: 60_000 });
    return { code: r.status, output: `${r.stdout}${r.stderr}`.trim() };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** the unit as installed on this machine: its node, this checkout as the application folder */
const here = UNIT.replaceAll('/usr/bin/node', process.execPath).replaceAll('/opt/portico', ROOT);

describe('the systemd unit (deploy/portico.service)', () => {
  test('runs the built CLI with node by absolute paths, as a user of its own, with its data directory the only place it writes', () => {
    const s = settings(UNIT);
    assert.deepEqual(s.get('ExecStart'), ['/usr/bin/node /opt/portico/dist/src/cli/main.js serve']);
    assert.deepEqual(s.get('User'), ['portico']);
    assert.deepEqual(s.get('StateDirectory'), ['portico']);
    assert.deepEqual(s.get('ReadWritePaths'), ['/var/lib/portico']);
    assert.ok(s.get('Environment')?.some((e) => e.split(/\s+/).includes('DATA_DIR=/var/lib/portico')));
    assert.deepEqual(s.get('ProtectSystem'), ['strict']);
    for (const on of ['NoNewPrivileges', 'ProtectHome', 'PrivateTmp', 'PrivateDevices', 'RestrictSUIDSGID', 'LockPersonality', 'RestrictNamespaces']) {
      assert.deepEqual(s.get(on), ['yes'], on);
    }
    assert.deepEqual(s.get('CapabilityBoundingSet'), ['']);
    assert.ok(s.get('SystemCallFilter')?.includes('@system-service'));
    // V8's JIT needs writable then executable memory: this one would stop node at its first compiled function
    assert.equal(s.get('MemoryDenyWriteExecute'), undefined);
    // the stop: SIGTERM, and longer than SHUTDOWN_GRACE_MS (10 s) + 5 s before systemd kills
    assert.deepEqual(s.get('KillSignal'), ['SIGTERM']);
    assert.ok(Number(s.get('TimeoutStopSec')?.[0]) >= 17);
    // the application's path is built by the build command the docs give, so ExecStart names a file it makes
    assert.equal(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).bin.portico, 'dist/src/cli/main.js');
  });

  test(
    'systemd-analyze verify: no output for the unit with this machine`s paths',
    { skip: hasAnalyze ? undefined : 'systemd-analyze is not installed (Debian: systemd): the unit is not verified here' },
    () => {
      const r = verify(here);
      assert.equal(r.output, '', r.output);
      assert.equal(r.code, 0);
      // the same check sees a mistake: an unknown setting, a program that does not exist
      const bad = verify(here.replace('NoNewPrivileges=yes', 'NoNewPrivilege=yes').replace(`${process.execPath} `, '/nonexistent/node '));
      assert.match(bad.output, /Unknown key( name)? 'NoNewPrivilege'/);
      assert.match(bad.output, /\/nonexistent\/node/);
    },
  );
});
