import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { RequestSchema, RequestsQuery } from '../schemas.js';
import { requestFilter } from './ledger.js';
import type { AdminContext } from '../context.js';

/** GET /v1/admin/requests: the requests of the request log and the usage ledger, newest first, filtered and paged. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/requests',
    {
      schema: {
        tags: ['Admin'],
        summary:
          "Recent {base_url} requests (the request log, with the usage ledger's charge): time, user, key, model, deployment, status, error, latency, tokens, cost; filtered and paged",
        querystring: RequestsQuery,
        response: {
          200: envelope(
            Type.Object({
              start_time: Type.Integer(),
              end_time: Type.Integer(),
              list: Type.Array(RequestSchema),
              total: Type.Integer(),
              page: Type.Integer(),
              per_page: Type.Integer(),
            }),
          ),
        },
      },
    },
    async (req) => ok(req, await service.requests(requestFilter(req.query), req.query)),
  );
}
