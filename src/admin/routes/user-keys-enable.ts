import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { KeyChangeAnswer, KeyChangeBody, UserParams } from '../schemas.js';
import { actorOf, type AdminContext } from '../context.js';

/** POST /v1/admin/users/{user_id}/keys/enable: one key of the user (api_key_id) or all of them; each change audited. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/users/:user_id/keys/enable',
    {
      schema: {
        tags: ['Admin'],
        summary: "Enable a user's disabled keys (one, or every disabled one), within the active-key limit",
        params: UserParams,
        body: KeyChangeBody,
        response: { 200: envelope(KeyChangeAnswer) },
      },
    },
    async (req) => ok(req, await service.setKeysDisabled(actorOf(req), req.params.user_id, false, req.body?.api_key_id)),
  );
}
