import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { MemberParams, MemberRoleAnswer, MemberRoleBody } from '../schemas.js';
import { actorOf, type AdminContext } from '../context.js';

/** PUT /v1/admin/orgs/{org_id}/members/{user_id}: sets a member's role where roles are Portico's own (audited). */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().put(
    '/orgs/:org_id/members/:user_id',
    {
      schema: {
        tags: ['Admin'],
        summary: "Set a member's organization role (admin or member); 409 roles_from_identity_provider where the identity provider issues roles",
        params: MemberParams,
        body: MemberRoleBody,
        response: { 200: envelope(MemberRoleAnswer) },
      },
    },
    async (req) => ok(req, await service.setMemberRole(actorOf(req), req.params.org_id, req.params.user_id, req.body.role)),
  );
}
