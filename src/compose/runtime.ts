/**
 * The serving runtime, built on the core: engines, key verification and its cache, limits and budgets,
 * metrics, the background queue and its worker and sweeps, the feature modules and the HTTP application.
 * Only `portico serve` (and the tests and benchmarks) build it.
 *
 * A new feature is a module (src/platform/module.ts) built here from explicit dependencies and added to the
 * list given to buildHttp (one line): what it declares (its key scope, usage operations, priced units) is
 * collected from that list and handed to the layers below; a new provider is one line in src/engines/providers.ts.
 */
import { hostname } from 'node:os';
import { trustedProxyCheck } from '../platform/http/proxy.js';
import type { FastifyInstance } from 'fastify';
import type { Core } from './core.js';
import { buildHttp, type Gate, type HttpOptions } from './http.js';
import { createJwtVerifier, type JwtVerifier } from '../platform/auth/jwt.js';
import { inferenceKeyToken } from '../platform/http/auth.js';
import { createWebModule } from '../web/index.js';
import { ConcurrencyLimiter, createWindowStore, RateLimiter } from '../platform/cluster/limits.js';
import { Admission } from '../api/admission.js';
import { RequestLog } from '../platform/ops/request-log.js';
import { Metrics } from '../platform/ops/metrics.js';
import { createOpsModule } from '../platform/ops/routes.js';
import type { Tracing } from '../platform/ops/tracing.js';
import type { FastifyRequest } from 'fastify';
import type { FeatureModule } from '../platform/module.js';
import { closeSpareEncoders } from '../codec/index.js';
import { EngineRegistry } from '../engines/registry.js';
import { PROVIDERS } from '../engines/providers.js';
import { ModelRegistry } from '../models/registry.js';
import { Router } from '../models/router/index.js';
import { HealthChecks } from '../models/router/checks.js';
import type { ReloadResult } from '../models/reload.js';
import { KeyVerifier } from '../portal/keys/verifier.js';
import { ClientSecrets, isClientSecret } from '../portal/keys/client-secrets.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import { AppError, msg } from '../platform/errors.js';
import { createKeysModule } from '../portal/keys/module.js';
import { createQueryModule } from '../portal/query/routes.js';
import type { BudgetGuard } from '../portal/usage/budget.js';
import { RouteScopes } from '../api/scopes.js';
import { Metering } from '../api/metering.js';
import { Prices } from '../models/pricing.js';
import { checkPricing, ModelConfigError } from '../models/config.js';
import type { TextEngineSource } from '../engines/registry.js';
import type { FastifyBaseLogger } from 'fastify';
import { collectDeclarations, type Declared } from './declarations.js';
import { createModelsModule } from '../api/models.js';
import { createResponsesModule, type ResponsesModule } from '../responses/module.js';
import { ResponseStore } from '../responses/store.js';
import { AudioEngines } from '../audio/engines.js';
import { tableVoices } from '../audio/voices.js';
import { keepModels } from './models.js';
import { defaultAudioModels } from '../audio/models.js';
import { createAudioModule } from '../audio/module.js';
import { AnswerSpeakerService } from '../audio/answer-speaker.js';
import { voicesOf } from '../audio/service.js';
import { createChatModule } from '../chat/module.js';
import { createMessagesModule } from '../messages/module.js';
import { createRealtimeModule } from '../realtime/module.js';
import { defaultRealtimeModels } from '../realtime/service.js';
import { PcmListenerService } from '../audio/pcm-listener.js';
import { closeVoiceActivity, createVoiceActivityDetector, voiceActivityExpected, voiceActivityStatus } from '../engines/shared/vad/index.js';
import { createEmbeddingsModule } from '../embeddings/module.js';
import { createAdminModule } from '../admin/module.js';
import { StoredModels, StoredModelStore } from '../models/stored.js';
import { SecretBox } from '../platform/secrets.js';

export interface Runtime {
  readonly core: Core;
  readonly app: FastifyInstance;
  /** the configured models and the built-in audio models */
  readonly models: ModelRegistry;
  readonly engines: EngineRegistry;
  /** the text and embeddings engines as features get them: each model's deployments, retries and fallbacks */
  readonly router: Router;
  /** the active health checks of the deployments that have one */
  readonly checks: HealthChecks;
  readonly audioEngines: AudioEngines;
  readonly jwt: JwtVerifier;
  readonly verifier: KeyVerifier;
  readonly limiter: RateLimiter;
  /** requests and open WebSockets per inference key, in this process (KEY_MAX_CONCURRENCY, a key's max_concurrency) */
  readonly concurrency: ConcurrencyLimiter;
  readonly budget: BudgetGuard;
  readonly metrics: Metrics;
  /** OpenTelemetry traces, when a collector is configured (OTEL_EXPORTER_OTLP_ENDPOINT) */
  readonly tracing?: Tracing;
  /** the request log: a row per {base_url} request (the admin API's requests) */
  readonly requestLog: RequestLog;
  /** the Prometheus text of this process (gauges refreshed) */
  scrape(): Promise<string>;
  readonly responses: ResponsesModule;
  /** what the feature modules declared: the route scopes, the usage operations, the priced units */
  readonly declared: Declared;
  /**
   * Reads the model file (PORTICO_CONFIG) again: checked whole, then applied at once to new requests while
   * requests in flight finish on what they started with; a file the check refuses changes nothing (one error
   * line). SIGHUP, `portico models reload` and the file watch (PORTICO_CONFIG_WATCH) call it.
   */
  reloadModels(reason: string): Promise<ReloadResult>;
  /**
   * Stops the modules' work (running background jobs get `graceMs`), the engines and shared connections. The
   * HTTP application is closed by its owner (startServer or the test helper) first; the core after.
   */
  close(graceMs?: number): Promise<void>;
}

export interface RuntimeOptions {
  /** on close, keep connections with a running stream open (the caller bounds the wait) */
  gracefulClose?: boolean;
  /** worker threads per embedded speech engine (default 2) */
  ttsPoolSize?: number;
  /**
   * the voices each embedded speech engine's workers speak with before they report ready, per provider (default:
   * the voices of the built-in table, tableVoices(); `{ espeak: [] }`: none, for tests whose apps use a voice or
   * two and would pay espeak-ng's warm-up of all six, ~2 s of CPU, for each app)
   */
  speechWarmVoices?: Partial<Record<string, readonly string[]>>;
  /**
   * modules added after the built-in ones (tests): a module, or a factory given what every feature may use (a
   * feature of a test fixture, built like the built-in ones)
   */
  extraModules?: Array<FeatureModule | ((deps: FeatureDeps) => FeatureModule)>;
  /** false: only the configured models, without the built-in audio models (tests that list models) */
  builtinModels?: boolean;
  /** false: do not serve the models pulled into MODELS_DIR (default true) */
  pulledModels?: boolean;
  /** false: load embedded models on their first request instead of in the background at start (default true) */
  warmUp?: boolean;
  /** how long a request whose client left waits for its work before it is written (default CLIENT_CLOSED_WAIT_MS; tests) */
  clientClosedWaitMs?: number;
  /** serve on this server, already listening (startServer's early server) */
  serverFactory?: HttpOptions['serverFactory'];
  /** how a budget's soft-limit webhook is posted (default: fetch; tests) */
  postWebhook?: (url: string, body: unknown) => Promise<void>;
  /** the most request-log rows waiting in memory (default REQUEST_LOG_MAX_BUFFERED; tests) */
  requestLogMaxBuffered?: number;
  /** how long a request-log row may wait for its batch (tests) */
  requestLogDelayMs?: number;
}

/** What the runtime gives every feature module it builds (each takes the part it names). */
export interface FeatureDeps {
  models: ModelRegistry;
  /** the text and embeddings engines, routed (deployments, retries, fallbacks) */
  engines: TextEngineSource;
  /** prices and records usage (src/api/metering.ts) */
  metering: Metering;
  log: FastifyBaseLogger;
  /** reservations at admission (billing, TPM limits) */
  admission: Admission;
}

export async function createRuntime(core: Core, opts: RuntimeOptions = {}): Promise<Runtime> {
  const { config, log } = core;
  const closers: Array<(graceMs: number) => Promise<void>> = [];
  const closing = (c: (graceMs: number) => Promise<void>) => closers.push(c);
  const close = async (graceMs = 0) => {
    for (const c of closers.splice(0).reverse()) {
      try {
        await c(graceMs);
      } catch (e) {
        log.warn({ err: (e as Error).message }, 'closing failed; closing the rest');
      }
    }
  };
  try {
    const metrics = new Metrics();
    // a row per {base_url} request, written in batches off the request path; closed last (closers run in reverse),
    // after the HTTP application and the modules' work, so a graceful stop writes every request's row
    const requestLog = new RequestLog(core.db.db, {
      maxBuffered: opts.requestLogMaxBuffered,
      delayMs: opts.requestLogDelayMs,
      onDropped: (n) => metrics.requestLogDropped.inc(n),
      log,
    });
    closing(() => requestLog.close());
    // the rows older than PORTICO_REQUEST_LOG_DAYS go, at start and every hour
    if (config.requestLogDays > 0) {
      const prune = () =>
        void requestLog.prune(config.requestLogDays).then(
          (n) => n > 0 && log.debug({ rows: n }, 'request log: old rows removed'),
          (e: unknown) => log.warn({ err: (e as Error).message }, 'request log: old rows not removed; tried again in an hour'),
        );
      const pruner = setInterval(prune, 3_600_000);
      pruner.unref();
      closing(async () => clearInterval(pruner));
      prune();
    }
    // the OpenTelemetry SDK is loaded only when a collector is configured: without one, tracing costs nothing
    let tracing: Tracing | undefined;
    if (config.tracing) {
      const { OtelTracing } = await import('../platform/ops/tracing-otel.js');
      const t = new OtelTracing({ ...config.tracing, instanceId: config.workerId ? `worker-${config.workerId}` : undefined });
      tracing = t;
      closing(() => t.close());
      log.info({ collector: config.tracing.url.replace(/\/\/[^@/]*@/, '//***@') }, 'tracing: spans are sent to the OTLP collector');
    }
    const verifyJwt = createJwtVerifier(config.jwt, log);
    // every verified token also tells who administers which organization now (org keys follow it)
    const jwt: JwtVerifier = {
      async verify(token) {
        const members = core.keys.members;
        const user = members ? await members.apply(await verifyJwt.verify(token)) : await verifyJwt.verify(token);
        await core.keys.roles.sync(user);
        // the first user of a fresh embedded install becomes an operator (one flag read after that)
        await core.operators.seen(user);
        return user;
      },
    };
    // client secrets (ek_...) minted from a key, for browsers: sealed under a key derived from KEY_PEPPER
    const clientSecrets = new ClientSecrets(config.keyPepper);
    const verifier = new KeyVerifier(
      core.keys.store,
      config.keyPepper,
      config.keyCacheFreshMs,
      config.lastUsedWriteIntervalMs,
      undefined,
      // PGlite is this process's own: every key change drops the cached entry at once, so no request need wait
      // for the database to read a known key again
      core.db.driver === 'pglite',
    );
    // a key change drops the cached verification here at once and, through the feed, on every other instance
    core.feed.subscribe('keys', (m) => {
      if (typeof m.digest !== 'string') return;
      if (m.created === true) verifier.noteCreated(m.digest);
      else verifier.invalidateDigest(m.digest);
    });
    for (const s of [core.keys.management, core.keys.inference]) s.onChange((c) => (c.what === 'created' ? verifier.noteCreated(c.digest) : verifier.invalidateDigest(c.digest)));
    // the keys that exist, read once (subscribed first, so a key made meanwhile is not missed): only unknown keys
    // are ever throttled
    const known = await verifier.loadKnown();
    if (!known.complete) log.warn({ keys: known.keys }, 'more keys than the verifier holds in memory: the oldest may be throttled with forged ones');

    const providerCtx = {
      env: process.env,
      ttsPoolSize: opts.ttsPoolSize ?? 2,
      llamaGpu: config.llamaGpu,
      whisperTimeout: config.whisperTimeout,
      warmVoices: opts.speechWarmVoices ?? tableVoices(),
      log,
    };
    const engines = new EngineRegistry(PROVIDERS, providerCtx);
    closing(async () => {
      await engines.close();
      closeSpareEncoders();
      // the Silero worker thread, unless another app of this process has a session open (the realtime sessions of
      // this one closed before: closers run in reverse)
      await closeVoiceActivity();
    });
    const models = new ModelRegistry(core.models.list()).addDefaults(opts.builtinModels === false ? [] : [...defaultAudioModels(), ...defaultRealtimeModels()]);
    // the engines' code (undici's for an upstream) loads while the rest is built: no request pays for it
    const preloading = engines.preload(models.list());
    // breaker changes reach the other instances through the change feed (Redis pub/sub when REDIS_URL is set)
    const router = new Router({
      engines,
      models,
      share: core.feed,
      log,
      observe: {
        retry: (model, deployment) => metrics.modelRetries.inc({ model, deployment }),
        fallback: (model, deployment) => metrics.modelFallbacks.inc({ model, deployment }),
      },
    });
    // every breaker change is a log line and a count (openings by this instance's verdicts are logged with their
    // reason by the router itself)
    router.health.onChange((deployment, state, why) => {
      metrics.breakerChanges.inc({ deployment, state });
      if (state === 'closed') log.info({ deployment }, `circuit breaker of '${deployment}' closed`);
      else if (why === 'opened by another instance') log.info({ deployment }, `circuit breaker of '${deployment}' opened by another instance`);
    });
    // active health checks of the deployments that have one (off the request path)
    const checks = new HealthChecks(router, log);
    checks.sync(models.list());
    closing(async () => checks.close());
    const audioEngines = new AudioEngines(engines, models, config.audio);
    // usage is priced and recorded by one helper; its prices are what the modules declare, given once they are
    // built (below): a reloaded model file is checked against their units
    const metering = new Metering(core.usage);
    const kept = keepModels({
      models,
      engines,
      router,
      log,
      modelsDir: opts.pulledModels === false ? undefined : config.modelsDir,
      warmUp: opts.warmUp ?? true,
      file: config.modelConfigPath,
      env: process.env,
      units: () => metering.prices.units,
      onApplied: (layer, specs) => {
        if (layer === 'configured') core.models.setLayer('configured', specs);
        // the health checks follow the deployments the file and the stored models now have
        checks.sync(models.list());
      },
      watchFile: config.modelConfigWatch,
    });
    closing(async () => kept.close());
    // the models operators add through the admin API (the database, the same on every instance): read once the
    // features' priced units are known (below), then kept as every instance changes them (the change feed)
    const storedModels = new StoredModels({
      store: new StoredModelStore(core.db.db),
      box: new SecretBox(config.secretsKey.material),
      models,
      apply: (specs) => kept.setStored(specs),
      feed: core.feed,
      env: process.env,
      units: () => metering.prices.units,
      log,
      providers: PROVIDERS,
      ctx: providerCtx,
      engines,
    });

    if (core.redisPrefix) log.info({ redis_prefix: core.redisPrefix }, "redis: this installation's keys and channels start with its prefix");
    const windows = createWindowStore(config.redisUrl ? { url: config.redisUrl, prefix: core.redisPrefix! } : undefined);
    closing(() => windows.close());
    const limiter = new RateLimiter(windows, config.rateLimits);
    const concurrency = new ConcurrencyLimiter(config.keyMaxConcurrency);
    const budget = core.budget;
    // requests that generate reserve their worst case in the balance and the TPM window (src/api/admission.ts)
    const admission = new Admission(limiter, budget, {
      ...config.reservations,
      log,
      onRefused: (reason) => metrics.rateLimited.inc({ reason }),
      onAdmitted: (key) => verifier.markUsed(key),
    });
    core.usage.onRefused(() => metrics.usageRefused.inc());
    core.usage.onRecord((e) => {
      const tokens = (e.inputTokens ?? 0) + (e.outputTokens ?? 0);
      // a record that settles a reservation has put its tokens in the window already (Hold.take)
      if (tokens > 0 && !e.hold) {
        const k = e.key;
        limiter
          .addTokens({ keyId: k.keyId, rpmLimit: k.rpmLimit ?? null, tpmLimit: k.tpmLimit ?? null }, tokens)
          .catch((err) => log.debug({ err: (err as Error).message }, 'tokens not added to the rate-limit window'));
      }
      if (e.inputTokens || e.outputTokens) metrics.tokensUsed(e.model, e.inputTokens ?? 0, e.outputTokens ?? 0);
      if (e.audioSeconds) metrics.audioSeconds.inc({ model: e.model, operation: e.operation }, e.audioSeconds);
      if (e.characters) metrics.characters.inc({ model: e.model }, e.characters);
    });

    const responses = await createResponsesModule({
      store: new ResponseStore(core.db.db),
      models,
      engines: router,
      metering,
      log,
      feed: core.feed,
      backgroundConcurrency: config.backgroundConcurrency,
      // BullMQ only when there is Redis to run it on (loading it costs ~0.15 s of start-up)
      queue: config.redisUrl ? new (await import('../responses/queue.js')).BullQueue(config.redisUrl, core.redisPrefix!, config.backgroundConcurrency, log) : undefined,
      orphansAreOurs: core.db.driver === 'pglite',
      backgroundStaleMs: config.backgroundStaleMs,
      // what a continuation may read of its stored conversation, and how many one key may read at once
      limits: config.responses,
      // compaction items are sealed under KEY_PEPPER, which every instance shares (docs/api.md, "Compaction")
      sealSecret: config.keyPepper,
      // each WebSocket turn is admitted as a request is: the gate below, run again on the upgrade's request
      ws: { limits: config.ws, admit: (req) => gate.key(req) },
      // spoken answers (modalities audio): the audio feature's voices, handed to the responses feature
      speaker: new AnswerSpeakerService(models, audioEngines),
      admission,
    });
    closing((graceMs) => responses.close!(graceMs));

    // the page and its sessions: first, so its CORS hook sees every {base_url} route
    const web = createWebModule({
      config,
      db: core.db.db,
      jwt,
      managementKeys: core.keys.management,
      inferenceKeys: core.keys.inference,
      models,
      voices: (m) => (m.type === 'speech' ? voicesOf(m) : undefined),
      log,
      onSessionUser: (user) => core.operators.seen(user),
      orgRoles: core.keys.members ? (user) => core.keys.members!.apply(user) : undefined,
    });
    closing(() => web.close());

    /** gauges that are read rather than counted (cache hits, queue depth), refreshed before each scrape */
    const refreshGauges = () => {
      const { hits, misses } = verifier;
      metrics.keyCacheHits.set(hits);
      metrics.keyCacheMisses.set(misses);
      metrics.keyCacheHitRatio.set(hits + misses > 0 ? hits / (hits + misses) : 0);
      metrics.queueDepth.set(responses.service.background.runs.size);
      for (const c of router.circuits()) {
        metrics.circuitState.set({ model: c.model, deployment: c.deployment }, c.state);
        if (c.checkOk !== undefined) metrics.healthCheck.set({ model: c.model, deployment: c.deployment }, c.checkOk ? 1 : 0);
      }
    };

    // the operators' API (/v1/admin): an operator's token or session, or their Management API Key with the operator scope
    const admin = createAdminModule({
      db: core.db.db,
      operators: core.operators,
      audit: core.audit,
      usage: core.usage,
      keys: { management: core.keys.management, inference: core.keys.inference },
      verifier,
      feed: core.feed,
      log,
      postWebhook: opts.postWebhook,
      authenticate: web.authenticatePortal,
      storedModels,
      // the operators' health view: this instance (named as its background runner is) and its deployments now
      health: {
        instance: { id: responses.service.background.instanceId, host: hostname(), pid: process.pid, startedAt: Math.floor(Date.now() / 1000) },
        deployments: () => router.deploymentHealth(models.list()),
      },
      requestLog: config.requestLogDays > 0 ? requestLog : undefined,
      members: core.keys.members,
    });
    closing(() => admin.close!(0));

    // the Realtime API: pipelines of the audio feature's recognizer and voices and the text models, or upstreams
    const speaker = new AnswerSpeakerService(models, audioEngines);
    const listener = new PcmListenerService(models, audioEngines);
    const realtime = createRealtimeModule({
      models,
      engines: router,
      realtime: (spec) => engines.realtime(spec),
      metering,
      log,
      ears: { spec: (m) => listener.spec(m), transcribe: (o) => listener.transcribe(o) },
      voice: {
        voices: (m) => speaker.voicesOf(m),
        spec: (m) => models.get(m),
        open: (o) => speaker.open({ voice: o.voice, format: 'pcm16', signal: o.signal, model: o.model, speed: o.speed }),
      },
      vad: { create: (threshold) => createVoiceActivityDetector({ threshold }), name: () => voiceActivityStatus().then((v) => v.engine) },
      admit: (req) => gate.key(req),
      // an open session's key, verified again (nothing counted: the turns are)
      verify: (req) => identify(req),
      mint: async (req, payload, seconds) => {
        const token = inferenceKeyToken(req);
        if (isClientSecret(token)) throw new AppError('permission_denied', 'A client secret cannot mint another; use an API key.');
        return clientSecrets.mint(verifier.digestOf(token), payload, seconds);
      },
      limits: config.voiceSessions,
      metrics: metrics.voiceSessions,
      // a span per turn, in the trace of the session's upgrade request when it carried a traceparent
      traceTurn: tracing
        ? (req) => {
            const span = tracing!.start('WS', '/v1/realtime', req.headers);
            return {
              run: (fn) => tracing!.enter(span, fn),
              end: (status, attributes, error) => tracing!.end(span, { route: '/v1/realtime (turn)', status, attributes, error }),
            };
          }
        : undefined,
    });
    closing(() => realtime.close!(0));
    // which voice activity detector server VAD runs on (Silero, or the energy fallback and why), said at start and in
    // /v1/models, told from the files: the runtime itself loads at the first session (loading blocks the event loop
    // ~0.1-0.3 s, which a serving instance must not get at a random moment)
    const vad = await voiceActivityExpected();
    const vadName: string = vad.engine;
    if (vad.reason) log.warn({ voice_activity: vad.engine }, `realtime voice activity: ${vad.reason}`);
    else log.debug({ voice_activity: vad.engine, model: vad.model }, 'realtime voice activity: Silero VAD (loaded at the first session)');

    const modules: FeatureModule[] = [
      web,
      createOpsModule({
        db: core.db.db,
        pingRedis: config.redisUrl ? () => core.feed.publish('ping', {}) : undefined,
        unavailableModels: () => models.unavailableModels(),
        metrics,
        metricsAccess: config.metrics.port !== undefined ? { mode: 'separate' } : config.metrics.token ? { mode: 'token', token: config.metrics.token } : { mode: 'loopback' },
        beforeScrape: refreshGauges,
      }),
      createKeysModule({ management: core.keys.management, inference: core.keys.inference }),
      createQueryModule({ jwt, verifier, usage: core.usage, adminRole: config.jwt.adminRole, billingEnabled: config.billingEnabled, authenticate: web.authenticatePortal }),
      admin,
      createModelsModule({
        models,
        engineOf: (spec) => (spec.type === 'speech' || spec.type === 'transcription' ? audioEngines.engineOf(spec) : spec.provider),
        partsOf: (spec) => {
          const parts = realtime.service.partsOf(spec);
          return parts ? { ...parts, voice_activity: vadName } : parts;
        },
      }),
      // the features, in the order their scopes are listed (keys' allowed values, the web page)
      responses,
      createChatModule({ models, engines: router, metering, log, admission }),
      createEmbeddingsModule({ models, engines: router, metering, log, admission }),
      createAudioModule({ models, engines: audioEngines, metering, log }),
      createMessagesModule({ models, engines: router, metering, log, admission }),
      realtime,
      ...(opts.extraModules ?? []).map((m) => (typeof m === 'function' ? m({ models, engines: router, metering, log, admission }) : m)),
    ];
    // what they declare, handed down as data: the keys' scopes, the ledger's operations, the prices' units (the
    // core's services are told once the application is built: a runtime that fails to build changes nothing)
    const found = collectDeclarations(modules);
    // the configured models' prices, now that the priced units are known (a reload checks its file the same way)
    for (const spec of core.models.list()) {
      const problem = checkPricing(spec, found.units, true);
      if (problem) throw new ModelConfigError(`${config.modelConfigPath ?? 'the models'}: ${spec.name}: ${problem}`);
    }
    metering.usePrices(new Prices(found.units));
    // the stored models, checked against the units now known, served before the first request; then every change
    // (and read again once the feed has subscribed: a change published between this read and the subscription is
    // not missed; the feed's first resync does the same)
    void storedModels
      .listen()
      .then(() => storedModels.refresh())
      .catch(() => {});
    await storedModels.refresh();
    // every layer of models is in: say what serves whisper-1 and the other built-in transcription models (a
    // warning when it is a recognizer far worse than whisper, or none), so nobody mistakes one for the other
    const recognizer = audioEngines.recognizerNotice();
    if (recognizer) log[recognizer.warn ? 'warn' : 'info'](recognizer.fields, recognizer.message);
    const routeScopes = new RouteScopes(found.scopes);

    /** the request's inference key (or the key of its client secret), verified: no scope, limit or budget */
    const identify = async (req: FastifyRequest): Promise<KeyPrincipal> => {
      const token = inferenceKeyToken(req);
      if (!isClientSecret(token)) return verifier.verify(token, 'inference', req.ip);
      // a client secret minted from a key opens a browser's session (routes with browserSocket) and nothing else
      if (req.routeOptions.config?.browserSocket !== true) throw new AppError('invalid_api_key', msg('client_secret_elsewhere'));
      const opened = await clientSecrets.open(token);
      const key = await verifier.verifyDigest(opened.digest, req.ip);
      req.clientSecret = opened.payload;
      return key;
    };
    const gate: Gate = {
      // a bearer JWT, or the web page's session cookie (with its CSRF check on changes)
      user: (req) => web.authenticatePortal(req),
      operator: (req) => admin.authenticate(req),
      async key(req) {
        const key = await identify(req);
        // known from here: a refusal below (scope, budget, rate limit) is in the request log under the key
        req.apiKey = key;
        routeScopes.assert(key, req.routeOptions.config?.scope);
        // the budgets an operator set on the key, its owner or its organization (429 budget_exceeded past one)
        try {
          await admin.checkBudgets(key);
        } catch (e) {
          metrics.rateLimited.inc({ reason: 'budget' });
          throw e;
        }
        // a route whose service reserves its worst case (balance and TPM window) is admitted there, in one round
        // trip per store; here only its request is counted (RPM)
        const reserves = req.routeOptions.config?.reserves === true;
        if (limiter.applies(key)) {
          try {
            await limiter.check(key, !reserves);
          } catch (e) {
            metrics.rateLimited.inc({ reason: 'rate_limit' });
            throw e;
          }
        }
        if (budget.enabled && !reserves) {
          try {
            await budget.check(key);
          } catch (e) {
            metrics.rateLimited.inc({ reason: 'quota' });
            throw e;
          }
        }
        // a request its service admits by a reservation is a use once it is admitted there (Admission.onAdmitted)
        if (!reserves || !admission.applies(key)) verifier.markUsed(key);
        return key;
      },
      hold(key) {
        try {
          return concurrency.take(key);
        } catch (e) {
          metrics.rateLimited.inc({ reason: 'concurrency' });
          throw e;
        }
      },
    };
    const app = await buildHttp({
      log,
      metrics,
      gate,
      modules,
      routeScopes: found.scopes,
      gracefulClose: opts.gracefulClose,
      limits: config.http,
      serverFactory: opts.serverFactory,
      // a frame a little over the limit gets an error frame; far over it (it must be read whole), a 1009 close
      websocket: { maxPayload: config.ws.maxFrameBytes + 1024 * 1024, preClose: () => responses.sockets!.close(opts.gracefulClose ? config.shutdownGraceMs : 0) },
      tracing,
      requestLog: config.requestLogDays > 0 ? requestLog : undefined,
      clientClosedWaitMs: opts.clientClosedWaitMs,
      trustProxy: config.trustProxy,
      // a trusted proxy carries every client's connections: the per-address cap counts the others only
      perAddress: config.trustProxy ? { exempt: trustedProxyCheck(config.trustProxy) } : undefined,
    });
    core.keys.inference.useRouteScopes(found.scopes);
    core.usage.useOperations(found.operations);
    const scrape = async () => {
      refreshGauges();
      return metrics.registry.metrics();
    };
    await preloading;
    return {
      core,
      app,
      models,
      engines,
      router,
      checks,
      audioEngines,
      jwt,
      verifier,
      limiter,
      concurrency,
      budget,
      metrics,
      tracing,
      requestLog,
      scrape,
      responses,
      declared: found,
      reloadModels: (reason) => kept.reload(reason),
      close,
    };
  } catch (e) {
    await close();
    throw e;
  }
}
