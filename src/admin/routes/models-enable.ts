import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { ModelItemSchema, ModelParams } from '../schemas.js';
import { actorOf, type AdminContext } from '../context.js';

/** POST /v1/admin/models/{name}/enable: serves a disabled stored model again; audited. */
export default function (app: FastifyInstance, { models }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/models/:name/enable',
    {
      schema: {
        tags: ['Admin'],
        summary: 'Serve a disabled stored model again on every instance',
        params: ModelParams,
        response: { 200: envelope(ModelItemSchema) },
      },
    },
    async (req) => ok(req, await models.setEnabled(actorOf(req), req.params.name, true)),
  );
}
