/**
 * The HTTP application: Fastify with Portico's request ids, body parsing, error rendering per route group,
 * the OpenAPI document, and the authentication gate of each group. Feature modules bring their routes; this
 * file mounts them in the group they name (src/platform/module.ts).
 */
import type { Socket } from 'node:net';
import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest, type FastifyServerOptions } from 'fastify';
import { randomUUID } from 'node:crypto';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import websocket from '@fastify/websocket';
import '../platform/http/types.js';
import type { Logger } from '../platform/log.js';
import { AppError, ERRORS, msg, type ErrorCode } from '../platform/errors.js';
import { lazySerializers, lazyValidatorCompiler } from '../platform/http/validation.js';
import { invalidJson, OFF_THREAD_BYTES, parseJsonBody, parseSmallJsonBody, readLargeJson, takeLargeJson } from '../platform/http/json-body.js';
import { workUnderWay } from '../platform/reclaim.js';
import { openAIErrorBody, sendAnthropicError, sendOpenAIError, sendPortalError } from '../platform/http/errors.js';
import { errorResponses } from '../platform/http/error-schemas.js';
import { AllowedMethods } from '../platform/http/allowed-methods.js';
import type { Metrics } from '../platform/ops/metrics.js';
import type { RequestLogRow } from '../platform/ops/request-log.js';
import { RequestFacts } from '../platform/ops/facts.js';
import type { Tracing } from '../platform/ops/tracing.js';
import type { FeatureModule, RouteGroup } from '../platform/module.js';
import type { UserPrincipal } from '../platform/auth/jwt.js';
import type { KeyPrincipal, OperatorPrincipal } from '../platform/auth/principal.js';
import type { HttpLimits, TrustProxy } from '../platform/config.js';
import { fastifyTrustProxy } from '../platform/http/proxy.js';
import { capConnectionsPerAddress } from '../platform/http/address-cap.js';
import { releaseWhenEnded } from '../platform/http/held.js';
import { KEY_SUBPROTOCOL } from '../platform/http/auth.js';
import { createLimitedServer } from '../platform/http/early.js';
import http from 'node:http';

/** How each kind of caller is recognized; the runtime builds these from the JWT verifier, the key verifier, limits and budgets. */
export interface Gate {
  /** a portal user (JWT bearer) */
  user(req: FastifyRequest): Promise<UserPrincipal>;
  /** an operator of the installation (/v1/admin); unset: every operator route answers 401 */
  operator?(req: FastifyRequest): Promise<OperatorPrincipal>;
  /** an inference key, allowed to call this route now (scope, rate limit, budget) */
  key(req: FastifyRequest): Promise<KeyPrincipal>;
  /**
   * takes one of the key's concurrent places for a {base_url} request (a WebSocket: for the socket's life), or throws
   * 429; gives the release, called once when the request ends (unset: no per-key concurrency)
   */
  hold?(key: KeyPrincipal): () => void;
}

export interface HttpOptions {
  log: Logger;
  metrics: Metrics;
  gate: Gate;
  modules: readonly FeatureModule[];
  /**
   * the route scopes the modules declared (src/compose/declarations.ts): a {base_url} route that needs another is
   * refused when it is added (no key could be given its scope)
   */
  routeScopes?: readonly string[];
  /** on close, keep connections with a running stream open (the caller bounds the wait) */
  gracefulClose?: boolean;
  /** time limits and the connection cap (config.http); unset in tests that build the app alone: Node's defaults */
  limits?: HttpLimits;
  /** the server to serve on, already listening (startServer's early server: src/platform/http/early.ts) */
  serverFactory?: (handler: http.RequestListener) => http.Server;
  /** WebSocket upgrades (the Responses WebSocket mode): the largest frame read, and what closes the sockets at shutdown */
  websocket?: { maxPayload: number; preClose?: () => Promise<void> };
  /** the request log (src/platform/ops/request-log.ts): a row for every {base_url} request whose key was known */
  requestLog?: { add(row: RequestLogRow): void };
  /** OpenTelemetry traces (src/platform/ops/tracing-otel.ts); unset: off, and no hook of it runs */
  tracing?: Tracing;
  /** how long a request whose client left waits for its work before it is written (default CLIENT_CLOSED_WAIT_MS) */
  clientClosedWaitMs?: number;
  /** TRUST_PROXY: whose X-Forwarded-For makes `req.ip` (src/platform/http/proxy.ts); unset: the socket's peer */
  trustProxy?: TrustProxy;
  /**
   * the cap on connections per client address (limits.maxConnectionsPerAddress): `exempt` names addresses it does
   * not count (a trusted proxy's, which carries every client's connections); default none
   */
  perAddress?: { exempt?: (address: string) => boolean };
}

/**
 * A Node server that bounds what one client can hold (docs/security.md): the headers within HEADERS_TIMEOUT_MS,
 * the whole request within REQUEST_TIMEOUT_MS (a client that sends part of a body and stops is cut; an answer
 * being streamed is not, since the request was complete), idle keep-alive connections closed after
 * KEEPALIVE_TIMEOUT_MS, and at most MAX_CONNECTIONS open. Node checks the two request timeouts on a timer:
 * every second here instead of its default 30 s, so a slow client is cut close to the limit.
 */
function limitedServer(l: HttpLimits) {
  return (handler: http.RequestListener) => createLimitedServer(l, handler);
}

/**
 * What Node's HTTP parser refuses before there is a request (the server's `clientError`: headers over
 * maxHeaderSize, bytes that are not HTTP, a request that did not arrive within HEADERS_TIMEOUT_MS or
 * REQUEST_TIMEOUT_MS) is answered in the OpenAI error shape with `connection: close`, as every other error, instead
 * of Node's empty 431/400/408 or Fastify's own `{"error","message","statusCode"}`. No request was read, so
 * there is no Accept-Language: English. Nothing is written when part of an answer already went out on the
 * socket (it would corrupt that answer), nor when the client is gone.
 */
function answerClientError(log: Logger, err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const code: ErrorCode =
    err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 'request_timeout' : err.code === 'HPE_HEADER_OVERFLOW' ? 'request_header_fields_too_large' : 'malformed_request';
  log.debug({ err }, `client error: ${code}`);
  const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (!socket.writable || inFlight?.headersSent) {
    socket.destroy();
    return;
  }
  const status = ERRORS[code].status;
  const body = JSON.stringify(openAIErrorBody(new AppError(code)));
  socket.write(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
  // flushed, then closed (destroySoon: end, and destroy once the answer is written)
  (socket as Socket & { destroySoon(): void }).destroySoon();
}

/**
 * After a refusal from the headers (below), the rest of the request's body is read and dropped for at most this
 * many bytes and this long, and no longer than this without a byte (nginx's "lingering close").
 */
export const LINGER = { maxBytes: 8 * 1024 * 1024, maxMs: 10_000, idleMs: 2_000 } as const;

/**
 * Runs a credential check in onRequest, before any of the body is read. When it refuses a request that has a
 * body, the answer says `connection: close` and goes at once; the connection then lingers (lingerAfterAnswer):
 * what the client still sends of its body is read and dropped, within LINGER, before the socket closes. Most
 * clients read the answer only once they have sent their body; cut at once, they got EPIPE instead of the 401
 * that says why (11 of 30 clients sending 5 MB with a bad key). A client without credentials still cannot keep
 * the connection busy: it is closed past those bounds, and it never carries another request.
 */
async function beforeBody<T>(req: FastifyRequest, reply: FastifyReply, check: () => Promise<T>): Promise<T> {
  try {
    return await check();
  } catch (e) {
    const h = req.headers;
    if ((h['content-length'] !== undefined && h['content-length'] !== '0') || h['transfer-encoding'] !== undefined) {
      reply.header('connection', 'close');
      lingerAfterAnswer(req.raw);
    }
    throw e;
  }
}

/**
 * Node closes a `connection: close` socket as soon as the answer is written (socket.destroySoon), which resets a
 * client still sending its body. Here the answer is followed by a half-close (FIN) and the socket stays open for
 * reading until the body has come (the request's parser drops it) or LINGER is used up; then it is destroyed.
 */
function lingerAfterAnswer(req: FastifyRequest['raw']): void {
  const socket = req.socket as (Socket & { destroySoon?: () => void }) | null;
  if (!socket || socket.destroyed) return;
  socket.destroySoon = function (this: Socket) {
    if (this.writable) this.end();
    const start = this.bytesRead;
    let last = start;
    const t0 = Date.now();
    let moved = t0;
    const timer = setInterval(() => {
      const now = Date.now();
      const read = this.bytesRead;
      if (read !== last) {
        last = read;
        moved = now;
      }
      if (req.complete || this.destroyed || read - start > LINGER.maxBytes || now - t0 > LINGER.maxMs || now - moved > LINGER.idleMs) {
        clearInterval(timer);
        this.destroy();
      }
    }, 50);
    timer.unref();
    this.once('close', () => clearInterval(timer));
  };
}

const REQUEST_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;

type ValidatorFactory = NonNullable<NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>['buildValidator']>;

/** the path of a request's URL, without its query */
const pathOf = (req: FastifyRequest) => req.url.split('?')[0] ?? req.url;
/** the URLs answered in the portal's envelope: {portal_base_url} and the operators' /v1/admin */
const ENVELOPED = /^\/v1\/(portal|admin)(\/|\?|$)/;
/** the outcome of a request whose client closed the connection before its answer was finished (status 499) */
export const CLIENT_CLOSED = 'client_closed';
/** how long, at most, a request whose client left waits for its work to stop before it is written */
export const CLIENT_CLOSED_WAIT_MS = 10_000;

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
    // route validators and response serializers compile at a route's first use, or after `serve` listens
    // (compileDeferred), not while the app gets ready (src/platform/http/validation.ts). Given here rather than by
    // setValidatorCompiler, Fastify does not load its own Ajv compiler only to have it replaced.
    // (Fastify types buildValidator as @fastify/ajv-compiler's factory; it calls whatever it gets with the route, as
    // it calls setValidatorCompiler's compiler)
    schemaController: { compilersFactory: { buildValidator: (() => lazyValidatorCompiler) as unknown as ValidatorFactory, buildSerializer: lazySerializers() } },
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 200 },
    // errors the router raises before any route runs, in the shape of the route group the URL belongs to
    frameworkErrors: (err, req, reply) => {
      const e =
        err.code === 'FST_ERR_MAX_PARAM_LENGTH'
          ? new AppError('uri_too_long', msg('path_param_too_long', { max: 200 }))
          : new AppError('validation_error', msg('malformed_url', { reason: err.message }));
      reply.header('x-request-id', req.id);
      return (ENVELOPED.test(req.url) ? sendPortalError : sendOpenAIError)(e, req, reply);
    },
    // production (startServer) lets running streams finish within the grace period; tests close at once
    forceCloseConnections: opts.gracefulClose ? 'idle' : true,
    trustProxy: fastifyTrustProxy(opts.trustProxy),
    clientErrorHandler: (err, socket) => answerClientError(opts.log, err, socket),
    ...(opts.limits
      ? { requestTimeout: opts.limits.requestTimeoutMs, keepAliveTimeout: opts.limits.keepAliveTimeoutMs, serverFactory: opts.serverFactory ?? limitedServer(opts.limits) }
      : {}),
  }) as unknown as FastifyInstance;
  app.decorate('metrics', metrics);
  // one address may hold at most MAX_CONNECTIONS_PER_ADDRESS connections: more are destroyed as they come
  if (opts.limits?.maxConnectionsPerAddress) {
    capConnectionsPerAddress(app.server, {
      max: opts.limits.maxConnectionsPerAddress,
      exempt: opts.perAddress?.exempt,
      onRefused: () => metrics.rateLimited.inc({ reason: 'connections_per_address' }),
    });
  }
  // a wrong method on a known path is 405 with Allow, not 404 (each group answers it in its own error shape)
  const allowedMethods = new AllowedMethods();
  app.addHook('onRoute', (r) => allowedMethods.add(r));
  // the portal says `no route`, {base_url} what OpenAI says (`Invalid URL`)
  const notFound = (send: typeof sendPortalError, message: 'no_route' | 'invalid_url') => (req: FastifyRequest, reply: FastifyReply) => {
    const allow = allowedMethods.allowed(req.url);
    if (allow.length === 0) return send(new AppError('not_found', msg(message, { method: req.method, path: pathOf(req) })), req, reply);
    reply.header('allow', allow.join(', '));
    return send(new AppError('method_not_allowed', msg('method_not_allowed_on', { method: req.method, path: pathOf(req), allowed: allow.join(', ') })), req, reply);
  };

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
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (req, body, done) => {
    const buf = body as Buffer;
    // a large body read in blocks as it came (readLargeJson, the {base_url} group's preParsing hook: Fastify got none)
    const blocks = buf.length === 0 ? takeLargeJson(req) : undefined;
    if (!blocks && buf.length < OFF_THREAD_BYTES) {
      let value: unknown;
      try {
        value = parseSmallJsonBody(buf, parseSmall);
      } catch (e) {
        done(e instanceof AppError ? e : invalidJson(), undefined);
        return;
      }
      done(null, value);
      return;
    }
    const schema = req.routeOptions.schema?.body;
    parseJsonBody(blocks ?? buf, parseSmall, schema !== null && typeof schema === 'object' ? schema : undefined).then(
      (v) => done(null, v),
      (e: unknown) => done(e instanceof AppError ? e : invalidJson(), undefined),
    );
  });

  app.decorateRequest('facts', null as unknown as RequestFacts);
  const tracing = opts.tracing;
  const requestLog = opts.requestLog;
  const waitMs = opts.clientClosedWaitMs ?? CLIENT_CLOSED_WAIT_MS;

  /**
   * Writes what a request did, once: its line, its HTTP and per-model counts, its span. An answer that finished
   * is written from onResponse; a request whose client closed the connection first (Fastify never calls
   * onResponse for it) from the response's `close`, as status 499 (docs/operations.md, "Logs").
   */
  const finish = (req: FastifyRequest, status: number, ms: number) => {
    const f = req.facts;
    if (f) {
      if (f.ended) return;
      f.ended = true;
    }
    const route = req.routeOptions.url ?? 'unknown';
    metrics.httpRequest(req.method, route, status, ms / 1000);
    f?.routed(f.route);
    logRequest(req, route, status, ms);
    if (f?.model !== undefined) modelMetrics(metrics, f, ms);
    // the {base_url} gate sets the key: only its requests are in the request log
    if (requestLog && req.apiKey && f) requestLog.add(requestLogRow(req, f, route, status, ms));
    if (tracing && f?.span) {
      const attributes = spanAttributes(req, f);
      if (f.clientClosed) attributes['portico.outcome'] = CLIENT_CLOSED;
      tracing.end(f.span, { route, status, attributes, error: f.errorCode });
    }
  };

  /**
   * The response closed. After an answer that finished this is nothing (onResponse wrote the request). Before,
   * the client went away: the request is written as 499 once its work has stopped (the handler, and what its
   * service kept going after it: src/platform/ops/facts.ts), so that the line has what was charged; at most
   * CLIENT_CLOSED_WAIT_MS after the close, whatever still runs. Its `ms` is the time the client waited.
   */
  const onClosed = (req: FastifyRequest, reply: FastifyReply) => {
    const f = req.facts;
    if (reply.raw.writableFinished || f.ended) return;
    // an upgraded WebSocket: its connection writes a line per turn and one when it closes (src/responses/ws/)
    if (req.ws && reply.sent) return;
    f.clientClosed = true;
    const ms = reply.elapsedTime;
    const work = f.settled();
    if (work === undefined) return finish(req, 499, ms);
    let timer: NodeJS.Timeout | undefined;
    const capped = new Promise<void>((resolve) => (timer = setTimeout(resolve, waitMs).unref()));
    void Promise.race([work, capped]).then(() => {
      clearTimeout(timer);
      finish(req, 499, ms);
    });
  };

  // every handler's promise goes into its request's facts (what a request whose client left waits for), and a
  // handler whose client is already gone is not run: nothing is generated, or charged, for nobody
  app.addHook('onRoute', (r) => {
    const handler = r.handler;
    r.handler = function (this: FastifyInstance, req: FastifyRequest, reply: FastifyReply) {
      const f = req.facts;
      if (f?.clientClosed) throw new Error('client disconnected');
      const out = handler.call(this, req, reply) as unknown;
      if (f && out !== null && typeof out === 'object' && typeof (out as PromiseLike<unknown>).then === 'function') f.handling = out as PromiseLike<unknown>;
      return out;
    } as typeof handler;
  });

  // callback hooks where nothing is awaited: an async hook costs a promise and a turn of the microtask queue
  app.addHook('onRequest', (req, reply, done) => {
    req.facts = new RequestFacts();
    // a request in hand: the event loop's full collection after large work waits for a moment with none
    // (platform/reclaim.ts); not an upgrade (a WebSocket's response closes only with its session; req.ws is set by a
    // hook that runs after this one)
    const end = req.headers.upgrade === undefined ? workUnderWay() : undefined;
    reply.raw.on('close', () => {
      end?.();
      onClosed(req, reply);
    });
    reply.header('x-request-id', req.id);
    if (req.url.includes('%00')) done(new AppError('validation_error', msg('url_nul')));
    else done();
  });
  if (tracing) {
    // one server span per request (continuing an incoming traceparent), made active from the handler on so the
    // upstream calls made for the request are its children (src/platform/ops/tracing.ts)
    app.addHook('onRequest', (req, reply, done) => {
      req.facts.span = tracing.start(req.method, req.url.split('?')[0]!, req.headers);
      done();
    });
    app.addHook('preHandler', (req, reply, done) => {
      const span = req.facts.span;
      if (span) tracing.enter(span, done);
      else done();
    });
  }
  app.addHook('onResponse', (req, reply, done) => {
    finish(req, reply.statusCode, reply.elapsedTime);
    done();
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
          xApiKey: { type: 'apiKey', in: 'header', name: 'x-api-key', description: "inference key sk-..., as Anthropic's SDK sends it (the routes of Anthropic's wire only)" },
        },
      },
    },
  });
  // the API reference shares the page's origin (and its session cookie): it gets the page's protections, a CSP of
  // its own files only (Swagger UI needs no inline script; its page has one inline style element), no framing, no
  // type sniffing
  await app.register(async (scope) => {
    scope.addHook('onSend', (_req, reply, payload, done) => {
      reply.header('x-frame-options', 'DENY');
      reply.header('x-content-type-options', 'nosniff');
      reply.header('referrer-policy', 'no-referrer');
      done(null, payload);
    });
    await scope.register(swaggerUi, {
      routePrefix: '/docs',
      staticCSP:
        "default-src 'none'; script-src 'self'; script-src-attr 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; connect-src 'self'; " +
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'; object-src 'none'",
    });
  });
  // WebSocket upgrades go through the router and the hooks of their route like any request, so the {base_url} gate
  // (onRequest) refuses a bad key with a plain HTTP 401 before any upgrade. Registered at the root: an upgrade
  // request that does not end in an upgrade (refused, or a route without a WebSocket handler) has its socket closed
  // after the answer. A frame over maxPayload closes the connection with 1009 (it would have to be read whole).
  await app.register(websocket, {
    options: {
      maxPayload: opts.websocket?.maxPayload ?? 1024 * 1024,
      perMessageDeflate: false,
      // the subprotocol answered is the first the client offered that is no key (`realtime`): a browser's key in
      // `openai-insecure-api-key.<key>` is never echoed back in the answer's headers (which proxies may log)
      handleProtocols: (protocols: Set<string>) => [...protocols].find((p) => !p.startsWith(KEY_SUBPROTOCOL)) ?? false,
    },
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
  app.get('/openapi.json', { schema: { hide: true } }, async (_req, reply) => {
    reply.header('x-content-type-options', 'nosniff');
    return app.swagger();
  });

  const mount = async (scope: FastifyInstance, group: RouteGroup) => {
    for (const m of opts.modules) await m.routes[group]?.(scope);
  };

  // ------------------------------------------------------------ /
  await mount(app, 'root');

  // ------------------------------------------------------------ {portal_base_url}
  await app.register(
    async (portal) => {
      portal.setErrorHandler((err, req, reply) => sendPortalError(err, req, reply));
      portal.setNotFoundHandler(notFound(sendPortalError, 'no_route'));
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

  // ------------------------------------------------------------ /v1/admin (the operators' API)
  await app.register(
    async (admin) => {
      admin.setErrorHandler((err, req, reply) => sendPortalError(err, req, reply));
      admin.setNotFoundHandler(notFound(sendPortalError, 'no_route'));
      admin.addHook('onRoute', (r) => {
        if ((r.config?.auth ?? 'operator') === 'operator') r.schema = { ...(r.schema ?? {}), security: [{ portalJwt: [] }, { apiKey: [] }] };
        r.schema = { ...(r.schema ?? {}), response: { ...errorResponses('portal'), ...((r.schema?.response as object) ?? {}) } };
      });
      // credentials are checked from the headers, before the body is read (docs/security.md)
      admin.addHook('onRequest', async (req, reply) => {
        if ((req.routeOptions.config?.auth ?? 'operator') !== 'operator') return;
        req.operator = await beforeBody(req, reply, async () => {
          if (!gate.operator) throw new AppError('unauthorized');
          return gate.operator(req);
        });
      });
      await mount(admin, 'admin');
    },
    { prefix: '/v1/admin' },
  );

  // ------------------------------------------------------------ {base_url}
  await app.register(
    async (api) => {
      // a route that speaks Anthropic's wire answers in its shape (the key's refusals too: the gate runs in the route's hooks)
      api.setErrorHandler((err, req, reply) => (req.routeOptions.config?.wire === 'anthropic-api' ? sendAnthropicError : sendOpenAIError)(err, req, reply));
      api.setNotFoundHandler(notFound(sendOpenAIError, 'invalid_url'));
      api.addHook('onRoute', (r) => {
        const scope = r.config?.scope;
        if (scope !== undefined && opts.routeScopes && !opts.routeScopes.includes(scope)) {
          throw new Error(`${String(r.method)} ${r.url}: the route scope '${scope}' is declared by no module (FeatureModule.scope); declared: ${opts.routeScopes.join(', ')}`);
        }
        const anthropic = r.config?.wire === 'anthropic-api';
        if ((r.config?.auth ?? 'key') === 'key') r.schema = { ...(r.schema ?? {}), security: anthropic ? [{ apiKey: [] }, { xApiKey: [] }] : [{ apiKey: [] }] };
        r.schema = { ...(r.schema ?? {}), response: { ...errorResponses(anthropic ? 'anthropic' : 'openai'), ...((r.schema?.response as object) ?? {}) } };
      });
      // a large JSON body is read in blocks as it comes, not joined in one copy at its end (platform/http/json-body.ts)
      api.addHook('preParsing', (req, _reply, payload, done) => done(null, readLargeJson(req, payload)));
      // which deployment served, and whether retries or a fallback happened (a stream's are written with its
      // head: platform/http/sse.ts)
      api.addHook('onSend', (req, reply, payload, done) => {
        const h = req.facts?.routeHeaders();
        if (h !== undefined) reply.headers(h);
        done(null, payload);
      });
      await mount(api, 'api');
      // added after the modules so it runs after their onRequest hooks (CORS: a refused request still carries the
      // allow-origin header, so a browser app can read the error); Fastify builds a route's hooks when the scope
      // is ready, so the gate covers every route of the scope all the same
      api.addHook('onRequest', async (req, reply) => {
        // a CORS preflight never carries credentials (browsers send none): the CORS plugin answers it
        if (req.method === 'OPTIONS') return;
        if ((req.routeOptions.config?.auth ?? 'key') !== 'key') return;
        await beforeBody(req, reply, async () => {
          req.apiKey = await gate.key(req);
          // one of the key's concurrent places, until the request ends (a WebSocket: until it closes); over the
          // key's limit, 429 here, so a WebSocket is refused at its upgrade
          if (gate.hold) releaseWhenEnded(req, reply, gate.hold(req.apiKey));
        });
      });
    },
    { prefix: '/v1' },
  );

  app.setNotFoundHandler(notFound(sendOpenAIError, 'invalid_url'));
  app.setErrorHandler((err, req, reply) => sendOpenAIError(err, req, reply));
  return app;
}

const round = (ms: number) => Math.round(ms * 100) / 100;

/**
 * The one line each request leaves (docs/operations.md, "Logs"): what was asked, by whom (key id, user, org;
 * never the key), of which model and deployment, what it cost (tokens, characters, audio seconds in and out), how long the
 * engine or upstream took and how long Portico itself did, and an engine or upstream failure with the upstream's
 * status and (redacted) reason. A 5xx is logged at error level, a failure the client could act on (an upstream
 * 4xx or 429) at warn, the rest at info. Exported for bench/observability.ts.
 */
export function logRequest(req: FastifyRequest, route: string, status: number, ms: number): void {
  const f = req.facts as RequestFacts | null;
  // a level the logger leaves out (LOG_LEVEL warn or error): the line is not built (an object of a dozen fields
  // per request, for nothing)
  const lowest = status >= 500 ? 'error' : f?.upstreamError !== undefined ? 'warn' : 'info';
  if ((req.log as { isLevelEnabled?: (level: string) => boolean }).isLevelEnabled?.(lowest) === false) return;
  const key = req.apiKey;
  const line: Record<string, unknown> = {
    method: req.method,
    // the route's pattern (/v1/responses/:id): never the ids or the query string of the URL itself
    route: route === 'unknown' ? req.url.split('?')[0] : route,
    status,
    ms: round(ms),
    key_id: key?.keyId,
    user_id: key?.userId ?? req.user?.userId,
    org_id: key?.orgId,
  };
  let level: 'info' | 'warn' | 'error' = status >= 500 ? 'error' : 'info';
  if (f?.clientClosed) line.outcome = CLIENT_CLOSED;
  if (f) {
    if (f.model !== undefined) {
      line.model = f.model;
      line.deployment = f.deployment;
      if (f.inputTokens || f.outputTokens) {
        line.tokens_in = f.inputTokens;
        line.tokens_out = f.outputTokens;
      }
      if (f.characters) line.characters = f.characters;
      if (f.audioSeconds) line.audio_seconds = Math.round(f.audioSeconds * 1000) / 1000;
      if (f.outputAudioSeconds) line.audio_seconds_out = Math.round(f.outputAudioSeconds * 1000) / 1000;
      if (f.upstreamMs !== undefined) {
        line.upstream_ms = round(f.upstreamMs);
        line.portico_ms = round(Math.max(0, ms - f.upstreamMs));
      }
      if (f.ttftMs !== undefined) line.ttft_ms = round(f.ttftMs);
      if (f.retries) line.retries = f.retries;
      if (f.fallback !== undefined) line.fallback = f.fallback;
    }
    if (f.errorCode !== undefined) line.error = f.errorCode;
    if (f.upstreamError !== undefined) {
      line.upstream_status = f.upstreamStatus;
      line.upstream_error = f.upstreamError;
      if (level === 'info') level = 'warn';
    }
  }
  req.log[level](line, 'request');
}

const roundOrNull = (ms: number | undefined) => (ms === undefined ? null : round(ms));

/**
 * A {base_url} request's row of the request log, from its facts: who (key, user, org), what (route, operation,
 * model, deployment), how it ended (status, the client's error code and message), how long (the whole, the first
 * output from the request's start, the engine), what it was charged, and the response stored for it.
 */
export function requestLogRow(req: FastifyRequest, f: RequestFacts, route: string, status: number, ms: number): RequestLogRow {
  const key = req.apiKey!;
  return {
    request_id: req.id,
    created_at: Math.floor(f.receivedAt / 1000),
    received_at_ms: f.receivedAt,
    key_id: key.keyId,
    user_id: key.userId,
    org_id: key.orgId,
    method: req.method,
    route: route === 'unknown' ? req.url.split('?')[0]!.slice(0, 200) : route,
    operation: f.operation ?? req.routeOptions.config?.scope ?? 'other',
    model: f.model ?? null,
    deployment: f.deployment ?? null,
    status: f.clientClosed ? 499 : status,
    error_code: f.errorCode ?? (f.clientClosed ? CLIENT_CLOSED : null),
    error_message: f.errorMessage ?? null,
    latency_ms: round(ms),
    ttft_ms: roundOrNull(f.firstOutputMs()),
    engine_ms: roundOrNull(f.upstreamMs),
    input_tokens: f.inputTokens,
    output_tokens: f.outputTokens,
    characters: f.characters,
    audio_seconds: f.audioSeconds,
    output_audio_seconds: f.outputAudioSeconds,
    cost_micros: f.costMicros,
    response_id: f.responseId ?? null,
  };
}

/** The per-model series of a request that reached a model (src/platform/ops/metrics.ts). Exported for bench/observability.ts. */
export function modelMetrics(metrics: Metrics, f: RequestFacts, ms: number): void {
  const deployment = f.deployment ?? 'unknown';
  const s = metrics.modelSeries(f.model!, deployment);
  s.requests.inc();
  s.duration.observe(ms / 1000);
  if (f.ttftMs !== undefined) s.ttft.observe(f.ttftMs / 1000);
  if (f.upstreamMs !== undefined) s.upstream.observe(f.upstreamMs / 1000);
  if (f.inputTokens) s.tokensIn.inc(f.inputTokens);
  if (f.outputTokens) s.tokensOut.inc(f.outputTokens);
  if (f.clientClosed) s.clientClosed.inc();
  const type = f.errorCode ?? (f.upstreamError !== undefined ? 'engine_error' : undefined);
  if (type !== undefined) metrics.modelErrors.inc({ model: f.model!, deployment, type });
}

/** What a request's span carries besides the HTTP attributes (no credentials: the key's id, never the key). */
function spanAttributes(req: FastifyRequest, f: RequestFacts): Record<string, string | number | undefined> {
  const key = req.apiKey;
  return {
    'portico.request_id': req.id,
    'portico.model': f.model,
    'portico.deployment': f.deployment,
    // what the answer's x-portico-retries and x-portico-fallback say (docs/models.md, "What the client is told")
    'portico.retries': f.route?.deployment !== undefined ? f.retries : undefined,
    'portico.fallback': f.fallback,
    'portico.key_id': key?.keyId,
    'portico.user_id': key?.userId ?? req.user?.userId,
    'portico.org_id': key?.orgId,
    'gen_ai.usage.input_tokens': f.inputTokens || undefined,
    'gen_ai.usage.output_tokens': f.outputTokens || undefined,
    'portico.upstream_ms': f.upstreamMs,
    'portico.ttft_ms': f.ttftMs,
    'portico.upstream_status': f.upstreamStatus,
    'portico.upstream_error': f.upstreamError,
  };
}
