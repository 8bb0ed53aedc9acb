import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import type { Services } from '../../app.js';
import { migrations } from '../db/migrations.js';

async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<T>((_, rej) => (t = setTimeout(() => rej(new Error(`${what} did not answer within ${ms} ms`)), ms)))]);
  } finally {
    clearTimeout(t);
  }
}

/** /healthz (the process is up), /readyz (it can serve: database, Redis, migrations), /metrics (Prometheus). */
export function registerOpsRoutes(app: FastifyInstance, s: Services) {
  app.get('/healthz', { schema: { tags: ['Operations'], summary: 'The process is up' } }, async () => ({ status: 'ok' }));

  app.get('/readyz', { schema: { tags: ['Operations'], summary: 'Database (and Redis) reachable, migrations applied' } }, async (req, reply) => {
    const checks: Record<string, string> = {};
    let ok = true;
    try {
      const r = await withTimeout(sql<{ n: number }>`select count(*)::int as n from portico_migrations`.execute(s.db.db), 2000, 'the database');
      const applied = Number(r.rows[0]?.n ?? 0);
      const known = Object.keys(migrations).length;
      checks.database = 'ok';
      checks.migrations = applied >= known ? 'ok' : `${applied} of ${known} applied`;
      if (applied < known) ok = false;
    } catch (e) {
      ok = false;
      checks.database = (e as Error).message;
    }
    if (s.config.redisUrl) {
      try {
        await withTimeout(s.feed.publish('ping', {}), 2000, 'Redis');
        checks.redis = 'ok';
      } catch (e) {
        ok = false;
        checks.redis = (e as Error).message;
      }
    }
    return reply.code(ok ? 200 : 503).send({ status: ok ? 'ready' : 'not ready', checks });
  });

  app.get('/metrics', { schema: { hide: true } }, async (req, reply) => {
    const m = s.metrics;
    const { hits, misses } = s.verifier;
    m.keyCacheHits.set(hits);
    m.keyCacheMisses.set(misses);
    m.keyCacheHitRatio.set(hits + misses > 0 ? hits / (hits + misses) : 0);
    m.queueDepth.set(s.responses.runs.size);
    reply.header('content-type', m.registry.contentType);
    return m.registry.metrics();
  });
}
