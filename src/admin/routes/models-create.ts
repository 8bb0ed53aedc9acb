import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { ModelBody, ModelItemSchema } from '../schemas.js';
import { actorOf, type AdminContext } from '../context.js';

/** POST /v1/admin/models: adds a model (a model-file entry, checked as the file is), served by every instance at once; audited. */
export default function (app: FastifyInstance, { models }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/models',
    {
      schema: {
        tags: ['Admin'],
        summary: 'Add a model and its deployments, stored in the database and served by every instance without a restart',
        body: ModelBody,
        response: { 201: envelope(ModelItemSchema) },
      },
    },
    async (req, reply) => reply.code(201).send(ok(req, await models.create(actorOf(req), req.body.entry))),
  );
}
