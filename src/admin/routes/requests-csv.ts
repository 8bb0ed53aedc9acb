import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { RequestsCsvQuery } from '../schemas.js';
import { requestFilter } from './ledger.js';
import type { AdminContext } from '../context.js';

/** GET /v1/admin/requests.csv: the same records as CSV (a file to download), newest first. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/requests.csv',
    {
      schema: {
        tags: ['Admin'],
        summary: 'The requests of GET /requests as CSV (UTF-8, RFC 4180), newest first, at most `limit` rows',
        querystring: RequestsCsvQuery,
        response: {
          200: { description: 'CSV: a header line, then one line per record', content: { 'text/csv': { schema: Type.String() } } },
        },
      },
    },
    async (req, reply) => {
      const csv = await service.requestsCsv(requestFilter(req.query), req.query.limit);
      reply.type('text/csv; charset=utf-8').header('content-disposition', 'attachment; filename="portico-requests.csv"').header('cache-control', 'no-store');
      return csv;
    },
  );
}
