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
import { buildApp, closeServices, createServices, type Services } from '../../src/app.js';
import { loadConfig } from '../../src/platform/config.js';
import { signToken } from '../../src/platform/auth/jwt.js';
import type { ModelSpec } from '../../src/models/config.js';

export const PG_URL = process.env.PORTICO_BENCH_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
export const BENCH_SECRET = 'bench-secret-0123456789abcdef0123456789abcdef';

export interface BenchPorticoOptions {
  /** 'postgres': PG_URL (PORTICO_BENCH_DATABASE_URL), in a fresh schema */
  db: 'pglite' | 'postgres';
  /**
   * Where PGlite keeps its data when db is 'pglite': 'memory' (PORTICO_DB=memory, the default) or 'files'
   * (PGlite files in DATA_DIR, the embedded default of `npm start`, with the usage journal beside them).
   */
  pglite?: 'memory' | 'files';
  models: ModelSpec[];
  /** feature modules mounted under /v1 (buildApp's apiPlugins) */
  apiPlugins?: Array<(app: FastifyInstance, services: Services) => Promise<void> | void>;
  /** more configuration variables (e.g. key limits) */
  env?: Record<string, string>;
}

export interface BenchPortico {
  app: FastifyInstance;
  services: Services;
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
  const config = loadConfig({
    DATA_DIR: dataDir,
    PORTICO_DB: o.db === 'pglite' && (o.pglite ?? 'memory') === 'memory' ? 'memory' : '',
    DATABASE_URL: o.db === 'postgres' ? PG_URL : '',
    JWT_SECRET: BENCH_SECRET,
    LOG_LEVEL: 'info',
    ...o.env,
  });
  const services = await createServices(config, { dbSchema: schema, models: o.models });
  // production-like logging: one info line per request, written to /dev/null
  const devnull = createWriteStream('/dev/null');
  const app = await buildApp(services, { apiPlugins: o.apiPlugins, logger: { level: 'info', stream: devnull } as any });
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  const jwt = await signToken(new TextEncoder().encode(BENCH_SECRET), { userId: 'bench-user', ttlSeconds: 3600 });
  return {
    app,
    services,
    url,
    jwt,
    async createKey(name: string) {
      const created = await app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${jwt}` }, payload: { name } });
      if (created.statusCode !== 200) throw new Error(`key: ${created.body}`);
      return created.json().data.api_key as string;
    },
    async close() {
      await app.close();
      await closeServices(services);
      devnull.end();
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
