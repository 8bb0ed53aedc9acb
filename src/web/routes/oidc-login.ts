import type { FastifyInstance } from 'fastify';
import { serializeCookie } from '../cookies.js';
import { OIDC_COOKIE, backToSignIn, type WebContext } from '../context.js';

/** GET /auth/oidc/login: starts an OpenID Connect sign-in (a redirect to the identity provider). */
export default function (app: FastifyInstance, ctx: WebContext) {
  app.get('/auth/oidc/login', { schema: { hide: true } }, async (req, reply) => {
    const { oidc } = ctx;
    if (!oidc) return backToSignIn(reply, 'oidc_off');
    try {
      const { url, sealed } = await oidc.start();
      reply.header('set-cookie', serializeCookie(OIDC_COOKIE, sealed, { httpOnly: true, secure: ctx.secure(req), sameSite: 'lax', path: '/auth/oidc', maxAge: 600 }));
      reply.header('cache-control', 'no-store');
      return reply.redirect(url, 303);
    } catch (e) {
      req.log.warn({ err: (e as Error).message }, 'OpenID Connect sign-in could not start');
      return backToSignIn(reply, 'oidc_unavailable');
    }
  });
}
