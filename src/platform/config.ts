import { mkdirSync, readFileSync, writeFileSync, existsSync, chmodSync, linkSync, unlinkSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join, resolve } from 'node:path';
import { availableParallelism } from 'node:os';
import { isIP } from 'node:net';
import { packageRoot } from './paths.js';

/** PGlite's shared buffers in MB unless PGLITE_SHARED_BUFFERS_MB says otherwise (docs/deployment.md) */
export const DEFAULT_PGLITE_SHARED_BUFFERS_MB = 8;

/** Everything Portico reads from the environment, validated once at start. */
export interface Config {
  port: number;
  host: string;
  dataDir: string;
  /** PostgreSQL connection string; unset means embedded PGlite under dataDir */
  databaseUrl?: string;
  /** PGlite in memory (tests): no files at all */
  inMemoryDb: boolean;
  /** PGlite on a worker thread of its own (default); PORTICO_PGLITE_THREAD=off runs it on the main thread */
  pgliteThread: boolean;
  /** PORTICO_PGLITE_TEMPLATE: a new embedded database starts as a copy of this dump of a migrated one (tests; default: the build's dist/pglite-template.tar.gz when it made one) */
  pgliteTemplate: string | undefined;
  /** PGLITE_SHARED_BUFFERS_MB: the embedded database's shared buffers */
  pgliteSharedBuffersMb: number;
  redisUrl?: string;
  /**
   * REDIS_PREFIX: what every Redis key and pub/sub channel of this installation starts with (`<prefix>:...`); unset,
   * `portico:<installation id>` (the id kept in the database: src/platform/db/installation.ts)
   */
  redisPrefix?: string;
  modelConfigPath?: string;
  /** PORTICO_CONFIG_WATCH: reload the model file when it changes on disk (default off; SIGHUP and `portico models reload` always work) */
  modelConfigWatch: boolean;
  /** where pulled models and their catalogue live (MODELS_DIR, default DATA_DIR/models) */
  modelsDir: string;
  /** the embedded llama engine: 'auto' uses a GPU when node-llama-cpp finds one (CUDA, Vulkan, Metal), 'cpu' never */
  llamaGpu: 'auto' | 'cpu';
  /**
   * the bound on one whisper job, for a base-sized model (larger models multiply it by their compute): a job not
   * done within floorMs + perAudioSecondMs x its audio seconds is stopped and answered 504 (WHISPER_TIMEOUT_MS,
   * WHISPER_TIMEOUT_PER_AUDIO_SECOND_MS; unset: the engine's defaults, 600 s and 20 s, src/engines/whisper)
   */
  whisperTimeout: { floorMs?: number; perAudioSecondMs?: number };
  logLevel: string;
  /** LOG_FORMAT: `pretty` (coloured, for a terminal), `json` (one JSON object a line), or chosen by whether stdout is a terminal */
  logFormat: 'pretty' | 'json' | 'auto';
  /** OpenTelemetry traces, sent over OTLP/HTTP; unset: off (docs/operations.md, "Traces") */
  tracing?: TracingConfig;
  jwt: {
    /** HS256 secret; generated under dataDir when neither secret nor JWKS is configured */
    secret?: Uint8Array;
    secretGenerated: boolean;
    jwksUrl?: string;
    issuer?: string;
    audience?: string;
    orgRolesClaim: string;
    adminRole: string;
    /**
     * PORTICO_OPERATOR_CLAIM: the claim of a token (or of an OpenID Connect sign-in) that makes its user an operator
     * of the installation: `NAME` (the claim is true or "true") or `NAME=VALUE` (the claim is VALUE, or a list that
     * holds it, such as a groups claim); unset: no token makes an operator (`portico operators add` does)
     */
    operatorClaim?: OperatorClaim;
    /** JWT_MAX_AGE_SECONDS: tokens need iat and are refused once older than this (default 7 days; 0 = no cap) */
    maxAgeSeconds: number;
  };
  /** HMAC pepper for API key digests */
  keyPepper: Buffer;
  /** whether KEY_PEPPER set it (rather than a file made under DATA_DIR) */
  keyPepperFromEnv: boolean;
  /**
   * PORTICO_SECRETS_KEY: what the secrets an operator types in (a stored model's upstream api_key) are encrypted
   * with (AES-256-GCM, the key derived from it by HKDF); unset: derived from the key pepper. The same on every instance.
   */
  secretsKey: { material: Buffer; fromEnv: boolean };
  limits: {
    activeManagementKeys: number;
    activeInferenceKeys: number;
  };
  /** how often last_used_at may be written for one key (ms) */
  lastUsedWriteIntervalMs: number;
  /** how long a verified key may be served from memory before it is read again (ms) */
  keyCacheFreshMs: number;
  /** default per-key limits (0 = unlimited); a key's own limits win */
  rateLimits: { rpm: number; tpm: number };
  /**
   * requests in progress plus open WebSockets one inference key may have on this instance (KEY_MAX_CONCURRENCY,
   * default 64, 0 = unlimited); a key's own `max_concurrency` wins
   */
  keyMaxConcurrency: number;
  /** refuse requests once the balance is spent */
  billingEnabled: boolean;
  /**
   * Reservations at admission (src/api/admission.ts), made when billing or a TPM limit applies: the output tokens
   * reserved for (and the most produced by) a request that names no max_output_tokens / max_tokens and whose
   * model's context window does not bound it lower (RESERVE_OUTPUT_TOKENS), and how long a reservation of a
   * request that never settled it (its process crashed) holds the balance (RESERVATION_TTL_MS)
   */
  reservations: { defaultOutputTokens: number; ttlMs: number };
  /** background responses running at once in this process */
  backgroundConcurrency: number;
  /** graceful shutdown: how long running streams may take to finish (ms) */
  shutdownGraceMs: number;
  /**
   * `portico serve` processes on this machine (WORKERS, `auto` = one per core; default 1). Above 1 a primary
   * process forks that many workers sharing the port; it needs DATABASE_URL and REDIS_URL (the embedded
   * database belongs to one process, and limits, spend and cancellation must be shared).
   */
  workers: number;
  /** set in a worker forked by the primary (PORTICO_WORKER_ID, 1-based): its journal lives in DATA_DIR/workers/<id> */
  workerId?: number;
  /** a running background job whose instance has been silent this long is marked failed (ms) */
  backgroundStaleMs: number;
  /** PORTICO_REQUEST_LOG_DAYS: how long the request log keeps a request (days; 0 = the log is off) */
  requestLogDays: number;
  /** what one client may hold of the HTTP server (docs/security.md, "Limits and timeouts") */
  http: HttpLimits;
  /** the WebSocket mode of /v1/responses (docs/api.md, "WebSocket mode") */
  ws: WsLimits;
  /** the Realtime API's sessions (docs/api.md, "Realtime"; docs/operations.md lists the variables) */
  voiceSessions: VoiceSessionLimits;
  /** how much of a stored conversation a continuation (previous_response_id) may read (docs/security.md, "Limits and timeouts") */
  responses: ResponsesLimits;
  /** how the embedded speech and transcription engines are shared between keys (docs/security.md, "Limits and timeouts") */
  audio: AudioLimits;
  /**
   * TRUST_PROXY: the proxies in front of Portico whose X-Forwarded-For is believed, so `req.ip` is the client's
   * address (src/platform/http/proxy.ts); unset: the socket's peer, the header ignored
   */
  trustProxy?: TrustProxy;
  /** /metrics: a port of its own (METRICS_PORT, on METRICS_HOST) and/or a bearer token (METRICS_TOKEN); neither: loopback only */
  metrics: { port?: number; host: string; token?: string };
  /** the web page (src/web): its public address, sessions, OpenID Connect sign-in, CORS of {base_url} */
  web: WebConfig;
}

/** PORTICO_OPERATOR_CLAIM, parsed: the claim's name, and the value that makes an operator (none: the claim is true) */
export interface OperatorClaim {
  name: string;
  value?: string;
}

/**
 * TRUST_PROXY, parsed: `hops` (a number: that many proxies in front, whatever their addresses) or `cidrs` (the
 * proxies' addresses and networks, IPv4 and IPv6, `loopback` / `linklocal` / `uniquelocal` expanded).
 */
export interface TrustProxy {
  hops?: number;
  cidrs?: string[];
}

export interface TracingConfig {
  /** the collector's traces URL: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces */
  url: string;
  /** OTEL_EXPORTER_OTLP_HEADERS (`key=value,...`): sent to the collector */
  headers?: Record<string, string>;
  /** OTEL_SERVICE_NAME (default portico) */
  serviceName: string;
}

export interface HttpLimits {
  /** the whole request (headers and body) must arrive within this (ms); answers, streams included, are not bounded by it */
  requestTimeoutMs: number;
  /** the request's headers must arrive within this (ms) */
  headersTimeoutMs: number;
  /** an idle keep-alive connection is closed after this (ms) */
  keepAliveTimeoutMs: number;
  /** open connections this process accepts; more are closed at once */
  maxConnections: number;
  /** open connections one client address may hold; more are closed at once (MAX_CONNECTIONS_PER_ADDRESS, 0 = off) */
  maxConnectionsPerAddress: number;
}

export interface WsLimits {
  /** a connection lasts at most this long (WS_MAX_AGE_MS, default 60 minutes) */
  maxAgeMs: number;
  /** a client frame larger than this gets an error frame (WS_MAX_FRAME_BYTES, default 16 MiB, as an HTTP body) */
  maxFrameBytes: number;
  /** response.create messages that may wait behind the one in flight (WS_MAX_QUEUED_TURNS, default 8) */
  maxQueuedTurns: number;
  /** a ping every this often; a peer that has not answered the previous one is cut (WS_PING_INTERVAL_MS, 0 = off) */
  pingIntervalMs: number;
  /** a connection without a client message for this long, and no response in progress, is closed (WS_IDLE_MS, default 5 minutes) */
  idleMs: number;
}

/** Realtime sessions: how long, how many, how much audio they hold. */
export interface VoiceSessionLimits {
  /** REALTIME_MAX_SESSION_MS (default 60 minutes, as OpenAI) */
  maxSessionMs: number;
  /** REALTIME_IDLE_MS: no client event and no response in progress for this long closes it (default 10 minutes) */
  idleMs: number;
  /** REALTIME_MAX_SESSIONS_PER_KEY (default 10, 0 = no limit) */
  perKey: number;
  /** REALTIME_MAX_SESSIONS on this instance (default 200, 0 = no limit) */
  perInstance: number;
  /** REALTIME_MAX_BUFFER_SECONDS: uncommitted input audio held at most (default 120) */
  maxBufferSeconds: number;
  /** REALTIME_MAX_KEPT_AUDIO_SECONDS: the user audio a conversation keeps for retrieve (default 600) */
  maxKeptAudioSeconds: number;
  /** REALTIME_MAX_BUFFERED_BYTES: unread output before a response waits for its client (default 1 MiB; 4x closes it) */
  maxBufferedBytes: number;
  /** REALTIME_VERIFY_MS: the key is verified again this often (default: KEY_CACHE_FRESH_MS, at least 1 s) */
  verifyEveryMs: number;
  /** the largest client event (WS_MAX_FRAME_BYTES) */
  maxEventBytes: number;
  /** REALTIME_MAX_ITEMS: items a conversation holds (default 1000) */
  maxItems: number;
}

/** What a continuation (`previous_response_id`) may make the instance read of a stored conversation. */
export interface ResponsesLimits {
  /**
   * the bytes a conversation may hold: the stored input items and response objects of every earlier turn, plus the
   * new input (RESPONSES_MAX_CHAIN_BYTES, default 64 MiB: four request bodies, what a WebSocket connection keeps in
   * memory); past it a continuation is a 400, or with truncation auto its oldest turns are dropped
   */
  maxChainBytes: number;
  /**
   * conversations one key may have loading at once on this instance (RESPONSES_MAX_CHAIN_LOADS_PER_KEY, default 4
   * on PostgreSQL, 1 on the embedded database: its one connection runs one statement at a time, so a key's second
   * load runs no sooner, it only puts one more large read ahead of every other key's statements)
   */
  maxChainLoadsPerKey: number;
  /** continuations of one key that may wait for a load; more get 429 with retry-after (RESPONSES_MAX_QUEUED_CHAIN_LOADS_PER_KEY, default 16) */
  maxQueuedChainLoadsPerKey: number;
}

/**
 * The fair sharing of the embedded audio engines (src/audio/scheduler.ts): each key waits in a queue of its own,
 * the queues are served in turn, and what one key may have waiting, and how long a request may expect to wait, are
 * bounded.
 */
export interface AudioLimits {
  /** a request whose first turn is estimated to come later than this is refused with 503 and retry-after (AUDIO_MAX_WAIT_MS) */
  maxWaitMs: number;
  /** seconds of audio one key may have waiting for transcription or translation (AUDIO_MAX_QUEUED_SECONDS_PER_KEY) */
  maxQueuedSecondsPerKey: number;
  /** characters one key may have waiting for speech (AUDIO_MAX_QUEUED_CHARACTERS_PER_KEY) */
  maxQueuedCharactersPerKey: number;
  /** longer audio is transcribed in pieces of at most this many seconds, each a turn of its own (AUDIO_PIECE_SECONDS) */
  pieceSeconds: number;
  /**
   * TRANSCRIPTION_REQUIRE=whisper: the built-in transcription models (whisper-1, gpt-4o-transcribe,
   * gpt-4o-mini-transcribe) are served by a whisper-class recognizer or answer 503, never by one a provider declares
   * weaker (pocketsphinx). Unset (or `any`): the best one installed, whatever it is.
   */
  requireWhisperClass?: boolean;
}

export interface WebConfig {
  /** the address people open (PUBLIC_URL, no trailing slash): sign-in links, Secure cookies, the OIDC redirect */
  publicUrl: string;
  /** how long a page session lasts from sign-in (ms) */
  sessionTtlMs: number;
  /** OpenID Connect sign-in (authorization code + PKCE); unset: sign-in links only */
  oidc?: { issuer: string; clientId: string; clientSecret?: string; redirectUrl: string; scopes: string };
  /** origins allowed to call {base_url} from a browser (CORS); empty = CORS off, ['*'] = any origin */
  corsOrigins: string[];
}

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

function int(env: Env, name: string, def: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return def;
  if (!/^\d+$/.test(raw.trim())) throw new ConfigError(`${name} must be a whole number from ${min} to ${max}, got "${raw}"`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(`${name} must be from ${min} to ${max}, got ${n}`);
  return n;
}

function choice<T extends string>(env: Env, name: string, allowed: readonly T[], def: T): T {
  const raw = (env[name] ?? '').trim().toLowerCase();
  if (raw === '') return def;
  if (!(allowed as readonly string[]).includes(raw)) throw new ConfigError(`${name} must be one of ${allowed.join(', ')}; got "${env[name]}"`);
  return raw as T;
}

function bool(env: Env, name: string): boolean {
  const raw = (env[name] ?? '').trim().toLowerCase();
  if (raw === '' || raw === '0' || raw === 'false' || raw === 'no') return false;
  if (raw === '1' || raw === 'true' || raw === 'yes') return true;
  throw new ConfigError(`${name} must be true or false, got "${env[name]}"`);
}

function url(env: Env, name: string, protocols: string[]): string | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new ConfigError(`${name} is not a valid URL`);
  }
  if (!protocols.includes(u.protocol)) throw new ConfigError(`${name} must start with ${protocols.map((p) => p + '//').join(' or ')}`);
  return raw;
}

/** Reads a secret file under dataDir, creating it (0600) with fresh random bytes the first time. */
export function persistentSecret(dataDir: string, file: string, bytes = 32): Buffer {
  const p = join(dataDir, file);
  if (existsSync(p)) {
    const hex = readFileSync(p, 'utf8').trim();
    if (!/^[0-9a-f]{32,}$/.test(hex)) throw new ConfigError(`${p} is damaged: expected hex text; delete it to generate a new one`);
    return Buffer.from(hex, 'hex');
  }
  mkdirSync(dataDir, { recursive: true });
  const secret = randomBytes(bytes);
  // written aside and linked into place: a reader never sees a half-written file, and when two processes
  // start at once the first link wins and the other reads it
  const tmp = `${p}.${process.pid}.tmp`;
  writeFileSync(tmp, secret.toString('hex') + '\n', { mode: 0o600 });
  chmodSync(tmp, 0o600);
  try {
    linkSync(tmp, p);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    unlinkSync(tmp);
    return persistentSecret(dataDir, file, bytes);
  }
  unlinkSync(tmp);
  return secret;
}

/** DATA_DIR as an absolute path (what `portico models reload` needs, without loadConfig's secrets being made there). */
export function dataDirOf(env: Env = process.env): string {
  return resolve(env.DATA_DIR || './data');
}

export function loadConfig(env: Env = process.env): Config {
  const dataDir = dataDirOf(env);
  const inMemoryDb = env.PORTICO_DB === 'memory';
  const databaseUrl = url(env, 'DATABASE_URL', ['postgres:', 'postgresql:']);
  const jwksUrl = url(env, 'JWT_JWKS_URL', ['http:', 'https:']);
  const host = env.HOST || '127.0.0.1';
  let secret: Uint8Array | undefined;
  let secretGenerated = false;
  if (env.JWT_SECRET) {
    if (env.JWT_SECRET.length < 32) throw new ConfigError('JWT_SECRET must be at least 32 characters (HS256 needs a 256-bit secret)');
    secret = new TextEncoder().encode(env.JWT_SECRET);
  } else if (!jwksUrl) {
    secret = persistentSecret(dataDir, 'jwt-secret');
    secretGenerated = true;
  }
  let keyPepper: Buffer;
  if (env.KEY_PEPPER) {
    if (env.KEY_PEPPER.length < 32) throw new ConfigError('KEY_PEPPER must be at least 32 characters');
    keyPepper = Buffer.from(env.KEY_PEPPER, 'utf8');
  } else {
    keyPepper = persistentSecret(dataDir, 'key-pepper');
  }
  const secretsKeyText = env.PORTICO_SECRETS_KEY?.trim();
  if (secretsKeyText !== undefined && secretsKeyText !== '' && secretsKeyText.length < 32) {
    throw new ConfigError('PORTICO_SECRETS_KEY must be at least 32 characters (openssl rand -hex 32)');
  }
  const logLevel = env.LOG_LEVEL || 'info';
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(logLevel)) {
    throw new ConfigError(`LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent; got "${logLevel}"`);
  }
  const port = int(env, 'PORT', 8080, 0, 65535);
  return {
    port,
    host,
    dataDir,
    databaseUrl,
    inMemoryDb,
    pgliteThread: env.PORTICO_PGLITE_THREAD !== 'off',
    pgliteTemplate: pgliteTemplateSetting(env),
    pgliteSharedBuffersMb: int(env, 'PGLITE_SHARED_BUFFERS_MB', DEFAULT_PGLITE_SHARED_BUFFERS_MB, 1, 4096),
    redisUrl: url(env, 'REDIS_URL', ['redis:', 'rediss:']),
    redisPrefix: redisPrefixSetting(env),
    modelConfigPath: env.PORTICO_CONFIG || undefined,
    modelConfigWatch: bool(env, 'PORTICO_CONFIG_WATCH'),
    modelsDir: env.MODELS_DIR?.trim() ? resolve(env.MODELS_DIR.trim()) : join(dataDir, 'models'),
    llamaGpu: choice(env, 'LLAMA_GPU', ['auto', 'cpu'] as const, 'auto'),
    whisperTimeout: {
      ...(env.WHISPER_TIMEOUT_MS?.trim() ? { floorMs: int(env, 'WHISPER_TIMEOUT_MS', 0, 1, 86_400_000) } : {}),
      ...(env.WHISPER_TIMEOUT_PER_AUDIO_SECOND_MS?.trim() ? { perAudioSecondMs: int(env, 'WHISPER_TIMEOUT_PER_AUDIO_SECOND_MS', 0, 0, 3_600_000) } : {}),
    },
    logLevel,
    logFormat: choice(env, 'LOG_FORMAT', ['pretty', 'json', 'auto'] as const, 'auto'),
    tracing: tracingSetting(env),
    jwt: {
      secret,
      secretGenerated,
      jwksUrl,
      issuer: env.JWT_ISSUER || undefined,
      audience: env.JWT_AUDIENCE || undefined,
      orgRolesClaim: env.JWT_ORG_ROLES_CLAIM || 'org_roles',
      adminRole: env.JWT_ADMIN_ROLE || 'admin',
      operatorClaim: operatorClaimSetting(env),
      // a token is refused 7 days after it was issued, whatever its exp (an exp in the year 9999 was accepted)
      maxAgeSeconds: int(env, 'JWT_MAX_AGE_SECONDS', 7 * 86400, 0, 10 * 365 * 86400),
    },
    keyPepper,
    keyPepperFromEnv: Boolean(env.KEY_PEPPER),
    secretsKey: secretsKeyText ? { material: Buffer.from(secretsKeyText, 'utf8'), fromEnv: true } : { material: keyPepper, fromEnv: false },
    limits: {
      activeManagementKeys: int(env, 'MAX_ACTIVE_MANAGEMENT_KEYS', 10, 1, 10000),
      activeInferenceKeys: int(env, 'MAX_ACTIVE_INFERENCE_KEYS', 10, 1, 10000),
    },
    lastUsedWriteIntervalMs: int(env, 'LAST_USED_WRITE_INTERVAL_MS', 60_000, 0, 86_400_000),
    keyCacheFreshMs: int(env, 'KEY_CACHE_FRESH_MS', 1_000, 0, 600_000),
    rateLimits: { rpm: int(env, 'RATE_LIMIT_RPM', 0, 0, 100_000_000), tpm: int(env, 'RATE_LIMIT_TPM', 0, 0, 1_000_000_000_000) },
    keyMaxConcurrency: int(env, 'KEY_MAX_CONCURRENCY', 64, 0, 1_000_000),
    billingEnabled: bool(env, 'BILLING_ENABLED'),
    reservations: {
      defaultOutputTokens: int(env, 'RESERVE_OUTPUT_TOKENS', 4096, 1, 10_000_000),
      ttlMs: int(env, 'RESERVATION_TTL_MS', 900_000, 1_000, 86_400_000),
    },
    backgroundConcurrency: int(env, 'BACKGROUND_CONCURRENCY', 4, 1, 1024),
    shutdownGraceMs: int(env, 'SHUTDOWN_GRACE_MS', 10_000, 0, 3_600_000),
    workers: workersSetting(env),
    trustProxy: trustProxySetting(env),
    metrics: metricsSetting(env, host),
    http: httpLimits(env),
    ws: {
      maxAgeMs: int(env, 'WS_MAX_AGE_MS', 3_600_000, 1_000, 86_400_000),
      maxFrameBytes: int(env, 'WS_MAX_FRAME_BYTES', 16 * 1024 * 1024, 1024, 64 * 1024 * 1024),
      maxQueuedTurns: int(env, 'WS_MAX_QUEUED_TURNS', 8, 0, 1000),
      pingIntervalMs: int(env, 'WS_PING_INTERVAL_MS', 30_000, 0, 3_600_000),
      idleMs: int(env, 'WS_IDLE_MS', 300_000, 100, 86_400_000),
    },
    voiceSessions: {
      maxSessionMs: int(env, 'REALTIME_MAX_SESSION_MS', 3_600_000, 1_000, 86_400_000),
      idleMs: int(env, 'REALTIME_IDLE_MS', 600_000, 100, 86_400_000),
      perKey: int(env, 'REALTIME_MAX_SESSIONS_PER_KEY', 10, 0, 100_000),
      perInstance: int(env, 'REALTIME_MAX_SESSIONS', 200, 0, 1_000_000),
      maxBufferSeconds: int(env, 'REALTIME_MAX_BUFFER_SECONDS', 120, 1, 3600),
      maxKeptAudioSeconds: int(env, 'REALTIME_MAX_KEPT_AUDIO_SECONDS', 600, 0, 36_000),
      maxBufferedBytes: int(env, 'REALTIME_MAX_BUFFERED_BYTES', 1024 * 1024, 16 * 1024, 256 * 1024 * 1024),
      verifyEveryMs: int(env, 'REALTIME_VERIFY_MS', Math.max(1_000, int(env, 'KEY_CACHE_FRESH_MS', 1_000, 0, 600_000)), 50, 600_000),
      maxEventBytes: int(env, 'WS_MAX_FRAME_BYTES', 16 * 1024 * 1024, 1024, 64 * 1024 * 1024),
      maxItems: int(env, 'REALTIME_MAX_ITEMS', 1000, 10, 100_000),
    },
    audio: audioLimits(env),
    responses: {
      maxChainBytes: int(env, 'RESPONSES_MAX_CHAIN_BYTES', 64 * 1024 * 1024, 1024, 1024 * 1024 * 1024),
      maxChainLoadsPerKey: int(env, 'RESPONSES_MAX_CHAIN_LOADS_PER_KEY', databaseUrl ? 4 : 1, 1, 1000),
      maxQueuedChainLoadsPerKey: int(env, 'RESPONSES_MAX_QUEUED_CHAIN_LOADS_PER_KEY', 16, 0, 100_000),
    },
    workerId: env.PORTICO_WORKER_ID ? int(env, 'PORTICO_WORKER_ID', 1, 1, 1024) : undefined,
    backgroundStaleMs: int(env, 'BACKGROUND_STALE_MS', 30_000, 1_000, 3_600_000),
    requestLogDays: int(env, 'PORTICO_REQUEST_LOG_DAYS', 30, 0, 3650),
    web: webConfig(env, host, port),
  };
}

/** PORTICO_OPERATOR_CLAIM: `NAME` or `NAME=VALUE`, the name a claim's (letters, digits and `_.:/-`, at most 100) */
function operatorClaimSetting(env: Env): OperatorClaim | undefined {
  const raw = env.PORTICO_OPERATOR_CLAIM?.trim();
  if (!raw) return undefined;
  const eq = raw.indexOf('=');
  const name = (eq < 0 ? raw : raw.slice(0, eq)).trim();
  const value = eq < 0 ? undefined : raw.slice(eq + 1).trim();
  if (!/^[A-Za-z0-9_.:/-]{1,100}$/.test(name) || value === '' || (value !== undefined && (value.length > 200 || /[\u0000-\u001f\u007f]/.test(value)))) {
    throw new ConfigError(`PORTICO_OPERATOR_CLAIM must be a claim name (letters, digits, "_.:/-") or NAME=VALUE (e.g. portico_operator or groups=portico-operators); got "${raw}"`);
  }
  return value === undefined ? { name } : { name, value };
}

/** REDIS_PREFIX: letters, digits and `:._-`, at most 100 characters; a trailing `:` is dropped (one is put after it). */
function redisPrefixSetting(env: Env): string | undefined {
  const raw = env.REDIS_PREFIX?.trim();
  if (!raw) return undefined;
  const p = raw.replace(/:+$/, '');
  if (!/^[A-Za-z0-9][A-Za-z0-9:._-]{0,99}$/.test(p)) {
    throw new ConfigError(`REDIS_PREFIX must be 1 to 100 letters, digits or ":._-", starting with a letter or digit; got "${raw}"`);
  }
  return p;
}

function httpLimits(env: Env): HttpLimits {
  const requestTimeoutMs = int(env, 'REQUEST_TIMEOUT_MS', 120_000, 1_000, 3_600_000);
  const headersTimeoutMs = int(env, 'HEADERS_TIMEOUT_MS', 10_000, 1_000, 600_000);
  if (headersTimeoutMs > requestTimeoutMs) throw new ConfigError(`HEADERS_TIMEOUT_MS (${headersTimeoutMs}) must not be longer than REQUEST_TIMEOUT_MS (${requestTimeoutMs})`);
  return {
    requestTimeoutMs,
    headersTimeoutMs,
    keepAliveTimeoutMs: int(env, 'KEEPALIVE_TIMEOUT_MS', 72_000, 1_000, 3_600_000),
    maxConnections: int(env, 'MAX_CONNECTIONS', defaultMaxConnections(), 16, 1_000_000),
    maxConnectionsPerAddress: int(env, 'MAX_CONNECTIONS_PER_ADDRESS', 256, 0, 1_000_000),
  };
}

function audioLimits(env: Env): AudioLimits {
  return {
    maxWaitMs: int(env, 'AUDIO_MAX_WAIT_MS', 30_000, 1_000, 3_600_000),
    maxQueuedSecondsPerKey: int(env, 'AUDIO_MAX_QUEUED_SECONDS_PER_KEY', 600, 1, 86_400),
    maxQueuedCharactersPerKey: int(env, 'AUDIO_MAX_QUEUED_CHARACTERS_PER_KEY', 16_384, 1, 10_000_000),
    pieceSeconds: int(env, 'AUDIO_PIECE_SECONDS', 15, 5, 600),
    ...(choice(env, 'TRANSCRIPTION_REQUIRE', ['any', 'whisper'], 'any') === 'whisper' ? { requireWhisperClass: true } : {}),
  };
}

/**
 * Four fifths of the process's open-file limit (the rest stays for the database, upstreams, logs and model
 * files), at most 10,000: the server refuses connections before the process runs out of descriptors.
 */
function defaultMaxConnections(): number {
  try {
    const m = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
    if (m && m[1] !== 'unlimited') return Math.max(16, Math.min(10_000, Math.floor(Number(m[1]) * 0.8)));
  } catch {
    // not Linux: no way to read the limit from Node
  }
  return 10_000;
}

/**
 * Tracing is on when a collector is named, by the standard OpenTelemetry variables: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
 * (the traces URL itself) or OTEL_EXPORTER_OTLP_ENDPOINT (a base URL, /v1/traces appended); OTEL_SDK_DISABLED=true
 * turns it off whatever is set.
 */
function tracingSetting(env: Env): TracingConfig | undefined {
  if (bool(env, 'OTEL_SDK_DISABLED')) return undefined;
  const traces = url(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', ['http:', 'https:']);
  const base = url(env, 'OTEL_EXPORTER_OTLP_ENDPOINT', ['http:', 'https:']);
  const target = traces ?? (base ? base.replace(/\/+$/, '') + '/v1/traces' : undefined);
  if (!target) return undefined;
  let headers: Record<string, string> | undefined;
  for (const part of (env.OTEL_EXPORTER_OTLP_TRACES_HEADERS ?? env.OTEL_EXPORTER_OTLP_HEADERS ?? '').split(',')) {
    const i = part.indexOf('=');
    if (i <= 0) continue;
    let v = part.slice(i + 1).trim();
    try {
      v = decodeURIComponent(v);
    } catch {
      // kept as written
    }
    (headers ??= {})[part.slice(0, i).trim()] = v;
  }
  return { url: target, headers, serviceName: env.OTEL_SERVICE_NAME?.trim() || 'portico' };
}

/** what proxy-addr's names stand for, written out (so every consumer of the setting reads the same list) */
const PROXY_NAMES: Record<string, string[]> = {
  loopback: ['127.0.0.0/8', '::1/128'],
  linklocal: ['169.254.0.0/16', 'fe80::/10'],
  uniquelocal: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', 'fc00::/7'],
};

/**
 * TRUST_PROXY: unset, empty, `false` or `0`: no proxy is trusted. A whole number from 1 to 32: that many proxies in
 * front (the client is the address that many hops from the right of X-Forwarded-For). Otherwise a comma-separated
 * list of the proxies' addresses or networks (`10.0.0.5`, `10.0.0.0/8`, `fd00::/8`, loopback, linklocal,
 * uniquelocal). `true` is refused: it would believe any client's X-Forwarded-For.
 */
function trustProxySetting(env: Env): TrustProxy | undefined {
  const raw = env.TRUST_PROXY?.trim() ?? '';
  const lower = raw.toLowerCase();
  if (lower === '' || lower === 'false' || lower === '0' || lower === 'no') return undefined;
  if (lower === 'true' || lower === 'yes' || lower === '*') {
    throw new ConfigError(
      `TRUST_PROXY=${raw} would believe the X-Forwarded-For of any client, who could then choose its own address; give the number of proxies in front of Portico (e.g. 1) or their addresses (e.g. 127.0.0.1 or 10.0.0.0/8)`,
    );
  }
  if (/^\d+$/.test(raw)) {
    const hops = Number(raw);
    if (hops > 32) throw new ConfigError(`TRUST_PROXY must be a number of proxies from 1 to 32, or a list of their addresses; got ${raw}`);
    return { hops };
  }
  const cidrs: string[] = [];
  for (const part of raw.split(',')) {
    const item = part.trim();
    const named = PROXY_NAMES[item.toLowerCase()];
    if (named) {
      cidrs.push(...named);
      continue;
    }
    const slash = item.indexOf('/');
    const address = slash < 0 ? item : item.slice(0, slash);
    const version = isIP(address);
    const max = version === 6 ? 128 : 32;
    const prefix = slash < 0 ? undefined : item.slice(slash + 1);
    const bad = version === 0 || (prefix !== undefined && (!/^\d{1,3}$/.test(prefix) || Number(prefix) > max || Number(prefix) === 0));
    if (bad) {
      throw new ConfigError(
        `TRUST_PROXY must be a number of proxies (1 to 32) or a comma-separated list of their IPv4 or IPv6 addresses or networks (10.0.0.5, 10.0.0.0/8, fd00::/8, loopback, linklocal, uniquelocal); "${item}" is not one${prefix === '0' ? ' (a /0 network would trust every client)' : ''}`,
      );
    }
    cidrs.push(prefix === undefined ? address : `${address}/${Number(prefix)}`);
  }
  return { cidrs };
}

function metricsSetting(env: Env, host: string): Config['metrics'] {
  const token = env.METRICS_TOKEN?.trim() || undefined;
  if (token !== undefined && (token.length < 16 || /\s/.test(token))) throw new ConfigError('METRICS_TOKEN must be at least 16 characters, without spaces');
  const port = env.METRICS_PORT?.trim() ? int(env, 'METRICS_PORT', 0, 0, 65535) : undefined;
  return { port, host: env.METRICS_HOST?.trim() || host, token };
}

/** WORKERS: a count, or `auto` for one per core */
function workersSetting(env: Env): number {
  const v = env.WORKERS?.trim();
  if (v === undefined || v === '') return 1;
  if (v.toLowerCase() === 'auto') return Math.max(1, availableParallelism());
  const n = /^\d+$/.test(v) ? Number(v) : NaN;
  if (!(n >= 1 && n <= 256)) throw new ConfigError(`WORKERS must be a number of processes from 1 to 256, or auto (one per core); got "${env.WORKERS}"`);
  return n;
}

function webConfig(env: Env, host: string, port: number): WebConfig {
  const wildcard = host === '0.0.0.0' || host === '::' || host === '';
  const shownHost = wildcard ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
  const publicUrl = (url(env, 'PUBLIC_URL', ['http:', 'https:']) ?? `http://${shownHost}:${port}`).replace(/\/+$/, '');
  let oidc: WebConfig['oidc'];
  const issuer = url(env, 'OIDC_ISSUER', ['http:', 'https:']);
  if (issuer) {
    const clientId = env.OIDC_CLIENT_ID?.trim();
    if (!clientId) throw new ConfigError('OIDC_ISSUER is set but OIDC_CLIENT_ID is not: both are needed for OpenID Connect sign-in');
    const loopback = ['localhost', '127.0.0.1', '[::1]'].includes(new URL(issuer).hostname);
    if (new URL(issuer).protocol === 'http:' && !loopback)
      throw new ConfigError('OIDC_ISSUER must start with https:// (plain http is accepted only on this machine: localhost, 127.0.0.1, [::1])');
    oidc = {
      issuer,
      clientId,
      clientSecret: env.OIDC_CLIENT_SECRET || undefined,
      redirectUrl: url(env, 'OIDC_REDIRECT_URL', ['http:', 'https:']) ?? `${publicUrl}/auth/oidc/callback`,
      scopes: env.OIDC_SCOPES?.trim() || 'openid profile email',
    };
    if (!oidc.scopes.split(/\s+/).includes('openid')) throw new ConfigError('OIDC_SCOPES must include openid');
  } else if (env.OIDC_CLIENT_ID) {
    throw new ConfigError('OIDC_CLIENT_ID is set but OIDC_ISSUER is not: both are needed for OpenID Connect sign-in');
  }
  const corsOrigins = (env.CORS_ORIGINS ?? '')
    .split(',')
    .map((o) => o.trim())
    .filter((o) => o !== '');
  for (const o of corsOrigins) {
    if (o === '*') continue;
    let u: URL | undefined;
    try {
      u = new URL(o);
    } catch {
      u = undefined;
    }
    if (!u || (u.protocol !== 'http:' && u.protocol !== 'https:') || u.origin !== o.replace(/\/$/, '')) {
      throw new ConfigError(`CORS_ORIGINS must list origins such as https://app.example.com (scheme, host, optional port; no path) or *, got "${o}"`);
    }
  }
  return {
    publicUrl,
    sessionTtlMs: int(env, 'SESSION_TTL_MS', 8 * 3_600_000, 1_000, 30 * 86_400_000),
    oidc,
    corsOrigins: corsOrigins.includes('*') ? ['*'] : corsOrigins.map((o) => o.replace(/\/$/, '')),
  };
}

/**
 * The dump a new embedded database starts from: PORTICO_PGLITE_TEMPLATE (`off`: none, always initdb), else the one a
 * build made with `--pglite-template` (dist/pglite-template.tar.gz: the migrations of that same build, applied to an
 * empty database, nothing of any installation in it), else none. A copy takes ~2 s where initdb takes ~10 s.
 */
function pgliteTemplateSetting(env: Env): string | undefined {
  const given = env.PORTICO_PGLITE_TEMPLATE;
  if (given === 'off') return undefined;
  if (given) return given;
  const packaged = join(packageRoot(), 'dist', 'pglite-template.tar.gz');
  return existsSync(packaged) ? packaged : undefined;
}
