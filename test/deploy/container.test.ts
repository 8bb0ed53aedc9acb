/**
 * The Dockerfile, built and run with podman (docs/deployment.md, "Container"): one instance on its embedded
 * database in a volume (non-root, read-only application folder, the CPU engines working, the health check, the
 * data kept across a new container), then two instances of the image on the test PostgreSQL and Redis behind
 * HAProxy run with deploy/haproxy.cfg (a key made on one works on the other and through the proxy); last,
 * deploy/portico.service run by systemd in a container of the image (its sandbox in force, the engines working in it;
 * skipped, saying so, where systemd does not boot in a container).
 *
 * No registry is needed: the image's base (the build argument BASE) is a local stand-in for node:22-bookworm-slim
 * made from Debian's packages and this machine's node by test/deploy/node-base.sh, once (kept and reused as
 * localhost/node-base:test). The build reaches the npm registry and Debian's mirror as this machine does.
 * The podman flags are those that work on these machines (runc, cgroupfs, ulimits, the host's network).
 *
 * Cost: the layers of the build stay in podman's storage, untagged, as the next build's cache (unchanged sources:
 * nothing is rebuilt; changed sources: only the build of the server and the layers after it); an earlier build's
 * layers this one did not use, the image this run tagged, its containers and volumes are removed at the end.
 * Without podman (or runc), this file says so and skips.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, chmodSync, constants, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import pg from 'pg';
import { packageRoot } from '../../src/platform/paths.js';
import { freePort } from '../helpers/cluster.js';
import { dropInstallationKeys } from '../helpers/redis-keys.js';
import { TEST_PG_URL, testPgUrl, testRedisUrl } from '../helpers/services.js';
import { makeTinyGguf } from '../helpers/tiny-gguf.js';
import { waitFor } from '../helpers/wait.js';

const ROOT = packageRoot();
const BASE_IMAGE = 'localhost/node-base:test';
const PODMAN = ['--runtime', 'runc', '--cgroup-manager=cgroupfs'];
const ULIMITS = ['--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024'];
/** the Redis database of this file (keys only under its own REDIS_PREFIX, removed at the end) */
const REDIS_DB = 3;

function onPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      // not here
    }
  }
  return undefined;
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** Runs a command to its end (never longer than timeoutMs), keeping its output. */
function sh(cmd: string, args: string[], timeoutMs = 120_000): Promise<Run> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], timeout: timeoutMs, killSignal: 'SIGKILL' });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (b) => (stdout += b));
    p.stderr.on('data', (b) => (stderr += b));
    p.once('error', (e) => resolve({ code: -1, stdout, stderr: stderr + String(e), ms: performance.now() - t0 }));
    p.once('close', (code) => resolve({ code, stdout, stderr, ms: performance.now() - t0 }));
  });
}
const podman = (args: string[], timeoutMs?: number) => sh('podman', [...PODMAN, ...args], timeoutMs);
async function podmanOk(args: string[], timeoutMs?: number): Promise<string> {
  const r = await podman(args, timeoutMs);
  if (r.code !== 0) throw new Error(`podman ${args.join(' ')} failed (${r.code}):\n${r.stdout.slice(-4000)}\n${r.stderr.slice(-4000)}`);
  return r.stdout.trim();
}

const podmanMissing = !onPath('podman')
  ? 'podman is not installed (apt-get install podman runc mmdebstrap): the container image is not built or run here'
  : !onPath('runc')
    ? 'runc is not installed (apt-get install runc): podman cannot run containers on this machine with its default runtime'
    : undefined;
const baseExists = !podmanMissing && spawnSync('podman', [...PODMAN, 'image', 'exists', BASE_IMAGE]).status === 0;
const whySkip =
  podmanMissing ??
  (!baseExists && !onPath('mmdebstrap') ? `mmdebstrap is not installed (apt-get install mmdebstrap): the local base image ${BASE_IMAGE} cannot be made` : undefined);
const pgOff = process.env.PORTICO_TEST_PG === 'off';

/** The image ids a build printed: podman prints "--> [Using cache ]ID" after each step. */
function builtIds(buildOutput: string): string[] {
  return buildOutput
    .split('\n')
    .map((l) => /^--> (?:Using cache )?([0-9a-f]{11,64})$/.exec(l.trim())?.[1])
    .filter((id): id is string => id !== undefined);
}

/**
 * Earlier builds' layers that this build did not use (the sources, the lock or the Dockerfile changed since): the
 * untagged images built on the test base that are nobody's parent and not among this build's, removed with their
 * untagged parents (podman keeps a parent that another image still builds on, such as the `npm ci` layers). So one
 * build's layers stay as the cache of the next, and a change of the dependencies does not leave ~1.5 GB behind.
 */
async function removeStaleBuilds(keep: string[]): Promise<void> {
  const ids = (await podmanOk(['images', '-aq'])).split('\n').filter(Boolean);
  if (!ids.length) return;
  const base = await podmanOk(['image', 'inspect', '--format', '{{.Id}}', BASE_IMAGE]);
  const rows = (await podmanOk(['image', 'inspect', '--format', '{{.Id}}|{{.Parent}}|{{len .RepoTags}}', ...new Set(ids)]))
    .split('\n')
    .map((l) => l.trim().split('|'))
    .map(([id, parent, tags]) => ({ id: id!, parent: parent ?? '', tagged: tags !== '0' }));
  const byId = new Map(rows.map((r) => [r.id, r]));
  const parents = new Set(rows.map((r) => r.parent).filter(Boolean));
  const onBase = (id: string): boolean => {
    for (let r = byId.get(id); r; r = byId.get(r.parent)) if (r.parent === base) return true;
    return false;
  };
  const kept = (id: string) => keep.some((k) => id.startsWith(k));
  for (const r of rows) {
    if (r.tagged || parents.has(r.id) || kept(r.id) || !onBase(r.id)) continue;
    await podman(['rmi', r.id]); // fails harmlessly when a build or a container of another run uses it
  }
}

async function get(url: string, key?: string): Promise<{ status: number; body: any; headers: Headers }> {
  const r = await fetch(url, { headers: key ? { authorization: `Bearer ${key}` } : {}, signal: AbortSignal.timeout(30_000) });
  const text = await r.text();
  let body: any = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: r.status, body, headers: r.headers };
}

async function post(url: string, auth: string, body: unknown): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${auth}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(120_000),
  });
}

describe('the container image (Dockerfile, podman)', { skip: whySkip, timeout: 60 * 60_000 }, () => {
  const run = randomBytes(4).toString('hex');
  const tag = `localhost/portico:test-${run}`;
  const containers: string[] = [];
  const volumes: string[] = [];
  let layers: string[] = [];
  const timings: string[] = [];
  let dir = '';

  /** podman run -d with this file's flags; gives the container's name */
  async function runContainer(name: string, port: number, volume: string, env: Record<string, string>, extra: string[] = []): Promise<string> {
    containers.push(name);
    const envArgs = Object.entries({ PORT: String(port), ...env }).flatMap(([k, v]) => ['-e', `${k}=${v}`]);
    // the health check is run on demand below (its timer needs systemd, which these machines do not run)
    await podmanOk(['run', '-d', '--name', name, ...ULIMITS, '--network', 'host', '--health-interval', 'disable', '-v', `${volume}:/data`, ...envArgs, ...extra, tag]);
    return name;
  }

  async function waitReady(name: string, url: string, timeoutMs = 240_000): Promise<number> {
    const t0 = performance.now();
    await waitFor(
      async () => {
        const state = await podman(['inspect', '--format', '{{.State.Status}}', name]);
        if (state.stdout.trim() !== 'running') {
          const logs = await podman(['logs', name]);
          throw new Error(`${name} is ${state.stdout.trim()}:\n${logs.stdout.slice(-4000)}${logs.stderr.slice(-4000)}`);
        }
        try {
          return (await get(`${url}/readyz`)).status === 200;
        } catch {
          return false; // not listening yet
        }
      },
      { timeoutMs, everyMs: 250, what: `${name} to answer /readyz` },
    );
    return Math.round(performance.now() - t0);
  }

  before(
    async () => {
      dir = mkdtempSync(join(tmpdir(), 'portico-container-'));
      chmodSync(dir, 0o755); // the container's user reads the model file mounted from here
      if (!baseExists) {
        const made = await sh('bash', [join(ROOT, 'test/deploy/node-base.sh')], 15 * 60_000);
        if (made.code !== 0) throw new Error(`making ${BASE_IMAGE} failed:\n${made.stdout}\n${made.stderr}`);
        timings.push(`base image made in ${Math.round(made.ms / 1000)} s`);
      }
      // a machine whose TLS is inspected gives node and npm its CA bundle (NODE_EXTRA_CA_CERTS); the build's npm ci
      // gets it the same way, for its RUN steps only (nothing of it goes into the image)
      const ca = process.env.NODE_EXTRA_CA_CERTS;
      const caArgs: string[] = [];
      if (ca && existsSync(ca)) {
        writeFileSync(join(dir, 'npmrc'), 'cafile=/run/portico-build-ca.crt\n');
        caArgs.push('-v', `${ca}:/run/portico-build-ca.crt:ro`, '-v', `${join(dir, 'npmrc')}:/usr/local/etc/npmrc:ro`);
      }
      // docker format: the OCI format has no HEALTHCHECK. --jobs 2: stages that do not depend on each other are built
      // at once (the runtime's Debian packages while the dependencies install), as Docker's BuildKit does
      const built = await podman(
        ['build', '--format', 'docker', '--jobs', '2', ...ULIMITS, '--network', 'host', ...caArgs, '--build-arg', `BASE=${BASE_IMAGE}`, '-t', tag, ROOT],
        30 * 60_000,
      );
      layers = builtIds(built.stdout);
      if (built.code !== 0) throw new Error(`podman build failed (${built.code}):\n${built.stdout.slice(-6000)}\n${built.stderr.slice(-6000)}`);
      timings.push(`image built in ${Math.round(built.ms / 1000)} s`);
    },
    { timeout: 45 * 60_000 },
  );

  after(
    async () => {
      for (const c of containers) await podman(['rm', '-f', '-v', '-t', '0', c]);
      for (const v of volumes) await podman(['volume', 'rm', '-f', v]);
      // the tags this run made go; the images stay (untagged) as the next build's cache, an earlier build's go
      for (const t of [tag, `${tag}-systemd`]) await podman(['untag', t]);
      if (layers.length) await removeStaleBuilds(layers);
      if (dir) rmSync(dir, { recursive: true, force: true });
    },
    { timeout: 5 * 60_000 },
  );

  test('one instance: non-root, read-only app, the engines work, healthy, and its data stays in the volume', { timeout: 20 * 60_000 }, async (t) => {
    for (const line of timings) t.diagnostic(line);
    const inspect = JSON.parse(await podmanOk(['image', 'inspect', tag]))[0];
    assert.equal(inspect.Config.User, '10001:10001');
    assert.ok(Object.keys(inspect.Config.Volumes ?? {}).includes('/data'), JSON.stringify(inspect.Config.Volumes));
    assert.ok(inspect.Config.Env.includes('DATA_DIR=/data') && inspect.Config.Env.includes('HOST=0.0.0.0'), inspect.Config.Env.join(' '));
    assert.match(JSON.stringify(inspect.Config.Healthcheck?.Test ?? inspect.Healthcheck?.Test), /\/readyz/);

    // a model file with a llama model (a tiny GGUF made here), read-only in the container
    copyFileSync(await makeTinyGguf(), join(dir, 'tiny.gguf'));
    writeFileSync(join(dir, 'models.yaml'), 'models:\n  - name: tiny\n    provider: llama\n    path: /config/tiny.gguf\n    context_window: 512\n');
    chmodSync(join(dir, 'tiny.gguf'), 0o644);
    chmodSync(join(dir, 'models.yaml'), 0o644);

    const volume = `portico-test-${run}`;
    volumes.push(volume);
    await podmanOk(['volume', 'create', volume]);
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const env = { PORTICO_CONFIG: '/config/models.yaml', PUBLIC_URL: url };
    const mount = ['-v', `${dir}:/config:ro`];
    const first = await runContainer(`portico-test-${run}-a`, port, volume, env, mount);
    t.diagnostic(`first start on a new volume: ready in ${await waitReady(first, url)} ms`);

    // not root: the image's user, the server (PID 1) included; the application folder is not writable
    assert.equal(await podmanOk(['exec', first, 'id', '-u']), '10001');
    assert.match(await podmanOk(['exec', first, 'grep', '^Uid:', '/proc/1/status']), /^Uid:\s+10001\s/);
    const write = await podman(['exec', first, 'sh', '-c', 'touch /app/dist/x']);
    assert.notEqual(write.code, 0, 'the application folder is writable by Portico');
    assert.match(write.stderr, /Permission denied|Read-only/);
    // the image's health check, run on demand: healthy
    const health = await podman(['healthcheck', 'run', first]);
    assert.equal(health.code, 0, `${health.stdout}${health.stderr}`);

    // `portico` on PATH in the container: a portal token, then a key made with it through the API
    const token = await podmanOk(['exec', first, 'portico', 'token', '--user', 'alice']);
    assert.match(token, /^eyJ[\w-]+\.[\w-]+\.[\w-]+$/);
    const made = await post(`${url}/v1/portal/api-keys`, token, { name: 'container' });
    const key = ((await made.json()) as any).data?.api_key as string;
    assert.equal(made.status, 200);
    assert.match(key, /^sk-/);
    const listed = await get(`${url}/v1/models`, key);
    assert.equal(listed.status, 200);
    const names = (listed.body.data as { id: string }[]).map((m) => m.id);
    assert.ok(names.includes('tiny') && names.includes('tts-1'), names.join(', '));

    // llama.cpp (node-llama-cpp's prebuilt CPU binary, from the read-only application folder)
    const chat = await post(`${url}/v1/chat/completions`, key, { model: 'tiny', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4 });
    const chatBody = (await chat.json()) as any;
    assert.equal(chat.status, 200, JSON.stringify(chatBody));
    assert.ok(chatBody.usage.completion_tokens > 0 && chatBody.usage.completion_tokens <= 4, JSON.stringify(chatBody.usage));

    // a voice (WebAssembly) encoded to mp3 by ffmpeg, then recognized by pocketsphinx (Debian's, in the image)
    const speech = await post(`${url}/v1/audio/speech`, key, { model: 'tts-1', voice: 'alloy', input: 'Hello from the container.', response_format: 'mp3' });
    const mp3 = Buffer.from(await speech.arrayBuffer());
    assert.equal(speech.status, 200, mp3.toString('utf8', 0, 300));
    assert.equal(speech.headers.get('content-type'), 'audio/mpeg');
    assert.ok(mp3.length > 2000 && (mp3.subarray(0, 3).toString('latin1') === 'ID3' || (mp3[0] === 0xff && (mp3[1]! & 0xe0) === 0xe0)), `not mp3: ${mp3.length} bytes`);
    const form = new FormData();
    form.append('model', 'whisper-1');
    form.append('file', new Blob([mp3], { type: 'audio/mpeg' }), 'hello.mp3');
    const heard = await fetch(`${url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form, signal: AbortSignal.timeout(120_000) });
    const heardBody = (await heard.json()) as any;
    assert.equal(heard.status, 200, JSON.stringify(heardBody));
    assert.equal(typeof heardBody.text, 'string');
    assert.ok(heardBody.usage?.seconds > 0.5, JSON.stringify(heardBody));
    // whisper-1 is served by whisper.cpp when its binding is installed, else by pocketsphinx: the image has only the latter
    assert.match(await podmanOk(['exec', first, 'sh', '-c', 'command -v pocketsphinx_continuous']), /pocketsphinx_continuous$/);
    // the data directory as Portico wants it: private, nothing for it to fix at start
    assert.doesNotMatch(await podmanOk(['logs', first]), /made private/);

    // SIGTERM to PID 1: a graceful stop (exit 0); then a new container on the same volume has the key and secrets
    await podmanOk(['stop', '-t', '30', first]);
    assert.equal(await podmanOk(['inspect', '--format', '{{.State.ExitCode}}', first]), '0');
    await podmanOk(['rm', first]);
    const second = await runContainer(`portico-test-${run}-b`, port, volume, env, mount);
    t.diagnostic(`restart on the volume (a new container): ready in ${await waitReady(second, url)} ms`);
    assert.equal((await get(`${url}/v1/models`, key)).status, 200, 'the key made before the restart is refused');
    const keys = await get(`${url}/v1/portal/api-keys`, token);
    assert.equal(keys.status, 200, 'the token minted before the restart is refused (the JWT secret was not kept)');
    assert.ok(JSON.stringify(keys.body).includes('"container"'), JSON.stringify(keys.body));
    await podmanOk(['rm', '-f', '-t', '0', second]);
  });

  test(
    'two instances of the image on PostgreSQL and Redis, behind HAProxy with deploy/haproxy.cfg',
    { timeout: 15 * 60_000, skip: pgOff ? 'PORTICO_TEST_PG=off: no PostgreSQL for several instances' : undefined },
    async (t) => {
      // a schema of this test's own (as test/helpers/cluster.ts makes them), a Redis prefix of its own
      const schema = `t_ctr_${run}`;
      const admin = new pg.Pool({ connectionString: TEST_PG_URL, max: 2 });
      admin.on('error', () => {});
      const prefix = `portico-test-ctr-${run}`;
      let proxy: ChildProcess | undefined;
      try {
        await admin.query(`create schema ${schema}`);
        await admin.query(`create table ${schema}.portico_migrations (name varchar(255) not null primary key, timestamp varchar(255) not null)`);
        await admin.query(`create table ${schema}.portico_migrations_lock (id varchar(255) not null primary key, is_locked integer not null default 0)`);
        await admin.query(`insert into ${schema}.portico_migrations_lock (id, is_locked) values ('migration_lock', 0)`);
        // what every instance shares (docs/deployment.md, "A multi-instance set-up")
        const shared = {
          DATABASE_URL: testPgUrl({ searchPath: schema }),
          REDIS_URL: testRedisUrl(REDIS_DB),
          REDIS_PREFIX: prefix,
          KEY_PEPPER: randomBytes(32).toString('hex'),
          JWT_SECRET: randomBytes(32).toString('hex'),
          TRUST_PROXY: 'loopback',
        };
        const [pa, pb, pp] = [await freePort(), await freePort(), await freePort()];
        const ua = `http://127.0.0.1:${pa}`;
        const ub = `http://127.0.0.1:${pb}`;
        const names = [`portico-test-${run}-1`, `portico-test-${run}-2`];
        for (const n of names) {
          volumes.push(n);
          await podmanOk(['volume', 'create', n]);
        }
        // started together: the migrations are applied by one of them under PostgreSQL's advisory lock
        const [a, b] = await Promise.all([runContainer(names[0]!, pa, names[0]!, shared), runContainer(names[1]!, pb, names[1]!, shared)]);
        const [ra, rb] = await Promise.all([waitReady(a, ua), waitReady(b, ub)]);
        t.diagnostic(`two instances on PostgreSQL ready in ${ra} / ${rb} ms`);

        // a token minted in A's container and a key made on A: both work on B
        const token = await podmanOk(['exec', a, 'portico', 'token', '--user', 'bob']);
        const made = await post(`${ua}/v1/portal/api-keys`, token, { name: 'made on A' });
        const key = ((await made.json()) as any).data?.api_key as string;
        assert.equal(made.status, 200);
        assert.equal((await get(`${ub}/v1/models`, key)).status, 200, 'the key made on A is refused on B');
        const onB = await get(`${ub}/v1/portal/api-keys`, token);
        assert.equal(onB.status, 200);
        assert.ok(JSON.stringify(onB.body).includes('made on A'));

        // HAProxy with the repository's configuration, the two containers as its servers
        if (!onPath('haproxy')) {
          t.skip('haproxy is not installed (apt-get install haproxy): the proxy configuration is not run here');
          return;
        }
        const cfg = readFileSync(join(ROOT, 'deploy/haproxy.cfg'), 'utf8')
          .replace(/^(\s*bind\s+):8080\b/m, `$1127.0.0.1:${pp}`)
          .replace(/\bportico-1:8080\b/, `127.0.0.1:${pa}`)
          .replace(/\bportico-2:8080\b/, `127.0.0.1:${pb}`);
        assert.ok(cfg.includes(`127.0.0.1:${pp}`) && cfg.includes(`127.0.0.1:${pa}`) && cfg.includes(`127.0.0.1:${pb}`), 'deploy/haproxy.cfg changed shape');
        writeFileSync(join(dir, 'haproxy.cfg'), cfg);
        const check = await sh('haproxy', ['-c', '-f', join(dir, 'haproxy.cfg')]);
        assert.equal(check.code, 0, check.stdout + check.stderr);
        proxy = spawn('haproxy', ['-db', '-f', join(dir, 'haproxy.cfg')], { stdio: ['ignore', 'ignore', 'pipe'] });
        const up = `http://127.0.0.1:${pp}`;
        await waitFor(async () => (await get(`${up}/readyz`).catch(() => ({ status: 0 }))).status === 200, { timeoutMs: 30_000, what: 'the proxy' });
        const before = await Promise.all(names.map(async (n) => ((await podmanOk(['logs', n])).match(/"route":"\/v1\/models"/g) ?? []).length));
        for (let i = 0; i < 6; i++) assert.equal((await get(`${up}/v1/models`, key)).status, 200);
        const afterCounts = await Promise.all(names.map(async (n) => ((await podmanOk(['logs', n])).match(/"route":"\/v1\/models"/g) ?? []).length));
        // round robin: both instances served some of them
        assert.ok(afterCounts[0]! > before[0]! && afterCounts[1]! > before[1]!, `requests per instance before ${before}, after ${afterCounts}`);
        // one instance stops: the proxy sends everything to the other (a refused connection is retried there)
        await podmanOk(['stop', '-t', '30', b]);
        for (let i = 0; i < 4; i++) assert.equal((await get(`${up}/v1/models`, key)).status, 200, `request ${i} after B stopped`);
      } finally {
        if (proxy && proxy.exitCode === null) {
          proxy.kill('SIGKILL');
          await new Promise((r) => proxy!.once('exit', r));
        }
        await dropInstallationKeys(testRedisUrl(REDIS_DB), prefix);
        await admin.query(`drop schema if exists ${schema} cascade`).catch(() => {});
        await admin.end();
      }
    },
  );
  test('the systemd unit, run by systemd in a container of the image: its sandbox applied, the engines work in it', { timeout: 15 * 60_000 }, async (t) => {
    // the image plus systemd; deploy/portico.service with the image's paths (node in /usr/local/bin, the app in /app)
    const sd = join(dir, 'systemd');
    mkdirSync(sd, { recursive: true });
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const unit = readFileSync(join(ROOT, 'deploy/portico.service'), 'utf8')
      .replace('/usr/bin/node /opt/portico/', '/usr/local/bin/node /app/')
      .replace(/^(Environment=.*\bPORT=)8080\b/m, `$1${port}`);
    assert.ok(unit.includes('/usr/local/bin/node /app/dist/src/cli/main.js serve') && unit.includes(`PORT=${port}`), 'deploy/portico.service changed shape');
    writeFileSync(join(sd, 'portico.service'), unit);
    writeFileSync(join(sd, 'models.conf'), '[Service]\nEnvironment=PORTICO_CONFIG=/etc/portico/models.yaml\n');
    writeFileSync(join(sd, 'models.yaml'), 'models:\n  - name: tiny\n    provider: llama\n    path: /etc/portico/tiny.gguf\n    context_window: 512\n');
    copyFileSync(await makeTinyGguf(), join(sd, 'tiny.gguf'));
    writeFileSync(
      join(sd, 'Containerfile'),
      [
        `FROM ${tag}`,
        'USER root',
        'RUN apt-get update && apt-get install -y --no-install-recommends systemd && rm -rf /var/lib/apt/lists/*',
        'COPY tiny.gguf models.yaml /etc/portico/',
        'COPY models.conf /etc/systemd/system/portico.service.d/models.conf',
        'COPY portico.service /etc/systemd/system/portico.service',
        'RUN chmod 0644 /etc/portico/* && systemctl enable portico',
        'STOPSIGNAL SIGRTMIN+3',
        'ENTRYPOINT ["/lib/systemd/systemd"]',
        'CMD []',
        '',
      ].join('\n'),
    );
    const built = await podman(['build', ...ULIMITS, '--network', 'host', '-t', `${tag}-systemd`, sd], 15 * 60_000);
    layers.push(...builtIds(built.stdout));
    assert.equal(built.code, 0, `${built.stdout.slice(-4000)}\n${built.stderr.slice(-4000)}`);
    // CAP_SYS_ADMIN lets systemd set up the unit's mount namespace (ProtectSystem, PrivateTmp...) in the container;
    // the image's /data volume is not used here (the unit's DATA_DIR is /var/lib/portico): a tmpfs, nothing left behind
    const name = `portico-test-${run}-systemd`;
    containers.push(name);
    await podmanOk(['run', '-d', '--name', name, '--systemd=always', '--cap-add', 'SYS_ADMIN', '--tmpfs', '/data', ...ULIMITS, '--network', 'host', `${tag}-systemd`]);
    const booted = await waitFor(
      async () => {
        const r = await podman(['exec', name, 'systemctl', 'is-system-running']);
        return ['running', 'degraded', 'starting'].includes(r.stdout.trim()) ? r.stdout.trim() : undefined;
      },
      { timeoutMs: 60_000, everyMs: 500, what: 'systemd in the container' },
    ).catch(() => undefined);
    if (!booted) {
      t.skip('systemd does not boot in a container on this machine: the unit is only verified (test/deploy/unit.test.ts)');
      return;
    }
    const t0 = performance.now();
    await waitFor(
      async () => {
        const state = (await podman(['exec', name, 'systemctl', 'is-active', 'portico'])).stdout.trim();
        if (state === 'failed') throw new Error(`portico.service failed:\n${(await podman(['exec', name, 'journalctl', '-u', 'portico', '--no-pager'])).stdout.slice(-4000)}`);
        return state === 'active' && (await get(`${url}/readyz`).catch(() => ({ status: 0 }))).status === 200;
      },
      { timeoutMs: 240_000, everyMs: 250, what: 'portico.service to answer /readyz' },
    );
    t.diagnostic(`portico.service ready in ${Math.round(performance.now() - t0)} ms`);

    // the sandbox is in force: its user, no capabilities, no new privileges, a seccomp filter, a read-only system
    const pid = await podmanOk(['exec', name, 'systemctl', 'show', '-p', 'MainPID', '--value', 'portico']);
    const status = await podmanOk(['exec', name, 'cat', `/proc/${pid}/status`]);
    for (const re of [/^Uid:\s+10001\s/m, /^NoNewPrivs:\s+1$/m, /^Seccomp:\s+2$/m, /^CapEff:\s+0+$/m, /^CapBnd:\s+0+$/m]) assert.match(status, re);
    const mounts = (await podmanOk(['exec', name, 'cat', `/proc/${pid}/mountinfo`])).split('\n').map((l) => l.split(' '));
    const opts = (at: string) => mounts.filter((m) => m[4] === at).map((m) => m[5]!.split(','));
    assert.ok(opts('/').at(-1)?.includes('ro'), 'the root is writable for the service (ProtectSystem=strict)');
    assert.ok(opts('/var/lib/portico').at(-1)?.includes('rw'), 'the data directory is not writable for the service');
    assert.ok(opts('/tmp').length > 0, 'no private /tmp');

    // what runs inside it: the CLI as the service's user, a key, llama.cpp, a voice through ffmpeg, pocketsphinx
    const token = await podmanOk(['exec', '-u', 'portico', '-e', 'DATA_DIR=/var/lib/portico', name, 'portico', 'token', '--user', 'carol']);
    const made = await post(`${url}/v1/portal/api-keys`, token, { name: 'systemd' });
    const key = ((await made.json()) as any).data?.api_key as string;
    assert.equal(made.status, 200);
    const chat = await post(`${url}/v1/chat/completions`, key, { model: 'tiny', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4 });
    assert.equal(chat.status, 200, await chat.clone().text());
    assert.ok(((await chat.json()) as any).usage.completion_tokens > 0);
    const speech = await post(`${url}/v1/audio/speech`, key, { model: 'tts-1', voice: 'alloy', input: 'Hello from systemd.', response_format: 'mp3' });
    const mp3 = Buffer.from(await speech.arrayBuffer());
    assert.equal(speech.status, 200, mp3.toString('utf8', 0, 300));
    const form = new FormData();
    form.append('model', 'whisper-1');
    form.append('file', new Blob([mp3], { type: 'audio/mpeg' }), 'hello.mp3');
    const heard = await fetch(`${url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form, signal: AbortSignal.timeout(120_000) });
    const heardBody = (await heard.json()) as any;
    assert.equal(heard.status, 200, JSON.stringify(heardBody));
    assert.ok(heardBody.usage?.seconds > 0.5, JSON.stringify(heardBody));
    // nothing the sandbox refused on the way, and a stop is a clean one
    await podmanOk(['exec', name, 'systemctl', 'stop', 'portico']);
    const journal = await podmanOk(['exec', name, 'journalctl', '-u', 'portico', '--no-pager', '-o', 'cat']);
    assert.doesNotMatch(journal, /EPERM|operation not permitted|SIGSYS|status=\d+\/|"level":50/i, journal.slice(-3000));
    assert.match(journal, /Deactivated successfully|Stopped portico/);
    await podmanOk(['rm', '-f', '-v', '-t', '0', name]);
  });
});
