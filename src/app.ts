import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { randomUUID } from 'node:crypto';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import './platform/http/types.js';
import type { Config } from './platform/config.js';
import { openDb, type OpenedDb } from './platform/db/index.js';
import { createJwtVerifier, type JwtVerifier } from './platform/auth/jwt.js';
import { AppError } from './platform/errors.js';
import { validatorCompiler } from './platform/http/validation.js';
import { sendOpenAIError, sendPortalError } from './platform/http/errors.js';
import { bearerToken } from './platform/http/auth.js';
import { KeyStore } from './portal/keys/store.js';
import { KeyService } from './portal/keys/service.js';
import { KeyVerifier } from './portal/keys/verifier.js';
import { registerKeyRoutes } from './portal/keys/routes/index.js';
import { registerQueryRoutes } from './portal/query/routes.js';
import { UsageStore } from './portal/usage/store.js';
import { UsageService } from './portal/usage/service.js';
import { loadModelConfig, type ModelSpec } from './models/config.js';
import { ModelRegistry } from './models/registry.js';
import { registerModelRoutes } from './api/models.js';
import { assertRouteScope } from './api/scopes.js';
import { EngineRegistry } from './engines/registry.js';
import { ResponseStore } from './responses/store.js';
import { ResponsesService } from './responses/service.js';
import pino from 'pino';
import { createFeed, type ChangeFeed } from './platform/cluster/feed.js';
import { Metrics } from './platform/ops/metrics.js';
import { registerOpsRoutes } from './platform/ops/routes.js';
import { RateLimiter, createWindowStore } from './platform/cluster/limits.js';
import { BudgetGuard } from './portal/usage/budget.js';
import { UsageJournal } from './portal/usage/journal.js';
import { withDefaultAudioModels } from './audio/models.js';
import { registerAudioEngines } from './audio/engines.js';
import { closeSpareEncoders } from './audio/codec/index.js';
import { BullQueue } from './responses/queue.js';

/** Everything a request handler may use; built once per process. */
export interface Services {
  config: Config;
  db: OpenedDb;
  jwt: JwtVerifier;
  managementKeys: KeyService;
  inferenceKeys: KeyService;
  verifier: KeyVerifier;
  usage: UsageService;
  models: ModelRegistry;
  engines: EngineRegistry;
  responses: ResponsesService;
  feed: ChangeFeed;
  metrics: Metrics;
  limiter: RateLimiter;
  budget: BudgetGuard;
  /** closers run at shutdown, last registered first */
  closers: Array<() => Promise<void>>;
}

export interface ServiceOptions {
  /** PostgreSQL schema of its own (tests) */
  dbSchema?: string;
  /** models instead of the PORTICO_CONFIG file (tests) */
  models?: ModelSpec[];
}

export async function createServices(config: Config, opts: ServiceOptions = {}): Promise<Services> {
  const models = new ModelRegistry(opts.models ?? withDefaultAudioModels(loadModelConfig(config.modelConfigPath).models));
  const db = await openDb({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, inMemory: config.inMemoryDb, schema: opts.dbSchema });
  try {
    await db.migrate();
  } catch (e) {
    await db.close();
    throw e;
  }
  const keyStore = new KeyStore(db.db);
  const verifier = new KeyVerifier(keyStore, config.keyPepper, config.keyCacheFreshMs, config.lastUsedWriteIntervalMs);
  const managementKeys = new KeyService('management', keyStore, config.keyPepper, config.limits.activeManagementKeys, config.jwt.adminRole);
  const inferenceKeys = new KeyService('inference', keyStore, config.keyPepper, config.limits.activeInferenceKeys, config.jwt.adminRole);
  const log = pino({ level: config.logLevel });
  const feed = createFeed({ redisUrl: config.redisUrl, databaseUrl: config.databaseUrl, log });
  // a key change drops the cached verification here at once and, through the feed, on every other instance
  feed.subscribe('keys', (m) => typeof m.digest === 'string' && verifier.invalidateDigest(m.digest));
  for (const s of [managementKeys, inferenceKeys]) {
    s.onChange((c) => {
      verifier.invalidateDigest(c.digest);
      if (c.what !== 'created') feed.publish('keys', { digest: c.digest }).catch((e) => log.warn({ err: (e as Error).message }, 'key change not broadcast; other instances see it within the cache freshness window'));
    });
  }
  const engines = new EngineRegistry();
  const audioEngines = registerAudioEngines(engines, models);
  const usage = new UsageService(new UsageStore(db.db), config.inMemoryDb ? undefined : new UsageJournal(config.dataDir));
  await usage.recover().catch((e) => log.warn({ err: (e as Error).message }, 'usage journal not shipped yet; it will be retried'));
  const windows = createWindowStore(config.redisUrl);
  const services: Services = {
    config,
    engines,
    responses: new ResponsesService({
      store: new ResponseStore(db.db),
      models,
      engines,
      usage,
      log,
      feed,
      backgroundConcurrency: config.backgroundConcurrency,
      queue: config.redisUrl ? new BullQueue(config.redisUrl, config.backgroundConcurrency, log) : undefined,
    }),
    db,
    jwt: createJwtVerifier(config.jwt),
    managementKeys,
    inferenceKeys,
    verifier,
    usage,
    models,
    feed,
    metrics: new Metrics(),
    limiter: new RateLimiter(windows, config.rateLimits),
    budget: new BudgetGuard(usage, config.billingEnabled),
    closers: [],
  };
  // background jobs: heartbeats and the sweep of jobs whose instance stopped (on PGlite nothing else can run them)
  if (db.driver === 'pglite') await services.responses.failOrphans();
  await services.responses.startMaintenance(config.backgroundStaleMs);
  usage.onRecord((e) => {
    services.budget.charged(e.key);
    const tokens = (e.inputTokens ?? 0) + (e.outputTokens ?? 0);
    if (tokens > 0) {
      const k = e.key as { keyId: string; rpmLimit?: number | null; tpmLimit?: number | null };
      services.limiter.addTokens({ keyId: k.keyId, rpmLimit: k.rpmLimit ?? null, tpmLimit: k.tpmLimit ?? null }, tokens).catch(() => {});
    }
    const m = services.metrics;
    if (e.inputTokens) m.tokens.inc({ model: e.model, direction: 'input' }, e.inputTokens);
    if (e.outputTokens) m.tokens.inc({ model: e.model, direction: 'output' }, e.outputTokens);
    if (e.audioSeconds) m.audioSeconds.inc({ model: e.model, operation: e.operation }, e.audioSeconds);
    if (e.characters) m.characters.inc({ model: e.model }, e.characters);
  });
  // closed last first: background jobs, then engines, then the feed and the database
  services.closers.push(() => db.close(), () => usage.close(), () => windows.close(), () => feed.close(), () => engines.close(), () => audioEngines.close(), async () => closeSpareEncoders(), () => services.responses.close());
  return services;
}

export async function closeServices(s: Services) {
  for (const c of [...s.closers].reverse()) {
    try {
      await c();
    } catch {
      // keep closing the rest
    }
  }
}

/** a JSON \\u0000 escape that is not itself escaped (an odd number of backslashes before u0000) */
const NUL_ESCAPE = /(?<!\\)(?:\\\\)*\\u0000/;
const REQUEST_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;

export interface AppOptions {
  logger?: FastifyServerOptions['logger'];
  /** on close, keep connections with a running stream open (the caller bounds the wait) */
  gracefulClose?: boolean;
  /** features registered by later modules (responses, audio) under {base_url} */
  apiPlugins?: Array<(app: FastifyInstance, services: Services) => Promise<void> | void>;
}

/** Builds the HTTP application on ready services. */
export async function buildApp(services: Services, opts: AppOptions = {}): Promise<FastifyInstance> {
  const { config } = services;
  const app = Fastify({
    logger: opts.logger ?? {
      level: config.logLevel,
      redact: { paths: ['req.headers.authorization', 'req.headers.cookie', 'req.body'], remove: true },
    },
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
  });
  app.setValidatorCompiler(validatorCompiler);
  app.decorate('metrics', services.metrics);

  // bodies are JSON (multipart only where audio uploads are taken): a text/plain body is 415, not a string
  app.removeContentTypeParser('text/plain');
  // JSON parser: an empty body is "no body" (so a POST without one gets the route's own message)
  const defaultJson = app.getDefaultJsonParser('error', 'error');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    if (body === '' || (typeof body === 'string' && body.trim() === '')) return done(null, undefined);
    // PostgreSQL text cannot hold NUL: refuse it up front instead of failing at storage
    if (NUL_ESCAPE.test(body as string)) return done(new AppError('validation_error', 'request body must not contain NUL characters (\\u0000)'), undefined);
    defaultJson(req, body as string, (err: Error | null, v?: unknown) => {
      if (err) return done(new AppError('invalid_json', 'request body is not valid JSON'), undefined);
      done(null, v);
    });
  });

  app.addHook('onRequest', async (req, reply) => {
    reply.header('x-request-id', req.id);
    if (req.url.includes('%00')) throw new AppError('validation_error', 'the URL must not contain NUL characters (%00)');
  });
  const { metrics } = services;
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
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  registerOpsRoutes(app, services);

  // ------------------------------------------------------------ {portal_base_url}
  await app.register(
    async (portal) => {
      portal.setErrorHandler((err, req, reply) => sendPortalError(err, req, reply));
      portal.setNotFoundHandler((req, reply) => sendPortalError(new AppError('not_found', `no route ${req.method} ${req.url.split('?')[0]}`), req, reply));
      // key management: JWT bearer on every operation
      await portal.register(async (keys) => {
        keys.addHook('onRoute', (r) => {
          r.schema = { ...(r.schema ?? {}), security: [{ portalJwt: [] }] };
        });
        keys.addHook('preValidation', async (req) => {
          req.user = await services.jwt.verify(bearerToken(req));
        });
        registerKeyRoutes(keys, { service: services.managementKeys, base: '/management/api-keys', tag: 'Management API Keys' });
        registerKeyRoutes(keys, { service: services.inferenceKeys, base: '/api-keys', tag: 'Inference API Keys' });
      });
      registerQueryRoutes(portal, { jwt: services.jwt, verifier: services.verifier, usage: services.usage, adminRole: config.jwt.adminRole });
    },
    { prefix: '/v1/portal' },
  );

  // ------------------------------------------------------------ {base_url}
  await app.register(
    async (api) => {
      api.setErrorHandler((err, req, reply) => sendOpenAIError(err, req, reply));
      api.setNotFoundHandler((req, reply) =>
        sendOpenAIError(new AppError('not_found', `Invalid URL (${req.method} ${req.url.split('?')[0]})`), req, reply),
      );
      api.addHook('onRoute', (r) => {
        if (!r.config?.public) r.schema = { ...(r.schema ?? {}), security: [{ apiKey: [] }] };
      });
      api.addHook('preValidation', async (req) => {
        if (req.routeOptions.config?.public) return;
        const key = await services.verifier.verify(bearerToken(req), 'inference');
        assertRouteScope(key, req.routeOptions.config?.scope);
        req.apiKey = key;
        if (services.limiter.applies(key)) {
          try {
            await services.limiter.check(key);
          } catch (e) {
            services.metrics.rateLimited.inc({ reason: 'rate_limit' });
            throw e;
          }
        }
        if (services.budget.enabled) {
          try {
            await services.budget.check(key);
          } catch (e) {
            services.metrics.rateLimited.inc({ reason: 'quota' });
            throw e;
          }
        }
      });
      registerModelRoutes(api, services.models);
      for (const p of opts.apiPlugins ?? []) await p(api, services);
    },
    { prefix: '/v1' },
  );

  app.setNotFoundHandler((req, reply) => sendOpenAIError(new AppError('not_found', `Invalid URL (${req.method} ${req.url.split('?')[0]})`), req, reply));
  app.setErrorHandler((err, req, reply) => sendOpenAIError(err, req, reply));
  return app;
}
