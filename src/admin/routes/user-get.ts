import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { UserDetail, UserParams } from '../schemas.js';
import type { AdminContext } from '../context.js';

/** GET /v1/admin/users/{user_id}: one user with their keys of both kinds. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/users/:user_id',
    {
      schema: {
        tags: ['Admin'],
        summary: 'One user: keys (both kinds), balance, usage this month, organizations they administer, operator role',
        params: UserParams,
        response: { 200: envelope(UserDetail) },
      },
    },
    async (req) => ok(req, await service.user(req.params.user_id)),
  );
}
