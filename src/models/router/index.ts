/**
 * The router: one model name, several deployments (each an engine: an upstream or an embedded model), and the
 * rules that pick one per try. It sits between the features and the engine registry and gives the features the
 * same engine interfaces (TextEngine, EmbeddingsEngine), so they do not know whether a model has one
 * deployment or ten.
 *
 * Per request: a deployment is chosen (weighted random, or `least-busy`: fewest in flight), skipping those
 * whose breaker is open, that asked to be left alone (retry-after) or that are at their `rpm`/`tpm`. A try
 * that fails in a retryable way (EngineError.retryable: refused, reset, timed out, 429, 5xx) BEFORE ANY OUTPUT
 * is tried again, on another deployment when there is one, up to `retries` times with a doubling backoff
 * (retry-after honoured, bounded by `max_retry_wait_ms`); then the model's `fallbacks` are tried, each with
 * its own deployments and retries. A context-window refusal goes to `context_window_fallbacks`. Once an event
 * or a result has come out, nothing is tried again: a client never gets two answers, and usage is charged once.
 *
 * The hot path with one healthy deployment is a few field reads, two timers and one AbortSignal: no Redis
 * (breaker changes are shared off the request path, ./health.ts).
 */
import {
  EngineError,
  type ChatCompletionsRequest,
  type EmbedRequest,
  type EmbedResult,
  type EmbeddingsEngine,
  type GenerateEvent,
  type GenerateRequest,
  type RouteNote,
  type TextEngine,
} from '../../engines/types.js';
import type { EngineRegistry } from '../../engines/registry.js';
import type { ModelRegistry } from '../registry.js';
import { deploymentName, upstreamName, type DeploymentSpec, type ModelSpec, type Timeouts } from '../spec.js';
import { DEFAULT_BREAKER, HealthBoard, type BreakerPolicy, type DeploymentHealth, type HealthShare } from './health.js';

export { HealthBoard, MinuteWindow, type HealthShare } from './health.js';

/** The defaults of docs/models.md ("Deployments and routing"). */
export const ROUTE_DEFAULTS = {
  retries: 2,
  retryBackoffMs: 100,
  maxRetryWaitMs: 10_000,
  /** first byte and total: applied by the router, for every engine (connect_ms has no default: the transport's timeout_ms covers it) */
  timeouts: { first_byte_ms: 120_000, total_ms: 900_000 } satisfies Omit<Required<Timeouts>, 'connect_ms'>,
} as const;

/** One deployment as a try sees it. */
interface Target {
  dep: DeploymentSpec;
  health: DeploymentHealth;
}

/** One model's routing, built once per spec object (a pulled model's spec is replaced when it changes). */
interface Route {
  spec: ModelSpec;
  targets: Target[];
  weights: number;
  policy: BreakerPolicy;
}

/** A try that produced its first output: the rest is the caller's, and `end` gives the verdict. */
interface Lease<T> {
  value: T;
  target: Target;
  /** the model that served (the requested one, or a fallback) */
  model: ModelSpec;
  signal: AbortSignal;
  /** the try's own timers and signal are let go; `ok`: a verdict for the breaker (undefined: the client left) */
  end(ok: boolean | undefined, err?: unknown): void;
}

export interface RouterOptions {
  engines: EngineRegistry;
  models: ModelRegistry;
  /** breaker changes to and from other instances (the change feed); none: this instance only */
  share?: HealthShare;
  log?: { warn(o: object, msg?: string): void; debug(o: object, msg?: string): void };
  /** told of each try after the first and each fallback (the per-model metrics series) */
  observe?: {
    retry(model: string, deployment: string): void;
    /** `model` fell back to another model after `deployment` (its last try) failed */
    fallback(model: string, deployment: string): void;
  };
  /** tests: the clock and the dice */
  now?: () => number;
  random?: () => number;
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

const sleepFor = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/** the upstream said the input is longer than the model's window */
function isContextWindowError(e: unknown): boolean {
  return e instanceof EngineError && (e.code === 'context_length_exceeded' || (e.status === 400 && /context (length|window)|maximum context|too many tokens/i.test(e.message)));
}

class TimeoutOfTry extends EngineError {}

export class Router {
  readonly health: HealthBoard;
  readonly engines: EngineRegistry;
  private readonly routes = new WeakMap<ModelSpec, Route>();
  /** the model each deployment id serves (for the circuit-state series) */
  private readonly modelOf = new Map<string, string>();
  private readonly texts = new WeakMap<ModelSpec, RoutedTextEngine>();
  private readonly embedders = new WeakMap<ModelSpec, RoutedEmbeddingsEngine>();
  private readonly now: () => number;
  private readonly random: () => number;
  private readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;

  constructor(private readonly o: RouterOptions) {
    this.engines = o.engines;
    this.health = new HealthBoard(o.share, (e) => o.log?.debug({ err: (e as Error)?.message }, 'a circuit breaker change was not shared'));
    this.now = o.now ?? Date.now;
    this.random = o.random ?? Math.random;
    this.sleep = o.sleep ?? sleepFor;
  }

  /** The text engine of a model: every deployment behind one TextEngine. */
  async text(spec: ModelSpec): Promise<TextEngine> {
    let e = this.texts.get(spec);
    if (!e) {
      const route = this.route(spec);
      // the first deployment's engine is made now: a model whose engine cannot be made fails here (503), and
      // its context window and token counting serve the request's preparation
      const primary = await this.o.engines.text(route.targets[0]!.dep);
      e = new RoutedTextEngine(this, spec, primary);
      this.texts.set(spec, e);
    }
    return e;
  }

  async embeddings(spec: ModelSpec): Promise<EmbeddingsEngine> {
    let e = this.embedders.get(spec);
    if (!e) {
      const route = this.route(spec);
      const primary = await this.o.engines.embeddings(route.targets[0]!.dep);
      e = new RoutedEmbeddingsEngine(this, spec, primary);
      this.embedders.set(spec, e);
    }
    return e;
  }

  /** The speech and transcription engines are not routed (one deployment each): the registry's own. */
  speech(spec: ModelSpec) {
    return this.o.engines.speech(spec);
  }
  transcription(spec: ModelSpec) {
    return this.o.engines.transcription(spec);
  }

  /** The deployments of a model: its `deployments`, or the entry itself (built-in models, models made by code). */
  route(spec: ModelSpec): Route {
    let r = this.routes.get(spec);
    if (!r) {
      const deps: DeploymentSpec[] = spec.deployments ?? [{ ...spec, id: deploymentName(spec), weight: 1, upstream_model: upstreamName(spec) } as DeploymentSpec];
      const targets = deps.map((dep) => ({ dep, health: this.health.of(dep.id, dep.rpm, dep.tpm) }));
      for (const d of deps) this.modelOf.set(d.id, spec.name);
      r = {
        spec,
        targets,
        weights: targets.reduce((s, t) => s + t.dep.weight, 0),
        policy: { failures: spec.breaker?.failures ?? DEFAULT_BREAKER.failures, cooldownMs: spec.breaker?.cooldown_ms ?? DEFAULT_BREAKER.cooldownMs },
      };
      this.routes.set(spec, r);
    }
    return r;
  }

  /** Chooses among the usable deployments not tried yet (or tried, when every usable one was). */
  private pick(r: Route, tried: Set<Target> | undefined, now: number): Target | undefined {
    const ts = r.targets;
    if (ts.length === 1) {
      const t = ts[0]!;
      return t.health.usable(now) ? t : undefined;
    }
    let pool = ts.filter((t) => t.health.usable(now) && !tried?.has(t));
    if (pool.length === 0) pool = ts.filter((t) => t.health.usable(now));
    if (pool.length <= 1) return pool[0];
    if (r.spec.routing === 'least-busy') {
      const least = Math.min(...pool.map((t) => t.health.inflight));
      pool = pool.filter((t) => t.health.inflight === least);
      if (pool.length === 1) return pool[0];
    }
    const weighted = pool.filter((t) => t.dep.weight > 0);
    if (weighted.length === 0) return pool[Math.floor(this.random() * pool.length)];
    let x = this.random() * weighted.reduce((s, t) => s + t.dep.weight, 0);
    for (const t of weighted) {
      x -= t.dep.weight;
      if (x < 0) return t;
    }
    return weighted[weighted.length - 1];
  }

  /**
   * Runs `open` on deployments until one gives its first output: the model's own, then its fallbacks. `open`
   * gets the deployment and a signal that aborts on the client's signal and on the try's timeouts.
   */
  /** Every deployment routed so far with its breaker's state now (0 closed, 1 half-open, 2 open). */
  circuits(): Array<{ model: string; deployment: string; state: 0 | 1 | 2 }> {
    const now = this.now();
    const out: Array<{ model: string; deployment: string; state: 0 | 1 | 2 }> = [];
    for (const [deployment, model] of this.modelOf) {
      const st = this.health.peek(deployment)?.state(now) ?? 'closed';
      out.push({ model, deployment, state: st === 'closed' ? 0 : st === 'half-open' ? 1 : 2 });
    }
    return out;
  }

  async first<T>(
    spec: ModelSpec,
    signal: AbortSignal | undefined,
    note: RouteNote | undefined,
    open: (dep: DeploymentSpec, engineSignal: AbortSignal) => Promise<T>,
  ): Promise<Lease<T>> {
    const models: ModelSpec[] = [spec];
    let lastErr: unknown;
    let windowFallbacksUsed = false;
    let lastDep: string | undefined;
    for (let m = 0; m < models.length; m++) {
      const model = models[m]!;
      const r = this.route(model);
      const tries = 1 + (model.retries ?? ROUTE_DEFAULTS.retries);
      const backoff = model.retry_backoff_ms ?? ROUTE_DEFAULTS.retryBackoffMs;
      const maxWait = model.max_retry_wait_ms ?? ROUTE_DEFAULTS.maxRetryWaitMs;
      let tried: Set<Target> | undefined;
      let failedHere = 0;
      for (let n = 0; n < tries; n++) {
        let now = this.now();
        let t = this.pick(r, tried, now);
        if (!t) {
          // nothing usable now: wait for a retry-after that ends soon enough, else give up on this model
          const soonest = r.targets.filter((x) => x.health.openUntil <= now && x.health.notBefore > now).sort((a, b) => a.health.notBefore - b.health.notBefore)[0];
          if (!soonest || soonest.health.notBefore - now > maxWait) break;
          await this.sleep(soonest.health.notBefore - now, signal);
          now = this.now();
          t = this.pick(r, tried, now);
          if (!t) break;
        } else if (tried?.has(t) && failedHere > 0) {
          // the same deployment again: back off first (doubling, bounded)
          await this.sleep(Math.min(maxWait, backoff * 2 ** (failedHere - 1)), signal);
          now = this.now();
        }
        (tried ??= new Set()).add(t);
        if (lastDep !== undefined) {
          if (n === 0) this.o.observe?.fallback(spec.name, lastDep);
          else this.o.observe?.retry(model.name, t.dep.id);
        }
        lastDep = t.dep.id;
        if (note) {
          note.deployment = t.dep.id;
          note.tries = (note.tries ?? 0) + 1;
          if (model !== spec) note.fallback = model.name;
        }
        try {
          return await this.attempt(t, model, r.policy, signal, open);
        } catch (e) {
          if (signal?.aborted) throw e;
          lastErr = e;
          failedHere++;
          if (isContextWindowError(e) && !windowFallbacksUsed && spec.context_window_fallbacks?.length) {
            windowFallbacksUsed = true;
            models.splice(m + 1, models.length, ...this.resolve(spec.context_window_fallbacks));
            break;
          }
          if (!(e instanceof EngineError) || !e.retryable) throw e;
          this.o.log?.debug({ model: model.name, deployment: t.dep.id, err: e.message, code: e.code }, 'deployment failed; trying again');
        }
      }
      // every deployment of this model failed or is out: the fallbacks of the requested model come next
      if (m === 0 && !windowFallbacksUsed && spec.fallbacks?.length) models.push(...this.resolve(spec.fallbacks));
    }
    if (lastErr) throw lastErr;
    throw this.unavailable(spec);
  }

  private resolve(names: readonly string[]): ModelSpec[] {
    return names.flatMap((n) => {
      const s = this.o.models.get(n);
      return s ? [s] : [];
    });
  }

  /** every deployment is out (breakers open, limits reached): a 503 that says why, without upstream details */
  private unavailable(spec: ModelSpec): EngineError {
    const now = this.now();
    const r = this.route(spec);
    const why = r.targets.map((t) => `${t.dep.id}: ${t.health.reason(now)}`).join('; ');
    const soonest = Math.min(...r.targets.map((t) => Math.max(t.health.openUntil, t.health.notBefore)).filter((x) => x > now));
    const after = Number.isFinite(soonest) ? Math.max(1, Math.ceil((soonest - now) / 1000)) : undefined;
    return new EngineError(`no deployment of the model '${spec.name}' can take the request now (${why})${after ? `; try again in ${after} s` : ''}`, 'engine_unavailable', 503, {
      retryable: true,
      retryAfterMs: after ? after * 1000 : undefined,
    });
  }

  /** One try on one deployment, with its timeouts, until its first output. */
  private async attempt<T>(
    t: Target,
    model: ModelSpec,
    policy: BreakerPolicy,
    signal: AbortSignal | undefined,
    open: (dep: DeploymentSpec, engineSignal: AbortSignal) => Promise<T>,
  ): Promise<Lease<T>> {
    const timeouts = t.dep.timeouts;
    const firstMs = timeouts?.first_byte_ms ?? ROUTE_DEFAULTS.timeouts.first_byte_ms;
    const totalMs = timeouts?.total_ms ?? ROUTE_DEFAULTS.timeouts.total_ms;
    const ctl = new AbortController();
    let timedOut: TimeoutOfTry | undefined;
    const expire = (what: string, ms: number, retryable: boolean) => () => {
      timedOut = new TimeoutOfTry(`the deployment ${t.dep.id} gave ${what} within ${ms} ms`, 'upstream_timeout', 504, { retryable });
      ctl.abort(timedOut);
    };
    // one timer at a time (first output, then the rest of the total), and the client's abort passed on by hand:
    // cheaper per request than two timers and AbortSignal.any
    const t0 = this.now();
    let timer = setTimeout(firstMs < totalMs ? expire('no output', firstMs, true) : expire('no complete answer', totalMs, false), Math.min(firstMs, totalMs));
    const onAbort = () => ctl.abort(signal!.reason);
    if (signal) {
      if (signal.aborted) ctl.abort(signal.reason);
      else signal.addEventListener('abort', onAbort, { once: true });
    }
    const engineSignal = ctl.signal;
    const now = this.now();
    this.health.begin(t.health, now);
    let ended = false;
    // the breaker's verdict: success at the first output, failure when the try fails (before or after it)
    const end = (ok: boolean | undefined, err?: unknown) => {
      if (ended) return;
      ended = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      if (ok === false) {
        const e = err instanceof EngineError ? err : undefined;
        this.health.failure(t.health, !e || e.retryable, policy, this.now(), e?.retryAfterMs);
      }
      this.health.release(t.health);
    };
    let value: T;
    try {
      value = await open(t.dep, engineSignal);
    } catch (e) {
      const err = timedOut ?? e;
      if (signal?.aborted) end(undefined);
      else end(false, err);
      throw err;
    }
    clearTimeout(timer);
    const left = totalMs - (this.now() - t0);
    timer = setTimeout(expire('no complete answer', totalMs, false), Math.max(1, left));
    this.health.success(t.health);
    return {
      value,
      target: t,
      model,
      signal: engineSignal,
      end: (ok, err) => end(ok, ok === false ? (timedOut ?? err) : err),
    };
  }

  /** what a lease's failure is, for the caller: the try's own timeout when that is why the engine stopped */
  static cause(lease: Lease<unknown>, e: unknown): unknown {
    const r = (lease.signal as AbortSignal & { reason?: unknown }).reason;
    return lease.signal.aborted && r instanceof TimeoutOfTry ? r : e;
  }

  /** tokens a deployment served, for its tpm */
  tokens(t: Target, n: number): void {
    if (t.health.tokens && n > 0) this.health.tokensUsed(t.health, n, this.now());
  }
}

/** The model name an answer reports: the client's request mapping, unless the upstream named a variant of its own. */
function reportedModel(reported: string | undefined, lease: Lease<unknown>, requested: ModelSpec, requestModel: string): string | undefined {
  if (reported === undefined) return undefined;
  // a fallback answers under the requested name; so does a deployment that only echoes its upstream name
  if (lease.model !== requested || reported === lease.target.dep.upstream_model) return requestModel;
  return reported;
}

class RoutedTextEngine implements TextEngine {
  readonly kind: string;
  readonly chatCompletions?: (req: ChatCompletionsRequest) => AsyncIterable<Record<string, unknown>>;

  constructor(
    private readonly router: Router,
    private readonly spec: ModelSpec,
    private readonly primary: TextEngine,
  ) {
    this.kind = primary.kind;
    // Chat Completions are forwarded when the first deployment forwards them (every deployment is asked to;
    // one that cannot gets the request generated, see forward below)
    if (primary.chatCompletions) this.chatCompletions = (req) => this.forward(req);
  }

  get contextWindow(): number | undefined {
    return this.primary.contextWindow;
  }

  info() {
    return this.primary.info?.() ?? { device: 'CPU' };
  }

  countTokens(req: Pick<GenerateRequest, 'model' | 'messages' | 'tools'>): Promise<number> {
    return this.primary.countTokens(req);
  }

  close(): Promise<void> {
    // the engines belong to the registry
    return Promise.resolve();
  }

  async *generate(req: GenerateRequest): AsyncGenerator<GenerateEvent> {
    const router = this.router;
    const engines = router.engines;
    const lease = await router.first(this.spec, req.signal, req.route, async (dep, signal) =>
      startStream((await engines.text(dep)).generate({ ...req, model: dep.upstream_model, signal })),
    );
    yield* relay(
      lease,
      req.signal,
      (e) => {
        if (e.type !== 'done') return e;
        router.tokens(lease.target, e.usage.inputTokens + e.usage.outputTokens);
        const model = reportedModel(e.model, lease, this.spec, req.model);
        return model === e.model ? e : { ...e, model };
      },
      (e) => e.type === 'done',
    );
  }

  /** Chat Completions forwarded: the same tries, on deployments that forward them. */
  private async *forward(req: ChatCompletionsRequest): AsyncGenerator<Record<string, unknown>> {
    const router = this.router;
    const engines = router.engines;
    const requestModel = req.body.model as string;
    const lease = await router.first(this.spec, req.signal, req.route, async (dep, signal) => {
      const engine = await engines.text(dep);
      if (!engine.chatCompletions) throw new EngineError(`the deployment ${dep.id} does not forward Chat Completions`, 'engine_unavailable', 503, { retryable: true });
      return startStream(engine.chatCompletions({ ...req, body: { ...req.body, model: dep.upstream_model }, signal }));
    });
    yield* relay(lease, req.signal, (o) => {
      if (typeof o.model === 'string') {
        const model = reportedModel(o.model, lease, this.spec, requestModel);
        if (model !== o.model) o = { ...o, model };
      }
      const u = o.usage as { total_tokens?: number } | null | undefined;
      if (u && typeof u.total_tokens === 'number') router.tokens(lease.target, u.total_tokens);
      return o;
    });
  }
}

interface Started<T> {
  it: AsyncIterator<T>;
  first: IteratorResult<T>;
}

/** Opens an engine's stream and waits for its first item: a try has succeeded once output starts. */
async function startStream<T>(source: AsyncIterable<T>): Promise<Started<T>> {
  const it = source[Symbol.asyncIterator]();
  try {
    return { it, first: await it.next() };
  } catch (e) {
    void Promise.resolve(it.return?.()).catch(() => {});
    throw e;
  }
}

/**
 * Passes a routed stream through, each item through `each`, and gives the try its verdict when the stream ends:
 * it broke (a failure for the breaker), it ended, or the consumer stopped early (no verdict unless `complete`
 * said the answer was whole already).
 */
async function* relay<T>(lease: Lease<Started<T>>, signal: AbortSignal | undefined, each: (item: T) => T, complete?: (item: T) => boolean): AsyncGenerator<T> {
  const { it } = lease.value;
  let ev = lease.value.first;
  let ok: boolean | undefined;
  try {
    while (!ev.done) {
      if (complete?.(ev.value)) ok = true;
      yield each(ev.value);
      ev = await it.next();
    }
    ok = true;
  } catch (e) {
    if (signal?.aborted) throw e;
    ok = false;
    const err = Router.cause(lease, e);
    lease.end(false, err);
    throw err;
  } finally {
    lease.end(ok);
    void Promise.resolve(it.return?.()).catch(() => {});
  }
}

class RoutedEmbeddingsEngine implements EmbeddingsEngine {
  readonly kind: string;

  constructor(
    private readonly router: Router,
    private readonly spec: ModelSpec,
    private readonly primary: EmbeddingsEngine,
  ) {
    this.kind = primary.kind;
  }

  get dimensions(): number | undefined {
    return this.primary.dimensions;
  }

  info() {
    return this.primary.info?.() ?? { device: 'CPU' };
  }

  close(): Promise<void> {
    return Promise.resolve();
  }

  async embed(req: EmbedRequest): Promise<EmbedResult> {
    const engines = this.router.engines;
    const lease = await this.router.first(this.spec, req.signal, req.route, async (dep, signal) =>
      (await engines.embeddings(dep)).embed({ ...req, model: dep.upstream_model, signal }),
    );
    lease.end(true);
    const r = lease.value;
    this.router.tokens(lease.target, r.inputTokens);
    const model = reportedModel(r.model, lease, this.spec, req.model);
    return model === r.model ? r : { ...r, model };
  }
}
