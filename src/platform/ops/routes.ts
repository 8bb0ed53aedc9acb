import { timingSafeEqual } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { AppError } from '../errors.js';
import { sql } from 'kysely';
import type { Db } from '../db/index.js';
import { migrations } from '../db/migrations.js';
import type { Metrics } from './metrics.js';
import type { FeatureModule } from '../module.js';

export interface OpsDeps {
  db: Db;
  /** a round trip to Redis when it is configured */
  pingRedis?: () => Promise<void>;
  /** models listed but not servable now (a missing file): reported, without paths; the instance stays ready for the rest */
  unavailableModels?: () => Array<{ name: string; reason: string }>;
  metrics: Metrics;
  /** refreshes gauges that are read rather than counted (cache hits, queue depth) before a scrape */
  beforeScrape?: () => void;
  /** who may read /metrics on this port (see MetricsAccess) */
  metricsAccess: MetricsAccess;
}

/**
 * /metrics is not public on the API port by default: it tells anyone who can read it which models, keys'
 * traffic and errors an instance has. `separate`: it is served on METRICS_PORT only (404 here). `token`: a
 * request needs `Authorization: Bearer <METRICS_TOKEN>`. `loopback` (neither set): only requests from the
 * machine itself (127.0.0.0/8, ::1) are answered. Behind a reverse proxy on the same machine every request
 * looks local, so set METRICS_TOKEN or METRICS_PORT there (docs/operations.md).
 */
export type MetricsAccess = { mode: 'separate' } | { mode: 'token'; token: string } | { mode: 'loopback' };

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|::ffff:127\.\d+\.\d+\.\d+)$/;

/** Whether a scrape may be answered; an AppError when not. */
export function checkMetricsAccess(access: MetricsAccess, remoteAddress: string | undefined, authorization: string | undefined): void {
  if (access.mode === 'separate') throw new AppError('not_found');
  if (access.mode === 'token') {
    const given = Buffer.from(/^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '')?.[1] ?? '');
    const want = Buffer.from(access.token);
    if (given.length !== want.length || !timingSafeEqual(given, want)) throw new AppError('unauthorized', 'unauthorized: /metrics needs Authorization: Bearer <METRICS_TOKEN>');
    return;
  }
  if (!LOOPBACK.test(remoteAddress ?? '')) {
    throw new AppError('permission_denied', 'permission denied: /metrics answers only requests from this machine; set METRICS_TOKEN or METRICS_PORT to scrape it from elsewhere');
  }
}

async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<T>((_, rej) => (t = setTimeout(() => rej(new Error(`${what} did not answer within ${ms} ms`)), ms)))]);
  } finally {
    clearTimeout(t);
  }
}

/** /healthz (the process is up), /readyz (it can serve: database, Redis, migrations), /metrics (Prometheus). */
export function createOpsModule(deps: OpsDeps): FeatureModule {
  return { name: 'ops', routes: { root: (app) => registerOpsRoutes(app, deps) } };
}

function registerOpsRoutes(app: FastifyInstance, s: OpsDeps) {
  app.get('/healthz', { schema: { tags: ['Operations'], summary: 'The process is up' } }, async () => ({ status: 'ok' }));

  app.get('/readyz', { schema: { tags: ['Operations'], summary: 'Database (and Redis) reachable, migrations applied' } }, async (req, reply) => {
    const checks: Record<string, string> = {};
    let ok = true;
    try {
      const r = await withTimeout(sql<{ n: number }>`select count(*)::int as n from portico_migrations`.execute(s.db), 2000, 'the database');
      const applied = Number(r.rows[0]?.n ?? 0);
      const known = Object.keys(migrations).length;
      checks.database = 'ok';
      checks.migrations = applied >= known ? 'ok' : `${applied} of ${known} applied`;
      if (applied < known) ok = false;
    } catch (e) {
      ok = false;
      checks.database = (e as Error).message;
    }
    if (s.pingRedis) {
      try {
        await withTimeout(s.pingRedis(), 2000, 'Redis');
        checks.redis = 'ok';
      } catch (e) {
        ok = false;
        checks.redis = (e as Error).message;
      }
    }
    const down = s.unavailableModels?.() ?? [];
    checks.models = down.length ? `${down.length} unavailable: ${down.map((m) => `${m.name} (${m.reason})`).join('; ')}` : 'ok';
    return reply.code(ok ? 200 : 503).send({ status: ok ? (down.length ? 'degraded' : 'ready') : 'not ready', checks });
  });

  app.get('/metrics', { schema: { hide: true } }, async (req, reply) => {
    checkMetricsAccess(s.metricsAccess, req.socket.remoteAddress, req.headers.authorization);
    const m = s.metrics;
    s.beforeScrape?.();
    reply.header('content-type', m.registry.contentType);
    return m.registry.metrics();
  });
}
