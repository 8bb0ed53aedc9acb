import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { OrgSummary, Paged, SearchQuery } from '../schemas.js';
import type { AdminContext } from '../context.js';

/** GET /v1/admin/orgs: every organization, searched by id, with members, keys, balance, usage this period, last activity. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/orgs',
    {
      schema: {
        tags: ['Admin'],
        summary: 'List and search organizations: members, keys, balance, usage this month and last activity',
        querystring: SearchQuery,
        response: { 200: envelope(Paged(OrgSummary)) },
      },
    },
    async (req) => ok(req, await service.orgs(req.query)),
  );
}
