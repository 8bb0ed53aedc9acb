import type { Redis } from 'ioredis';
import { redisClass } from './redis-client.js';
import type { Client, Pool } from 'pg';
import type { FastifyBaseLogger } from 'fastify';

export type FeedHandler = (message: Record<string, unknown>) => void;

/**
 * Messages every instance must hear (key invalidations, cancels, breaker changes). Redis pub/sub when REDIS_URL
 * is set, PostgreSQL LISTEN/NOTIFY when only DATABASE_URL is, otherwise in this process only. Delivery is best
 * effort: the key cache's freshness window bounds what a lost message can cost.
 *
 * Channels belong to one installation: Redis pub/sub ignores the database number of REDIS_URL and NOTIFY ignores
 * the schema, so without a name of its own every installation on one Redis (or one PostgreSQL database) would hear
 * the others (a breaker opened by staging took a production deployment out). A Redis channel is
 * `<REDIS_PREFIX>:<channel>`, a PostgreSQL one `portico_<installation id>_<channel>`.
 */
export interface ChangeFeed {
  readonly kind: 'local' | 'redis' | 'postgres';
  publish(channel: string, message: Record<string, unknown>): Promise<void>;
  /**
   * Hears a channel. The promise settles once the subscription is in place (Redis acknowledged SUBSCRIBE,
   * PostgreSQL ran LISTEN): a reader that reads its state after it misses nothing published since. It never
   * rejects; with the connection down it waits until the connection is back.
   */
  subscribe(channel: string, handler: FeedHandler): Promise<void>;
  /**
   * Called each time the subscription is in place and acknowledged: after the connection was lost (messages
   * published meanwhile were not delivered), and the first time too (whoever read its state before subscribing
   * may have missed a message published in between: the stored models read at start, before Redis said
   * SUBSCRIBE was done). Whoever keeps state from the messages starts afresh.
   */
  onResync(handler: () => void): void;
  close(): Promise<void>;
}

class LocalFeed implements ChangeFeed {
  readonly kind = 'local' as const;
  private readonly handlers = new Map<string, FeedHandler[]>();
  async publish(channel: string, message: Record<string, unknown>) {
    for (const h of this.handlers.get(channel) ?? []) h(message);
  }
  async subscribe(channel: string, handler: FeedHandler) {
    this.handlers.set(channel, [...(this.handlers.get(channel) ?? []), handler]);
  }
  onResync() {
    // in process: nothing is ever lost
  }
  async close() {}
}

class RedisFeed implements ChangeFeed {
  readonly kind = 'redis' as const;
  /** opened at the first publish, the subscriber at the first subscribe: a command that does neither opens nothing */
  private pubConn?: Redis;
  private sub?: Redis;
  private readonly handlers = new Map<string, FeedHandler[]>();
  private readonly opts = { lazyConnect: false, maxRetriesPerRequest: 1, enableOfflineQueue: false, retryStrategy: (n: number) => Math.min(n * 100, 1000) };

  /** `<prefix>:`: what this installation's channels start with */
  private readonly prefix: string;

  constructor(
    private readonly url: string,
    prefix: string,
    private readonly log: FastifyBaseLogger,
  ) {
    this.prefix = prefix + ':';
  }

  private get pub(): Redis {
    if (!this.pubConn) {
      this.pubConn = new (redisClass())(this.url, this.opts);
      this.pubConn.on('error', (e) => this.log.debug({ err: e.message }, 'redis feed connection error'));
    }
    return this.pubConn;
  }

  private subscriber(): Redis {
    if (this.sub) return this.sub;
    // The channels are subscribed here, on every 'ready' (the first connection and each reconnect), and never while
    // the connection is being set up: ioredis (5.11) sent a SUBSCRIBE queued during the connect before its ready
    // check, whose INFO was then refused in subscriber mode ("only subscriber commands may be used"), and the
    // channels subscribed at start were lost (no key change or breaker heard; test/platform/installations.test.ts).
    // No ready check and no automatic resubscription: the channels go out once the connection is set up.
    const sub = new (redisClass())(this.url, {
      ...this.opts,
      enableOfflineQueue: true,
      maxRetriesPerRequest: null,
      enableReadyCheck: false,
      autoResubscribe: false,
    });
    sub.on('error', (e) => this.log.debug({ err: e.message }, 'redis feed connection error'));
    // what was published while the connection was down (or before the first SUBSCRIBE was acknowledged) is gone:
    // the resync handlers catch up once the channels are subscribed
    sub.on('ready', () => {
      const channels = [...this.handlers.keys()].map((c) => this.prefix + c);
      if (!channels.length) return;
      sub.subscribe(...channels).then(
        () => {
          for (const w of this.waiting.splice(0)) w();
          for (const h of this.resync) h();
        },
        (e) => this.log.warn({ err: e.message }, 'redis subscribe failed'),
      );
    });
    sub.on('message', (ch: string, raw: string) => {
      let msg: Record<string, unknown>;
      try {
        msg = JSON.parse(raw);
      } catch {
        return;
      }
      if (!ch.startsWith(this.prefix)) return;
      for (const h of this.handlers.get(ch.slice(this.prefix.length)) ?? []) h(msg);
    });
    this.sub = sub;
    return sub;
  }
  private readonly resync: Array<() => void> = [];
  onResync(handler: () => void) {
    this.resync.push(handler);
  }

  async publish(channel: string, message: Record<string, unknown>) {
    // a fresh connection (an operator command publishes right after it starts) is waited for, briefly
    if (this.pub.status === 'connecting' || this.pub.status === 'wait') await this.ready(2_000);
    await this.pub.publish(this.prefix + channel, JSON.stringify(message));
  }
  private ready(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.pub.off('ready', done);
        resolve();
      };
      const t = setTimeout(done, ms);
      this.pub.once('ready', done);
    });
  }
  /** subscribers waiting for the channels to be subscribed at the next 'ready' */
  private readonly waiting: Array<() => void> = [];
  subscribe(channel: string, handler: FeedHandler): Promise<void> {
    const known = this.handlers.has(channel);
    if (!known) this.handlers.set(channel, []);
    this.handlers.get(channel)!.push(handler);
    // a connection not ready yet subscribes every channel once it is ('ready' above)
    const sub = this.subscriber();
    if (sub.status !== 'ready') return new Promise((resolve) => this.waiting.push(resolve));
    if (known) return Promise.resolve();
    return sub.subscribe(this.prefix + channel).then(
      () => undefined,
      (e) => {
        this.log.warn({ err: e.message, channel }, 'redis subscribe failed');
        // the next 'ready' subscribes it again
        return new Promise<void>((resolve) => this.waiting.push(resolve));
      },
    );
  }
  async close() {
    this.pubConn?.disconnect();
    this.sub?.disconnect();
  }
}

/** node-postgres, loaded when a PostgreSQL feed first needs it (a start on the embedded database never loads it) */
const loadPg = () => import('pg').then((m) => m.default);

/** LISTEN/NOTIFY on one dedicated connection that reconnects by itself. */
class PostgresFeed implements ChangeFeed {
  readonly kind = 'postgres' as const;
  private client?: Client;
  private readonly handlers = new Map<string, FeedHandler[]>();
  private closed = false;
  /** for publishing: opened at the first publish, like the listening connection at the first subscribe */
  private pool?: Promise<Pool>;
  /** `portico_<installation id>_`: what this installation's channels start with */
  private readonly prefix: string;

  constructor(
    private readonly url: string,
    installation: string,
    private readonly log: FastifyBaseLogger,
  ) {
    if (!/^[a-z0-9]+$/.test(installation)) throw new Error(`bad installation id ${installation}`);
    this.prefix = `portico_${installation}_`;
  }

  private async connect() {
    if (this.closed) return;
    const { Client } = await loadPg();
    const c = new Client({ connectionString: this.url });
    c.on('error', () => {});
    c.on('end', () => {
      if (this.client === c) this.client = undefined;
      if (!this.closed) setTimeout(() => (this.connecting = this.connect()), 500).unref();
    });
    c.on('notification', (n) => {
      if (!n.channel.startsWith(this.prefix) || !n.payload) return;
      let msg: Record<string, unknown>;
      try {
        msg = JSON.parse(n.payload);
      } catch {
        return;
      }
      for (const h of this.handlers.get(n.channel.slice(this.prefix.length)) ?? []) h(msg);
    });
    try {
      await c.connect();
      if (this.closed) {
        await c.end();
        return;
      }
      for (const ch of this.handlers.keys()) await c.query(`listen ${this.prefix}${ch}`);
      this.client = c;
      for (const w of this.waiting.splice(0)) w();
      // listening now: what was sent before (while the connection was down, or before the first LISTEN) is caught up
      for (const h of this.resync) h();
    } catch (e) {
      this.log.debug({ err: (e as Error).message }, 'postgres feed connect failed');
      c.end().catch(() => {});
    }
  }

  async publish(channel: string, message: Record<string, unknown>) {
    // as a pool that was ended refuses: a closed feed never opens one
    if (this.closed && !this.pool) throw new Error('Cannot publish on a closed change feed');
    this.pool ??= loadPg().then(({ Pool }) => {
      const pool = new Pool({ connectionString: this.url, max: 2 });
      pool.on('error', () => {});
      return pool;
    });
    await (await this.pool).query('select pg_notify($1, $2)', [this.prefix + channel, JSON.stringify(message)]);
  }

  subscribe(channel: string, handler: FeedHandler): Promise<void> {
    if (!/^[a-z_]+$/.test(channel)) throw new Error(`bad channel ${channel}`);
    const known = this.handlers.has(channel);
    if (!known) this.handlers.set(channel, []);
    this.handlers.get(channel)!.push(handler);
    if (!this.connecting) {
      // the listening connection is opened at the first subscribe (a process that only publishes never holds one)
      this.connecting = this.connect();
    } else if (!known && this.client) {
      const c = this.client;
      // one LISTEN at a time on the connection: pg queues a query sent while another runs, but that use is deprecated
      // (and goes in pg 9), and several subscribes in one turn (a module's start) would send theirs at once
      const listened = this.listening.then(() => c.query(`listen ${this.prefix}${channel}`));
      this.listening = listened.then(
        () => {},
        () => {},
      );
      return listened.then(
        () => undefined,
        () => new Promise<void>((resolve) => this.waiting.push(resolve)),
      );
    }
    if (this.client) return Promise.resolve();
    return new Promise((resolve) => this.waiting.push(resolve));
  }
  /** subscribers waiting for the listening connection (every channel is listened to when it connects) */
  private readonly waiting: Array<() => void> = [];

  private connecting?: Promise<void>;
  /** the last LISTEN sent on the listening connection: the next waits for it */
  private listening: Promise<void> = Promise.resolve();
  private readonly resync: Array<() => void> = [];

  onResync(handler: () => void) {
    this.resync.push(handler);
  }

  async close() {
    this.closed = true;
    await this.connecting;
    await this.client?.end().catch(() => {});
    await (await this.pool)?.end().catch(() => {});
  }
}

export interface FeedOptions {
  redisUrl?: string;
  /** with redisUrl: the installation's REDIS_PREFIX (channels `<prefix>:<channel>`) */
  redisPrefix?: string;
  databaseUrl?: string;
  /** with databaseUrl and no redisUrl: the installation id (channels `portico_<id>_<channel>`) */
  installation?: string;
  log: FastifyBaseLogger;
}

export function createFeed(opts: FeedOptions): ChangeFeed {
  if (opts.redisUrl) {
    if (!opts.redisPrefix) throw new Error('a Redis change feed needs the installation prefix');
    return new RedisFeed(opts.redisUrl, opts.redisPrefix, opts.log);
  }
  if (opts.databaseUrl) {
    if (!opts.installation) throw new Error('a PostgreSQL change feed needs the installation id');
    return new PostgresFeed(opts.databaseUrl, opts.installation, opts.log);
  }
  return new LocalFeed();
}
