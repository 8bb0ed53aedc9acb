import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { GrantAnswer, GrantBody } from '../schemas.js';
import { actorOf, type AdminContext } from '../context.js';

/** POST /v1/admin/credits: grants (or, negative, removes) credits of a user or an organization, with a note; audited. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/credits',
    {
      schema: {
        tags: ['Admin'],
        summary: "Grant or remove credits of a user (personal) or an organization, with a note; every instance's budget sees it",
        body: GrantBody,
        response: { 200: envelope(GrantAnswer) },
      },
    },
    async (req) => ok(req, await service.grant(actorOf(req), req.body)),
  );
}
