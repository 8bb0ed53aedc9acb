/**
 * Background responses: stored (status in_progress, job state queued) with their request (so any instance can run them), handed to a queue
 * (in process, or BullMQ on Redis), run by whichever instance takes the job, followed live or replayed from the
 * stored events, cancelled wherever they run (the change feed carries the cancel), and ended as failed by a
 * sweep when the instance running them stops.
 */
import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { AppError } from '../platform/errors.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { ChangeFeed } from '../platform/cluster/feed.js';
import { fromEngineError } from '../api/engine-errors.js';
import { ResponseBuilder, type StreamEvent } from './builder.js';
import type { ResponseObject } from './object.js';
import type { ResponseStore } from './store.js';
import type { CreateResponseRequest } from './schemas.js';
import { RunManager, type Run } from './runs.js';
import { LocalQueue, type BackgroundQueue } from './queue.js';
import type { Prepared, Preparer } from './prepare.js';
import { withOutputText, type Runner } from './run.js';

export interface BackgroundDeps {
  store: ResponseStore;
  preparer: Preparer;
  runner: Runner;
  log: FastifyBaseLogger;
  /** jobs running at once in this process (the in-process queue; BullMQ has its own concurrency) */
  concurrency?: number;
  /** where jobs wait; in process when not given */
  queue?: BackgroundQueue;
  feed?: ChangeFeed;
  /** false: this process never takes jobs (it still creates, follows and cancels them) */
  worker?: boolean;
}

/** What a background job needs to run on any instance. */
interface StoredRequest {
  req: CreateResponseRequest;
  key: KeyPrincipal;
  requestId: string;
}

export function notFound(id: string) {
  return new AppError('response_not_found', `Response with id '${id}' not found.`, 'response_id');
}

const bad = (message: string, param: string | null = null) => new AppError('validation_error', message, param);

export class Background {
  readonly runs: RunManager;
  readonly instanceId = randomUUID();
  private readonly queue: BackgroundQueue;
  private sweeper?: NodeJS.Timeout;

  constructor(private readonly d: BackgroundDeps) {
    this.runs = new RunManager(d.queue?.kind === 'bullmq' ? 1_000_000 : (d.concurrency ?? 4), d.log);
    this.queue = d.queue ?? new LocalQueue();
    if (d.worker !== false) this.queue.start((id) => this.runJob(id));
    d.feed?.subscribe('responses', (m) => {
      if (typeof m.cancel === 'string') this.stopHere(m.cancel);
    });
  }

  /** Stops a job running in this process (cancel or delete); true when there was one. */
  stopHere(id: string): boolean {
    const run = this.runs.get(id);
    if (!run || run.done) return false;
    run.cancelRequested = true;
    run.controller.abort(new Error('cancelled'));
    return true;
  }

  /** Asks every instance to stop the job (it may run anywhere). */
  async stopEverywhere(id: string): Promise<void> {
    if (!this.stopHere(id)) await this.d.feed?.publish('responses', { cancel: id });
  }

  /** Embedded database: one process owns it, so whatever was unfinished when it last stopped is orphaned. */
  async failOrphans(): Promise<void> {
    const n = await this.d.store.failStale(Number.MAX_SAFE_INTEGER, 'the server stopped before this response finished', true);
    if (n) this.d.log.warn({ count: n }, 'background responses left unfinished by the last run marked failed');
  }

  /**
   * Heartbeats for the jobs running here, and the sweep that ends jobs whose instance stopped saying it runs
   * them (failed, never in_progress forever). `staleMs` is how long a silent job is given.
   */
  startMaintenance(staleMs = 30_000, everyMs = Math.min(5_000, Math.max(100, Math.floor(staleMs / 3)))): Promise<void> {
    let requeuedAt = 0;
    const tick = async () => {
      try {
        const ids = this.runs.ids();
        if (ids.length) await this.d.store.heartbeat(ids, this.instanceId);
        const n = await this.d.store.failStale(Date.now() - staleMs, 'the instance running this response stopped before it finished');
        if (n) this.d.log.warn({ count: n }, 'background responses of a stopped instance marked failed');
        // BullMQ: a response queued longer than staleMs and never claimed may have lost its job (Redis lost it, or
        // an older version queued it under another prefix): queued again, once per staleMs. A job still waiting
        // has that id already, and nothing is added; two runs of one response cannot happen (the claim)
        if (this.queue.kind === 'bullmq' && Date.now() - requeuedAt >= staleMs) {
          requeuedAt = Date.now();
          const waiting = await this.d.store.unclaimed(Math.floor((Date.now() - staleMs) / 1000));
          for (const id of waiting) await this.queue.enqueue(id);
          if (waiting.length) this.d.log.debug({ count: waiting.length }, 'background responses queued and unclaimed: queued again');
        }
      } catch (e) {
        this.d.log.warn({ err: (e as Error).message }, 'background maintenance failed; tried again at the next tick');
      }
    };
    this.sweeper = setInterval(() => void tick(), everyMs);
    this.sweeper.unref();
    return tick();
  }

  /**
   * background true: stored at once (with the request, so any instance can run it), then queued. The client
   * gets it `in_progress` with usage null and empty output (specification 3.2); the row's job state says `queued`
   * until a worker claims it.
   */
  async create(p: Prepared): Promise<ResponseObject> {
    const events: StreamEvent[] = [];
    const builder = new ResponseBuilder(p.response, (e) => events.push(e), { maxToolCalls: p.req.max_tool_calls });
    builder.start(true);
    const queued = builder.snapshot();
    const request: StoredRequest = { req: p.req, key: p.key, requestId: p.requestId };
    // the in-process queue dies with this instance, so its queued jobs carry our heartbeat; BullMQ's do not
    const runner = this.queue.kind === 'local' ? this.instanceId : undefined;
    await this.d.store.insert(
      { id: p.id, userId: p.key.userId, orgId: p.key.orgId, keyId: p.key.keyId, object: queued, inputItems: p.inputItems, request, runner, job: 'queued' },
      events,
    );
    if (p.facts) p.facts.responseId = p.id;
    try {
      await this.queue.enqueue(p.id);
    } catch (e) {
      // the client gets an error (503 when Redis is away): the stored row must not stay queued forever
      const failed = { ...queued, status: 'failed', error: { code: 'server_error', type: 'server_error', message: 'the response could not be queued' } } as ResponseObject;
      await this.d.store
        .update(failed, undefined, ['queued'])
        .catch((err) => this.d.log.error({ err: (err as Error).message, id: p.id }, 'a background response that could not be queued stays queued until the sweep'));
      throw e;
    }
    return withOutputText(queued);
  }

  /** Runs a queued background response (on whichever instance took the job). */
  private runJob(id: string): Promise<void> {
    return new Promise<void>((resolve) => {
      if (this.runs.get(id)) return resolve();
      this.runs.submit(id, (run) => this.run(id, run).finally(resolve));
    });
  }

  private async run(id: string, run: Run): Promise<void> {
    const stored = await this.d.store.getAny(id);
    if (!stored) return; // deleted while queued
    if (stored.job !== 'queued') {
      // cancelled while queued: whoever follows it here gets its events, the final one included (one running
      // on another instance is followed from the store instead)
      if (stored.object.status !== 'in_progress') for (const e of await this.d.store.events(id, -1)) run.push(e);
      return;
    }
    const request = stored.request as StoredRequest | null;
    const storedEvents = await this.d.store.events(id, -1);
    const builder = new ResponseBuilder(stored.object, () => {}, { maxToolCalls: request?.req.max_tool_calls, startSeq: storedEvents.length });
    for (const e of storedEvents) run.push(e);
    const pending: StreamEvent[] = [];
    let flushing: Promise<void> = Promise.resolve();
    const flush = () => {
      const batch = pending.splice(0);
      if (batch.length)
        flushing = flushing.then(() => this.d.store.appendEvents(id, batch)).catch((e) => this.d.log.warn({ err: (e as Error).message, id }, 'could not persist response events'));
      return flushing;
    };
    const timer = setInterval(flush, 200);
    builder.redirect((e) => {
      pending.push(e);
      run.push(e);
    });
    try {
      const claimed = await this.d.store.claim(id, this.instanceId);
      if (!claimed) return; // cancelled, or taken by another instance
      builder.running();
      let final: ResponseObject;
      let p: Prepared | undefined;
      try {
        if (!request) throw new AppError('engine_error', 'the stored request is missing');
        p = await this.d.preparer.prepare(request.req, request.key, request.requestId, { id, inputItems: stored.inputItems, response: builder.response });
        ({ final } = await this.d.runner.execute(p, builder, run.controller.signal, () => {}));
      } catch (e) {
        if (run.controller.signal.aborted) {
          final = run.cancelRequested ? builder.cancel() : builder.fail('server_shutdown', 'the server stopped while this response was running');
        } else {
          const { code, message } = fromEngineError(e);
          final = builder.fail(code, message);
        }
      }
      clearInterval(timer);
      await flush();
      // the result first (a database blip is retried), then the charge: never billed for a lost result
      for (let attempt = 0; ; attempt++) {
        try {
          await this.d.store.update(final, pending.splice(0), ['queued', 'in_progress']);
          break;
        } catch (e) {
          if (attempt >= 4) throw e;
          await new Promise((r) => setTimeout(r, 250 * 2 ** attempt));
        }
      }
      if (p) await this.d.runner.recordUsage(p, final).catch((e) => this.d.log.error({ err: (e as Error).message, id }, 'usage of a background response not recorded'));
      p?.hold?.release();
    } finally {
      clearInterval(timer);
    }
  }

  /** Cancels a background response wherever it runs; cancelling one that already ended answers it as it is. */
  async cancel(id: string, key: KeyPrincipal): Promise<void> {
    const r = await this.d.store.head(id, key.userId);
    if (!r) throw notFound(id);
    if (!r.object.background) throw bad('Only responses created with background set to true can be cancelled.', 'response_id');
    // still waiting in a queue (here or anywhere): cancelled in the store at once, with the final event a stream
    // of it ends with (the same as a cancelled running one: response.incomplete with the cancelled object); the
    // job skips it
    if (r.job === 'queued') {
      const cancelled: ResponseObject = { ...r.object, status: 'cancelled' };
      const seq = (await this.d.store.events(id, -1)).length;
      if (await this.d.store.update(cancelled, [{ type: 'response.incomplete', sequence_number: seq, response: cancelled }], ['queued'])) {
        const waiting = this.runs.get(id);
        if (waiting) waiting.cancelRequested = true;
        return;
      }
    }
    const run = this.runs.get(id);
    if (run && !run.done) {
      this.stopHere(id);
      await this.waitEnded(id, key, run);
    } else if (r.object.status === 'in_progress') {
      // running elsewhere: ask that instance
      await this.d.feed?.publish('responses', { cancel: id });
      await this.waitEnded(id, key);
    }
  }

  /** Waits (at most 5 s) until the response is no longer queued or running. */
  private async waitEnded(id: string, key: KeyPrincipal, run?: Run) {
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline) {
      if (run ? run.done : false) return;
      const now = await this.d.store.head(id, key.userId);
      if (!now || now.object.status !== 'in_progress') return;
      await new Promise((res) => setTimeout(res, 25));
    }
  }

  /** Events of a background response after `after`: stored ones, then live ones while it runs. */
  async *replay(id: string, key: KeyPrincipal, after: number, signal: AbortSignal): AsyncIterable<StreamEvent> {
    const r = await this.d.store.head(id, key.userId);
    if (!r) throw notFound(id);
    if (!r.object.background) throw bad('Only background responses can be streamed again; this one was not created with background: true.', 'stream');
    const run = this.runs.get(id);
    if (run) {
      yield* run.follow(after, signal);
      return;
    }
    let last = after;
    // another instance may be running it: read its events as they are written until it ends
    while (!signal.aborted) {
      for (const e of await this.d.store.events(id, last)) {
        last = e.sequence_number;
        yield e;
      }
      const now = await this.d.store.head(id, key.userId);
      if (!now || now.object.status !== 'in_progress') {
        for (const e of await this.d.store.events(id, last)) yield e;
        return;
      }
      await new Promise((res) => setTimeout(res, 100));
    }
  }

  /** Stops taking jobs; running ones get `graceMs` to finish before they are stopped. */
  close(graceMs = 0): Promise<void> {
    clearInterval(this.sweeper);
    this.closing ??= Promise.all([this.queue.close(), this.runs.close(graceMs)]).then(() => {});
    return this.closing;
  }
  private closing?: Promise<void>;
}
