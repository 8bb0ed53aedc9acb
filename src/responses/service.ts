/**
 * The Responses API as the routes see it: prepare (./prepare.ts), run in the request (./run.ts) or in the
 * background (./background.ts), and the companions (retrieve, delete, cancel, input items, input tokens).
 */
import type { FastifyBaseLogger } from 'fastify';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { RequestFacts } from '../platform/ops/facts.js';
import type { ChangeFeed } from '../platform/cluster/feed.js';
import type { TextEngineSource } from '../engines/registry.js';
import type { ModelRegistry } from '../models/registry.js';
import type { Metering } from '../api/metering.js';
import { AppError } from '../platform/errors.js';
import type { ResponseStore } from './store.js';
import type { CreateResponseRequest } from './schemas.js';
import type { ResponseObject } from './object.js';
import type { StreamEvent } from './builder.js';
import type { BackgroundQueue } from './queue.js';
import { DEFAULT_MAX_CHAIN_BYTES, Preparer, type Prepared } from './prepare.js';
import { Runner, withOutputText } from './run.js';
import { Background, notFound } from './background.js';
import { Sealer } from './seal.js';
import type { AnswerSpeaker } from './speech.js';
import { ChainLoads } from './chain-loads.js';
import type { ResponsesLimits } from '../platform/config.js';
import type { Admission } from '../api/admission.js';

export type { Prepared } from './prepare.js';

export interface ResponsesDeps {
  store: ResponseStore;
  models: ModelRegistry;
  engines: TextEngineSource;
  /** prices and records usage (src/api/metering.ts) */
  metering: Metering;
  log: FastifyBaseLogger;
  /** background jobs running at once in this process */
  backgroundConcurrency?: number;
  queue?: BackgroundQueue;
  feed?: ChangeFeed;
  /** the secret compaction items are sealed with (KEY_PEPPER; ./seal.ts); without it they are refused */
  sealSecret?: Buffer;
  /** speaks answers asked for with modalities audio (src/audio/answer-speaker.ts, given by the runtime) */
  speaker?: AnswerSpeaker;
  /** what a continuation may read of its stored conversation, and how many one key may read at once (defaults: platform/config.ts) */
  limits?: ResponsesLimits;
  /** reservations at admission (billing, TPM limits; src/api/admission.ts); without it nothing is reserved */
  admission?: Admission;
}

export class ResponsesService {
  readonly preparer: Preparer;
  readonly runner: Runner;
  readonly background: Background;
  readonly sealer?: Sealer;
  /** the chain loads running and waiting per key (./chain-loads.ts) */
  readonly chainLoads: ChainLoads;

  constructor(private readonly d: ResponsesDeps) {
    this.sealer = d.sealSecret ? new Sealer(d.sealSecret) : undefined;
    this.chainLoads = new ChainLoads({ perKey: d.limits?.maxChainLoadsPerKey ?? 4, queuedPerKey: d.limits?.maxQueuedChainLoadsPerKey ?? 16 });
    this.preparer = new Preparer({ ...d, sealer: this.sealer, chain: { maxBytes: d.limits?.maxChainBytes ?? DEFAULT_MAX_CHAIN_BYTES, loads: this.chainLoads } });
    this.runner = new Runner(d);
    this.background = new Background({
      store: d.store,
      preparer: this.preparer,
      runner: this.runner,
      log: d.log,
      concurrency: d.backgroundConcurrency,
      queue: d.queue,
      feed: d.feed,
    });
  }

  /** `facts`: the request's (req.facts), filled as it runs */
  prepare(req: CreateResponseRequest, key: KeyPrincipal, requestId: string, facts?: RequestFacts): Promise<Prepared> {
    return this.preparer.prepare(req, key, requestId, undefined, facts ? { facts } : undefined);
  }

  json(p: Prepared, signal: AbortSignal): Promise<ResponseObject> {
    return this.runner.json(p, signal);
  }

  stream(p: Prepared, signal: AbortSignal): AsyncIterable<StreamEvent> {
    return this.runner.stream(p, signal);
  }

  async createBackground(p: Prepared): Promise<ResponseObject> {
    // reserved when a worker runs it (Runner.execute); refused here only once nothing is left
    await this.d.admission?.check(p.key);
    return this.background.create(p);
  }

  replay(id: string, key: KeyPrincipal, after: number, signal: AbortSignal): AsyncIterable<StreamEvent> {
    return this.background.replay(id, key, after, signal);
  }

  async get(id: string, key: KeyPrincipal): Promise<ResponseObject> {
    const r = await this.d.store.head(id, key.userId);
    if (!r) throw notFound(id);
    return withOutputText(r.object);
  }

  async delete(id: string, key: KeyPrincipal): Promise<{ id: string; object: 'response'; deleted: true }> {
    const ok = await this.d.store.softDelete(id, key.userId);
    if (!ok) throw notFound(id);
    // it may be running, here or on another instance: stop it
    await this.background.stopEverywhere(id).catch((e) => this.d.log.warn({ err: (e as Error).message, id }, 'a deleted response may still run on another instance until it ends'));
    return { id, object: 'response', deleted: true };
  }

  async cancel(id: string, key: KeyPrincipal): Promise<ResponseObject> {
    await this.background.cancel(id, key);
    return this.get(id, key);
  }

  async inputItems(id: string, key: KeyPrincipal, q: { after?: string; limit: number; order: 'asc' | 'desc' }) {
    // the page is cut in the database: a response's 4096 items never come out to serve 20 of them
    const r = await this.d.store.inputItemsPage(id, key.userId, { ...q, after: q.after || undefined });
    if (!r) throw notFound(id);
    if ('afterMissing' in r) throw new AppError('validation_error', `after: no input item '${q.after}' in this response`, 'after');
    const page = r.items;
    return { object: 'list' as const, data: page, first_id: page[0]?.id ?? null, last_id: page[page.length - 1]?.id ?? null, has_more: r.hasMore };
  }

  inputTokens(req: CreateResponseRequest, key: KeyPrincipal) {
    return this.preparer.inputTokens(req, key);
  }

  /** Stops taking jobs; running ones get `graceMs` to finish before they are stopped. */
  close(graceMs = 0): Promise<void> {
    return this.background.close(graceMs);
  }
}
