import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../../platform/http/portal-envelope.js';
import { KeyIdParams, KeyRecordSchema } from '../schemas.js';
import type { KeyRoutesDeps } from './deps.js';

export default function (app: FastifyInstance, { service, base, tag }: KeyRoutesDeps) {
  app.withTypeProvider<TypeBoxTypeProvider>().delete(
    `${base}/:api_key_id`,
    {
      schema: {
        tags: [tag],
        summary: 'Delete an API key (soft delete: it leaves the list and stops working)',
        params: KeyIdParams,
        response: { 200: envelope(KeyRecordSchema) },
      },
    },
    async (req) => ok(req, await service.delete(req.user!, req.params.api_key_id)),
  );
}
