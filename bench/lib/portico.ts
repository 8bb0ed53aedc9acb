/**
 * An in-process Portico for a benchmark: its own DATA_DIR (a temporary directory), on PGlite or on
 * PostgreSQL (a schema of its own, dropped by close()), production-like logging (one info line per request)
 * written to /dev/null, listening on 127.0.0.1 on a free port.
 *
 * Not for the worker thread of the load generator: it loads the whole application.
 */
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { FastifyInstance } from 'fastify';
import { createCore } from '../../src/compose/core.js';
import { createRuntime, type Runtime } from '../../src/compose/runtime.js';
import { compileDeferred } from '../../src/platform/http/validation.js';
import type { FeatureModule } from '../../src/platform/module.js';
import { loadConfig } from '../../src/platform/config.js';
import { signToken } from '../../src/platform/auth/jwt.js';
import type { ModelSpec } from '../../src/models/config.js';
import { TEST_PG_URL, testRedisPrefix } from '../../test/helpers/services.js';
import { dropInstallationKeys } from '../../test/helpers/redis-keys.js';

/** the PostgreSQL of the tests (PORTICO_TEST_DATABASE_URL) */
export const PG_URL = TEST_PG_URL;
export const BENCH_SECRET = 'bench-secret-0123456789abcdef0123456789abcdef';

export interface BenchPorticoOptions {
  /** 'postgres': PG_URL (PORTICO_TEST_DATABASE_URL), in a fresh schema */
  db: 'pglite' | 'postgres';
  /**
   * Where PGlite keeps its data when db is 'pglite': 'memory' (PORTICO_DB=memory, the default) or 'files'
   * (PGlite files in DATA_DIR, the embedded default of `npm start`, with the usage journal beside them).
   */
  pglite?: 'memory' | 'files';
  models: ModelSpec[];
  /** modules added to the built-in ones (e.g. a baseline route) */
  extraModules?: FeatureModule[];
  /** more configuration variables (e.g. key limits); with REDIS_URL and no REDIS_PREFIX, a prefix of its own, its keys removed by close() */
  env?: Record<string, string>;
}

export interface BenchPortico {
  app: FastifyInstance;
  runtime: Runtime;
  /** http://127.0.0.1:<port> */
  url: string;
  /** a portal token (JWT, user bench-user, one hour) */
  jwt: string;
  /** creates an inference key through the portal API and returns it */
  createKey(name: string): Promise<string>;
  /** stops the server and the services, drops the PostgreSQL schema, removes DATA_DIR */
  close(): Promise<void>;
}

export async function startPortico(o: BenchPorticoOptions): Promise<BenchPortico> {
  const dataDir = mkdtempSync(join(tmpdir(), 'portico-bench-'));
  const schema = o.db === 'postgres' ? `bench_${randomBytes(5).toString('hex')}` : undefined;
  const ownPrefix = o.env?.REDIS_URL && o.env.REDIS_PREFIX === undefined ? testRedisPrefix('bench') : undefined;
  const config = loadConfig({
    DATA_DIR: dataDir,
    PORTICO_DB: o.db === 'pglite' && (o.pglite ?? 'memory') === 'memory' ? 'memory' : '',
    DATABASE_URL: o.db === 'postgres' ? PG_URL : '',
    JWT_SECRET: BENCH_SECRET,
    LOG_LEVEL: 'info',
    ...o.env,
    ...(ownPrefix ? { REDIS_PREFIX: ownPrefix } : {}),
  });
  // production-like logging: one info line per request, written to /dev/null
  const devnull = createWriteStream('/dev/null');
  const core = await createCore(config, { role: 'serve', dbSchema: schema, models: o.models, logDestination: devnull });
  const runtime = await createRuntime(core, { extraModules: o.extraModules });
  const app = runtime.app;
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  // as `serve` does right after listen (in the background there; awaited here, so that no benchmark measures a
  // route's first call compiling its schema, which a served instance has done within a second of starting)
  await compileDeferred();
  const jwt = await signToken(new TextEncoder().encode(BENCH_SECRET), { userId: 'bench-user', ttlSeconds: 3600 });
  return {
    app,
    runtime,
    url,
    jwt,
    async createKey(name: string) {
      const created = await app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${jwt}` }, payload: { name } });
      if (created.statusCode !== 200) throw new Error(`key: ${created.body}`);
      return created.json().data.api_key as string;
    },
    async close() {
      await app.close();
      await runtime.close();
      await core.close();
      devnull.end();
      if (ownPrefix) await dropInstallationKeys(config.redisUrl!, ownPrefix);
      if (schema) {
        const c = new pg.Client({ connectionString: PG_URL });
        await c.connect();
        await c.query(`drop schema if exists ${schema} cascade`);
        await c.end();
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
