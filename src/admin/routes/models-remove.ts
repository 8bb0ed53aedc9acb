import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { ModelDeletedSchema, ModelParams } from '../schemas.js';
import { actorOf, type AdminContext } from '../context.js';

/** DELETE /v1/admin/models/{name}: removes a stored model from every instance (requests in flight finish); audited. */
export default function (app: FastifyInstance, { models }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().delete(
    '/models/:name',
    {
      schema: {
        tags: ['Admin'],
        summary: 'Remove a stored model (409 read_only for a model of the file, a pulled or a built-in one)',
        params: ModelParams,
        response: { 200: envelope(ModelDeletedSchema) },
      },
    },
    async (req) => ok(req, await models.remove(actorOf(req), req.params.name)),
  );
}
