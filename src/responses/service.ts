import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { AppError, type ErrorCode } from '../platform/errors.js';
import { type ChatMessage, type GenerateEvent, type GenerateRequest, type TextEngine, type TextFormat, type ToolChoice, type Usage } from '../engines/types.js';
import type { EngineRegistry } from '../engines/registry.js';
import type { ModelRegistry } from '../models/registry.js';
import type { ModelSpec } from '../models/config.js';
import type { KeyPrincipal } from '../portal/keys/verifier.js';
import type { UsageService } from '../portal/usage/service.js';
import { assertModelScope } from '../api/scopes.js';
import { expandReasoningContent, normalizeInput, toChatMessages, type StoredItem } from './input.js';
import { initialResponse, normalizedTools, outputAsItems, outputText, type ResponseObject } from './object.js';
import { ResponseBuilder, toUsage, type StreamEvent } from './builder.js';
import type { ResponseStore } from './store.js';
import type { CreateResponseRequest } from './schemas.js';
import { RunManager, type Run } from './runs.js';
import { newId } from './ids.js';
import { fromEngineError } from '../api/engine-errors.js';
import { LocalQueue, type BackgroundQueue } from './queue.js';
import type { ChangeFeed } from '../platform/cluster/feed.js';

/** Everything decided before any output: a request that gets this far is valid. */
export interface Prepared {
  id: string;
  req: CreateResponseRequest;
  key: KeyPrincipal;
  requestId: string;
  spec: ModelSpec;
  engine: TextEngine;
  inputItems: StoredItem[];
  gen: GenerateRequest;
  response: ResponseObject;
  store: boolean;
}

export interface ResponsesDeps {
  store: ResponseStore;
  models: ModelRegistry;
  engines: EngineRegistry;
  usage: UsageService;
  log: FastifyBaseLogger;
  /** background jobs running at once in this process */
  backgroundConcurrency?: number;
  queue?: BackgroundQueue;
  feed?: ChangeFeed;
}

/** What a background job needs to run on any instance. */
interface StoredRequest {
  req: CreateResponseRequest;
  key: KeyPrincipal;
  requestId: string;
}

const bad = (message: string, param: string | null = null, code: ErrorCode = 'validation_error') => new AppError(code, message, param);

export class ResponsesService {
  readonly runs: RunManager;
  readonly instanceId = randomUUID();

  private readonly queue: BackgroundQueue;
  private sweeper?: NodeJS.Timeout;

  constructor(private readonly d: ResponsesDeps) {
    this.runs = new RunManager(d.queue?.kind === 'bullmq' ? 1_000_000 : d.backgroundConcurrency ?? 4);
    this.queue = d.queue ?? new LocalQueue();
    this.queue.start((id) => this.runJob(id));
    d.feed?.subscribe('responses', (m) => {
      if (typeof m.cancel !== 'string') return;
      const run = this.runs.get(m.cancel);
      if (run && !run.done) {
        run.cancelRequested = true;
        run.controller.abort(new Error('cancelled'));
      }
    });
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
  startMaintenance(staleMs = 30_000, everyMs = Math.min(5_000, Math.max(100, Math.floor(staleMs / 3)))) {
    const tick = async () => {
      try {
        const ids = this.runs.ids();
        if (ids.length) await this.d.store.heartbeat(ids, this.instanceId);
        const n = await this.d.store.failStale(Date.now() - staleMs, 'the instance running this response stopped before it finished');
        if (n) this.d.log.warn({ count: n }, 'background responses of a stopped instance marked failed');
      } catch (e) {
        this.d.log.debug({ err: (e as Error).message }, 'background maintenance failed');
      }
    };
    this.sweeper = setInterval(() => void tick(), everyMs);
    this.sweeper.unref();
    return tick();
  }

  // ------------------------------------------------------------------ create

  /** Validates the request against models, tools, history and the context window. */
  async prepare(
    req: CreateResponseRequest,
    key: KeyPrincipal,
    requestId: string,
    existing?: { id: string; inputItems: StoredItem[]; response: ResponseObject },
  ): Promise<Prepared> {
    const spec = this.d.models.require(req.model, 'text');
    assertModelScope(key, spec.name);
    if (req.background && req.store === false) throw bad('background mode requires store to be true', 'store');
    const tools = normalizedTools(req);
    tools.forEach((t, i) => {
      const raw = req.tools![i];
      if (raw.type !== 'function') throw bad(`tools[${i}].type: only "function" tools are supported (got ${JSON.stringify(raw.type)})`, `tools[${i}].type`);
      if (typeof t.name !== 'string' || !/^[A-Za-z0-9_.:-]{1,128}$/.test(t.name)) throw bad(`tools[${i}].name is required (letters, digits, _ . : -; at most 128)`, `tools[${i}].name`);
      if (t.parameters !== null && (typeof t.parameters !== 'object' || Array.isArray(t.parameters))) throw bad(`tools[${i}].parameters must be a JSON Schema object`, `tools[${i}].parameters`);
    });
    const names = new Set(tools.map((t) => t.name as string));
    if (names.size !== tools.length) throw bad('tools: function names must be unique', 'tools');
    let toolChoice: ToolChoice | undefined;
    const tc = req.tool_choice;
    if (typeof tc === 'string') toolChoice = tc;
    else if (tc) {
      if (tc.type !== 'function') throw bad(`tool_choice.type must be "function" (got ${JSON.stringify(tc.type)})`, 'tool_choice.type');
      const name = tc.name ?? (tc.function as { name?: string } | undefined)?.name;
      if (!name) throw bad('tool_choice.name is required', 'tool_choice.name');
      if (!names.has(name)) throw bad(`tool_choice names "${name}", which is not among the tools`, 'tool_choice.name');
      toolChoice = { type: 'function', name };
    }
    if ((toolChoice === 'required' || typeof toolChoice === 'object') && tools.length === 0) throw bad(`tool_choice ${JSON.stringify(tc)} needs at least one tool`, 'tool_choice');
    let format: TextFormat | undefined;
    const f = req.text?.format;
    if (f?.type === 'json_schema') {
      if (!f.name) throw bad('text.format.name is required for json_schema', 'text.format.name');
      if (!f.schema) throw bad('text.format.schema is required for json_schema', 'text.format.schema');
      format = { type: 'json_schema', name: f.name, schema: f.schema as Record<string, unknown>, strict: f.strict ?? undefined, description: f.description };
    } else if (f?.type === 'json_object') format = { type: 'json_object' };
    const stop = req.stop == null ? undefined : typeof req.stop === 'string' ? [req.stop] : req.stop;

    const inputItems = existing?.inputItems ?? expandReasoningContent(req.input, normalizeInput(req.input));
    let history: StoredItem[] = [];
    if (req.previous_response_id) {
      const chain = await this.d.store.chain(req.previous_response_id, key.userId);
      if (chain.length === 0) {
        throw new AppError('previous_response_not_found', `Previous response with id '${req.previous_response_id}' not found.`, 'previous_response_id');
      }
      const last = chain[chain.length - 1].object;
      if (last.status === 'queued' || last.status === 'in_progress') {
        throw bad(`Previous response '${req.previous_response_id}' is still ${last.status}; wait until it finishes`, 'previous_response_id', 'invalid_state');
      }
      for (const c of chain) history.push(...c.inputItems, ...outputAsItems(c.object.output));
    }
    let messages = toChatMessages(req.instructions, [...history, ...inputItems]);
    const engine = await this.d.engines.textEngine(spec);
    const window = engine.contextWindow ?? spec.context_window;
    const engineTools = tools.map((t) => ({
      name: t.name as string,
      description: (t.description as string | null) ?? undefined,
      parameters: (t.parameters as Record<string, unknown> | null) ?? undefined,
      strict: (t.strict as boolean | null) ?? undefined,
    }));
    if (window) messages = await this.fit(engine, spec, messages, engineTools, window, req.truncation ?? 'disabled');

    const id = existing?.id ?? newId('resp');
    const gen: GenerateRequest = {
      model: spec.upstream_model ?? spec.name,
      messages,
      tools: toolChoice === 'none' ? undefined : engineTools.length ? engineTools : undefined,
      toolChoice: engineTools.length ? toolChoice ?? 'auto' : undefined,
      parallelToolCalls: req.parallel_tool_calls ?? true,
      format,
      temperature: req.temperature ?? undefined,
      topP: req.top_p ?? undefined,
      maxOutputTokens: req.max_output_tokens ?? undefined,
      stop,
      reasoningEffort: req.reasoning?.effort ?? undefined,
      cacheKey: req.previous_response_id ?? undefined,
      saveKey: id,
    };
    const createdAt = Math.floor(Date.now() / 1000);
    const response = existing?.response ?? initialResponse(req, id, createdAt, req.background ? 'queued' : 'in_progress');
    return { id, req, key, requestId, spec, engine, inputItems, gen, response, store: req.store ?? true };
  }

  /** truncation disabled: 400 when the input does not fit; auto: drop the oldest turns (never the instructions). */
  private async fit(engine: TextEngine, spec: ModelSpec, messages: ChatMessage[], tools: GenerateRequest['tools'], window: number, truncation: 'auto' | 'disabled'): Promise<ChatMessage[]> {
    const count = (m: ChatMessage[]) => engine.countTokens({ model: spec.upstream_model ?? spec.name, messages: m, tools: tools?.length ? tools : undefined });
    let n = await count(messages);
    if (n <= window) return messages;
    if (truncation !== 'auto') {
      throw new AppError('context_length_exceeded', `Your input is ${n} tokens, which exceeds the context window of ${window} tokens of the model '${spec.name}'. Shorten the input or set truncation to "auto".`, 'input');
    }
    const head = messages.filter((m, i) => i === 0 && m.role === 'system');
    let rest = messages.slice(head.length);
    while (rest.length > 1 && n > window) {
      // drop one turn from the start: a message, or an assistant tool-call message with its outputs
      const first = rest[0];
      let cut = 1;
      if (first.toolCalls?.length) {
        const ids = new Set(first.toolCalls.map((c) => c.callId));
        while (cut < rest.length && rest[cut].role === 'tool' && ids.has(rest[cut].toolCallId ?? '')) cut++;
      }
      rest = rest.slice(cut);
      while (rest.length > 1 && rest[0].role === 'tool') rest = rest.slice(1);
      n = await count([...head, ...rest]);
    }
    if (n > window) {
      throw new AppError('context_length_exceeded', `Even after truncation the input is ${n} tokens, more than the context window of ${window} tokens of the model '${spec.name}'.`, 'input');
    }
    return [...head, ...rest];
  }

  /**
   * Runs the generation, folding events into the builder. The first engine event is awaited before
   * `onStart` is called, so a request the engine refuses at once (bad upstream request, unreachable
   * upstream) fails with a plain HTTP error instead of a half-started response.
   */
  private async execute(p: Prepared, builder: ResponseBuilder, signal: AbortSignal, onStart: () => void): Promise<{ final: ResponseObject; usage?: Usage }> {
    const gen = { ...p.gen, signal };
    const it = p.engine.generate(gen)[Symbol.asyncIterator]();
    let first: IteratorResult<GenerateEvent>;
    try {
      first = await it.next();
    } catch (e) {
      if (signal.aborted) throw e;
      throw fromEngineError(e);
    }
    onStart();
    let ev = first;
    try {
      return await this.consume(it, ev, builder, signal, p.gen.model);
    } finally {
      // let the engine release what it holds (its generator is suspended at the done event)
      void Promise.resolve(it.return?.()).catch(() => {});
    }
  }

  private async consume(it: AsyncIterator<GenerateEvent>, ev: IteratorResult<GenerateEvent>, builder: ResponseBuilder, signal: AbortSignal, upstreamModel: string): Promise<{ final: ResponseObject; usage?: Usage }> {
    try {
      while (!ev.done) {
        // an engine may finish normally after an abort (with the usage so far): the abort wins
        if (signal.aborted) throw signal.reason ?? new Error('aborted');
        const e = ev.value;
        if (e.type === 'done') {
          // the model the engine reports (e.g. a dated variant) names the response, unless it is just the
          // upstream name the request was mapped to (then the client's own name stays)
          const model = e.model && e.model !== upstreamModel ? e.model : undefined;
          return { final: builder.finish(e.finishReason, e.usage, model), usage: e.usage };
        }
        builder.handle(e);
        ev = await it.next();
      }
      // the engine ended without a done event
      return { final: builder.fail('engine_error', 'the model engine ended without finishing the response') };
    } catch (e) {
      if (signal.aborted) throw e;
      const { code, message } = fromEngineError(e);
      return { final: builder.fail(code === 'validation_error' ? 'engine_error' : code, message) };
    }
  }

  private cost(spec: ModelSpec, u: Usage | undefined): number {
    const pr = spec.pricing;
    if (!pr || !u) return 0;
    const cached = u.cachedTokens ?? 0;
    return (
      ((u.inputTokens - cached) * (pr.input_per_million ?? 0) + cached * (pr.cached_input_per_million ?? pr.input_per_million ?? 0) + u.outputTokens * (pr.output_per_million ?? 0))
    );
  }

  /**
   * Records the usage of a response. One that ended without the engine's usage (the client left, a cancel, a
   * failure) but produced output is charged by estimate: input counted by the engine, output ~4 characters a
   * token (so leaving before the last event is not a way to get an answer for free).
   */
  private async recordUsage(p: Prepared, final: ResponseObject) {
    let u = final.usage;
    if (!u) {
      if (final.output.length === 0) return;
      let chars = 0;
      for (const o of final.output) {
        if (o.type === 'message') for (const c of o.content) chars += c.text.length;
        else if (o.type === 'function_call') chars += o.name.length + o.arguments.length;
        else for (const c of o.content) chars += c.text.length;
      }
      const input = await p.engine.countTokens({ model: p.gen.model, messages: p.gen.messages, tools: p.gen.tools }).catch(() => 0);
      u = toUsage({ inputTokens: input, outputTokens: Math.max(1, Math.ceil(chars / 4)) });
    }
    await this.d.usage.record({
      requestId: p.requestId,
      key: p.key,
      model: p.spec.name,
      operation: 'responses',
      inputTokens: u.input_tokens,
      outputTokens: u.output_tokens,
      cachedTokens: u.input_tokens_details.cached_tokens,
      // pricing is per million tokens and the ledger is in micro-credits: the two factors cancel
      costMicros: this.cost(p.spec, { inputTokens: u.input_tokens, outputTokens: u.output_tokens, cachedTokens: u.input_tokens_details.cached_tokens }),
    });
  }

  /** stream false, background false: the finished object. */
  async createSync(p: Prepared, signal: AbortSignal): Promise<ResponseObject> {
    const builder = ResponseBuilder.quiet(p.response, { maxToolCalls: p.req.max_tool_calls });
    builder.start();
    let final: ResponseObject;
    try {
      ({ final } = await this.execute(p, builder, signal, () => {}));
    } catch (e) {
      if (signal.aborted) await this.recordUsage(p, builder.response).catch(() => {});
      throw e;
    }
    await this.finishRecord(p, final);
    return withOutputText(final);
  }

  /**
   * Stores the response, then records its usage. In that order a database that is away fails the request
   * (503, which clients retry) before anything is charged; the usage record itself goes to the local journal,
   * which does not depend on the database.
   */
  private async finishRecord(p: Prepared, final: ResponseObject) {
    if (p.store) {
      await this.d.store.insert({ id: p.id, userId: p.key.userId, orgId: p.key.orgId, keyId: p.key.keyId, object: final, inputItems: p.inputItems, request: null });
    }
    try {
      await this.recordUsage(p, final);
    } catch (e) {
      if (!p.store) throw e;
      // the response is stored: a retry would make a second one, so tell the SDKs not to retry this error
      this.d.log.error({ err: (e as Error).message, id: p.id }, 'usage not recorded for a stored response');
      throw new AppError('service_unavailable', `the response ${p.id} was stored but its usage could not be recorded; retrieve it instead of retrying`, null, { 'x-should-retry': 'false' });
    }
  }

  /**
   * stream true (not background): `write` receives every event in order. Usage and storage are written
   * before the final event goes out, so a client that saw `response.completed` can rely on both.
   */
  async createStream(p: Prepared, signal: AbortSignal, start: () => void, write: (e: StreamEvent) => void): Promise<void> {
    const held: StreamEvent[] = [];
    let started = false;
    const builder = new ResponseBuilder(p.response, (e) => (started && !isFinal(e.type) ? write(e) : held.push(e)), { maxToolCalls: p.req.max_tool_calls });
    builder.start();
    let final: ResponseObject;
    try {
      ({ final } = await this.execute(p, builder, signal, () => {
        started = true;
        start();
        for (const e of held.splice(0)) write(e);
      }));
    } catch (e) {
      // the client left mid-stream: what it was sent is charged
      if (signal.aborted) await this.recordUsage(p, builder.response).catch(() => {});
      throw e;
    }
    try {
      await this.finishRecord(p, final);
    } catch (e) {
      // the final event was held back: take it back and end as failed instead (error, then response.failed)
      builder.rewind(held.length);
      held.length = 0;
      const { code, message } = fromEngineError(e);
      builder.redirect(write);
      builder.fail(code === 'validation_error' ? 'server_error' : code, message);
      return;
    }
    for (const e of held.splice(0)) write(e);
  }

  /** background true: stored as queued at once (with the request, so any instance can run it); then queued. */
  async createBackground(p: Prepared): Promise<{ response: ResponseObject; events: StreamEvent[] }> {
    const events: StreamEvent[] = [];
    const builder = new ResponseBuilder(p.response, (e) => events.push(e), { maxToolCalls: p.req.max_tool_calls });
    builder.start(true);
    const queued = builder.snapshot();
    const request: StoredRequest = { req: p.req, key: p.key, requestId: p.requestId };
    // the in-process queue dies with this instance, so its queued jobs carry our heartbeat; BullMQ's do not
    const runner = this.queue.kind === 'local' ? this.instanceId : undefined;
    await this.d.store.insert({ id: p.id, userId: p.key.userId, orgId: p.key.orgId, keyId: p.key.keyId, object: queued, inputItems: p.inputItems, request, runner }, events);
    try {
      await this.queue.enqueue(p.id);
    } catch (e) {
      // the client gets an error (503 when Redis is away): the stored row must not stay queued forever
      const failed = { ...queued, status: 'failed', error: { code: 'server_error', type: 'server_error', message: 'the response could not be queued' } } as ResponseObject;
      await this.d.store.update(failed, undefined, ['queued']).catch(() => {});
      throw e;
    }
    return { response: withOutputText(queued), events };
  }

  /** Runs a queued background response (on whichever instance took the job). */
  private runJob(id: string): Promise<void> {
    return new Promise<void>((resolve) => {
      if (this.runs.get(id)) return resolve();
      this.runs.submit(id, (run) => this.runBackground(id, run).finally(resolve));
    });
  }

  private async runBackground(id: string, run: Run): Promise<void> {
    const stored = await this.d.store.getAny(id);
    if (!stored || stored.object.status !== 'queued') return; // cancelled or deleted while queued
    const request = stored.request as StoredRequest | null;
    const storedEvents = await this.d.store.events(id, -1);
    const persisted = storedEvents.length;
    const builder = new ResponseBuilder(stored.object, () => {}, { maxToolCalls: request?.req.max_tool_calls, startSeq: persisted });
    for (const e of storedEvents) run.push(e);
    const pending: StreamEvent[] = [];
    let flushing: Promise<void> = Promise.resolve();
    const flush = () => {
      const batch = pending.splice(0);
      if (batch.length) flushing = flushing.then(() => this.d.store.appendEvents(id, batch)).catch((e) => this.d.log.warn({ err: e, id }, 'could not persist response events'));
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
        p = await this.prepare(request.req, request.key, request.requestId, { id, inputItems: stored.inputItems, response: builder.response });
        ({ final } = await this.execute(p, builder, run.controller.signal, () => {}));
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
      if (p) await this.recordUsage(p, final).catch((e) => this.d.log.error({ err: (e as Error).message, id }, 'usage of a background response not recorded'));
    } finally {
      clearInterval(timer);
    }
  }

  // ------------------------------------------------------------------ companions

  async get(id: string, key: KeyPrincipal): Promise<ResponseObject> {
    const r = await this.d.store.get(id, key.userId);
    if (!r) throw notFound(id);
    return withOutputText(r.object);
  }

  async delete(id: string, key: KeyPrincipal): Promise<{ id: string; object: 'response'; deleted: true }> {
    const run = this.runs.get(id);
    const ok = await this.d.store.softDelete(id, key.userId);
    if (!ok) throw notFound(id);
    if (run) {
      run.cancelRequested = true;
      run.controller.abort(new Error('deleted'));
    } else {
      // it may be running on another instance: stop it there
      await this.d.feed?.publish('responses', { cancel: id }).catch(() => {});
    }
    return { id, object: 'response', deleted: true };
  }

  /** Cancels a background response wherever it runs; cancelling one that already ended answers it as it is. */
  async cancel(id: string, key: KeyPrincipal): Promise<ResponseObject> {
    const r = await this.d.store.get(id, key.userId);
    if (!r) throw notFound(id);
    if (!r.object.background) throw bad('Only responses created with background set to true can be cancelled.', 'response_id');
    // still waiting in a queue (here or anywhere): cancelled in the store at once, and the job skips it
    if (r.object.status === 'queued' && (await this.d.store.update({ ...r.object, status: 'cancelled' }, undefined, ['queued']))) {
      const waiting = this.runs.get(id);
      if (waiting) waiting.cancelRequested = true;
      return this.get(id, key);
    }
    const run = this.runs.get(id);
    if (run && !run.done) {
      run.cancelRequested = true;
      run.controller.abort(new Error('cancelled'));
      await this.waitEnded(id, key, run);
    } else if (r.object.status === 'in_progress' || r.object.status === 'queued') {
      // running elsewhere: ask that instance
      await this.d.feed?.publish('responses', { cancel: id });
      await this.waitEnded(id, key);
    }
    return this.get(id, key);
  }

  /** Waits (at most 5 s) until the response is no longer queued or running. */
  private async waitEnded(id: string, key: KeyPrincipal, run?: Run) {
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline) {
      if (run ? run.done : false) return;
      const now = await this.d.store.get(id, key.userId);
      if (!now || (now.object.status !== 'queued' && now.object.status !== 'in_progress')) return;
      await new Promise((res) => setTimeout(res, 25));
    }
  }

  async inputItems(id: string, key: KeyPrincipal, q: { after?: string; limit: number; order: 'asc' | 'desc' }) {
    const r = await this.d.store.get(id, key.userId);
    if (!r) throw notFound(id);
    let items = q.order === 'asc' ? [...r.inputItems] : [...r.inputItems].reverse();
    if (q.after) {
      const i = items.findIndex((x) => x.id === q.after);
      if (i < 0) throw bad(`after: no input item '${q.after}' in this response`, 'after');
      items = items.slice(i + 1);
    }
    const page = items.slice(0, q.limit);
    return { object: 'list' as const, data: page, first_id: page[0]?.id ?? null, last_id: page[page.length - 1]?.id ?? null, has_more: items.length > page.length };
  }

  async inputTokens(req: CreateResponseRequest, key: KeyPrincipal): Promise<{ object: 'response.input_tokens'; input_tokens: number }> {
    const p = await this.prepare({ ...req, truncation: 'auto' }, key, 'count');
    const n = await p.engine.countTokens({ model: p.gen.model, messages: p.gen.messages, tools: p.gen.tools });
    return { object: 'response.input_tokens', input_tokens: n };
  }

  /** Events of a background response after `after`: stored ones, then live ones while it runs. */
  async *replay(id: string, key: KeyPrincipal, after: number, signal: AbortSignal): AsyncIterable<StreamEvent> {
    const r = await this.d.store.get(id, key.userId);
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
      const now = await this.d.store.get(id, key.userId);
      if (!now || (now.object.status !== 'queued' && now.object.status !== 'in_progress')) {
        for (const e of await this.d.store.events(id, last)) yield e;
        return;
      }
      await new Promise((res) => setTimeout(res, 100));
    }
  }

  /** Stops taking jobs; running ones get `graceMs` to finish before they are stopped. */
  async close(graceMs = 0) {
    clearInterval(this.sweeper);
    await Promise.all([this.queue.close(), this.runs.close(graceMs)]);
  }
}

function isFinal(type: string) {
  return type === 'response.completed' || type === 'response.incomplete' || type === 'response.failed' || type === 'error';
}

function notFound(id: string) {
  return new AppError('response_not_found', `Response with id '${id}' not found.`, 'response_id');
}

/** The SDKs add output_text themselves; plain HTTP clients get it too (as OpenAI's SDK-facing object has it). */
function withOutputText(r: ResponseObject): ResponseObject {
  return { ...r, output_text: outputText(r.output) };
}
