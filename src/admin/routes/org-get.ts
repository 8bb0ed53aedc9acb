import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { OrgDetail, OrgParams } from '../schemas.js';
import type { AdminContext } from '../context.js';

/** GET /v1/admin/orgs/{org_id}: one organization with its keys. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/orgs/:org_id',
    {
      schema: {
        tags: ['Admin'],
        summary: 'One organization: members, keys (both kinds), balance, usage this month',
        params: OrgParams,
        response: { 200: envelope(OrgDetail) },
      },
    },
    async (req) => ok(req, await service.org(req.params.org_id)),
  );
}
