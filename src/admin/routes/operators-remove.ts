import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { OperatorSchema, UserParams } from '../schemas.js';
import { actorOf, type AdminContext } from '../context.js';

/** DELETE /v1/admin/operators/{user_id}: takes a recorded operator's role away (audited); not one's own. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().delete(
    '/operators/:user_id',
    {
      schema: {
        tags: ['Admin'],
        summary: "Remove a recorded operator (their admin keys stop working at once); not one's own role",
        params: UserParams,
        response: { 200: envelope(OperatorSchema) },
      },
    },
    async (req) => ok(req, await service.operatorRemove(actorOf(req), req.params.user_id)),
  );
}
