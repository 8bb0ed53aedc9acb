import { join } from 'node:path';
import type { FastifyBaseLogger, FastifyInstance, FastifyRequest } from 'fastify';
import helmet from '@fastify/helmet';
import cors from '@fastify/cors';
import type { OperatorClaim, WebConfig } from '../platform/config.js';
import type { Db } from '../platform/db/index.js';
import type { JwtVerifier, UserPrincipal } from '../platform/auth/jwt.js';
import { packageRoot } from '../platform/paths.js';
import type { ModelRegistry } from '../models/registry.js';
import type { ModelSpec } from '../models/config.js';
import type { KeyService } from '../portal/keys/service.js';
import { registerMeRoutes } from '../portal/me/routes.js';
import { WebSessionStore } from './store.js';
import { SessionService } from './sessions.js';
import { OidcSignIn } from './oidc.js';
import { loadPageAssets } from './assets.js';
import { createWebContext } from './context.js';
import page from './routes/page.js';
import assets from './routes/assets.js';
import oidcLogin from './routes/oidc-login.js';
import oidcCallback from './routes/oidc-callback.js';
import sessionMethods from './routes/session-methods.js';
import sessionGet from './routes/session-get.js';
import sessionLink from './routes/session-link.js';
import sessionDelete from './routes/session-delete.js';

export interface WebDeps {
  config: { web: WebConfig; keyPepper: Buffer; jwt: { orgRolesClaim: string; adminRole: string; operatorClaim?: OperatorClaim } };
  db: Db;
  /** verifies portal bearer JWTs (scripts keep using them beside the page's session) */
  jwt: JwtVerifier;
  managementKeys: KeyService;
  inferenceKeys: KeyService;
  models: ModelRegistry;
  /** the voices a speech model speaks (GET /me lists them for the playground) */
  voices?: (model: ModelSpec) => readonly string[] | undefined;
  log: FastifyBaseLogger;
  /** the built page (default: dist/web under the package root) */
  pageDir?: string;
  /** told of each user a session recognizes (bearer tokens are told by `jwt`) */
  onSessionUser?: (user: UserPrincipal) => Promise<void>;
  /** the roles an operator set, in place of those the session's sign-in carried (roles Portico's own: src/portal/keys/members.ts) */
  orgRoles?: (user: UserPrincipal) => Promise<UserPrincipal>;
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

/** The web page's back end: the page and its sign-in under /, the session under {portal_base_url}, CORS on {base_url}. */
export function createWebModule(deps: WebDeps): WebModule {
  const { web } = deps.config;
  const pageDir = deps.pageDir ?? join(packageRoot(), 'dist', 'web');
  const ctx = createWebContext({
    web,
    jwt: deps.jwt,
    sessions: new SessionService(new WebSessionStore(deps.db), deps.config.keyPepper, Math.round(web.sessionTtlMs / 1000), deps.orgRoles),
    oidc: web.oidc ? new OidcSignIn(web.oidc, deps.config.jwt.orgRolesClaim, deps.config.keyPepper, deps.config.jwt.operatorClaim) : undefined,
    page: loadPageAssets(pageDir),
    onSessionUser: deps.onSessionUser,
  });
  if (!ctx.page.index) deps.log.warn({ dir: pageDir }, 'the web page is not built (run npm run build); / answers 503 until it is');
  const { httpsOnly } = ctx;

  return {
    name: 'web',
    authenticatePortal: ctx.authenticatePortal,
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
          page(scope, ctx);
          assets(scope, ctx);
          oidcLogin(scope, ctx);
          oidcCallback(scope, ctx);
        });
      },

      async portal(app) {
        // these answer people who are not signed in yet, or look at the session cookie themselves
        sessionMethods(app, ctx);
        sessionGet(app, ctx);
        sessionLink(app, ctx);
        sessionDelete(app, ctx);
        registerMeRoutes(app, {
          authenticate: ctx.authenticatePortal,
          managementKeys: deps.managementKeys,
          inferenceKeys: deps.inferenceKeys,
          models: deps.models,
          voices: deps.voices,
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
          // the plugin's OPTIONS route matches /v1/portal/... and /v1/admin/... too: they are for the page on Portico's own origin
          delegator: (req, cb) => cb(null, /^\/v1\/(portal|admin)(\/|\?|$)/.test(req.url) ? { origin: false } : options),
        });
      },
    },
    async close() {},
  };
}
