import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { AuditQuery, AuditSchema, Paged } from '../schemas.js';
import type { AdminContext } from '../context.js';

/** GET /v1/admin/audit: the audit log, newest first, filtered by actor, action, target and time. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/audit',
    {
      schema: {
        tags: ['Admin'],
        summary: 'Every change operators made: who, what, when, the record before and after',
        querystring: AuditQuery,
        response: { 200: envelope(Paged(AuditSchema)) },
      },
    },
    async (req) => ok(req, await service.auditList(req.query)),
  );
}
