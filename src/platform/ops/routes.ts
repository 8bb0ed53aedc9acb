import { timingSafeEqual } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { AppError, msg } from '../errors.js';
import { sql } from 'kysely';
import { migrations } from '../db/migrations.js';
import { newerMigrations, type Db } from '../db/index.js';
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
 * machine itself (127.0.0.0/8, ::1) are answered, by `req.ip`: behind a reverse proxy on the same machine every
 * request looks local unless TRUST_PROXY names it, so set TRUST_PROXY, METRICS_TOKEN or METRICS_PORT there
 * (docs/operations.md).
 */
export type MetricsAccess = { mode: 'separate' } | { mode: 'token'; token: string } | { mode: 'loopback' };

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|::ffff:127\.\d+\.\d+\.\d+)$/;

/** Whether a scrape may be answered; an AppError when not. */
export function checkMetricsAccess(access: MetricsAccess, remoteAddress: string | undefined, authorization: string | undefined): void {
  if (access.mode === 'separate') throw new AppError('not_found');
  if (access.mode === 'token') {
    const given = Buffer.from(/^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '')?.[1] ?? '');
    const want = Buffer.from(access.token);
    if (given.length !== want.length || !timingSafeEqual(given, want)) throw new AppError('unauthorized', msg('metrics_token_needed'));
    return;
  }
  if (!LOOPBACK.test(remoteAddress ?? '')) {
    throw new AppError('permission_denied', msg('metrics_local_only'));
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

/**
 * /healthz (the process is up), /readyz (this instance can serve: see readiness below), /metrics (Prometheus).
 */
export function createOpsModule(deps: OpsDeps): FeatureModule {
  return { name: 'ops', routes: { root: (app) => registerOpsRoutes(app, deps) } };
}

/**
 * Readiness answers one question: can this instance serve requests now? A load balancer takes an instance that
 * says no out of its pool, so only what stops *this* instance from serving may make it say no:
 * - the database unreachable (key checks, usage records and stored responses need it: requests get 503) or a
 *   migration missing: 503 `not ready`;
 * - Redis unreachable: still 200, `degraded`. Requests go on in the documented degraded mode (docs/deployment.md,
 *   "When PostgreSQL or Redis goes away": only rate-limited keys, budget checks and background creates get 503),
 *   and Redis is shared by every instance, so a 503 here would take all of them out at once;
 * - a configured model that cannot be served (its file is missing): 200, `degraded`; the other models serve.
 */
function registerOpsRoutes(app: FastifyInstance, s: OpsDeps) {
  app.get('/healthz', { schema: { tags: ['Operations'], summary: 'The process is up' } }, async () => ({ status: 'ok' }));

  app.get(
    '/readyz',
    { schema: { tags: ['Operations'], summary: 'This instance can serve: database reachable, migrations applied (Redis away or a model missing: degraded, still ready)' } },
    async (req, reply) => {
      const checks: Record<string, string> = {};
      let ready = true;
      let degraded = false;
      try {
        const r = await withTimeout(sql<{ name: string }>`select name from portico_migrations`.execute(s.db), 2000, 'the database');
        const done = new Set(r.rows.map((x) => x.name));
        const missing = Object.keys(migrations).filter((n) => !done.has(n)).length;
        const known = Object.keys(migrations).length;
        // a newer release migrated the database while this one runs (a rolling upgrade): this instance keeps serving
        // until it is replaced (migrations only add), and says so; a restart of this release would refuse to start
        const newer = newerMigrations(done);
        checks.database = 'ok';
        checks.migrations =
          missing > 0
            ? `${known - missing} of ${known} applied`
            : newer.length
              ? `ok; ${newer.length} newer (${newer.join(', ')}): a newer release migrated the database; replace this instance with it`
              : 'ok';
        if (missing > 0) ready = false;
      } catch (e) {
        ready = false;
        checks.database = (e as Error).message;
      }
      if (s.pingRedis) {
        try {
          await withTimeout(s.pingRedis(), 2000, 'Redis');
          checks.redis = 'ok';
        } catch (e) {
          degraded = true;
          checks.redis = `degraded: ${(e as Error).message}; requests are served, except those of rate-limited keys, budget checks and background creates (503 until Redis answers)`;
        }
      }
      const down = s.unavailableModels?.() ?? [];
      if (down.length) degraded = true;
      checks.models = down.length ? `${down.length} unavailable: ${down.map((m) => `${m.name} (${m.reason})`).join('; ')}` : 'ok';
      return reply.code(ready ? 200 : 503).send({ status: ready ? (degraded ? 'degraded' : 'ready') : 'not ready', checks });
    },
  );

  app.get('/metrics', { schema: { hide: true } }, async (req, reply) => {
    checkMetricsAccess(s.metricsAccess, req.ip, req.headers.authorization);
    const m = s.metrics;
    s.beforeScrape?.();
    reply.header('content-type', m.registry.contentType);
    return m.registry.metrics();
  });
}
