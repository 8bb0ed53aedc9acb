import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { DestinationStream } from 'pino';
import { createCore, type Core } from '../../src/compose/core.js';
import { createRuntime, type Runtime, type RuntimeOptions } from '../../src/compose/runtime.js';
import { loadConfig, type Config } from '../../src/platform/config.js';
import { signToken } from '../../src/platform/auth/jwt.js';
import type { ModelSpec } from '../../src/models/config.js';
import { DEFAULT_SPEND_PREFIX } from '../../src/portal/usage/spend.js';
import { dropInstallationKeys } from './redis-keys.js';
import { databaseFromTemplate, pgliteTemplate } from './db-template.js';
import { openPooled } from './pglite-pool.js';

export type TestDb = 'pglite' | 'postgres';

/** The PostgreSQL server the suite also runs on (CI starts it; PORTICO_TEST_DATABASE_URL); PORTICO_TEST_PG=off skips it. */
import { TEST_PG_URL, testPgUrl, testRedisPrefix } from './services.js';
export { TEST_PG_URL };

/** Every database the suite runs on: PGlite always, PostgreSQL unless turned off. */
export function testDatabases(): TestDb[] {
  return process.env.PORTICO_TEST_PG === 'off' ? ['pglite'] : ['pglite', 'postgres'];
}

export const TEST_JWT_SECRET = 'test-secret-0123456789abcdef0123456789abcdef';

/** KEY_PEPPER of apps that share a PostgreSQL schema (`dbSchema`), unless the test sets its own */
const SHARED_SCHEMA_PEPPER = 'shared-schema-pepper-0123456789abcdef012345';

/**
 * `runtime` for an app whose espeak-ng workers warm no voice before they report ready. A test app's espeak-ng pool
 * otherwise speaks a warm-up text ten times in each of its two workers (the six voices of the built-in table: ~2 s
 * of CPU and 3-5 s on a loaded machine, per app) for tests that speak with one or two of them; a voice's first
 * sentence is then ~0.1 s slower. The warm-up itself is tested on the engine (test/engines/tts.test.ts).
 */
export const NO_VOICE_WARM_UP: RuntimeOptions = { speechWarmVoices: { espeak: [] } };

/** The parts of core and runtime tests reach for, by the names they had. */
export interface TestServices {
  db: Core['db'];
  usage: Core['usage'];
  managementKeys: Core['keys']['management'];
  inferenceKeys: Core['keys']['inference'];
  verifier: Runtime['verifier'];
  models: Runtime['models'];
  engines: Runtime['engines'];
  audioEngines: Runtime['audioEngines'];
}

export interface TestApp {
  app: FastifyInstance;
  core: Core;
  runtime: Runtime;
  services: TestServices;
  config: Config;
  db: TestDb;
  /** PostgreSQL: where this app's data is (its own database, or the schema it uses), for a command run beside it */
  databaseUrl?: string;
  /** a portal JWT for that user */
  token(userId: string, orgRoles?: Record<string, string>, ttlSeconds?: number): Promise<string>;
  /** creates an inference key for the user and returns the full key */
  inferenceKey(userId: string, body?: Record<string, unknown>): Promise<string>;
  close(): Promise<void>;
}

export interface TestAppOptions {
  db?: TestDb;
  env?: Record<string, string>;
  /** exactly these models (plus the built-in audio models only when `builtins` is true) instead of PORTICO_CONFIG */
  models?: ModelSpec[];
  builtins?: boolean;
  runtime?: RuntimeOptions;
  /** where log lines go (default: nowhere, LOG_LEVEL silent) */
  logDestination?: DestinationStream;
  /** listen on a real port too (returns url) */
  listen?: boolean;
  /**
   * PostgreSQL: this schema (shared by several apps, like instances on one database; the caller drops it). With
   * REDIS_URL, such apps are one installation: the caller gives them one REDIS_PREFIX (testRedisPrefix()) and
   * removes its keys after.
   */
  dbSchema?: string;
}

/**
 * REDIS_PREFIX of an app given REDIS_URL: the one the test gives (its keys are the test's to remove), or one of its
 * own made here and removed at close; REDIS_PREFIX '' asks for the default (`portico:<installation id>`), whose keys
 * (and the running spend's `portico:spend:<ledger id>:*`) are removed at close too when the app is its own
 * installation.
 */
function redisPrefixOf(opts: TestAppOptions): { env: Record<string, string>; own?: string } {
  if (!opts.env?.REDIS_URL || opts.env.REDIS_PREFIX !== undefined) return { env: {} };
  if (opts.dbSchema) throw new Error('apps sharing a PostgreSQL schema with REDIS_URL are one installation: give them one REDIS_PREFIX (testRedisPrefix())');
  const own = testRedisPrefix('app');
  return { env: { REDIS_PREFIX: own }, own };
}

export async function buildTestApp(opts: TestAppOptions = {}): Promise<TestApp & { url?: string }> {
  const db = opts.db ?? 'pglite';
  const dataDir = mkdtempSync(join(tmpdir(), 'portico-test-'));
  // PostgreSQL: a database of its own copied from the migrated template (test/helpers/db-template.ts), or the
  // schema several apps share (`dbSchema`), or a schema of its own when the test reaches the server another way
  const copied =
    db === 'postgres' && !opts.dbSchema && opts.env?.DATABASE_URL === undefined && process.env.PORTICO_TEST_PG_TEMPLATE !== 'off' ? await databaseFromTemplate() : undefined;
  const schema = db === 'postgres' && !copied ? (opts.dbSchema ?? `t_${randomBytes(6).toString('hex')}`) : undefined;
  const redis = redisPrefixOf(opts);
  const config = loadConfig({
    DATA_DIR: dataDir,
    PORTICO_DB: db === 'pglite' ? 'memory' : '',
    DATABASE_URL: db === 'postgres' ? (copied?.url ?? TEST_PG_URL) : '',
    JWT_SECRET: TEST_JWT_SECRET,
    LOG_LEVEL: 'silent',
    PORT: '0',
    // instances on one database share KEY_PEPPER (a core refuses to start on a database made with another)
    ...(opts.dbSchema ? { KEY_PEPPER: SHARED_SCHEMA_PEPPER } : {}),
    ...opts.env,
    ...redis.env,
  });
  const dbTemplate = db === 'pglite' && config.inMemoryDb && process.env.PORTICO_TEST_PGLITE_TEMPLATE !== 'off' ? await pgliteTemplate() : undefined;
  const core = await createCore(config, { role: 'serve', dbSchema: schema, dbTemplate, openDb: openPooled, models: opts.models, logDestination: opts.logDestination });
  const runtime = await createRuntime(core, { builtinModels: opts.builtins ?? opts.models === undefined, ...opts.runtime });
  const app = runtime.app;
  const services: TestServices = {
    db: core.db,
    usage: core.usage,
    managementKeys: core.keys.management,
    inferenceKeys: core.keys.inference,
    verifier: runtime.verifier,
    models: runtime.models,
    engines: runtime.engines,
    audioEngines: runtime.audioEngines,
  };
  let url: string | undefined;
  if (opts.listen) url = await app.listen({ port: 0, host: '127.0.0.1' });
  else await app.ready();
  const t: TestApp & { url?: string } = {
    app,
    core,
    runtime,
    services,
    config,
    db,
    url,
    databaseUrl: db === 'postgres' ? (copied?.url ?? testPgUrl({ searchPath: schema })) : undefined,
    token: (userId, orgRoles = {}, ttlSeconds = 3600) => signToken(config.jwt.secret!, { userId, orgRoles, ttlSeconds }),
    async inferenceKey(userId, body = {}) {
      const res = await app.inject({
        method: 'POST',
        url: '/v1/portal/api-keys',
        headers: { authorization: `Bearer ${await t.token(userId)}` },
        payload: { name: 'test key', ...body },
      });
      if (res.statusCode !== 200) throw new Error(`creating a key failed: ${res.body}`);
      return res.json().data.api_key;
    },
    async close() {
      // the default prefix of an installation of its own (its own database): its keys, and its running spend's
      const byDefault = config.redisUrl && core.redisPrefix && !config.redisPrefix && !opts.dbSchema;
      const ledger = byDefault && config.billingEnabled ? await core.usage.ledgerId().catch(() => undefined) : undefined;
      await app.close();
      await runtime.close();
      await core.close();
      if (redis.own) await dropInstallationKeys(config.redisUrl!, redis.own);
      if (byDefault) await dropInstallationKeys(config.redisUrl!, core.redisPrefix!);
      if (ledger) await dropInstallationKeys(config.redisUrl!, `${DEFAULT_SPEND_PREFIX}${ledger}`);
      if (copied) await copied.drop();
      if (schema && !opts.dbSchema) {
        const { default: pg } = await import('pg');
        const c = new pg.Client({ connectionString: TEST_PG_URL });
        await c.connect();
        await c.query(`drop schema if exists ${schema} cascade`);
        await c.end();
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return t;
}
