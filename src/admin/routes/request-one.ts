import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { RequestDetail, RequestParams } from '../schemas.js';
import type { AdminContext } from '../context.js';

/** GET /v1/admin/requests/{request_id}: one request, its timings and (when it was stored) its response's input and output. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/requests/:request_id',
    {
      schema: {
        tags: ['Admin'],
        summary: 'One request: its row, its timings, and the input and output of its stored response (null when none was stored)',
        params: RequestParams,
        response: { 200: envelope(RequestDetail) },
      },
    },
    async (req) => ok(req, await service.request(req.params.request_id)),
  );
}
