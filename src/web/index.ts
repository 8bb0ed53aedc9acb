import { join } from 'node:path';
import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import helmet from '@fastify/helmet';
import cors from '@fastify/cors';
import type { WebConfig } from '../platform/config.js';
import type { Db } from '../platform/db/index.js';
import type { JwtVerifier, UserPrincipal } from '../platform/auth/jwt.js';
import { bearerToken } from '../platform/http/auth.js';
import { AppError, msg } from '../platform/errors.js';
import { envelope, ok } from '../platform/http/portal-envelope.js';
import { packageRoot } from '../platform/paths.js';
import type { ModelRegistry } from '../models/registry.js';
import type { KeyService } from '../portal/keys/service.js';
import { registerMeRoutes } from '../portal/me/routes.js';
import { WebSessionStore } from './store.js';
import { SessionService, csrfMatches, type Session } from './sessions.js';
import { OidcError, OidcSignIn } from './oidc.js';
import { loadPageAssets, pickEncoding, type Asset } from './assets.js';
import { parseCookies, serializeCookie } from './cookies.js';

export interface WebDeps {
  config: { web: WebConfig; keyPepper: Buffer; jwt: { orgRolesClaim: string; adminRole: string } };
  db: Db;
  /** verifies portal bearer JWTs (scripts keep using them beside the page's session) */
  jwt: JwtVerifier;
  managementKeys: KeyService;
  inferenceKeys: KeyService;
  models: ModelRegistry;
  log: FastifyBaseLogger;
  /** the built page (default: dist/web under the package root) */
  pageDir?: string;
}

export interface WebModule {
  name: 'web';
  /**
   * Who calls a portal route: the bearer JWT when an Authorization header is sent (as before), else the page's
   * session cookie. A cookie-authenticated request that changes state (not GET/HEAD/OPTIONS) must also carry the
   * session's CSRF token in `x-csrf-token`.
   */
  authenticatePortal(req: FastifyRequest): Promise<UserPrincipal>;
  routes: {
    /** the page under `/` (HTML, hashed assets, security headers) and the OpenID Connect redirects under /auth/oidc */
    root(app: FastifyInstance): Promise<void>;
    /** {portal_base_url}: /session (the page's session), /session/link, /session/methods, /me */
    portal(app: FastifyInstance): Promise<void>;
    /** {base_url}: CORS for browser apps, when CORS_ORIGINS is set */
    api(app: FastifyInstance): Promise<void>;
  };
  close(): Promise<void>;
}

/** Paths that answer the page (its router shows the screen); the API keeps every other path. */
export const PAGE_PATHS = ['/', '/signin', '/keys', '/usage', '/playground'];
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
const OIDC_COOKIE = 'portico_oidc';

export function createWebModule(deps: WebDeps): WebModule {
  const { web } = deps.config;
  const httpsOnly = web.publicUrl.startsWith('https:');
  const sessions = new SessionService(new WebSessionStore(deps.db), deps.config.keyPepper, Math.round(web.sessionTtlMs / 1000));
  const oidc = web.oidc ? new OidcSignIn(web.oidc, deps.config.jwt.orgRolesClaim, deps.config.keyPepper) : undefined;
  const pageDir = deps.pageDir ?? join(packageRoot(), 'dist', 'web');
  const page = loadPageAssets(pageDir);
  if (!page.index) deps.log.warn({ dir: pageDir }, 'the web page is not built (run npm run build); / answers 503 until it is');

  // Secure cookies when people reach Portico over https (PUBLIC_URL, or the request itself); the __Host- prefix
  // then pins the cookie to this host and path /.
  const secure = (req: FastifyRequest) => httpsOnly || req.protocol === 'https';
  const sessionCookieName = (isSecure: boolean) => (isSecure ? '__Host-portico_session' : 'portico_session');
  const cookies = (req: FastifyRequest) => parseCookies(req.headers.cookie);
  const sessionValue = (req: FastifyRequest): string | undefined => {
    const c = cookies(req);
    return c['__Host-portico_session'] ?? c['portico_session'];
  };
  const setSessionCookie = (req: FastifyRequest, reply: FastifyReply, value: string, session: Session) => {
    const s = secure(req);
    reply.header(
      'set-cookie',
      serializeCookie(sessionCookieName(s), value, { httpOnly: true, secure: s, sameSite: 'strict', path: '/', maxAge: session.expiresAt - Math.floor(Date.now() / 1000) }),
    );
  };
  const clearSessionCookie = (req: FastifyRequest, reply: FastifyReply) => {
    const s = secure(req);
    reply.header('set-cookie', serializeCookie(sessionCookieName(s), '', { httpOnly: true, secure: s, sameSite: 'strict', path: '/', maxAge: 0 }));
  };
  // a state-changing request from another origin is refused even before the CSRF token is looked at
  const assertSameOrigin = (req: FastifyRequest) => {
    const origin = req.headers.origin;
    if (origin === undefined) return;
    const own = [new URL(web.publicUrl).origin, `${req.protocol}://${req.headers.host}`];
    if (!own.includes(origin)) throw new AppError('csrf_failed', msg('csrf_other_site'));
  };

  async function currentSession(req: FastifyRequest): Promise<Session> {
    const value = sessionValue(req);
    if (value === undefined) throw new AppError('unauthorized');
    const session = await sessions.get(value);
    if (!session) throw new AppError('session_expired');
    return session;
  }

  async function authenticatePortal(req: FastifyRequest): Promise<UserPrincipal> {
    if (req.headers.authorization !== undefined) return deps.jwt.verify(bearerToken(req));
    const session = await currentSession(req);
    if (!SAFE_METHODS.has(req.method)) {
      assertSameOrigin(req);
      if (!csrfMatches(req.headers['x-csrf-token'], session.csrfToken)) throw new AppError('csrf_failed');
    }
    return session.principal;
  }

  const sessionView = (s: Session) => ({
    user_id: s.principal.userId,
    org_roles: s.principal.orgRoles,
    method: s.method,
    created_at: s.createdAt,
    expires_at: s.expiresAt,
    csrf_token: s.csrfToken,
  });
  const SessionSchema = Type.Object({
    user_id: Type.String(),
    org_roles: Type.Record(Type.String(), Type.String()),
    method: Type.Union([Type.Literal('link'), Type.Literal('oidc')]),
    created_at: Type.Integer(),
    expires_at: Type.Integer(),
    csrf_token: Type.String({ description: 'send it as x-csrf-token on every state-changing portal request made with the session cookie' }),
  });

  function sendAsset(req: FastifyRequest, reply: FastifyReply, a: Asset, cacheControl: string) {
    reply.header('content-type', a.type).header('cache-control', cacheControl).header('etag', a.etag).header('vary', 'accept-encoding');
    if (req.headers['if-none-match'] === a.etag) return reply.code(304).send();
    const enc = pickEncoding(req.headers['accept-encoding'], a);
    if (enc) reply.header('content-encoding', enc);
    return reply.send(enc === 'br' ? a.br : enc === 'gzip' ? a.gzip : a.body);
  }

  return {
    name: 'web',
    authenticatePortal,
    routes: {
      async root(app) {
        await app.register(async (scope) => {
          await scope.register(helmet, {
            contentSecurityPolicy: {
              useDefaults: false,
              directives: {
                defaultSrc: ["'none'"],
                scriptSrc: ["'self'"],
                styleSrc: ["'self'"],
                imgSrc: ["'self'", 'data:'],
                fontSrc: ["'self'"],
                connectSrc: ["'self'"],
                // played speech and recorded audio are blob: URLs made by the page
                mediaSrc: ["'self'", 'blob:'],
                manifestSrc: ["'self'"],
                formAction: ["'self'"],
                frameAncestors: ["'none'"],
                baseUri: ["'none'"],
                objectSrc: ["'none'"],
                ...(httpsOnly ? { upgradeInsecureRequests: [] } : {}),
              },
            },
            frameguard: { action: 'deny' },
            referrerPolicy: { policy: 'no-referrer' },
            crossOriginResourcePolicy: { policy: 'same-origin' },
            // HSTS only means something over https; on plain http it would be ignored anyway
            strictTransportSecurity: httpsOnly ? { maxAge: 31_536_000, includeSubDomains: false } : false,
          });
          scope.addHook('onSend', async (_req, reply) => {
            reply.header('permissions-policy', 'microphone=(self), camera=(), geolocation=(), payment=(), usb=(), interest-cohort=()');
          });
          const index = async (req: FastifyRequest, reply: FastifyReply) => {
            if (!page.index) return reply.code(503).type('text/plain; charset=utf-8').send('The web page is not built: run npm run build, then restart Portico.\n');
            // the HTML names the hashed assets: always revalidated, so a new build is picked up at once
            return sendAsset(req, reply, page.index, 'no-cache');
          };
          for (const p of PAGE_PATHS) scope.get(p, { schema: { hide: true } }, index);
          scope.get('/assets/:file', { schema: { hide: true } }, async (req, reply) => {
            const a = page.files.get((req.params as { file: string }).file);
            if (!a) return reply.code(404).type('text/plain; charset=utf-8').send('not found\n');
            // names carry the content's hash: cached for a year, never revalidated
            return sendAsset(req, reply, a, 'public, max-age=31536000, immutable');
          });

          const back = (reply: FastifyReply, error: string) => reply.redirect(`/signin?error=${error}`, 303);
          scope.get('/auth/oidc/login', { schema: { hide: true } }, async (req, reply) => {
            if (!oidc) return back(reply, 'oidc_off');
            try {
              const { url, sealed } = await oidc.start();
              reply.header('set-cookie', serializeCookie(OIDC_COOKIE, sealed, { httpOnly: true, secure: secure(req), sameSite: 'lax', path: '/auth/oidc', maxAge: 600 }));
              reply.header('cache-control', 'no-store');
              return reply.redirect(url, 303);
            } catch (e) {
              req.log.warn({ err: (e as Error).message }, 'OpenID Connect sign-in could not start');
              return back(reply, 'oidc_unavailable');
            }
          });
          scope.get('/auth/oidc/callback', { schema: { hide: true } }, async (req, reply) => {
            if (!oidc) return back(reply, 'oidc_off');
            const q = req.url.indexOf('?');
            // the transaction is over either way: its cookie goes
            reply.header('set-cookie', serializeCookie(OIDC_COOKIE, '', { httpOnly: true, secure: secure(req), sameSite: 'lax', path: '/auth/oidc', maxAge: 0 }));
            reply.header('cache-control', 'no-store');
            let principal: UserPrincipal;
            try {
              principal = await oidc.finish(q >= 0 ? req.url.slice(q + 1) : '', cookies(req)[OIDC_COOKIE]);
            } catch (e) {
              req.log.warn({ err: (e as Error).message }, 'OpenID Connect sign-in failed');
              return back(reply, e instanceof OidcError ? 'oidc_failed' : 'oidc_unavailable');
            }
            const { value, session } = await sessions.create(principal, 'oidc');
            const s = secure(req);
            reply.header('set-cookie', [
              serializeCookie(OIDC_COOKIE, '', { httpOnly: true, secure: s, sameSite: 'lax', path: '/auth/oidc', maxAge: 0 }),
              serializeCookie(sessionCookieName(s), value, { httpOnly: true, secure: s, sameSite: 'strict', path: '/', maxAge: session.expiresAt - Math.floor(Date.now() / 1000) }),
            ]);
            // the code and state leave the address bar with this redirect
            return reply.redirect('/keys', 303);
          });
        });
      },

      async portal(app) {
        const r = app.withTypeProvider<TypeBoxTypeProvider>();
        const tags = ['Web session'];
        // these answer people who are not signed in yet, or look at the session cookie themselves
        const none = { auth: 'none' as const };
        r.get(
          '/session/methods',
          {
            config: none,
            schema: {
              tags,
              summary: 'How a person can sign in to the page (no authentication)',
              response: { 200: envelope(Type.Object({ link: Type.Boolean(), oidc: Type.Boolean(), oidc_login_url: Type.Union([Type.String(), Type.Null()]) })) },
            },
          },
          async (req) => ok(req, { link: true, oidc: oidc !== undefined, oidc_login_url: oidc ? '/auth/oidc/login' : null }),
        );
        r.get(
          '/session',
          { config: none, schema: { tags, summary: "The page's session (session cookie): the user, its expiry and its CSRF token", response: { 200: envelope(SessionSchema) } } },
          async (req, reply) => {
            reply.header('cache-control', 'no-store');
            return ok(req, sessionView(await currentSession(req)));
          },
        );
        r.post(
          '/session/link',
          {
            config: none,
            schema: {
              tags,
              summary: 'Sign in with a sign-in link (portico login): starts a session, sets its HttpOnly cookie',
              body: Type.Object({ token: Type.String({ minLength: 1, maxLength: 4096 }) }, { additionalProperties: false }),
              response: { 200: envelope(SessionSchema) },
            },
          },
          async (req, reply) => {
            assertSameOrigin(req);
            const { value, session } = await sessions.redeemLink(req.body.token);
            setSessionCookie(req, reply, value, session);
            reply.header('cache-control', 'no-store');
            return ok(req, sessionView(session));
          },
        );
        r.delete(
          '/session',
          {
            config: none,
            schema: {
              tags,
              summary: 'Sign out: ends the session (x-csrf-token required) and clears its cookie',
              response: { 200: envelope(Type.Object({ signed_out: Type.Boolean() })) },
            },
          },
          async (req, reply) => {
            const value = sessionValue(req);
            const session = value === undefined ? undefined : await sessions.get(value);
            if (session) {
              assertSameOrigin(req);
              if (!csrfMatches(req.headers['x-csrf-token'], session.csrfToken)) throw new AppError('csrf_failed');
              await sessions.destroy(value!);
            }
            clearSessionCookie(req, reply);
            return ok(req, { signed_out: session !== undefined });
          },
        );
        registerMeRoutes(app, {
          authenticate: authenticatePortal,
          managementKeys: deps.managementKeys,
          inferenceKeys: deps.inferenceKeys,
          models: deps.models,
          adminRole: deps.config.jwt.adminRole,
        });
      },

      async api(app) {
        if (web.corsOrigins.length === 0) return;
        const any = web.corsOrigins[0] === '*';
        const options = {
          origin: any ? '*' : web.corsOrigins,
          methods: ['GET', 'HEAD', 'POST', 'DELETE', 'OPTIONS'],
          // API keys travel in the Authorization header; cookies are never used on {base_url}
          credentials: false,
          exposedHeaders: [
            'x-request-id',
            'x-portico-deployment',
            'x-portico-retries',
            'x-portico-fallback',
            'retry-after',
            'retry-after-ms',
            'x-ratelimit-limit',
            'x-ratelimit-remaining',
            'x-ratelimit-reset',
          ],
          maxAge: 600,
          strictPreflight: true,
        };
        await app.register(cors, {
          // the plugin's OPTIONS route matches /v1/portal/... too: the portal is for the page on Portico's own origin
          delegator: (req, cb) => cb(null, req.url.startsWith('/v1/portal') ? { origin: false } : options),
        });
      },
    },
    async close() {},
  };
}
