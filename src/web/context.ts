/**
 * What the web module's routes share: the session service and its cookie, the same-origin and CSRF checks, the
 * OpenID Connect sign-in (when configured), the built page. Made once by createWebModule (./index.ts) and given to
 * each route (./routes/<endpoint>.ts).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { JwtVerifier, UserPrincipal } from '../platform/auth/jwt.js';
import { bearerToken } from '../platform/http/auth.js';
import { AppError, msg } from '../platform/errors.js';
import type { WebConfig } from '../platform/config.js';
import { SessionService, csrfMatches, type Session } from './sessions.js';
import type { OidcSignIn } from './oidc.js';
import { pickEncoding, type Asset, type PageAssets } from './assets.js';
import { parseCookies, serializeCookie } from './cookies.js';

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
/** the cookie holding an OpenID Connect sign-in under way (sealed state, nonce and verifier) */
export const OIDC_COOKIE = 'portico_oidc';

export interface WebContext {
  sessions: SessionService;
  oidc?: OidcSignIn;
  page: PageAssets;
  /** the page is reached over https (PUBLIC_URL): HSTS, upgrade-insecure-requests, Secure cookies */
  httpsOnly: boolean;
  /** whether this request's cookies are Secure (PUBLIC_URL over https, or the request itself) */
  secure(req: FastifyRequest): boolean;
  sessionCookieName(isSecure: boolean): string;
  cookies(req: FastifyRequest): Record<string, string>;
  /** the session cookie's value, if one was sent */
  sessionValue(req: FastifyRequest): string | undefined;
  setSessionCookie(req: FastifyRequest, reply: FastifyReply, value: string, session: Session): void;
  clearSessionCookie(req: FastifyRequest, reply: FastifyReply): void;
  /** a state-changing request from another origin is refused even before the CSRF token is looked at */
  assertSameOrigin(req: FastifyRequest): void;
  /** the session of the cookie sent: 401 without one, session_expired when it is over */
  currentSession(req: FastifyRequest): Promise<Session>;
  /** the one function the portal gate uses to recognize a user (see WebModule.authenticatePortal) */
  authenticatePortal(req: FastifyRequest): Promise<UserPrincipal>;
}

export function createWebContext(d: {
  web: WebConfig;
  jwt: JwtVerifier;
  sessions: SessionService;
  oidc?: OidcSignIn;
  page: PageAssets;
  /** told of each user a session recognizes (the first user of a fresh install becomes an operator) */
  onSessionUser?: (user: UserPrincipal) => Promise<void>;
}): WebContext {
  const { web, sessions } = d;
  const httpsOnly = web.publicUrl.startsWith('https:');
  // Secure cookies when people reach Portico over https (PUBLIC_URL, or the request itself); the __Host- prefix
  // then pins the cookie to this host and path /.
  const secure = (req: FastifyRequest) => httpsOnly || req.protocol === 'https';
  const sessionCookieName = (isSecure: boolean) => (isSecure ? '__Host-portico_session' : 'portico_session');
  const cookies = (req: FastifyRequest) => parseCookies(req.headers.cookie);
  const sessionValue = (req: FastifyRequest): string | undefined => {
    const c = cookies(req);
    return c['__Host-portico_session'] ?? c['portico_session'];
  };
  const assertSameOrigin = (req: FastifyRequest) => {
    const origin = req.headers.origin;
    if (origin === undefined) return;
    const own = [new URL(web.publicUrl).origin, `${req.protocol}://${req.headers.host}`];
    if (!own.includes(origin)) throw new AppError('csrf_failed', msg('csrf_other_site'));
  };
  const currentSession = async (req: FastifyRequest): Promise<Session> => {
    const value = sessionValue(req);
    if (value === undefined) throw new AppError('unauthorized');
    const session = await sessions.get(value);
    if (!session) throw new AppError('session_expired');
    return session;
  };
  return {
    sessions,
    oidc: d.oidc,
    page: d.page,
    httpsOnly,
    secure,
    sessionCookieName,
    cookies,
    sessionValue,
    setSessionCookie(req, reply, value, session) {
      const s = secure(req);
      reply.header(
        'set-cookie',
        serializeCookie(sessionCookieName(s), value, { httpOnly: true, secure: s, sameSite: 'strict', path: '/', maxAge: session.expiresAt - Math.floor(Date.now() / 1000) }),
      );
    },
    clearSessionCookie(req, reply) {
      const s = secure(req);
      reply.header('set-cookie', serializeCookie(sessionCookieName(s), '', { httpOnly: true, secure: s, sameSite: 'strict', path: '/', maxAge: 0 }));
    },
    assertSameOrigin,
    currentSession,
    async authenticatePortal(req) {
      if (req.headers.authorization !== undefined) return d.jwt.verify(bearerToken(req));
      const session = await currentSession(req);
      if (!SAFE_METHODS.has(req.method)) {
        assertSameOrigin(req);
        if (!csrfMatches(req.headers['x-csrf-token'], session.csrfToken)) throw new AppError('csrf_failed');
      }
      await d.onSessionUser?.(session.principal);
      return session.principal;
    },
  };
}

export { SessionSchema } from './schemas.js';

export const sessionView = (s: Session) => ({
  user_id: s.principal.userId,
  org_roles: s.principal.orgRoles,
  method: s.method,
  created_at: s.createdAt,
  expires_at: s.expiresAt,
  csrf_token: s.csrfToken,
});

/** Sends a page asset: its validators, and the best encoding the client takes. */
export function sendAsset(req: FastifyRequest, reply: FastifyReply, a: Asset, cacheControl: string) {
  reply.header('content-type', a.type).header('cache-control', cacheControl).header('etag', a.etag).header('vary', 'accept-encoding');
  if (req.headers['if-none-match'] === a.etag) return reply.code(304).send();
  const enc = pickEncoding(req.headers['accept-encoding'], a);
  if (enc) reply.header('content-encoding', enc);
  return reply.send(enc === 'br' ? a.br : enc === 'gzip' ? a.gzip : a.body);
}

/** Back to the sign-in screen, which says what went wrong (an OpenID Connect sign-in that could not be made). */
export function backToSignIn(reply: FastifyReply, error: string) {
  return reply.redirect(`/signin?error=${error}`, 303);
}
