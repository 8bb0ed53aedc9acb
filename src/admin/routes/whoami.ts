import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { WhoamiSchema } from '../schemas.js';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import type { AdminContext } from '../context.js';

/** GET /v1/admin/whoami: whether the caller is an operator (200), and by what (the page asks before it shows the console). */
export default function (app: FastifyInstance, _ctx: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/whoami',
    {
      schema: {
        tags: ['Admin'],
        summary: 'The operator calling (403 for anyone who is not one)',
        response: { 200: envelope(WhoamiSchema) },
      },
    },
    async (req) => ok(req, { user_id: req.operator!.userId, key_id: req.operator!.keyId ?? null }),
  );
}
