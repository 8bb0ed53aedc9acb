import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../../platform/http/portal-envelope.js';
import { CreateKeyBody, CreatedKeyRecordSchema } from '../schemas.js';
import type { KeyRoutesDeps } from './deps.js';

export default function (app: FastifyInstance, { service, base, tag }: KeyRoutesDeps) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    base,
    {
      schema: {
        tags: [tag],
        summary: 'Create API Key (the full key is returned once)',
        body: CreateKeyBody,
        response: { 200: envelope(CreatedKeyRecordSchema) },
      },
    },
    async (req) => ok(req, await service.create(req.user!, req.body)),
  );
}
