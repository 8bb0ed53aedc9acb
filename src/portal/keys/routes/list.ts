import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../../platform/http/portal-envelope.js';
import { KeyListSchema, ListKeysQuery } from '../schemas.js';
import type { KeyRoutesDeps } from './deps.js';

export default function (app: FastifyInstance, { service, base, tag }: KeyRoutesDeps) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    base,
    {
      schema: {
        tags: [tag],
        summary: "List the caller's API keys",
        querystring: ListKeysQuery,
        response: { 200: envelope(KeyListSchema) },
      },
    },
    async (req) => ok(req, await service.list(req.user!, req.query)),
  );
}
