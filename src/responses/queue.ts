import { createRequire } from 'node:module';
import type { Queue, Worker, ConnectionOptions } from 'bullmq';
import type { FastifyBaseLogger } from 'fastify';

/**
 * Where background responses wait to run. In-process when Redis is not configured; BullMQ on Redis when it
 * is, so any instance may take a queued job. The job carries only the response id: the request itself is
 * stored with the response, so whichever instance runs it rebuilds it from PostgreSQL.
 */
export interface BackgroundQueue {
  readonly kind: 'local' | 'bullmq';
  /** queues the job of response `id`; on BullMQ the job id is the response id, so queuing one already queued adds nothing */
  enqueue(id: string): Promise<void>;
  /** begins taking jobs; `run` resolves when the job is finished */
  start(run: (id: string) => Promise<void>): void;
  close(): Promise<void>;
}

export class LocalQueue implements BackgroundQueue {
  readonly kind = 'local' as const;
  private run?: (id: string) => Promise<void>;
  async enqueue(id: string) {
    // the RunManager bounds concurrency; this only hands the job over
    void this.run?.(id);
  }
  start(run: (id: string) => Promise<void>) {
    this.run = run;
  }
  async close() {}
}

const QUEUE = 'portico-responses';
/** BullMQ (and ioredis, ~30 MiB) loaded only when a Redis queue is used, not by every start that imports this file */
const bullmq = () => createRequire(import.meta.url)('bullmq') as typeof import('bullmq');
/** how long an enqueue may wait for Redis before the request fails (503) */
const ENQUEUE_TIMEOUT_MS = 2_000;

/**
 * BullMQ on Redis. Its keys are the installation's (`<REDIS_PREFIX>:bull:portico-responses:...`): installations
 * sharing a Redis, whatever their database numbers, never take each other's jobs. (Before REDIS_PREFIX the queue
 * was BullMQ's default `bull:portico-responses`; jobs an older version left there are taken up again by the
 * background sweep, which queues anew every response still queued and unclaimed: src/responses/background.ts.)
 */
export class BullQueue implements BackgroundQueue {
  readonly kind = 'bullmq' as const;
  private queue?: Queue;
  private worker?: Worker;
  private readonly connection: ConnectionOptions;
  private readonly prefix: string;

  constructor(
    redisUrl: string,
    redisPrefix: string,
    private readonly concurrency: number,
    private readonly log: FastifyBaseLogger,
  ) {
    this.prefix = `${redisPrefix}:bull`;
    const u = new URL(redisUrl);
    this.connection = {
      host: u.hostname,
      port: Number(u.port || 6379),
      username: u.username || undefined,
      password: u.password ? decodeURIComponent(u.password) : undefined,
      db: u.pathname.length > 1 ? Number(u.pathname.slice(1)) : 0,
      tls: u.protocol === 'rediss:' ? {} : undefined,
      maxRetriesPerRequest: null,
      // reconnect at most a second apart (BullMQ's default backs off to 20 s, so a long Redis outage would
      // leave the queue idle long after Redis is back)
      retryStrategy: (n: number) => Math.min(n * 100, 1000),
    };
  }

  /**
   * The producer is opened on the first enqueue (commands such as `portico keys` never need it). It keeps
   * ioredis' offline queue: with enableOfflineQueue false, BullMQ's own start-up commands (INFO, SELECT) fail
   * when they run before the connection is up, and that error escapes as an unhandled 'error' event that
   * ends the process. Instead each enqueue is bounded in time, so a client gets a 503 while Redis is away.
   */
  private producer(): Queue {
    if (!this.queue) {
      this.queue = new (bullmq().Queue)(QUEUE, { prefix: this.prefix, connection: { ...this.connection, maxRetriesPerRequest: 1 } as ConnectionOptions });
      this.queue.on('error', (e) => this.log.debug({ err: e.message }, 'background queue error'));
    }
    return this.queue;
  }

  async enqueue(id: string) {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(Object.assign(new Error(`Redis did not take the job within ${ENQUEUE_TIMEOUT_MS} ms`), { code: 'ETIMEDOUT' })), ENQUEUE_TIMEOUT_MS);
    });
    try {
      await Promise.race([this.producer().add('respond', { id }, { jobId: id, removeOnComplete: true, removeOnFail: true, attempts: 1 }), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  start(run: (id: string) => Promise<void>) {
    this.worker = new (bullmq().Worker)(QUEUE, async (job) => run(String(job.data.id)), {
      prefix: this.prefix,
      connection: this.connection,
      concurrency: this.concurrency,
      // a job whose instance died is handed to another instance, which finds it stale and ends it
      stalledInterval: 15_000,
      maxStalledCount: 1,
    });
    this.worker.on('error', (e) => this.log.debug({ err: e.message }, 'background worker error'));
  }

  async close() {
    if (this.worker) {
      // a worker closed before its connections are up leaves BullMQ timers behind that keep the process
      // alive for ~15 s (every CLI command paid that): let it finish starting first, briefly
      const w = this.worker;
      await Promise.race([w.waitUntilReady().catch(() => {}), new Promise((r) => setTimeout(r, 2_000).unref())]);
      await w.close().catch(() => {});
    }
    await this.queue?.close().catch(() => {});
  }
}
