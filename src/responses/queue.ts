import { Queue, Worker, type ConnectionOptions } from 'bullmq';
import type { FastifyBaseLogger } from 'fastify';

/**
 * Where background responses wait to run. In-process when Redis is not configured; BullMQ on Redis when it
 * is, so any instance may take a queued job. The job carries only the response id: the request itself is
 * stored with the response, so whichever instance runs it rebuilds it from PostgreSQL.
 */
export interface BackgroundQueue {
  readonly kind: 'local' | 'bullmq';
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

export class BullQueue implements BackgroundQueue {
  readonly kind = 'bullmq' as const;
  private readonly queue: Queue;
  private worker?: Worker;
  private readonly connection: ConnectionOptions;

  constructor(
    redisUrl: string,
    private readonly concurrency: number,
    private readonly log: FastifyBaseLogger,
  ) {
    const u = new URL(redisUrl);
    this.connection = {
      host: u.hostname,
      port: Number(u.port || 6379),
      username: u.username || undefined,
      password: u.password ? decodeURIComponent(u.password) : undefined,
      db: u.pathname.length > 1 ? Number(u.pathname.slice(1)) : 0,
      tls: u.protocol === 'rediss:' ? {} : undefined,
      maxRetriesPerRequest: null,
    };
    this.queue = new Queue(QUEUE, { connection: { ...this.connection, enableOfflineQueue: false, maxRetriesPerRequest: 1 } as ConnectionOptions });
    this.queue.on('error', (e) => this.log.debug({ err: e.message }, 'background queue error'));
  }

  async enqueue(id: string) {
    await this.queue.add('respond', { id }, { jobId: id, removeOnComplete: true, removeOnFail: true, attempts: 1 });
  }

  start(run: (id: string) => Promise<void>) {
    this.worker = new Worker(QUEUE, async (job) => run(String(job.data.id)), {
      connection: this.connection,
      concurrency: this.concurrency,
      // a job whose instance died is handed to another instance, which finds it stale and ends it
      stalledInterval: 15_000,
      maxStalledCount: 1,
    });
    this.worker.on('error', (e) => this.log.debug({ err: e.message }, 'background worker error'));
  }

  async close() {
    await this.worker?.close().catch(() => {});
    await this.queue.close().catch(() => {});
  }
}
