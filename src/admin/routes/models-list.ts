import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { ModelListSchema } from '../schemas.js';
import type { AdminContext } from '../context.js';

/** GET /v1/admin/models: every model the instance serves (file, stored, pulled, built-in) and every stored one. */
export default function (app: FastifyInstance, { models }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/models',
    {
      schema: {
        tags: ['Admin'],
        summary: 'The models: where each comes from, whether it can be changed here, its entry (no secret) and which secrets are set',
        response: { 200: envelope(ModelListSchema) },
      },
    },
    async (req) => ok(req, models.list()),
  );
}
