import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import type { WebContext } from '../context.js';
import { SignInMethodsSchema } from '../schemas.js';

/** GET {portal_base_url}/session/methods: how a person can sign in (answers people not signed in yet). */
export default function (app: FastifyInstance, ctx: WebContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/session/methods',
    {
      config: { auth: 'none' },
      schema: {
        tags: ['Web session'],
        summary: 'How a person can sign in to the page (no authentication)',
        response: { 200: envelope(SignInMethodsSchema) },
      },
    },
    async (req) => ok(req, { link: true, oidc: ctx.oidc !== undefined, oidc_login_url: ctx.oidc ? '/auth/oidc/login' : null }),
  );
}
