import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { ModelItemSchema, ModelParams } from '../schemas.js';
import { actorOf, type AdminContext } from '../context.js';

/** POST /v1/admin/models/{name}/disable: stops serving a stored model (clients get 404; it stays listed); audited. */
export default function (app: FastifyInstance, { models }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/models/:name/disable',
    {
      schema: {
        tags: ['Admin'],
        summary: 'Stop serving a stored model on every instance',
        params: ModelParams,
        response: { 200: envelope(ModelItemSchema) },
      },
    },
    async (req) => ok(req, await models.setEnabled(actorOf(req), req.params.name, false)),
  );
}
