/**
 * The HTTP application: Fastify with Portico's request ids, body parsing, error rendering per route group,
 * the OpenAPI document, and the authentication gate of each group. Feature modules bring their routes; this
 * file mounts them in the group they name (src/platform/module.ts).
 */
import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { randomUUID } from 'node:crypto';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import websocket from '@fastify/websocket';
import '../platform/http/types.js';
import type { Logger } from '../platform/log.js';
import { AppError } from '../platform/errors.js';
import { validatorCompiler } from '../platform/http/validation.js';
import { invalidJson, parseJsonBody } from '../platform/http/json-body.js';
import { sendOpenAIError, sendPortalError } from '../platform/http/errors.js';
import { errorResponses } from '../platform/http/error-schemas.js';
import type { Metrics } from '../platform/ops/metrics.js';
import type { FeatureModule, RouteGroup } from '../platform/module.js';
import type { UserPrincipal } from '../platform/auth/jwt.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { HttpLimits } from '../platform/config.js';
import http from 'node:http';

/** How each kind of caller is recognized; the runtime builds these from the JWT verifier, the key verifier, limits and budgets. */
export interface Gate {
  /** a portal user (JWT bearer) */
  user(req: FastifyRequest): Promise<UserPrincipal>;
  /** an inference key, allowed to call this route now (scope, rate limit, budget) */
  key(req: FastifyRequest): Promise<KeyPrincipal>;
}

export interface HttpOptions {
  log: Logger;
  metrics: Metrics;
  gate: Gate;
  modules: readonly FeatureModule[];
  /** on close, keep connections with a running stream open (the caller bounds the wait) */
  gracefulClose?: boolean;
  /** time limits and the connection cap (config.http); unset in tests that build the app alone: Node's defaults */
  limits?: HttpLimits;
  /** WebSocket upgrades (the Responses WebSocket mode): the largest frame read, and what closes the sockets at shutdown */
  websocket?: { maxPayload: number; preClose?: () => Promise<void> };
}

/**
 * A Node server that bounds what one client can hold (docs/security.md): the headers within HEADERS_TIMEOUT_MS,
 * the whole request within REQUEST_TIMEOUT_MS (a client that sends part of a body and stops is cut; an answer
 * being streamed is not, since the request was complete), idle keep-alive connections closed after
 * KEEPALIVE_TIMEOUT_MS, and at most MAX_CONNECTIONS open. Node checks the two request timeouts on a timer:
 * every second here instead of its default 30 s, so a slow client is cut close to the limit.
 */
function limitedServer(l: HttpLimits) {
  return (handler: http.RequestListener) => {
    const server = http.createServer(
      { connectionsCheckingInterval: 1000, requestTimeout: l.requestTimeoutMs, headersTimeout: l.headersTimeoutMs, keepAliveTimeout: l.keepAliveTimeoutMs },
      handler,
    );
    server.maxConnections = l.maxConnections;
    return server;
  };
}

/**
 * Runs a credential check in onRequest, before any of the body is read. When it refuses a request that has a
 * body, the answer closes the connection: the body is never read, so the connection cannot carry another
 * request, and a client without credentials cannot keep it busy sending megabytes nobody reads.
 */
async function beforeBody<T>(req: FastifyRequest, reply: FastifyReply, check: () => Promise<T>): Promise<T> {
  try {
    return await check();
  } catch (e) {
    const h = req.headers;
    if ((h['content-length'] !== undefined && h['content-length'] !== '0') || h['transfer-encoding'] !== undefined) reply.header('connection', 'close');
    throw e;
  }
}

const REQUEST_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;

export async function buildHttp(opts: HttpOptions): Promise<FastifyInstance> {
  const { metrics, gate } = opts;
  const app = Fastify({
    loggerInstance: opts.log,
    // one line per request, written in onResponse below
    logController: new LogController({ disableRequestLogging: true }),
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID_RE.test(given) ? given : `req_${randomUUID().replace(/-/g, '')}`;
    },
    bodyLimit: 1024 * 1024,
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 200 },
    // errors the router raises before any route runs, in the shape of the route group the URL belongs to
    frameworkErrors: (err, req, reply) => {
      const e =
        err.code === 'FST_ERR_MAX_PARAM_LENGTH'
          ? new AppError('uri_too_long', 'a path parameter is longer than 200 characters')
          : new AppError('validation_error', `malformed URL: ${err.message}`);
      reply.header('x-request-id', req.id);
      return (req.url.startsWith('/v1/portal') ? sendPortalError : sendOpenAIError)(e, req, reply);
    },
    // production (startServer) lets running streams finish within the grace period; tests close at once
    forceCloseConnections: opts.gracefulClose ? 'idle' : true,
    ...(opts.limits ? { requestTimeout: opts.limits.requestTimeoutMs, keepAliveTimeout: opts.limits.keepAliveTimeoutMs, serverFactory: limitedServer(opts.limits) } : {}),
  }) as unknown as FastifyInstance;
  app.setValidatorCompiler(validatorCompiler);
  app.decorate('metrics', metrics);

  // bodies are JSON (multipart only where audio uploads are taken): a text/plain body is 415, not a string
  app.removeContentTypeParser('text/plain');
  // JSON parser: an empty body is "no body" (so a POST without one gets the route's own message); NUL escapes are
  // refused up front (PostgreSQL text cannot hold NUL), and so are bodies past the shape limits; large bodies are
  // parsed in a worker thread, off the event loop (src/platform/http/json-body.ts)
  const defaultJson = app.getDefaultJsonParser('error', 'error');
  const parseSmall = (text: string) => {
    let out: unknown;
    let failed = false;
    defaultJson({} as FastifyRequest, text, (err: Error | null, v?: unknown) => {
      failed = err !== null;
      out = v;
    });
    if (failed) throw invalidJson();
    return out;
  };
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => {
    parseJsonBody(body as Buffer, parseSmall).then(
      (v) => done(null, v),
      (e: unknown) => done(e instanceof AppError ? e : invalidJson(), undefined),
    );
  });

  app.addHook('onRequest', async (req, reply) => {
    reply.header('x-request-id', req.id);
    if (req.url.includes('%00')) throw new AppError('validation_error', 'the URL must not contain NUL characters (%00)');
  });
  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url ?? 'unknown';
    metrics.requests.inc({ method: req.method, route, status: reply.statusCode });
    metrics.latency.observe({ method: req.method, route }, reply.elapsedTime / 1000);
    req.log.info({ method: req.method, url: req.routeOptions.url ?? req.url.split('?')[0], status: reply.statusCode, ms: Math.round(reply.elapsedTime * 100) / 100 }, 'request');
  });

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Portico',
        version: '1',
        description: 'Management API Keys portal ({portal_base_url} = /v1/portal) and OpenAI-compatible endpoints ({base_url} = /v1).',
      },
      components: {
        securitySchemes: {
          portalJwt: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
          apiKey: { type: 'http', scheme: 'bearer', description: 'inference key sk-... (or a Management API Key mk-... on the query APIs)' },
        },
      },
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  // WebSocket upgrades go through the router and the hooks of their route like any request, so the {base_url} gate
  // (onRequest) refuses a bad key with a plain HTTP 401 before any upgrade. Registered at the root: an upgrade
  // request that does not end in an upgrade (refused, or a route without a WebSocket handler) has its socket closed
  // after the answer. A frame over maxPayload closes the connection with 1009 (it would have to be read whole).
  await app.register(websocket, {
    options: { maxPayload: opts.websocket?.maxPayload ?? 1024 * 1024, perMessageDeflate: false },
    preClose: async () => {
      await opts.websocket?.preClose?.();
      for (const c of app.websocketServer.clients) c.terminate();
    },
    // protocol errors (bad frames, oversize, invalid UTF-8) are closed by ws itself with the right code
    errorHandler: (err, socket, req) => {
      req.log.debug({ err: err.message }, 'websocket error');
      if (socket.readyState === socket.OPEN) socket.terminate();
    },
  });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  const mount = async (scope: FastifyInstance, group: RouteGroup) => {
    for (const m of opts.modules) await m.routes[group]?.(scope);
  };

  // ------------------------------------------------------------ /
  await mount(app, 'root');

  // ------------------------------------------------------------ {portal_base_url}
  await app.register(
    async (portal) => {
      portal.setErrorHandler((err, req, reply) => sendPortalError(err, req, reply));
      portal.setNotFoundHandler((req, reply) => sendPortalError(new AppError('not_found', `no route ${req.method} ${req.url.split('?')[0]}`), req, reply));
      portal.addHook('onRoute', (r) => {
        if ((r.config?.auth ?? 'user') === 'user') r.schema = { ...(r.schema ?? {}), security: [{ portalJwt: [] }] };
        r.schema = { ...(r.schema ?? {}), response: { ...errorResponses('portal'), ...((r.schema?.response as object) ?? {}) } };
      });
      // credentials are checked from the headers, before the body is read (docs/security.md)
      portal.addHook('onRequest', async (req, reply) => {
        if ((req.routeOptions.config?.auth ?? 'user') === 'user') req.user = await beforeBody(req, reply, () => gate.user(req));
      });
      await mount(portal, 'portal');
    },
    { prefix: '/v1/portal' },
  );

  // ------------------------------------------------------------ {base_url}
  await app.register(
    async (api) => {
      api.setErrorHandler((err, req, reply) => sendOpenAIError(err, req, reply));
      api.setNotFoundHandler((req, reply) => sendOpenAIError(new AppError('not_found', `Invalid URL (${req.method} ${req.url.split('?')[0]})`), req, reply));
      api.addHook('onRoute', (r) => {
        if ((r.config?.auth ?? 'key') === 'key') r.schema = { ...(r.schema ?? {}), security: [{ apiKey: [] }] };
        r.schema = { ...(r.schema ?? {}), response: { ...errorResponses('openai'), ...((r.schema?.response as object) ?? {}) } };
      });
      await mount(api, 'api');
      // added after the modules so it runs after their onRequest hooks (CORS: a refused request still carries the
      // allow-origin header, so a browser app can read the error); Fastify builds a route's hooks when the scope
      // is ready, so the gate covers every route of the scope all the same
      api.addHook('onRequest', async (req, reply) => {
        // a CORS preflight never carries credentials (browsers send none): the CORS plugin answers it
        if (req.method === 'OPTIONS') return;
        if ((req.routeOptions.config?.auth ?? 'key') === 'key') req.apiKey = await beforeBody(req, reply, () => gate.key(req));
      });
    },
    { prefix: '/v1' },
  );

  app.setNotFoundHandler((req, reply) => sendOpenAIError(new AppError('not_found', `Invalid URL (${req.method} ${req.url.split('?')[0]})`), req, reply));
  app.setErrorHandler((err, req, reply) => sendOpenAIError(err, req, reply));
  return app;
}
