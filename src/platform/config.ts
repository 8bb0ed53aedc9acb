import { mkdirSync, readFileSync, writeFileSync, existsSync, chmodSync, linkSync, unlinkSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join, resolve } from 'node:path';

/** Everything Portico reads from the environment, validated once at start. */
export interface Config {
  port: number;
  host: string;
  dataDir: string;
  /** PostgreSQL connection string; unset means embedded PGlite under dataDir */
  databaseUrl?: string;
  /** PGlite in memory (tests): no files at all */
  inMemoryDb: boolean;
  redisUrl?: string;
  modelConfigPath?: string;
  logLevel: string;
  jwt: {
    /** HS256 secret; generated under dataDir when neither secret nor JWKS is configured */
    secret?: Uint8Array;
    secretGenerated: boolean;
    jwksUrl?: string;
    issuer?: string;
    audience?: string;
    orgRolesClaim: string;
    adminRole: string;
  };
  /** HMAC pepper for API key digests */
  keyPepper: Buffer;
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
  /** refuse requests once the balance is spent */
  billingEnabled: boolean;
  /** background responses running at once in this process */
  backgroundConcurrency: number;
  /** graceful shutdown: how long running streams may take to finish (ms) */
  shutdownGraceMs: number;
  /** a running background job whose instance has been silent this long is marked failed (ms) */
  backgroundStaleMs: number;
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

export function loadConfig(env: Env = process.env): Config {
  const dataDir = resolve(env.DATA_DIR || './data');
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
  const logLevel = env.LOG_LEVEL || 'info';
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(logLevel)) {
    throw new ConfigError(`LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent; got "${logLevel}"`);
  }
  return {
    port: int(env, 'PORT', 8080, 0, 65535),
    host,
    dataDir,
    databaseUrl,
    inMemoryDb,
    redisUrl: url(env, 'REDIS_URL', ['redis:', 'rediss:']),
    modelConfigPath: env.PORTICO_CONFIG || undefined,
    logLevel,
    jwt: {
      secret,
      secretGenerated,
      jwksUrl,
      issuer: env.JWT_ISSUER || undefined,
      audience: env.JWT_AUDIENCE || undefined,
      orgRolesClaim: env.JWT_ORG_ROLES_CLAIM || 'org_roles',
      adminRole: env.JWT_ADMIN_ROLE || 'admin',
    },
    keyPepper,
    limits: {
      activeManagementKeys: int(env, 'MAX_ACTIVE_MANAGEMENT_KEYS', 10, 1, 10000),
      activeInferenceKeys: int(env, 'MAX_ACTIVE_INFERENCE_KEYS', 10, 1, 10000),
    },
    lastUsedWriteIntervalMs: int(env, 'LAST_USED_WRITE_INTERVAL_MS', 60_000, 0, 86_400_000),
    keyCacheFreshMs: int(env, 'KEY_CACHE_FRESH_MS', 1_000, 0, 600_000),
    rateLimits: { rpm: int(env, 'RATE_LIMIT_RPM', 0, 0, 100_000_000), tpm: int(env, 'RATE_LIMIT_TPM', 0, 0, 1_000_000_000_000) },
    billingEnabled: bool(env, 'BILLING_ENABLED'),
    backgroundConcurrency: int(env, 'BACKGROUND_CONCURRENCY', 4, 1, 1024),
    shutdownGraceMs: int(env, 'SHUTDOWN_GRACE_MS', 10_000, 0, 3_600_000),
    backgroundStaleMs: int(env, 'BACKGROUND_STALE_MS', 30_000, 1_000, 3_600_000),
  };
}
