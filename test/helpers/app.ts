import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { FastifyInstance } from 'fastify';
import { buildApp, closeServices, createServices, type AppOptions, type Services } from '../../src/app.js';
import { loadConfig, type Config } from '../../src/platform/config.js';
import { signToken } from '../../src/platform/auth/jwt.js';
import type { ModelSpec } from '../../src/models/config.js';
import { apiPlugins } from '../../src/api/plugins.js';

export type TestDb = 'pglite' | 'postgres';

/** The PostgreSQL server the suite also runs on (CI starts it); PORTICO_TEST_PG=off skips it. */
export const TEST_PG_URL = process.env.PORTICO_TEST_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';

/** Every database the suite runs on: PGlite always, PostgreSQL unless turned off. */
export function testDatabases(): TestDb[] {
  return process.env.PORTICO_TEST_PG === 'off' ? ['pglite'] : ['pglite', 'postgres'];
}

export const TEST_JWT_SECRET = 'test-secret-0123456789abcdef0123456789abcdef';

export interface TestApp {
  app: FastifyInstance;
  services: Services;
  config: Config;
  db: TestDb;
  /** a portal JWT for that user */
  token(userId: string, orgRoles?: Record<string, string>, ttlSeconds?: number): Promise<string>;
  /** creates an inference key for the user and returns the full key */
  inferenceKey(userId: string, body?: Record<string, unknown>): Promise<string>;
  close(): Promise<void>;
}

export interface TestAppOptions {
  db?: TestDb;
  env?: Record<string, string>;
  models?: ModelSpec[];
  app?: AppOptions;
  /** listen on a real port too (returns url) */
  listen?: boolean;
}

export async function buildTestApp(opts: TestAppOptions = {}): Promise<TestApp & { url?: string }> {
  const db = opts.db ?? 'pglite';
  const dataDir = mkdtempSync(join(tmpdir(), 'portico-test-'));
  const schema = db === 'postgres' ? `t_${randomBytes(6).toString('hex')}` : undefined;
  const config = loadConfig({
    DATA_DIR: dataDir,
    PORTICO_DB: db === 'pglite' ? 'memory' : '',
    DATABASE_URL: db === 'postgres' ? TEST_PG_URL : '',
    JWT_SECRET: TEST_JWT_SECRET,
    LOG_LEVEL: 'silent',
    PORT: '0',
    ...opts.env,
  });
  const services = await createServices(config, { dbSchema: schema, models: opts.models });
  const app = await buildApp(services, { apiPlugins, ...opts.app });
  let url: string | undefined;
  if (opts.listen) url = await app.listen({ port: 0, host: '127.0.0.1' });
  else await app.ready();
  const t: TestApp & { url?: string } = {
    app,
    services,
    config,
    db,
    url,
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
      await app.close();
      await closeServices(services);
      if (schema) {
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
