import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { Paged, SearchQuery, UserSummary } from '../schemas.js';
import type { AdminContext } from '../context.js';

/** GET /v1/admin/users: every user, searched by id, with keys, balance, usage this period and last activity. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/users',
    {
      schema: {
        tags: ['Admin'],
        summary: 'List and search users: their keys, balance, usage this month and last activity',
        querystring: SearchQuery,
        response: { 200: envelope(Paged(UserSummary)) },
      },
    },
    async (req) => ok(req, await service.users(req.query)),
  );
}
