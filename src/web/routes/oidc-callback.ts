import type { FastifyInstance } from 'fastify';
import type { UserPrincipal } from '../../platform/auth/jwt.js';
import { serializeCookie } from '../cookies.js';
import { OidcError } from '../oidc.js';
import { OIDC_COOKIE, backToSignIn, type WebContext } from '../context.js';

/** GET /auth/oidc/callback: the identity provider's answer; starts a session and goes to the keys. */
export default function (app: FastifyInstance, ctx: WebContext) {
  app.get('/auth/oidc/callback', { schema: { hide: true } }, async (req, reply) => {
    const { oidc } = ctx;
    if (!oidc) return backToSignIn(reply, 'oidc_off');
    const q = req.url.indexOf('?');
    // the transaction is over either way: its cookie goes
    reply.header('set-cookie', serializeCookie(OIDC_COOKIE, '', { httpOnly: true, secure: ctx.secure(req), sameSite: 'lax', path: '/auth/oidc', maxAge: 0 }));
    reply.header('cache-control', 'no-store');
    let principal: UserPrincipal;
    try {
      principal = await oidc.finish(q >= 0 ? req.url.slice(q + 1) : '', ctx.cookies(req)[OIDC_COOKIE]);
    } catch (e) {
      req.log.warn({ err: (e as Error).message }, 'OpenID Connect sign-in failed');
      return backToSignIn(reply, e instanceof OidcError ? 'oidc_failed' : 'oidc_unavailable');
    }
    const { value, session } = await ctx.sessions.create(principal, 'oidc');
    const s = ctx.secure(req);
    reply.header('set-cookie', [
      serializeCookie(OIDC_COOKIE, '', { httpOnly: true, secure: s, sameSite: 'lax', path: '/auth/oidc', maxAge: 0 }),
      serializeCookie(ctx.sessionCookieName(s), value, { httpOnly: true, secure: s, sameSite: 'strict', path: '/', maxAge: session.expiresAt - Math.floor(Date.now() / 1000) }),
    ]);
    // the code and state leave the address bar with this redirect
    return reply.redirect('/keys', 303);
  });
}
