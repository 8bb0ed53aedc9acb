/**
 * Several real Portico processes (`node dist/src/cli/main.js serve`) on one PostgreSQL and one Redis, for the
 * multi-instance tests and the cluster benchmark.
 *
 *   const c = await startCluster({ upstreamUrl: up.url });
 *   const [a, b] = c.instances;
 *   const { key, id } = await c.createKey(a, 'alice');
 *   await fetch(`${b.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
 *   await c.cli(['keys', 'disable', id]);
 *   await c.close();
 *
 * Each cluster gets a PostgreSQL schema of its own in PORTICO_TEST_DATABASE_URL's database (search_path in
 * DATABASE_URL; created here, dropped at close) and a Redis key prefix of its own in PORTICO_TEST_REDIS_URL's
 * database (REDIS_PREFIX: BullMQ, the change feed, the rate-limit windows and the running spend all live under
 * it; its keys are removed at close). PostgreSQL and Redis may be reached through TCP proxies the test can cut
 * and restore (see tcp-proxy.ts): the machine's servers are never stopped.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { signToken } from '../../src/platform/auth/jwt.js';
import { startTcpProxy, type TcpProxy } from './tcp-proxy.js';
import { dropInstallationKeys } from './redis-keys.js';
import { TEST_PG, TEST_PG_URL, TEST_REDIS, testPgUrl, testRedisPrefix, testRedisUrl } from './services.js';

export const MAIN_JS = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
export const CLUSTER_PG_URL = TEST_PG_URL;
/** the Redis the cluster tests use (PORTICO_TEST_REDIS_URL: another server, so two checkouts can run them at once) */
export const CLUSTER_REDIS = TEST_REDIS;
export const CLUSTER_JWT_SECRET = 'cluster-jwt-secret-0123456789abcdef0123456789';
export const CLUSTER_KEY_PEPPER = 'cluster-key-pepper-0123456789abcdef0123456789';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A port nobody listens on right now (the processes cannot report theirs, so we choose). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
}

export interface ModelEntry {
  name: string;
  upstream_model?: string;
  pricing?: { input_per_million?: number; output_per_million?: number; cached_input_per_million?: number };
}

export interface ClusterOptions {
  /** processes to start (default 2) */
  instances?: number;
  /** base URL of the scripted upstream (…/v1) */
  upstreamUrl: string;
  models?: ModelEntry[];
  /** no REDIS_URL at all (PostgreSQL LISTEN/NOTIFY feed, in-process queue and limits) */
  noRedis?: boolean;
  /** reach PostgreSQL / Redis through a proxy the test can cut */
  proxyPostgres?: boolean;
  proxyRedis?: boolean;
  /** settings for every instance */
  env?: Record<string, string>;
  /** how long to wait for /readyz (default 30 s) */
  readyTimeoutMs?: number;
}

export interface Instance {
  name: string;
  url: string;
  port: number;
  proc: ChildProcess;
  pid: number;
  /** resolves with the exit code/signal */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly running: boolean;
  /** the process's stdout+stderr so far (last 200 kB) */
  output(): string;
  /** resident memory in kB (VmRSS of /proc/<pid>/status) */
  rssKb(): number;
  kill(signal?: NodeJS.Signals): void;
}

export interface Cluster {
  instances: Instance[];
  schema: string;
  /** DATABASE_URL the processes use (through the proxy when there is one) */
  databaseUrl: string;
  redisUrl?: string;
  /** REDIS_PREFIX of the cluster's installation (its own unless `env` gave one) */
  redisPrefix?: string;
  pgProxy?: TcpProxy;
  redisProxy?: TcpProxy;
  /** the env every process gets */
  env: Record<string, string>;
  /** starts one more instance (extra env on top of the cluster's) */
  startInstance(extraEnv?: Record<string, string>): Promise<Instance>;
  token(userId: string, orgRoles?: Record<string, string>): Promise<string>;
  /** creates an inference key through `inst`'s portal */
  createKey(inst: Instance, userId: string, body?: Record<string, unknown>): Promise<{ key: string; id: string }>;
  /** runs `portico ARGS` as its own process against the same database and Redis */
  cli(args: string[], extraEnv?: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }>;
  /** SQL in the cluster's schema, directly on PostgreSQL (not through the proxy) */
  query<T = any>(text: string, params?: unknown[]): Promise<T[]>;
  close(): Promise<void>;
}

function modelsYaml(upstreamUrl: string, models: ModelEntry[]): string {
  const lines = ['models:'];
  for (const m of models) {
    lines.push(`  - name: ${m.name}`, '    provider: openai-compatible', `    base_url: ${upstreamUrl}`, `    upstream_model: ${m.upstream_model ?? 'scripted-model'}`);
    if (m.pricing) {
      lines.push('    pricing:');
      for (const [k, v] of Object.entries(m.pricing)) lines.push(`      ${k}: ${v}`);
    }
  }
  return lines.join('\n') + '\n';
}

/** Waits until GET url/readyz answers 200 (or the process dies, or the time is up). */
export async function waitReady(inst: Instance, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!inst.running) throw new Error(`${inst.name} exited before it was ready:\n${inst.output()}`);
    try {
      const r = await fetch(`${inst.url}/readyz`, { signal: AbortSignal.timeout(2000) });
      await r.arrayBuffer();
      if (r.status === 200) return;
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  throw new Error(`${inst.name} not ready within ${timeoutMs} ms:\n${inst.output()}`);
}

export function spawnPortico(name: string, args: string[], env: Record<string, string>): Instance & { port: number } {
  let out = '';
  const proc = spawn(process.execPath, [MAIN_JS, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const take = (b: Buffer) => {
    out += b.toString('utf8');
    if (out.length > 200_000) out = out.slice(-200_000);
  };
  proc.stdout!.on('data', take);
  proc.stderr!.on('data', take);
  let running = true;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.once('exit', (code, signal) => {
      running = false;
      resolve({ code, signal });
    }),
  );
  const port = Number(env.PORT ?? 0);
  return {
    name,
    port,
    url: `http://127.0.0.1:${port}`,
    proc,
    pid: proc.pid!,
    exited,
    get running() {
      return running;
    },
    output: () => out,
    rssKb() {
      try {
        const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${proc.pid}/status`, 'utf8'));
        return m ? Number(m[1]) : 0;
      } catch {
        return 0;
      }
    },
    kill(signal: NodeJS.Signals = 'SIGKILL') {
      if (running) proc.kill(signal);
    },
  };
}

export async function startCluster(opts: ClusterOptions): Promise<Cluster> {
  const schema = `t_cl_${randomBytes(5).toString('hex')}`;
  const admin = new pg.Pool({ connectionString: CLUSTER_PG_URL, max: 2, options: `-c search_path=${schema}` });
  admin.on('error', () => {});
  await admin.query(`create schema ${schema}`);
  // Kysely's migrator, when given no schema, looks for its tables in every schema of the database: other
  // tests' schemas hold them, so it would skip creating ours. Creating them here (as Kysely would) avoids that.
  await admin.query(`create table ${schema}.portico_migrations (name varchar(255) not null primary key, timestamp varchar(255) not null)`);
  await admin.query(`create table ${schema}.portico_migrations_lock (id varchar(255) not null primary key, is_locked integer not null default 0)`);
  await admin.query(`insert into ${schema}.portico_migrations_lock (id, is_locked) values ('migration_lock', 0)`);

  const pgProxy = opts.proxyPostgres ? await startTcpProxy(TEST_PG.port, TEST_PG.host) : undefined;
  const redisProxy = opts.proxyRedis && !opts.noRedis ? await startTcpProxy(CLUSTER_REDIS.port, CLUSTER_REDIS.host) : undefined;
  const databaseUrl = testPgUrl({ viaPort: pgProxy?.port, searchPath: schema });
  const redisUrl = opts.noRedis ? undefined : testRedisUrl(redisProxy?.port);
  // one prefix for the instances and commands of this cluster (one installation), none other uses
  const ownPrefix = redisUrl && !opts.env?.REDIS_PREFIX ? testRedisPrefix('cluster') : undefined;
  const redisPrefix = opts.env?.REDIS_PREFIX || ownPrefix;

  const dir = mkdtempSync(join(tmpdir(), 'portico-cluster-'));
  const configPath = join(dir, 'models.yaml');
  writeFileSync(configPath, modelsYaml(opts.upstreamUrl, opts.models ?? [{ name: 'm1' }]));

  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: process.env.HOME ?? dir,
    HOST: '127.0.0.1',
    DATABASE_URL: databaseUrl,
    JWT_SECRET: CLUSTER_JWT_SECRET,
    KEY_PEPPER: CLUSTER_KEY_PEPPER,
    PORTICO_CONFIG: configPath,
    LOG_LEVEL: 'warn',
    ...(redisUrl ? { REDIS_URL: redisUrl } : {}),
    ...(ownPrefix ? { REDIS_PREFIX: ownPrefix } : {}),
    ...opts.env,
  };

  const instances: Instance[] = [];
  let n = 0;
  const startInstance = async (extraEnv: Record<string, string> = {}) => {
    const name = String.fromCharCode(65 + n++);
    const port = await freePort();
    const inst = spawnPortico(name, ['serve'], { ...env, DATA_DIR: join(dir, `data-${name}`), PORT: String(port), ...extraEnv });
    instances.push(inst);
    await waitReady(inst, opts.readyTimeoutMs ?? 30_000);
    return inst;
  };

  const cluster: Cluster = {
    instances,
    schema,
    databaseUrl,
    redisUrl,
    redisPrefix,
    pgProxy,
    redisProxy,
    env,
    startInstance,
    token: (userId, orgRoles = {}) => signToken(new TextEncoder().encode(CLUSTER_JWT_SECRET), { userId, orgRoles, ttlSeconds: 3600 }),
    async createKey(inst, userId, body = {}) {
      const r = await fetch(`${inst.url}/v1/portal/api-keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${await cluster.token(userId)}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'cluster key', ...body }),
      });
      const j = (await r.json()) as any;
      if (r.status !== 200) throw new Error(`creating a key on ${inst.name} failed: ${r.status} ${JSON.stringify(j)}`);
      return { key: j.data.api_key, id: j.data.id };
    },
    async cli(args, extraEnv = {}) {
      const p = spawn(process.execPath, [MAIN_JS, ...args], { env: { ...env, DATA_DIR: join(dir, 'data-cli'), ...extraEnv }, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (b) => (stdout += b));
      p.stderr.on('data', (b) => (stderr += b));
      const code = await new Promise<number | null>((resolve) => p.once('exit', (c) => resolve(c)));
      return { code, stdout, stderr };
    },
    async query(text, params) {
      const r = await admin.query(text, params as any[]);
      return r.rows;
    },
    async close() {
      await Promise.all(
        instances.map(async (i) => {
          if (!i.running) return;
          i.kill('SIGKILL');
          await i.exited;
        }),
      );
      await pgProxy?.close();
      await redisProxy?.close();
      try {
        // the installation's Redis keys (under its own prefix) go with it; a prefix the test gave is the test's
        if (ownPrefix) await dropInstallationKeys(testRedisUrl(), ownPrefix);
        await admin.query(`drop schema if exists ${schema} cascade`);
      } finally {
        await admin.end();
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };

  try {
    // the first one applies the migrations; the others start in parallel after it
    const count = opts.instances ?? 2;
    if (count > 0) await startInstance();
    await Promise.all(Array.from({ length: count - 1 }, () => startInstance()));
  } catch (e) {
    await cluster.close().catch(() => {});
    throw e;
  }
  return cluster;
}

/** Reads an SSE body into its events (data lines parsed as JSON). */
export async function readSse(res: Response): Promise<any[]> {
  const text = await res.text();
  return parseSse(text);
}

export function parseSse(text: string): any[] {
  const out: any[] = [];
  for (const block of text.split('\n\n')) {
    const data = block
      .split('\n')
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).trimStart())
      .join('\n');
    if (!data || data === '[DONE]') continue;
    try {
      out.push(JSON.parse(data));
    } catch {
      // not JSON
    }
  }
  return out;
}

/** POST /v1/responses with a key (JSON body); gives status, JSON body and headers. */
export async function createResponse(
  url: string,
  key: string,
  body: Record<string, unknown>,
  timeoutMs = 15_000,
): Promise<{ status: number; body: any; headers: Headers; ms: number }> {
  const t0 = Date.now();
  const r = await fetch(`${url}/v1/responses`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await r.text();
  let j: any = text;
  try {
    j = JSON.parse(text);
  } catch {
    // SSE or text
  }
  return { status: r.status, body: j, headers: r.headers, ms: Date.now() - t0 };
}

/**
 * Which of `instances` owns the local TCP port `localPort` (e.g. the port an upstream request came from):
 * the socket's inode from /proc/net/tcp, then the process holding that inode among its descriptors.
 */
export function instanceOwningPort(instances: Instance[], localPort: number): Instance | undefined {
  const hex = localPort.toString(16).toUpperCase().padStart(4, '0');
  const inodes = new Set<string>();
  for (const f of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length > 9 && cols[1].endsWith(`:${hex}`)) inodes.add(cols[9]);
    }
  }
  for (const inst of instances) {
    if (!inst.running) continue;
    let fds: string[] = [];
    try {
      fds = readdirSync(`/proc/${inst.pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${inst.pid}/fd/${fd}`));
        if (m && inodes.has(m[1])) return inst;
      } catch {
        // closed meanwhile
      }
    }
  }
  return undefined;
}
