import type { Redis } from 'ioredis';
import { redisClass } from './redis-client.js';
import { AppError, msg, type Texts } from '../errors.js';

/** Fixed one-minute windows of counts, shared by instances when backed by Redis. */
export interface WindowStore {
  /** adds `amount` to the current window of `key` and gives the window's total and ms until it ends */
  add(key: string, amount: number): Promise<{ total: number; resetMs: number }>;
  /** the current window's total */
  get(key: string): Promise<{ total: number; resetMs: number }>;
  /**
   * Adds `amount` to the current window of `key` only if its total then stays within `limit`, atomically (across
   * instances with Redis); gives the window (its number, for `adjust`), its total and the ms until it ends.
   */
  reserve(key: string, amount: number, limit: number): Promise<{ ok: boolean; window: number; total: number; resetMs: number }>;
  /** Adds `delta` (negative: gives back) to window `window` of `key`, if that window is still the current one. */
  adjust(key: string, window: number, delta: number): Promise<void>;
  close(): Promise<void>;
}

const WINDOW_MS = 60_000;

class MemoryWindows implements WindowStore {
  private readonly counts = new Map<string, { window: number; total: number }>();
  async add(key: string, amount: number) {
    const now = Date.now();
    const w = Math.floor(now / WINDOW_MS);
    let e = this.counts.get(key);
    if (!e || e.window !== w) {
      e = { window: w, total: 0 };
      this.counts.set(key, e);
      if (this.counts.size > 100_000) this.sweep(w);
    }
    e.total += amount;
    return { total: e.total, resetMs: (w + 1) * WINDOW_MS - now };
  }
  async get(key: string) {
    const now = Date.now();
    const w = Math.floor(now / WINDOW_MS);
    const e = this.counts.get(key);
    return { total: e && e.window === w ? e.total : 0, resetMs: (w + 1) * WINDOW_MS - now };
  }
  async reserve(key: string, amount: number, limit: number) {
    const now = Date.now();
    const w = Math.floor(now / WINDOW_MS);
    const e = this.counts.get(key);
    const total = e && e.window === w ? e.total : 0;
    if (total + amount > limit) return { ok: false, window: w, total, resetMs: (w + 1) * WINDOW_MS - now };
    return { ok: true, window: w, ...(await this.add(key, amount)) };
  }
  async adjust(key: string, window: number, delta: number) {
    const e = this.counts.get(key);
    if (e && e.window === window && window === Math.floor(Date.now() / WINDOW_MS)) e.total = Math.max(0, e.total + delta);
  }
  private sweep(w: number) {
    for (const [k, v] of this.counts) if (v.window !== w) this.counts.delete(k);
  }
  async close() {}
}

/** How long the first requests after start wait for the first connection to Redis. */
const FIRST_CONNECT_WAIT_MS = 2_000;

/** KEYS: the window; ARGV: amount, limit, ttl (ms). Adds only within the limit: { 1|0, total }. */
const RESERVE = `
local t = tonumber(redis.call('GET', KEYS[1]) or '0')
if t + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return { 0, t } end
t = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return { 1, t }`;
/** KEYS: the window; ARGV: delta. Only a window that still exists (a lapsed one is not made again). */
const ADJUST = `
local t = redis.call('GET', KEYS[1])
if not t then return 0 end
if tonumber(t) + tonumber(ARGV[1]) < 0 then redis.call('SET', KEYS[1], 0, 'KEEPTTL') else redis.call('INCRBY', KEYS[1], ARGV[1]) end
return 1`;

type ScriptedWindows = Redis & {
  windowReserve(key: string, amount: number, limit: number, ttlMs: number): Promise<[number, number]>;
  windowAdjust(key: string, delta: number): Promise<number>;
};

class RedisWindows implements WindowStore {
  private readonly r: ScriptedWindows;
  /** until the first connection is made: requests wait for it (bounded) instead of failing */
  private firstConnect: Promise<void> | undefined;
  /** `prefix`: the installation's REDIS_PREFIX (windows `<prefix>:rl:<rpm|tpm>:<key id>:<minute>`) */
  constructor(
    url: string,
    private readonly prefix: string,
  ) {
    // fail fast when Redis is away: the request gets a 503 instead of waiting in an offline queue
    const r = new (redisClass())(url, { maxRetriesPerRequest: 1, enableOfflineQueue: false, retryStrategy: (n) => Math.min(n * 100, 1000) });
    r.on('error', () => {});
    r.defineCommand('windowReserve', { numberOfKeys: 1, lua: RESERVE });
    r.defineCommand('windowAdjust', { numberOfKeys: 1, lua: ADJUST });
    this.r = r as ScriptedWindows;
    this.firstConnect = new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.firstConnect = undefined;
        resolve();
      };
      const timer = setTimeout(done, FIRST_CONNECT_WAIT_MS);
      timer.unref();
      this.r.once('ready', done);
    });
  }
  private k(key: string, w: number) {
    return `${this.prefix}:rl:${key}:${w}`;
  }
  async add(key: string, amount: number) {
    if (this.firstConnect) await this.firstConnect;
    const now = Date.now();
    const w = Math.floor(now / WINDOW_MS);
    const k = this.k(key, w);
    const res = await this.r
      .multi()
      .incrby(k, amount)
      .pexpire(k, WINDOW_MS * 2)
      .exec();
    const total = Number(res?.[0]?.[1] ?? 0);
    return { total, resetMs: (w + 1) * WINDOW_MS - now };
  }
  async get(key: string) {
    if (this.firstConnect) await this.firstConnect;
    const now = Date.now();
    const w = Math.floor(now / WINDOW_MS);
    const v = await this.r.get(this.k(key, w));
    return { total: Number(v ?? 0), resetMs: (w + 1) * WINDOW_MS - now };
  }
  async reserve(key: string, amount: number, limit: number) {
    if (this.firstConnect) await this.firstConnect;
    const now = Date.now();
    const w = Math.floor(now / WINDOW_MS);
    const [ok, total] = await this.r.windowReserve(this.k(key, w), amount, limit, WINDOW_MS * 2);
    return { ok: ok === 1, window: w, total: Number(total), resetMs: (w + 1) * WINDOW_MS - now };
  }
  async adjust(key: string, window: number, delta: number) {
    if (delta === 0 || window !== Math.floor(Date.now() / WINDOW_MS)) return;
    if (this.firstConnect) await this.firstConnect;
    await this.r.windowAdjust(this.k(key, window), delta);
  }
  async close() {
    this.r.disconnect();
  }
}

/** Windows in Redis (`redis`: its URL and the installation's REDIS_PREFIX), shared by the instances; else in memory. */
export function createWindowStore(redis?: { url: string; prefix: string }): WindowStore {
  return redis ? new RedisWindows(redis.url, redis.prefix) : new MemoryWindows();
}

export interface LimitedKey {
  keyId: string;
  rpmLimit: number | null;
  tpmLimit: number | null;
}

/** Tokens reserved in a key's TPM window (RateLimiter.reserveTokens), given back or settled at the end. */
export interface TokenHold {
  keyId: string;
  window: number;
  tokens: number;
}

/**
 * Per-key requests-per-minute and tokens-per-minute limits (the key's own, else the configured default;
 * 0 = unlimited). Requests are counted when they arrive. Tokens: a request that generates reserves its worst
 * case (input estimate + the most output it may produce) in the window at admission, atomically, and is refused
 * when that would pass the limit; at its end the reservation is settled with the real count (the unused part
 * given back while the window lasts). Tokens of records made without a reservation are added when recorded, and
 * such routes are refused once this minute's tokens reach the limit.
 */
export class RateLimiter {
  constructor(
    private readonly store: WindowStore,
    private readonly defaults: { rpm: number; tpm: number },
  ) {}

  /** `tokens` false: the route reserves its tokens itself (reserveTokens), so the window is not read here */
  async check(key: LimitedKey, tokens = true): Promise<void> {
    const rpm = key.rpmLimit ?? this.defaults.rpm;
    const tpm = key.tpmLimit ?? this.defaults.tpm;
    if (rpm > 0) {
      const { total, resetMs } = await this.store.add(`rpm:${key.keyId}`, 1);
      if (total > rpm) throw limited(msg('rpm_reached', { rpm }), resetMs, rpm, 0);
    }
    if (tpm > 0 && tokens) {
      const { total, resetMs } = await this.store.get(`tpm:${key.keyId}`);
      if (total >= tpm) throw limited(msg('tpm_reached', { tpm, used: total }), resetMs, tpm, 0);
    }
  }

  /** the TPM limit of a key (0: none) */
  tpmOf(key: LimitedKey): number {
    return key.tpmLimit ?? this.defaults.tpm;
  }

  /**
   * Reserves a request's worst case (`input` estimated + at most `output`) in the key's TPM window: one atomic
   * step, refused with 429 saying the reservation when it would pass the limit. Undefined when no limit applies.
   */
  async reserveTokens(key: LimitedKey, input: number, output: number): Promise<TokenHold | undefined> {
    const tpm = this.tpmOf(key);
    if (!(tpm > 0)) return undefined;
    const tokens = Math.max(0, Math.ceil(input + output));
    const r = await this.store.reserve(`tpm:${key.keyId}`, tokens, tpm);
    if (!r.ok) {
      throw limited(
        tokens > tpm ? msg('tpm_too_large', { tpm, tokens, input, output }) : msg('tpm_reserve', { tpm, tokens, input, output, used: r.total }),
        r.resetMs,
        tpm,
        Math.max(0, tpm - r.total),
      );
    }
    return { keyId: key.keyId, window: r.window, tokens };
  }

  /** The request ended having used `used` tokens of its reservation (0: none): the difference goes back. */
  async settleTokens(hold: TokenHold, used: number): Promise<void> {
    await this.store.adjust(`tpm:${hold.keyId}`, hold.window, Math.round(used) - hold.tokens);
  }

  async addTokens(key: LimitedKey, tokens: number): Promise<void> {
    const tpm = key.tpmLimit ?? this.defaults.tpm;
    if (tpm > 0 && tokens > 0) await this.store.add(`tpm:${key.keyId}`, tokens);
  }

  /** whether any limit can apply to this key (skips the store round trip when none does) */
  applies(key: LimitedKey): boolean {
    return (key.rpmLimit ?? this.defaults.rpm) > 0 || (key.tpmLimit ?? this.defaults.tpm) > 0;
  }
}

function limited(message: Texts, resetMs: number, limit: number, remaining: number): AppError {
  const secs = Math.max(1, Math.ceil(resetMs / 1000));
  return new AppError('rate_limit_exceeded', message, null, {
    headers: {
      'retry-after': String(secs),
      'retry-after-ms': String(Math.max(1, resetMs)),
      'x-ratelimit-limit': String(limit),
      'x-ratelimit-remaining': String(remaining),
    },
  });
}

export interface ConcurrentKey {
  keyId: string;
  /** the key's own limit (null = the configured default; 0 = unlimited) */
  maxConcurrency: number | null;
}

/** Gives back a place taken by ConcurrencyLimiter.take: the first call does, every later one nothing. */
export type Release = () => void;

const NOTHING_HELD: Release = () => {};

/**
 * Per-key concurrency (issue 22 §1): the requests in progress and the open WebSockets of one inference key, counted
 * together (a WebSocket holds its place for its whole life), at most the key's `max_concurrency`, else the
 * configured default (KEY_MAX_CONCURRENCY; 0 = unlimited). Counted in this process's memory: each instance gives a
 * key that many places (docs/security.md). A place is taken synchronously, so two requests can never both take the
 * last one, and its release is idempotent, so the HTTP layer may call it from every path that ends a request.
 */
export class ConcurrencyLimiter {
  private readonly held = new Map<string, number>();

  constructor(private readonly defaultMax: number) {}

  /** the key's limit (0 = unlimited) */
  limitOf(key: ConcurrentKey): number {
    return key.maxConcurrency ?? this.defaultMax;
  }

  /** places the key holds now */
  inUse(keyId: string): number {
    return this.held.get(keyId) ?? 0;
  }

  /** Takes one of the key's places, or refuses with 429 `concurrency_limit_exceeded` (retry-after) when none is free. */
  take(key: ConcurrentKey): Release {
    const max = this.limitOf(key);
    if (max <= 0) return NOTHING_HELD;
    const id = key.keyId;
    const n = this.held.get(id) ?? 0;
    if (n >= max) {
      throw new AppError('concurrency_limit_exceeded', msg('concurrency_reached', { max }), null, {
        // a place frees when a request ends: no window to wait for, so the shortest wait a client will honor
        headers: { 'retry-after': '1', 'retry-after-ms': '1000', 'x-concurrency-limit': String(max) },
      });
    }
    this.held.set(id, n + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.held.get(id) ?? 1) - 1;
      if (left > 0) this.held.set(id, left);
      else this.held.delete(id);
    };
  }
}
