import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { ModelBody, ModelItemSchema, ModelParams } from '../schemas.js';
import { actorOf, type AdminContext } from '../context.js';

/** PUT /v1/admin/models/{name}: replaces a stored model's entry (an api_key left out is kept for the same deployment id and base_url origin, null removes it); audited. */
export default function (app: FastifyInstance, { models }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().put(
    '/models/:name',
    {
      schema: {
        tags: ['Admin'],
        summary: 'Change a stored model (409 read_only for a model of the file, a pulled or a built-in one)',
        params: ModelParams,
        body: ModelBody,
        response: { 200: envelope(ModelItemSchema) },
      },
    },
    async (req) => ok(req, await models.update(actorOf(req), req.params.name, req.body.entry)),
  );
}
