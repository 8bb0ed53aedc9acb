import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { SessionSchema, sessionView, type WebContext } from '../context.js';

/** POST {portal_base_url}/session/link: signs in with a sign-in link (portico login); sets the session cookie. */
export default function (app: FastifyInstance, ctx: WebContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/session/link',
    {
      config: { auth: 'none' },
      schema: {
        tags: ['Web session'],
        summary: 'Sign in with a sign-in link (portico login): starts a session, sets its HttpOnly cookie',
        body: Type.Object({ token: Type.String({ minLength: 1, maxLength: 4096 }) }, { additionalProperties: false }),
        response: { 200: envelope(SessionSchema) },
      },
    },
    async (req, reply) => {
      ctx.assertSameOrigin(req);
      const { value, session } = await ctx.sessions.redeemLink(req.body.token);
      ctx.setSessionCookie(req, reply, value, session);
      reply.header('cache-control', 'no-store');
      return ok(req, sessionView(session));
    },
  );
}
