import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { AppError } from '../../platform/errors.js';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { csrfMatches } from '../sessions.js';
import type { WebContext } from '../context.js';

/** DELETE {portal_base_url}/session: signs out (the session ends on every instance at once) and clears its cookie. */
export default function (app: FastifyInstance, ctx: WebContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().delete(
    '/session',
    {
      config: { auth: 'none' },
      schema: {
        tags: ['Web session'],
        summary: 'Sign out: ends the session (x-csrf-token required) and clears its cookie',
        response: { 200: envelope(Type.Object({ signed_out: Type.Boolean() })) },
      },
    },
    async (req, reply) => {
      const value = ctx.sessionValue(req);
      const session = value === undefined ? undefined : await ctx.sessions.get(value);
      if (session) {
        ctx.assertSameOrigin(req);
        if (!csrfMatches(req.headers['x-csrf-token'], session.csrfToken)) throw new AppError('csrf_failed');
        await ctx.sessions.destroy(value!);
      }
      ctx.clearSessionCookie(req, reply);
      return ok(req, { signed_out: session !== undefined });
    },
  );
}
