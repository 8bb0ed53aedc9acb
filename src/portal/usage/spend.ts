import type { Redis } from 'ioredis';
import { redisClass } from '../../platform/cluster/redis-client.js';

/**
 * The running spend of each payer, shared by the instances (Redis) or kept by the one instance (memory).
 *
 * One entry per payer: `epoch` (a random id given when the entry is made), `used` (micro-credits charged while
 * the entry lives) and `version` (raised whenever what an instance read from the ledger for this payer may be
 * out of date: a grant, a record that reached the ledger uncounted). A usage record carries, in the ledger, the
 * epoch it was charged under (`spend_epoch`); a charge counts only if the entry's epoch is still that one. So at
 * any moment the payer's true spend is exactly
 *
 *     used (the records of the current epoch, stored or still on their way)
 *   + the ledger's records of any other epoch, or none (read from the ledger, once per epoch and version)
 *
 * and no record is in both parts or in neither, whatever the order in which charges, reads and the arrival
 * of records in the ledger happen. See BudgetGuard for the reasoning.
 */
export interface SpendEntry {
  epoch: string;
  used: number;
  version: number;
}

/**
 * A reservation asked of the store: `micros` held for request `id` until it is charged or released, or until
 * `ttlMs` has passed (a crashed process's reservations expire; the next reservation of the payer drops them).
 * `base` is what the instance read from the ledger for the entry's epoch and version (`epoch`, `version`):
 * granted minus the records not of that epoch. The store grants it only if that is still the entry's epoch and
 * version and `base - used - reserved >= micros` (and something is left at all), in one atomic step.
 */
export interface ReserveAsk {
  newEpoch: string;
  epoch: string;
  version: number;
  base: number;
  id: string;
  micros: number;
  ttlMs: number;
}

/** `ok`: held; `refused`: not enough left; `stale`: the instance's ledger part is not for this epoch/version */
export type ReserveResult = SpendEntry & { status: 'ok' | 'refused' | 'stale'; reserved: number };

export interface SpendStore {
  readonly kind: 'memory' | 'redis';
  /** The payer's entry, made with `newEpoch` (used 0, version 0) if there is none. */
  read(payer: string, newEpoch: string): Promise<SpendEntry>;
  /** Reads the entry (made as `read` does) and holds a reservation if enough is left; see ReserveAsk. */
  reserve(payer: string, ask: ReserveAsk): Promise<ReserveResult>;
  /** Drops a reservation (the request ended without a charge); nothing if it is gone (expired, entry reset). */
  release(payer: string, id: string): Promise<void>;
  /**
   * Adds `micros` to `used` if the entry's epoch is `epoch`; false if it was not counted (no entry, another
   * epoch). `reservation`: dropped in the same atomic step, whatever the epoch.
   */
  charge(payer: string, epoch: string, micros: number, reservation?: string): Promise<boolean>;
  /** Records charged under these epochs ('' = none) reached the ledger: raises the version if any is not the entry's epoch. */
  settle(payer: string, epochs: string[]): Promise<void>;
  /** A record charged under `epoch` was refused by the ledger: takes its charge back if that epoch is current. */
  refund(payer: string, epoch: string, micros: number): Promise<void>;
  /** Raises the version (credits were granted), if there is an entry. */
  bump(payer: string): Promise<void>;
  /** Forgets the entry: the next read makes a new epoch (after a charge of uncertain outcome). */
  reset(payer: string): Promise<void>;
  /** Fails when the store cannot be reached now (checked before credits are granted). */
  reachable(): Promise<void>;
  close(): Promise<void>;
}

interface MemoryEntry extends SpendEntry {
  reserved: number;
  /** reservation id -> [micros, expires at (ms)] */
  holds: Map<string, [number, number]>;
}

export class MemorySpendStore implements SpendStore {
  readonly kind = 'memory' as const;
  private readonly entries = new Map<string, MemoryEntry>();

  private entry(payer: string, newEpoch: string): MemoryEntry {
    let e = this.entries.get(payer);
    if (!e) {
      e = { epoch: newEpoch, used: 0, version: 0, reserved: 0, holds: new Map() };
      this.entries.set(payer, e);
    }
    return e;
  }

  /** (synchronous up to its result: two reservations never interleave) */
  async reserve(payer: string, ask: ReserveAsk): Promise<ReserveResult> {
    const e = this.entry(payer, ask.newEpoch);
    const now = Date.now();
    for (const [id, [micros, until]] of e.holds) {
      if (until <= now) {
        e.holds.delete(id);
        e.reserved -= micros;
      }
    }
    const seen = { epoch: e.epoch, used: e.used, version: e.version, reserved: e.reserved };
    if (e.epoch !== ask.epoch || e.version !== ask.version) return { status: 'stale', ...seen };
    const left = ask.base - e.used - e.reserved;
    if (ask.base - e.used <= 0 || left < ask.micros) return { status: 'refused', ...seen };
    if (ask.micros > 0) {
      e.holds.set(ask.id, [ask.micros, now + ask.ttlMs]);
      e.reserved += ask.micros;
    }
    return { status: 'ok', ...seen, reserved: e.reserved };
  }
  async release(payer: string, id: string) {
    this.drop(this.entries.get(payer), id);
  }
  private drop(e: MemoryEntry | undefined, id: string | undefined) {
    const h = e && id !== undefined ? e.holds.get(id) : undefined;
    if (!e || !h) return;
    e.holds.delete(id!);
    e.reserved -= h[0];
  }

  async read(payer: string, newEpoch: string): Promise<SpendEntry> {
    const e = this.entry(payer, newEpoch);
    return { epoch: e.epoch, used: e.used, version: e.version };
  }
  /** (the body runs before the first await: the charge is counted when this is called, not later) */
  async charge(payer: string, epoch: string, micros: number, reservation?: string): Promise<boolean> {
    const e = this.entries.get(payer);
    this.drop(e, reservation);
    if (!e || e.epoch !== epoch) return false;
    e.used += micros;
    return true;
  }
  async settle(payer: string, epochs: string[]) {
    const e = this.entries.get(payer);
    if (e && epochs.some((x) => x !== e.epoch)) e.version++;
  }
  async refund(payer: string, epoch: string, micros: number) {
    const e = this.entries.get(payer);
    if (e && e.epoch === epoch) e.used -= micros;
  }
  async bump(payer: string) {
    const e = this.entries.get(payer);
    if (e) e.version++;
  }
  /** raises the version of every entry (a change feed that was away may have lost a grant) */
  bumpAll() {
    for (const e of this.entries.values()) e.version++;
  }
  async reset(payer: string) {
    // its reservations go with it: requests in flight then run unreserved (their own cap still holds)
    this.entries.delete(payer);
  }
  async reachable() {}
  async close() {}
}

/**
 * Where the entries are kept without REDIS_PREFIX: `portico:spend:<ledger id>:<payer>`, as before REDIS_PREFIX existed
 * (the ledger id already tells installations apart), so an upgrade's old and new instances keep one running
 * spend. With REDIS_PREFIX: `<prefix>:spend:<ledger id>:<payer>`.
 */
export const DEFAULT_SPEND_PREFIX = 'portico:spend:';
/** an entry nobody charges for this long is dropped by Redis (and rebuilt from the ledger when needed); checks
 * only read, so they write nothing to Redis */
const TTL_SECONDS = 7 * 86400;

const READ = `
local v = redis.call('HMGET', KEYS[1], 'e', 'u', 'v')
if not v[1] then
  redis.call('HSET', KEYS[1], 'e', ARGV[1], 'u', 0, 'v', 0)
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  v = { ARGV[1], '0', '0' }
end
return v`;
/*
 * Reservations: field 'r' of the hash is their total, field 'r:<id>' each one's micro-credits, and a sorted set
 * (KEYS[2], the hash's key + ':r') their expiry times (ms). Expired ones are dropped by the next reservation.
 * ARGV: new epoch, ttl (s), known epoch, known version, base, id, micros, now (ms), expires at (ms)
 * Returns { status (1 ok, 0 refused, -1 stale), epoch, used, version, reserved }.
 */
const RESERVE = `
local v = redis.call('HMGET', KEYS[1], 'e', 'u', 'v', 'r')
if not v[1] then
  redis.call('HSET', KEYS[1], 'e', ARGV[1], 'u', 0, 'v', 0, 'r', 0)
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  redis.call('DEL', KEYS[2])
  v = { ARGV[1], '0', '0', '0' }
end
local reserved = tonumber(v[4] or '0')
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[8])
for i = 1, #old do
  local a = redis.call('HGET', KEYS[1], 'r:' .. old[i])
  if a then
    reserved = redis.call('HINCRBY', KEYS[1], 'r', -tonumber(a))
    redis.call('HDEL', KEYS[1], 'r:' .. old[i])
  end
end
if #old > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[8]) end
if v[1] ~= ARGV[3] or v[3] ~= ARGV[4] then return { -1, v[1], v[2], v[3], reserved } end
local left = tonumber(ARGV[5]) - tonumber(v[2]) - reserved
local micros = tonumber(ARGV[7])
if tonumber(ARGV[5]) - tonumber(v[2]) <= 0 or left < micros then return { 0, v[1], v[2], v[3], reserved } end
if micros > 0 then
  reserved = redis.call('HINCRBY', KEYS[1], 'r', ARGV[7])
  redis.call('HSET', KEYS[1], 'r:' .. ARGV[6], ARGV[7])
  redis.call('ZADD', KEYS[2], ARGV[9], ARGV[6])
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
return { 1, v[1], v[2], v[3], reserved }`;
/** KEYS: hash, reservations; ARGV: id */
const RELEASE = `
local a = redis.call('HGET', KEYS[1], 'r:' .. ARGV[1])
if a then
  redis.call('HINCRBY', KEYS[1], 'r', -tonumber(a))
  redis.call('HDEL', KEYS[1], 'r:' .. ARGV[1])
end
redis.call('ZREM', KEYS[2], ARGV[1])
return 0`;
/** KEYS: hash, reservations; ARGV: epoch, micros, ttl, reservation id ('' = none) */
const CHARGE = `
if ARGV[4] ~= '' then
  local a = redis.call('HGET', KEYS[1], 'r:' .. ARGV[4])
  if a then
    redis.call('HINCRBY', KEYS[1], 'r', -tonumber(a))
    redis.call('HDEL', KEYS[1], 'r:' .. ARGV[4])
  end
  redis.call('ZREM', KEYS[2], ARGV[4])
end
if redis.call('HGET', KEYS[1], 'e') == ARGV[1] then
  redis.call('HINCRBY', KEYS[1], 'u', ARGV[2])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0`;
const SETTLE = `
local e = redis.call('HGET', KEYS[1], 'e')
if not e then return 0 end
for i = 1, #ARGV do
  if ARGV[i] ~= e then
    redis.call('HINCRBY', KEYS[1], 'v', 1)
    return 1
  end
end
return 0`;
const REFUND = `
if redis.call('HGET', KEYS[1], 'e') == ARGV[1] then
  redis.call('HINCRBY', KEYS[1], 'u', -tonumber(ARGV[2]))
  return 1
end
return 0`;
const BUMP = `
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'v', 1)
  return 1
end
return 0`;

type Scripted = Redis & {
  spendRead(key: string, epoch: string, ttl: number): Promise<[string, string, string]>;
  spendCharge(key: string, holds: string, epoch: string, micros: number, ttl: number, reservation: string): Promise<number>;
  spendReserve(key: string, holds: string, ...args: Array<string | number>): Promise<[number, string, string, string, number]>;
  spendRelease(key: string, holds: string, id: string): Promise<number>;
  spendSettle(key: string, ...epochs: string[]): Promise<number>;
  spendRefund(key: string, epoch: string, micros: number): Promise<number>;
  spendBump(key: string): Promise<number>;
};

/**
 * The entries in Redis, one hash per payer (`portico:spend:<ledger id>:<payer>`, or under REDIS_PREFIX: e, u, v), each operation one Lua script,
 * so it is atomic across instances. Commands fail fast while Redis is away (no offline queue, nothing resent
 * after a reconnect, 1 s at most per command): the budget then answers 503, and a charge whose outcome is
 * unknown makes the payer's entry be reset once Redis answers again.
 */
export class RedisSpendStore implements SpendStore {
  readonly kind = 'redis' as const;
  private client: Scripted | undefined;
  private closed = false;
  private ns: string | undefined;
  private nsRead: Promise<string> | undefined;

  /**
   * `namespace` names the ledger (a random id kept in its database): entries of another database sharing this
   * Redis (another deployment, a database restored empty, test schemas) are never taken for this one's.
   */
  constructor(
    private readonly url: string,
    private readonly namespace: () => Promise<string> = async () => '',
    /** what every entry's key starts with (DEFAULT_SPEND_PREFIX, or `<REDIS_PREFIX>:spend:`) */
    private readonly prefix = DEFAULT_SPEND_PREFIX,
  ) {}

  /** The connection is opened on first use (a process that never checks nor grants never opens it). */
  private get r(): Scripted {
    if (this.closed) throw Object.assign(new Error('Connection is closed.'), { code: 'ECONNREFUSED' });
    if (!this.client) {
      const r = new (redisClass())(this.url, {
        maxRetriesPerRequest: 1,
        enableOfflineQueue: false,
        autoResendUnfulfilledCommands: false,
        commandTimeout: 1000,
        retryStrategy: (n) => Math.min(n * 100, 1000),
      });
      r.on('error', () => {});
      r.defineCommand('spendRead', { numberOfKeys: 1, lua: READ });
      r.defineCommand('spendCharge', { numberOfKeys: 2, lua: CHARGE });
      r.defineCommand('spendReserve', { numberOfKeys: 2, lua: RESERVE });
      r.defineCommand('spendRelease', { numberOfKeys: 2, lua: RELEASE });
      r.defineCommand('spendSettle', { numberOfKeys: 1, lua: SETTLE });
      r.defineCommand('spendRefund', { numberOfKeys: 1, lua: REFUND });
      r.defineCommand('spendBump', { numberOfKeys: 1, lua: BUMP });
      this.client = r as Scripted;
    }
    return this.client;
  }

  /** the first connection, waited for once */
  private firstConnection: Promise<void> | undefined;

  /**
   * Right after the connection is opened it is not up yet and, without an offline queue, a command would fail:
   * the first commands wait for it (2 s at most). Later, while Redis is away, commands fail at once (the caller
   * answers 503).
   */
  private ready(): Promise<void> | undefined {
    const r = this.r;
    if (r.status === 'ready') return undefined;
    this.firstConnection ??= new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        r.off('ready', done);
        resolve();
      };
      const timer = setTimeout(done, 2000);
      r.once('ready', done);
    });
    return this.firstConnection;
  }

  /** Fails (as a command would) when Redis cannot be reached now. */
  async reachable(): Promise<void> {
    const w = this.ready();
    if (w) await w;
    await this.r.ping();
  }

  private async key(payer: string): Promise<string> {
    if (this.ns === undefined) {
      this.nsRead ??= this.namespace().then(
        (v) => (this.ns = v),
        (e) => {
          this.nsRead = undefined;
          throw e;
        },
      );
      await this.nsRead;
    }
    return this.keyName(payer);
  }

  /** the Redis key of a payer's entry (for messages to an operator) */
  keyName(payer: string): string {
    return `${this.prefix}${this.ns ?? '<ledger id>'}${this.ns === '' ? '' : ':'}${payer}`;
  }

  async read(payer: string, newEpoch: string): Promise<SpendEntry> {
    const k = await this.key(payer);
    const w = this.ready();
    if (w) await w;
    const [e, u, v] = await this.r.spendRead(k, newEpoch, TTL_SECONDS);
    return { epoch: e, used: Number(u), version: Number(v) };
  }
  async reserve(payer: string, a: ReserveAsk): Promise<ReserveResult> {
    const k = await this.key(payer);
    const w = this.ready();
    if (w) await w;
    const now = Date.now();
    const [st, e, u, v, r] = await this.r.spendReserve(k, `${k}:r`, a.newEpoch, TTL_SECONDS, a.epoch, String(a.version), a.base, a.id, a.micros, now, now + a.ttlMs);
    return { status: st === 1 ? 'ok' : st === 0 ? 'refused' : 'stale', epoch: e, used: Number(u), version: Number(v), reserved: Number(r) };
  }
  async release(payer: string, id: string) {
    const k = await this.key(payer);
    const w = this.ready();
    if (w) await w;
    await this.r.spendRelease(k, `${k}:r`, id);
  }
  async charge(payer: string, epoch: string, micros: number, reservation?: string): Promise<boolean> {
    const k = await this.key(payer);
    const w = this.ready();
    if (w) await w;
    return (await this.r.spendCharge(k, `${k}:r`, epoch, micros, TTL_SECONDS, reservation ?? '')) === 1;
  }
  async settle(payer: string, epochs: string[]) {
    const k = await this.key(payer);
    const w = this.ready();
    if (w) await w;
    await this.r.spendSettle(k, ...epochs);
  }
  async refund(payer: string, epoch: string, micros: number) {
    const k = await this.key(payer);
    const w = this.ready();
    if (w) await w;
    await this.r.spendRefund(k, epoch, micros);
  }
  async bump(payer: string) {
    const k = await this.key(payer);
    const w = this.ready();
    if (w) await w;
    await this.r.spendBump(k);
  }
  async reset(payer: string) {
    const k = await this.key(payer);
    const w = this.ready();
    if (w) await w;
    await this.r.del(k, `${k}:r`);
  }
  async close() {
    this.closed = true;
    this.client?.disconnect();
  }
}

export function createSpendStore(redisUrl: string | undefined, namespace: () => Promise<string>, redisPrefix?: string): SpendStore {
  return redisUrl ? new RedisSpendStore(redisUrl, namespace, redisPrefix ? `${redisPrefix}:spend:` : DEFAULT_SPEND_PREFIX) : new MemorySpendStore();
}
