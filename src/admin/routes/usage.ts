import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { AdminUsageReportSchema, UsageQuery } from '../schemas.js';
import { ledgerFilter } from './ledger.js';
import type { AdminContext } from '../context.js';
import type { AdminGroupBy } from '../store.js';

/** GET /v1/admin/usage: usage over every user and organization, grouped by key (default), user, org, model, day, ... */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/usage',
    {
      schema: {
        tags: ['Admin'],
        summary: 'Usage of every key, user and organization over a time range, grouped (default: per key)',
        querystring: UsageQuery,
        response: { 200: envelope(AdminUsageReportSchema) },
      },
    },
    async (req) => {
      const groupBy = [...new Set((req.query.group_by ?? 'key').split(','))] as AdminGroupBy[];
      return ok(req, await service.usage(ledgerFilter(req.query), groupBy));
    },
  );
}
