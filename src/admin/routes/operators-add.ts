import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { Id, OperatorSchema } from '../schemas.js';
import { actorOf, type AdminContext } from '../context.js';

/** POST /v1/admin/operators: makes a user an operator (audited). */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/operators',
    {
      schema: {
        tags: ['Admin'],
        summary: 'Make a user an operator',
        body: Type.Object({ user_id: Id('the user') }, { additionalProperties: false }),
        response: { 200: envelope(OperatorSchema) },
      },
    },
    async (req) => ok(req, await service.operatorAdd(actorOf(req), req.body.user_id)),
  );
}
