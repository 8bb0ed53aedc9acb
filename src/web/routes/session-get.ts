import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { SessionSchema, sessionView, type WebContext } from '../context.js';

/** GET {portal_base_url}/session: the page's session, from its cookie (looked at here, not by the portal gate). */
export default function (app: FastifyInstance, ctx: WebContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/session',
    {
      config: { auth: 'none' },
      schema: { tags: ['Web session'], summary: "The page's session (session cookie): the user, its expiry and its CSRF token", response: { 200: envelope(SessionSchema) } },
    },
    async (req, reply) => {
      reply.header('cache-control', 'no-store');
      return ok(req, sessionView(await ctx.currentSession(req)));
    },
  );
}
