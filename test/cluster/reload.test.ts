// Changing the model file of real `portico serve` processes (issue 21, section 4): SIGHUP (which used to end the
// process and cut its streams), `portico models reload` (through the control socket in DATA_DIR), the file watch
// (PORTICO_CONFIG_WATCH=1), and WORKERS=2 where every worker reloads. One process on PGlite; the workers on
// PostgreSQL and Redis.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { freePort, parseSse, spawnPortico, startCluster, waitReady, type Cluster, type Instance } from '../helpers/cluster.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { portico } from '../cli/helpers.js';
import { waitFor } from '../helpers/wait.js';
import { pgliteTemplate } from '../helpers/db-template.js';
import { signToken } from '../../src/platform/auth/jwt.js';

const JWT_SECRET = 'reload-jwt-secret-0123456789abcdef0123456789ab';

/** waits for `probe` to give a value (the reloads of real processes: up to 20 s, polled every 50 ms) */
const until = <T>(what: string, probe: () => T | undefined | Promise<T | undefined>, ms = 20_000) => waitFor(probe, { what, timeoutMs: ms, everyMs: 50 });

/** the JSON log lines of a process so far */
function logLines(inst: Instance): Array<Record<string, any>> {
  const out: Array<Record<string, any>> = [];
  for (const l of inst.output().split('\n')) {
    if (!l.startsWith('{')) continue;
    try {
      out.push(JSON.parse(l));
    } catch {
      // not a log line
    }
  }
  return out;
}
const reloads = (inst: Instance) => logLines(inst).filter((l) => typeof l.msg === 'string' && l.msg.startsWith('model file'));

/** One request on a connection of its own (with workers: each goes to the next worker). */
function fresh(url: string, key: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const req = http.request(
      `${url}${path}`,
      {
        method: data ? 'POST' : 'GET',
        agent: false,
        headers: { authorization: `Bearer ${key}`, ...(data ? { 'content-type': 'application/json', 'content-length': String(data.length) } : {}) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let j: any = text;
          try {
            j = JSON.parse(text);
          } catch {
            // not JSON
          }
          resolve({ status: res.statusCode ?? 0, body: j });
        });
      },
    );
    req.on('error', reject);
    req.setTimeout(15_000, () => req.destroy(new Error('timeout')));
    req.end(data);
  });
}

const modelsFile = (upstreamUrl: string, names: Array<[string, string]>) =>
  'models:\n' + names.map(([n, up]) => `  - name: ${n}\n    provider: openai-compatible\n    base_url: ${upstreamUrl}\n    upstream_model: ${up}\n`).join('');

/** Writes the model file as editors do: a new file renamed over the old one (a new inode). */
function replaceFile(file: string, text: string) {
  const tmp = join(dirname(file), `.models.yaml.${process.pid}.tmp`);
  writeFileSync(tmp, text);
  renameSync(tmp, file);
}

/** One `portico serve` on PGlite, with its own DATA_DIR (its database made from the suite's template) and model file. */
async function startPglite(up: ScriptedUpstream, env: Record<string, string> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'portico-reload-'));
  const file = join(dir, 'models.yaml');
  writeFileSync(file, modelsFile(up.url, [['m1', 'up-1']]));
  const dataDir = join(dir, 'data');
  const inst = spawnPortico('P', ['serve'], {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: process.env.HOME ?? dir,
    HOST: '127.0.0.1',
    PORT: String(await freePort()),
    DATA_DIR: dataDir,
    PORTICO_CONFIG: file,
    JWT_SECRET,
    LOG_LEVEL: 'info',
    PORTICO_PGLITE_TEMPLATE: await pgliteTemplate(),
    ...env,
  });
  await waitReady(inst, 60_000);
  const jwt = await signToken(new TextEncoder().encode(JWT_SECRET), { userId: 'rhea', orgRoles: {}, ttlSeconds: 3600 });
  const r = await fetch(`${inst.url}/v1/portal/api-keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'reload' }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  const key = ((await r.json()) as any).data.api_key as string;
  return {
    inst,
    file,
    dataDir,
    key,
    async close() {
      if (inst.running) {
        inst.kill('SIGTERM');
        await inst.exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

describe('one process on PGlite: SIGHUP and `portico models reload`', () => {
  let up: ScriptedUpstream;
  let p: Awaited<ReturnType<typeof startPglite>>;
  before(async () => {
    up = await startScriptedUpstream();
    p = await startPglite(up);
  });
  after(async () => {
    await p?.close();
    await up?.close();
  });

  test('SIGHUP mid-stream: the process lives, the stream completes with all its events, then the new file is served', async () => {
    const pieces = Array.from({ length: 10 }, (_, i) => `w${i} `);
    up.script({ text: pieces, delayMs: 150 });
    const res = await fetch(`${p.inst.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${p.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm1', input: 'slow', stream: true }),
    });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = dec.decode((await reader.read()).value);

    writeFileSync(
      p.file,
      modelsFile(up.url, [
        ['m1', 'up-1b'],
        ['m2', 'up-2'],
      ]),
    );
    p.inst.kill('SIGHUP');
    const line = await until('the reload log line', () => reloads(p.inst).find((l) => l.reason === 'SIGHUP'));
    assert.equal(line.msg, 'model file reloaded');
    assert.deepEqual([line.added, line.changed, line.removed], [['m2'], ['m1'], []]);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value);
    }
    const events = parseSse(text);
    assert.equal(events.at(-1).type, 'response.completed', text.slice(-500));
    assert.equal(
      events
        .filter((e) => e.type === 'response.output_text.delta')
        .map((e) => e.delta)
        .join(''),
      pieces.join(''),
    );
    assert.equal(p.inst.running, true, 'SIGHUP ended the process');
    up.reset();
    const m2 = await fresh(p.inst.url, p.key, '/v1/responses', { model: 'm2', input: 'hi' });
    assert.equal(m2.status, 200, JSON.stringify(m2.body));
    assert.equal(up.requests.at(-1)!.body.model, 'up-2');
  });

  test('`portico models reload` says what changed (exit 0); a bad file: exit 1 with the problem, one error line, the old models serve', async () => {
    writeFileSync(
      p.file,
      modelsFile(up.url, [
        ['m1', 'up-1b'],
        ['m3', 'up-3'],
      ]),
    );
    const ok = await portico(['models', 'reload'], { DATA_DIR: p.dataDir });
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(ok.stdout, 'model file reloaded: added m3; removed m2; 1 unchanged\n');
    const again = await portico(['models', 'reload'], { DATA_DIR: p.dataDir });
    assert.equal(again.stdout, 'model file reloaded: nothing changed (2 models)\n');
    assert.equal((await fresh(p.inst.url, p.key, '/v1/responses', { model: 'm3', input: 'hi' })).status, 200);
    assert.equal((await fresh(p.inst.url, p.key, '/v1/responses', { model: 'm2', input: 'hi' })).status, 404);

    writeFileSync(p.file, 'models:\n  - name: m1\n    provider: openai-compatible\n    base_url: http://127.0.0.1:99999/v1\n');
    const errorsBefore = logLines(p.inst).filter((l) => l.level >= 50).length;
    const bad = await portico(['models', 'reload'], { DATA_DIR: p.dataDir });
    assert.equal(bad.code, 1);
    assert.equal(bad.stdout, '');
    assert.match(bad.stderr, /^portico: the model file was not reloaded: .*models\.yaml: models\[0\] \(m1\): 'base_url' has the port 99999, outside 1-65535\n$/);
    const errors = await until('the error line', () => {
      const e = logLines(p.inst).filter((l) => l.level >= 50);
      return e.length > errorsBefore ? e.slice(errorsBefore) : undefined;
    });
    assert.equal(errors.length, 1);
    assert.match(errors[0]!.msg, /^model file not reloaded: .*'base_url' has the port 99999.*; the previous configuration keeps serving$/);
    up.reset();
    assert.equal((await fresh(p.inst.url, p.key, '/v1/responses', { model: 'm3', input: 'hi' })).status, 200, 'the previous configuration serves');
    assert.equal(up.requests.at(-1)!.body.model, 'up-3');
    writeFileSync(
      p.file,
      modelsFile(up.url, [
        ['m1', 'up-1b'],
        ['m3', 'up-3'],
      ]),
    );
  });

  test('`portico models reload` with no server on that DATA_DIR: exit 1, one line saying so', async () => {
    const r = await portico(['models', 'reload'], { DATA_DIR: join(dirname(p.dataDir), 'elsewhere') });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^portico: no running Portico server uses this DATA_DIR \(nothing answers on .*elsewhere.portico\.sock\)/);
  });
});

describe('PORTICO_CONFIG_WATCH=1 on PGlite: the file watch', () => {
  let up: ScriptedUpstream;
  let p: Awaited<ReturnType<typeof startPglite>>;
  before(async () => {
    up = await startScriptedUpstream();
    p = await startPglite(up, { PORTICO_CONFIG_WATCH: '1' });
  });
  after(async () => {
    await p?.close();
    await up?.close();
  });

  test('a file replaced by rename is reloaded; a bad one is refused with one error line and the old models serve; the same text reloads nothing', async () => {
    replaceFile(
      p.file,
      modelsFile(up.url, [
        ['m1', 'up-1'],
        ['w2', 'up-w2'],
      ]),
    );
    await until('w2 served', async () => ((await fresh(p.inst.url, p.key, '/v1/responses', { model: 'w2', input: 'hi' })).status === 200 ? true : undefined));
    const done = reloads(p.inst).filter((l) => l.reason === 'file changed');
    assert.equal(done.length, 1, JSON.stringify(done));
    assert.deepEqual(done[0]!.added, ['w2']);

    // a second rename-replace: the watch follows the name, not the first file's inode
    replaceFile(
      p.file,
      modelsFile(up.url, [
        ['m1', 'up-1'],
        ['w3', 'up-w3'],
      ]),
    );
    await until('w3 served', async () => ((await fresh(p.inst.url, p.key, '/v1/responses', { model: 'w3', input: 'hi' })).status === 200 ? true : undefined));

    replaceFile(
      p.file,
      modelsFile(up.url, [
        ['m1', 'up-1'],
        ['w3', 'up-w3'],
      ]).replace(`base_url: ${up.url}`, 'base_url: "http://host name/v1"'),
    );
    const refused = await until('the refusal', () => reloads(p.inst).find((l) => l.level >= 50));
    assert.match(refused.msg, /^model file not reloaded: .*models\[0\] \(m1\): 'base_url' contains whitespace/);
    assert.equal(refused.reason, 'file changed');
    assert.equal((await fresh(p.inst.url, p.key, '/v1/responses', { model: 'w3', input: 'hi' })).status, 200);

    // the good file back, then the same text written again (a save without a change): one reload, not two
    replaceFile(
      p.file,
      modelsFile(up.url, [
        ['m1', 'up-1'],
        ['w3', 'up-w3'],
      ]),
    );
    await until('the good file reloaded', () => (reloads(p.inst).filter((l) => l.reason === 'file changed' && l.level === 30).length === 3 ? true : undefined));
    const count = reloads(p.inst).length;
    writeFileSync(
      p.file,
      modelsFile(up.url, [
        ['m1', 'up-1'],
        ['w3', 'up-w3'],
      ]),
    );
    // a change after it proves the watch looked at the unchanged write and moved on
    replaceFile(
      p.file,
      modelsFile(up.url, [
        ['m1', 'up-1'],
        ['w4', 'up-w4'],
      ]),
    );
    await until('w4 served', async () => ((await fresh(p.inst.url, p.key, '/v1/responses', { model: 'w4', input: 'hi' })).status === 200 ? true : undefined));
    const after = reloads(p.inst).slice(count);
    assert.equal(after.length, 1, JSON.stringify(after));
    assert.deepEqual([after[0]!.added, after[0]!.removed], [['w4'], ['w3']]);
  });
});

describe('WORKERS=2 on PostgreSQL and Redis: every worker reloads', () => {
  let up: ScriptedUpstream;
  let c: Cluster;
  let p: Instance;
  let key: string;
  let file: string;
  let dataDir: string;
  before(async () => {
    up = await startScriptedUpstream();
    c = await startCluster({ upstreamUrl: up.url, instances: 1, env: { WORKERS: '2', LOG_LEVEL: 'info', SHUTDOWN_GRACE_MS: '3000' } });
    p = c.instances[0]!;
    await until('both workers listening', () => (/2 workers serving on port/.test(p.output()) ? true : undefined), 30_000);
    key = (await c.createKey(p, 'wes')).key;
    file = c.env.PORTICO_CONFIG!;
    dataDir = join(dirname(file), `data-${p.name}`);
  });
  after(async () => {
    await c?.close();
    await up?.close();
  });

  /** every one of several requests on fresh connections (spread over the workers) gets this status */
  const allAnswer = async (model: string, status: number) => {
    for (let i = 0; i < 6; i++) assert.equal((await fresh(p.url, key, '/v1/responses', { model, input: 'hi' })).status, status, `request ${i} to ${model}`);
  };

  test('SIGHUP to the primary reaches both workers: each logs its reload, and every worker serves the new model', async () => {
    writeFileSync(
      file,
      modelsFile(up.url, [
        ['m1', 'scripted-model'],
        ['h2', 'up-h2'],
      ]),
    );
    p.kill('SIGHUP');
    const lines = await until('a reload line from each worker', () => {
      const ls = reloads(p).filter((l) => l.reason === 'SIGHUP');
      return new Set(ls.map((l) => l.worker)).size === 2 ? ls : undefined;
    });
    for (const l of lines) assert.deepEqual(l.added, ['h2']);
    assert.equal(p.running, true);
    await allAnswer('h2', 200);
  });

  test('`portico models reload` asks every worker and prints what each did; a bad file: exit 1 from each, the old models serve', async () => {
    writeFileSync(
      file,
      modelsFile(up.url, [
        ['m1', 'scripted-model'],
        ['h3', 'up-h3'],
      ]),
    );
    const ok = await portico(['models', 'reload'], { DATA_DIR: dataDir });
    assert.equal(ok.code, 0, ok.stderr);
    assert.deepEqual(ok.stdout.trim().split('\n').sort(), [
      'worker 1: model file reloaded: added h3; removed h2; 1 unchanged',
      'worker 2: model file reloaded: added h3; removed h2; 1 unchanged',
    ]);
    await allAnswer('h3', 200);
    await allAnswer('h2', 404);

    writeFileSync(file, modelsFile(up.url, [['m1', 'scripted-model']]) + '    api_key_env: PORTICO_TEST_NOT_SET_ANYWHERE\n');
    const bad = await portico(['models', 'reload'], { DATA_DIR: dataDir });
    assert.equal(bad.code, 1);
    const lines = bad.stderr.trim().split('\n').sort();
    assert.equal(lines.length, 2, bad.stderr);
    lines.forEach((l, i) =>
      assert.match(l, new RegExp(`^portico: worker ${i + 1}: the model file was not reloaded: .*'api_key_env' names PORTICO_TEST_NOT_SET_ANYWHERE, which is not set`)),
    );
    await allAnswer('h3', 200);
  });
});
