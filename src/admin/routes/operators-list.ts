import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { OperatorSchema } from '../schemas.js';
import type { AdminContext } from '../context.js';

/** GET /v1/admin/operators: the operators recorded in the database. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/operators',
    {
      schema: {
        tags: ['Admin'],
        summary: "The recorded operators (those a token's claim names are recorded once they make an admin key)",
        response: { 200: envelope(Type.Object({ list: Type.Array(OperatorSchema) })) },
      },
    },
    async (req) => ok(req, await service.operatorList()),
  );
}
