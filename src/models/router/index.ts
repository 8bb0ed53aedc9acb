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
 * A try is bounded by its deployment's timeouts and nothing else: when `first_byte_ms` (or the client's abort)
 * ends it, the router moves on at once and leaves the abandoned call to settle on its own (an HTTP client may
 * take seconds to give up a connect); what it would still give is thrown away.
 *
 * The breaker (./health.ts) gets one verdict per client request and deployment: a failure before or after the
 * first output, or a success when the answer ended whole.
 *
 * The hot path with one healthy deployment is a few field reads, two timers and one AbortSignal: no Redis
 * (breaker changes are shared off the request path, ./health.ts).
 */
import {
  EngineError,
  type ChatCompletionsRequest,
  type MessagesForwardRequest,
  type ForwardRequest,
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
import { DEFAULT_BREAKER, HealthBoard, type BreakerPolicy, type BreakerState, type DeploymentHealth, type HealthShare } from './health.js';

export { HealthBoard, MinuteWindow, type HealthShare } from './health.js';

/** The defaults of docs/models.md ("Deployments and routing"). */
export const ROUTE_DEFAULTS = {
  retries: 2,
  retryBackoffMs: 100,
  maxRetryWaitMs: 10_000,
  /**
   * first byte and total: applied by the router, for every engine. connect_ms has no default of its own: the
   * transport bounds a connect by the smaller of timeout_ms, first_byte_ms and 10 s (src/engines/openai-compatible)
   */
  timeouts: { first_byte_ms: 120_000, total_ms: 900_000 } satisfies Omit<Required<Timeouts>, 'connect_ms'>,
} as const;

/** A deployment as the operators' health view shows it (Router.deploymentHealth): this instance's figures. */
export interface DeploymentReport {
  model: string;
  deployment: string;
  provider: string;
  state: BreakerState;
  /** why the breaker opened (the failure's message), while it is open or half-open */
  reason: string | null;
  /** tries that ended in the last minute, and those the deployment failed (DeploymentStats) */
  requests: number;
  failures: number;
  /** latencies of whole answers and times to the first output of streams, as sparse histograms (health.ts) */
  latency: number[];
  ttft: number[];
  inFlight: number;
  /** requests begun and tokens served in the last minute, and the deployment's limits (per instance) */
  rpmUsed: number;
  tpmUsed: number;
  rpmLimit: number | null;
  tpmLimit: number | null;
}

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
  /** the model's only deployment, with no fallback to turn to: its breaker opens only when it fails nearly everything */
  only: boolean;
}

/** One client request's verdicts: each deployment it tried gets at most one failure. */
type Verdicts = Set<DeploymentHealth>;

/** A try that produced its first output: the rest is the caller's, and `end` gives the verdict. */
interface Lease<T> {
  value: T;
  target: Target;
  /** the model that served (the requested one, or a fallback) */
  model: ModelSpec;
  signal: AbortSignal;
  /** tokens the answer used (Router.tokens): put in the deployment's tpm window when the try ends, with its clock */
  used: number;
  /** the try's own timers and signal are let go; `ok`: a verdict for the breaker (undefined: the client left) */
  end(ok: boolean | undefined, err?: unknown): void;
}

export interface RouterOptions {
  engines: EngineRegistry;
  models: ModelRegistry;
  /** breaker changes to and from other instances (the change feed); none: this instance only */
  share?: HealthShare;
  log?: { warn(o: object, msg?: string): void; info?(o: object, msg?: string): void; debug(o: object, msg?: string): void };
  /** told of each try after the first and each fallback (the per-model metrics series) */
  observe?: {
    /** a try of `model` on `deployment` failed and another try follows */
    retry(model: string, deployment: string): void;
    /** the request for `model` fell back to another model after `deployment` failed (or was out): once per request */
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

/** A failure that is the deployment's before its first output: a 429 is load, a refusal of the request is the request's. */
function isDeploymentFault(e: unknown): boolean {
  if (!(e instanceof EngineError)) return true;
  if (e instanceof NotForwarding) return false;
  return e.retryable && !isRateLimited(e);
}

/** the upstream refused the load (429): not a fault for the breaker, a failed try in the operators' figures */
function isRateLimited(e: unknown): boolean {
  return e instanceof EngineError && !(e instanceof NotForwarding) && (e.status === 429 || e.code === 'rate_limit_exceeded');
}

class TimeoutOfTry extends EngineError {}

const makeText = (engines: EngineRegistry, d: DeploymentSpec) => engines.text(d);
const makeEmbeddings = (engines: EngineRegistry, d: DeploymentSpec) => engines.embeddings(d);

/** An engine that could not be made for a deployment: another deployment may serve (the reason is in the log). */
class EngineNotMade extends EngineError {}

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
      // the first deployment whose engine can be made lends its context window and token counting to the
      // request's preparation; none at all: the model fails here (503)
      const primary = await this.firstMade(spec, (d) => this.o.engines.text(d));
      e = new RoutedTextEngine(this, spec, primary);
      this.texts.set(spec, e);
    }
    return e;
  }

  async embeddings(spec: ModelSpec): Promise<EmbeddingsEngine> {
    let e = this.embedders.get(spec);
    if (!e) {
      const primary = await this.firstMade(spec, (d) => this.o.engines.embeddings(d));
      e = new RoutedEmbeddingsEngine(this, spec, primary);
      this.embedders.set(spec, e);
    }
    return e;
  }

  private async firstMade<E>(spec: ModelSpec, make: (d: DeploymentSpec) => Promise<E>): Promise<E> {
    const route = this.route(spec);
    let first: unknown;
    for (const t of route.targets) {
      try {
        return await make(t.dep);
      } catch (e) {
        first ??= e;
        if (route.targets.length > 1)
          this.o.log?.warn({ model: spec.name, deployment: t.dep.id, err: (e as Error)?.message }, `deployment '${t.dep.id}' could not be started; trying the next`);
      }
    }
    throw first;
  }

  /** A deployment's engine for one try: one that cannot be made is a failure of that deployment, and the next is tried. */
  async engine<E>(dep: DeploymentSpec, make: (engines: EngineRegistry, d: DeploymentSpec) => Promise<E>): Promise<E> {
    try {
      return await make(this.o.engines, dep);
    } catch (e) {
      if (e instanceof EngineError) throw e.retryable ? e : new EngineNotMade(e.message, e.code, e.status, { retryable: true });
      this.o.log?.warn({ deployment: dep.id, err: (e as Error)?.message }, `deployment '${dep.id}' could not be started`);
      throw new EngineNotMade(`the deployment ${dep.id} could not be started (see the server log)`, 'engine_unavailable', 503, { retryable: true });
    }
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
      const b = spec.breaker;
      const policy: BreakerPolicy = {
        failures: b?.failures ?? DEFAULT_BREAKER.failures,
        failureRate: b?.failure_rate ?? DEFAULT_BREAKER.failureRate,
        windowMs: b?.window_ms ?? DEFAULT_BREAKER.windowMs,
        cooldownMs: b?.cooldown_ms ?? DEFAULT_BREAKER.cooldownMs,
      };
      const targets = deps.map((dep) => ({ dep, health: this.health.of(dep.id, dep.rpm, dep.tpm, policy.windowMs) }));
      for (const d of deps) this.modelOf.set(d.id, spec.name);
      r = {
        spec,
        targets,
        weights: targets.reduce((s, t) => s + t.dep.weight, 0),
        policy,
        only: targets.length === 1 && !spec.fallbacks?.length,
      };
      this.routes.set(spec, r);
    }
    return r;
  }

  /**
   * A reload changed or removed these deployments: their health (breaker, counts, limits) is dropped, so the new
   * configuration's routes start afresh; routes already taken by requests in flight keep what they hold.
   */
  forget(deploymentIds: Iterable<string>): void {
    for (const id of deploymentIds) {
      this.health.forget(id);
      this.modelOf.delete(id);
    }
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
   * Every deployment routed so far with its breaker's state now (0 closed, 1 half-open, 2 open) and its active
   * health check's last verdict (undefined: no check, or none yet).
   */
  circuits(): Array<{ model: string; deployment: string; state: 0 | 1 | 2; checkOk: boolean | undefined }> {
    const now = this.now();
    const out: Array<{ model: string; deployment: string; state: 0 | 1 | 2; checkOk: boolean | undefined }> = [];
    for (const [deployment, model] of this.modelOf) {
      const h = this.health.peek(deployment);
      const st = h?.state(now) ?? 'closed';
      out.push({ model, deployment, state: st === 'closed' ? 0 : st === 'half-open' ? 1 : 2, checkOk: h?.checkOk });
    }
    return out;
  }

  /**
   * Every deployment of these models that the router serves (text and embeddings models; speech and transcription
   * are not routed), as this instance sees it now, in the models' order: the operators' health view
   * (GET /v1/admin/health). A deployment nobody called is listed too, with zeros.
   */
  deploymentHealth(models: readonly ModelSpec[]): DeploymentReport[] {
    const now = this.now();
    const out: DeploymentReport[] = [];
    for (const m of models) {
      if (m.type !== 'text' && m.type !== 'embeddings') continue;
      for (const { dep, health: h } of this.route(m).targets) {
        const state = h.state(now);
        const w = h.stats.read(now);
        out.push({
          model: m.name,
          deployment: dep.id,
          provider: dep.provider,
          state,
          reason: state === 'closed' ? null : (h.lastError ?? null),
          requests: w.requests,
          failures: w.failures,
          latency: w.latency,
          ttft: w.ttft,
          inFlight: h.inflight,
          rpmUsed: h.requests.sum(now),
          tpmUsed: h.tokens.sum(now),
          rpmLimit: dep.rpm ?? null,
          tpmLimit: dep.tpm ?? null,
        });
      }
    }
    return out;
  }

  /**
   * Runs `open` on deployments until one gives its first output: the model's own, then its fallbacks. `open`
   * gets the deployment and a signal that aborts on the client's signal and on the try's timeouts; `abandon`
   * gets what a try gave after it was given up (a late first output), to close it.
   */
  async first<T>(
    spec: ModelSpec,
    signal: AbortSignal | undefined,
    note: RouteNote | undefined,
    open: (dep: DeploymentSpec, engineSignal: AbortSignal) => Promise<T>,
    abandon?: (value: T) => void,
    /** the answer streams: the time to its first output is a sample of the deployment's TTFT */
    streamed = false,
  ): Promise<Lease<T>> {
    const models: ModelSpec[] = [spec];
    const verdicts: Verdicts = new Set();
    let lastErr: unknown;
    let windowFallbacksUsed = false;
    /** the deployment whose failure (or unavailability) led to the next try */
    let lastFailed: string | undefined;
    let fellBack = false;
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
          // nothing usable now: wait for a retry-after or a limit that ends soon enough, else give up on this model
          const soonest = Math.min(...r.targets.filter((x) => !x.health.broken(now)).map((x) => x.health.usableAt(now)));
          if (!Number.isFinite(soonest) || soonest - now > maxWait) break;
          await this.sleep(Math.max(1, soonest - now), signal);
          // the timer runs on the monotonic clock and `now` is whole wall-clock milliseconds: it may read one short
          // of the time waited for, which would find the deployment still out and refuse a request that waited
          now = Math.max(this.now(), soonest);
          t = this.pick(r, tried, now);
          if (!t) break;
        } else if (tried?.has(t) && failedHere > 0) {
          // the same deployment again: back off first (doubling, bounded)
          await this.sleep(Math.min(maxWait, backoff * 2 ** (failedHere - 1)), signal);
          now = this.now();
        }
        (tried ??= new Set()).add(t);
        if (model !== spec && !fellBack) {
          fellBack = true;
          this.o.observe?.fallback(spec.name, lastFailed ?? this.outOne(this.route(spec), now));
        } else if (lastFailed !== undefined && n > 0) this.o.observe?.retry(model.name, lastFailed);
        if (note) {
          note.deployment = t.dep.id;
          note.tries = (note.tries ?? 0) + 1;
          if (model !== spec) note.fallback = model.name;
        }
        try {
          return await this.attempt(t, r, model, signal, verdicts, open, abandon, streamed);
        } catch (e) {
          if (signal?.aborted) throw e;
          lastErr = e;
          lastFailed = t.dep.id;
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
    // a try failed: its error (an upstream's 429 keeps its message and retry-after); none was made: why not
    if (lastErr) throw lastErr;
    throw this.unavailable(spec);
  }

  /** a deployment of the route that is out now (for the fallback series when nothing was tried) */
  private outOne(r: Route, now: number): string {
    return (r.targets.find((t) => !t.health.usable(now)) ?? r.targets[0]!).dep.id;
  }

  private resolve(names: readonly string[]): ModelSpec[] {
    return names.flatMap((n) => {
      const s = this.o.models.get(n);
      return s ? [s] : [];
    });
  }

  /**
   * Every deployment is out: a 503 `engine_unavailable` when a breaker is open (the deployments are failing), a 429
   * `rate_limit_exceeded` when they are only at their rpm/tpm or waiting out an upstream's retry-after; both say
   * why per deployment, and when to try again (retry-after, also as the error's retryAfterMs).
   */
  private unavailable(spec: ModelSpec): EngineError {
    const now = this.now();
    const r = this.route(spec);
    const why = r.targets.map((t) => `${t.dep.id}: ${t.health.reason(now)}`).join('; ');
    const soonest = Math.min(...r.targets.map((t) => t.health.usableAt(now)));
    const waitMs = Number.isFinite(soonest) && soonest > now ? soonest - now : 1000;
    const after = Math.max(1, Math.ceil(waitMs / 1000));
    const broken = r.targets.some((t) => t.health.broken(now));
    return broken
      ? new EngineError(`no deployment of the model '${spec.name}' can take the request now (${why}); try again in ${after} s`, 'engine_unavailable', 503, {
          retryable: true,
          retryAfterMs: waitMs,
        })
      : new EngineError(`the model '${spec.name}' is at its rate limit (${why}); try again in ${after} s`, 'rate_limit_exceeded', 429, {
          retryable: true,
          retryAfterMs: waitMs,
        });
  }

  /** One try on one deployment, with its timeouts, until its first output. */
  private async attempt<T>(
    t: Target,
    r: Route,
    model: ModelSpec,
    signal: AbortSignal | undefined,
    verdicts: Verdicts,
    open: (dep: DeploymentSpec, engineSignal: AbortSignal) => Promise<T>,
    abandon: ((value: T) => void) | undefined,
    streamed: boolean,
  ): Promise<Lease<T>> {
    const timeouts = t.dep.timeouts;
    const firstMs = timeouts?.first_byte_ms ?? ROUTE_DEFAULTS.timeouts.first_byte_ms;
    const totalMs = timeouts?.total_ms ?? ROUTE_DEFAULTS.timeouts.total_ms;
    const ctl = new AbortController();
    let timedOut: TimeoutOfTry | undefined;
    // the try is given up: the wait for its first output ends now, whatever the engine is still doing
    let giveUp: ((e: unknown) => void) | undefined;
    const expire = (what: string, ms: number, retryable: boolean) => () => {
      timedOut = new TimeoutOfTry(`the deployment ${t.dep.id} gave ${what} within ${ms} ms`, 'upstream_timeout', 504, { retryable });
      ctl.abort(timedOut);
      giveUp?.(timedOut);
    };
    // one timer at a time (first output, then the rest of the total), and the client's abort passed on by hand:
    // cheaper per request than two timers and AbortSignal.any
    const t0 = this.now();
    let timer = setTimeout(firstMs < totalMs ? expire('no output', firstMs, true) : expire('no complete answer', totalMs, false), Math.min(firstMs, totalMs));
    const onAbort = () => {
      ctl.abort(signal!.reason);
      giveUp?.(signal!.reason);
    };
    if (signal) {
      if (signal.aborted) ctl.abort(signal.reason);
      else signal.addEventListener('abort', onAbort, { once: true });
    }
    const engineSignal = ctl.signal;
    const h = t.health;
    // the try began at t0 (the same millisecond as far as a breaker or a minute window can tell)
    const probe = this.health.begin(h, t0);
    let ended = false;
    // what the caller gets at the first output (its value set then); the try's end reads the tokens it counted
    const lease: Lease<T> = {
      value: undefined as T,
      target: t,
      model,
      signal: engineSignal,
      used: 0,
      end: (ok, err) => end(ok, ok === false ? (timedOut ?? err) : err),
    };
    // the breaker's verdict, once per client request and deployment: a failure (before or after the first
    // output), or a success when the answer ended whole; none when the client left (the operators' figures count
    // the try, and the whole answer's latency)
    const end = (ok: boolean | undefined, err?: unknown) => {
      if (ended) return;
      ended = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      const now = this.now();
      if (lease.used > 0) this.health.tokensUsed(h, lease.used, now);
      if (ok === false) this.judge(t, r, err, probe, verdicts, true, now);
      else if (ok === true) {
        this.health.succeeded(h, now);
        h.stats.ended(false, now - t0, now);
      } else h.stats.ended(false, undefined, now);
      this.health.release(h, probe);
    };
    let value: T;
    let gaveUp = false;
    let came: { value: T } | undefined;
    try {
      const opened = open(t.dep, engineSignal);
      // a try given up before its first output may still give one later: it is closed, never used (and a late
      // failure is nobody's to hear)
      opened.then((v) => {
        if (gaveUp) abandon?.(v);
        else came = { value: v };
      }, noop);
      if (engineSignal.aborted) throw timedOut ?? ctl.signal.reason;
      value = await new Promise<T>((resolve, reject) => {
        giveUp = reject;
        opened.then(resolve, reject);
      });
      giveUp = undefined;
      // given up in the same turn as the first output came: the output is not used
      if (engineSignal.aborted) throw timedOut ?? signal?.reason;
    } catch (e) {
      giveUp = undefined;
      gaveUp = true;
      if (came !== undefined) abandon?.(came.value);
      const err = timedOut ?? e;
      if (signal?.aborted) end(undefined);
      else {
        ended = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.judge(t, r, err, probe, verdicts, false, this.now());
        this.health.release(h, probe);
      }
      throw err;
    }
    clearTimeout(timer);
    const firstAt = this.now();
    if (streamed) h.stats.firstOutput(firstAt - t0, firstAt);
    const left = totalMs - (firstAt - t0);
    timer = setTimeout(expire('no complete answer', totalMs, false), Math.max(1, left));
    this.health.answered(h);
    lease.value = value;
    return lease;
  }

  /** A failed try's verdict: a failure of the deployment (once per request), a back-off for a 429, or nothing. */
  private judge(t: Target, r: Route, err: unknown, probe: boolean, verdicts: Verdicts, afterOutput: boolean, now: number): void {
    const h = t.health;
    // the operators' figures: a failure of the deployment as the breaker sees one, or an upstream's 429 (it refused
    // the load); a refusal of the request itself (bad input, a context window) is not the deployment's
    h.stats.ended(afterOutput || isDeploymentFault(err) || isRateLimited(err), undefined, now);
    if (err instanceof EngineError && err.retryAfterMs !== undefined && (err.status === 429 || err.status === 503)) this.health.backOff(h, now, err.retryAfterMs);
    // after output every failure is the deployment's (a stream that breaks, a total_ms that passes); before it,
    // only the failures isDeploymentFault names
    if (!afterOutput && !isDeploymentFault(err)) return;
    if (verdicts.has(h)) {
      // counted already for this request; a probe that fails still opens the breaker again
      if (probe) this.health.open(h, now + r.policy.cooldownMs, messageOf(err));
      return;
    }
    verdicts.add(h);
    const was = h.openUntil;
    this.health.failed(h, r.policy, now, messageOf(err), probe, r.only);
    if (was === 0 && h.openUntil !== 0)
      this.o.log?.warn({ model: r.spec.name, deployment: t.dep.id, until: new Date(h.openUntil).toISOString(), err: messageOf(err) }, `circuit breaker of '${t.dep.id}' opened`);
  }

  /** what a lease's failure is, for the caller: the try's own timeout when that is why the engine stopped */
  static cause(lease: Lease<unknown>, e: unknown): unknown {
    const r = (lease.signal as AbortSignal & { reason?: unknown }).reason;
    return lease.signal.aborted && r instanceof TimeoutOfTry ? r : e;
  }

  /** tokens the deployment of a try served, for its tpm (and the operators' view): counted when the try ends */
  tokens(lease: Lease<unknown>, n: number): void {
    if (n > 0) lease.used += n;
  }
}

const noop = () => {};

function messageOf(e: unknown): string | undefined {
  const m = (e as { message?: unknown } | undefined)?.message;
  return typeof m === 'string' ? m.slice(0, 300) : undefined;
}

class RoutedTextEngine implements TextEngine {
  readonly kind: string;
  readonly chatCompletions?: (req: ChatCompletionsRequest) => AsyncIterable<Record<string, unknown>>;
  readonly forwardJson?: (req: ForwardRequest) => Promise<Record<string, unknown>>;
  readonly messages?: (req: MessagesForwardRequest) => AsyncIterable<Record<string, unknown>>;

  constructor(
    private readonly router: Router,
    private readonly spec: ModelSpec,
    private readonly primary: TextEngine,
  ) {
    this.kind = primary.kind;
    // Chat Completions are forwarded when the first deployment forwards them; a deployment that cannot is skipped
    // like one that is out (src/chat/forwarding.ts refuses up front what only forwarding deployments could take)
    if (primary.chatCompletions) this.chatCompletions = (req) => this.forward(req);
    // other calls forwarded as they are: the same tries, on deployments that forward them
    if (primary.forwardJson) this.forwardJson = (req) => this.forwardOne(req);
    // Anthropic's Messages API forwarded: as Chat Completions are (the feature refuses up front what only
    // forwarding deployments could take, and forwards only when every one of them does)
    if (primary.messages) this.messages = (req) => this.forwardMessages(req);
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

  generate(req: GenerateRequest): AsyncIterable<GenerateEvent> {
    const router = this.router;
    // (the answer names the model the client asked for whatever `done.model` says: the features see to it)
    return new RoutedStream<GenerateEvent>(
      () =>
        router.first(
          this.spec,
          req.signal,
          req.route,
          async (dep, signal) => startStream((await router.engine(dep, makeText)).generate({ ...req, model: dep.upstream_model, signal })),
          closeStarted,
          // a caller that folds the whole answer asks the upstream for one JSON answer: its first output is its end
          req.stream !== false,
        ),
      req.signal,
      (e, lease) => {
        if (e.type === 'done') {
          router.tokens(lease, e.usage.inputTokens + e.usage.outputTokens);
          return true;
        }
        return false;
      },
    );
  }

  /** One call forwarded as it is (TextEngine.forwardJson): tried as a generation is, until a deployment answers. */
  private async forwardOne(req: ForwardRequest): Promise<Record<string, unknown>> {
    const router = this.router;
    const lease = await router.first(this.spec, req.signal, req.route, async (dep, signal) => {
      const engine = await router.engine(dep, makeText);
      if (!engine.forwardJson) throw new NotForwarding(`the deployment ${dep.id} does not forward ${req.path}`, 'engine_unavailable', 503, { retryable: true });
      return engine.forwardJson({ ...req, body: { ...req.body, model: dep.upstream_model }, signal });
    });
    const u = lease.value.usage as { total_tokens?: unknown } | null | undefined;
    if (u && typeof u.total_tokens === 'number') router.tokens(lease, u.total_tokens);
    lease.end(true);
    return lease.value;
  }

  /** Chat Completions forwarded: the same tries, on deployments that forward them. */
  private forward(req: ChatCompletionsRequest): AsyncIterable<Record<string, unknown>> {
    const router = this.router;
    const requestModel = req.body.model as string;
    return this.forwarded(
      req,
      'Chat Completions',
      (engine, r) => engine.chatCompletions?.(r),
      req.body.stream === true,
      (o, lease) => {
        const u = o.usage as { total_tokens?: number } | null | undefined;
        if (u && typeof u.total_tokens === 'number') router.tokens(lease, u.total_tokens);
        // a non-streamed answer is whole when it comes (its reader stops there); a stream, at its end
        return o.object === 'chat.completion';
      },
      // every chunk names the model the client asked for, whatever the upstream calls it
      (o) => (typeof o.model === 'string' && o.model !== requestModel ? { ...o, model: requestModel } : o),
    );
  }

  /** Anthropic's Messages API forwarded: the same tries, on deployments that forward it. */
  private forwardMessages(req: MessagesForwardRequest): AsyncIterable<Record<string, unknown>> {
    const router = this.router;
    const stream = !req.count && req.body.stream === true;
    let input = 0;
    return this.forwarded(
      req,
      "Anthropic's Messages API",
      (engine, r) => engine.messages?.(r),
      stream,
      (o, lease) => {
        // the tokens for the deployment's tpm: the input at message_start (or in the answer), the output at the end
        const u = ((o.type === 'message_start' ? (o.message as { usage?: unknown } | undefined)?.usage : o.usage) ?? undefined) as Record<string, unknown> | undefined;
        const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : 0);
        if (u && typeof u === 'object') {
          const inp = n(u.input_tokens) + n(u.cache_read_input_tokens) + n(u.cache_creation_input_tokens);
          if (inp > 0) input = inp;
          if (o.type !== 'message_start') router.tokens(lease, input + n(u.output_tokens));
        }
        // a JSON answer is whole when it comes; a stream, at message_stop
        return !stream || o.type === 'message_stop';
      },
    );
  }

  /**
   * An API forwarded as the client sent it (the model named as each deployment knows it): the tries run on the
   * first read, on the deployments whose engine forwards it (`call` gives nothing: it does not); `seen` tells when
   * the answer is whole, `map` what the client gets of each item.
   */
  private forwarded<R extends { body: Record<string, unknown>; signal?: AbortSignal; route?: RouteNote }>(
    req: R,
    api: string,
    call: (engine: TextEngine, req: R) => AsyncIterable<Record<string, unknown>> | undefined,
    stream: boolean,
    seen: (item: Record<string, unknown>, lease: Lease<Started<Record<string, unknown>>>) => boolean,
    map?: (item: Record<string, unknown>) => Record<string, unknown>,
  ): AsyncIterable<Record<string, unknown>> {
    const router = this.router;
    return new RoutedStream<Record<string, unknown>>(
      () =>
        router.first(
          this.spec,
          req.signal,
          req.route,
          async (dep, signal) => {
            const engine = await router.engine(dep, makeText);
            const answer = call(engine, { ...req, body: { ...req.body, model: dep.upstream_model }, signal });
            if (!answer) throw new NotForwarding(`the deployment ${dep.id} does not forward ${api}`, 'engine_unavailable', 503, { retryable: true });
            return startStream(answer);
          },
          closeStarted,
          stream,
        ),
      req.signal,
      seen,
      map,
    );
  }
}

/** Chat Completions asked of a deployment that does not forward them: not a fault of the deployment. */
class NotForwarding extends EngineError {}

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

/** A stream whose first item came after its try was given up: closed, never read. */
function closeStarted(s: Started<unknown>): void {
  void Promise.resolve(s.it.return?.()).catch(noop);
}

const DONE: IteratorReturnResult<undefined> = Object.freeze({ value: undefined, done: true }) as IteratorReturnResult<undefined>;

/**
 * A routed stream: the one layer between a feature and the engine that holds the rule "nothing is tried again
 * once output has come". Its first read runs the tries (Router.first: retries, fallbacks, timeouts, until a
 * deployment gives its first item); every later read is the engine's own, passed through with one `then` (no
 * async generator per layer, no copy of the items unless `map` makes one). The try gets its verdict when the
 * stream ends: it broke (a failure for the breaker), it ended (a success), or the consumer stopped early (no
 * verdict unless `seen` said the answer was whole already: `seen` sees every item, and says so).
 */
class RoutedStream<T> implements AsyncIterableIterator<T> {
  private lease: Lease<Started<T>> | undefined;
  /** the first read, while the tries run */
  private opening: Promise<IteratorResult<T>> | undefined;
  /** no more reads: the end, a failure or the consumer's return() */
  private over = false;
  /** the verdict so far: true once the answer is whole */
  private ok: boolean | undefined;

  constructor(
    private readonly open: () => Promise<Lease<Started<T>>>,
    private readonly signal: AbortSignal | undefined,
    private readonly seen: (item: T, lease: Lease<Started<T>>) => boolean,
    private readonly map?: (item: T) => T,
  ) {}

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<T>> {
    if (this.over) return Promise.resolve(DONE);
    const lease = this.lease;
    if (lease === undefined) {
      // a second read while the tries run waits for them (one reader at a time is the rule; this keeps it safe)
      if (this.opening !== undefined)
        return this.opening.then(
          () => this.next(),
          () => this.next(),
        );
      return (this.opening = this.open().then(
        (l) => {
          this.lease = l;
          // given up while the tries ran (a return() before the first output)
          if (this.over) {
            this.settle(l);
            return DONE;
          }
          return this.take(l.value.first);
        },
        (e: unknown) => {
          this.over = true;
          throw e;
        },
      ));
    }
    return lease.value.it.next().then(this.onItem, this.onError);
  }

  private readonly onItem = (ev: IteratorResult<T>): IteratorResult<T> => (this.over ? DONE : this.take(ev));

  private take(ev: IteratorResult<T>): IteratorResult<T> {
    if (ev.done) {
      this.ok = true;
      this.finish();
      return DONE;
    }
    const v = ev.value;
    if (this.seen(v, this.lease!)) this.ok = true;
    return this.map === undefined ? (ev as IteratorYieldResult<T>) : { value: this.map(v), done: false };
  }

  private readonly onError = (e: unknown): never => {
    if (this.over) throw e;
    const lease = this.lease!;
    if (this.signal?.aborted) {
      this.finish();
      throw e;
    }
    this.ok = false;
    const err = Router.cause(lease, e);
    lease.end(false, err);
    this.finish();
    throw err;
  };

  /** the consumer stopped: no verdict unless the answer was whole */
  return(): Promise<IteratorResult<T>> {
    if (!this.over) this.finish();
    return Promise.resolve(DONE);
  }

  private finish(): void {
    this.over = true;
    if (this.lease !== undefined) this.settle(this.lease);
  }

  private settle(lease: Lease<Started<T>>): void {
    lease.end(this.ok);
    void Promise.resolve(lease.value.it.return?.()).catch(noop);
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
    const router = this.router;
    const lease = await router.first(this.spec, req.signal, req.route, async (dep, signal) =>
      (await router.engine(dep, makeEmbeddings)).embed({ ...req, model: dep.upstream_model, signal }),
    );
    const r = lease.value;
    router.tokens(lease, r.inputTokens);
    lease.end(true);
    // the answer names the model the client asked for (the embeddings feature sees to it)
    return r;
  }
}
