import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { HealthAnswer, HealthQuery } from '../schemas.js';
import type { AdminContext } from '../context.js';

/** GET /v1/admin/health: each deployment's breaker, error rate, latencies, in flight and rpm/tpm, per instance and summed. */
export default function (app: FastifyInstance, { health }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/health',
    {
      schema: {
        tags: ['Admin'],
        summary: "Each deployment's state over the last minute (breaker, error rate, p50/p95 latency and time to first token, in flight, rpm/tpm used), per instance and summed",
        querystring: HealthQuery,
        response: { 200: envelope(HealthAnswer) },
      },
    },
    async (req) => ok(req, await health.read(req.query.model)),
  );
}
