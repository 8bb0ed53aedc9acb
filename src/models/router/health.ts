/**
 * What the router knows of each deployment: requests in flight, its circuit breaker and the outcomes it judges
 * by, a retry-after it was given, and its requests and tokens of the last minute (for `rpm`/`tpm`). All of it is
 * read and written in memory on the request path; only a breaker that opens or closes is told to the other
 * instances (through the change feed: Redis pub/sub when REDIS_URL is set), so a healthy deployment costs no
 * round trip at all.
 *
 * The breaker judges a failure RATE over a short window, not a run of failures (docs/models.md, "Circuit
 * breaker"): each client request gives each deployment it tried at most one verdict (a failure, or a success
 * when its answer ended whole), so retries do not multiply one bad request; it opens when the window holds at
 * least `failures` failures and they are at least `failure_rate` of its verdicts. A model's only deployment
 * (no other deployment, no fallback) opens only when it failed nearly everything (ONLY_DEPLOYMENT_RATE), as
 * taking it out turns every request into a 503.
 */

/** Counts over the last 60 seconds in one-second buckets (no allocation per request). */
export class MinuteWindow {
  private readonly counts = new Float64Array(60);
  private readonly stamps = new Float64Array(60);

  add(n: number, now: number): void {
    const sec = Math.floor(now / 1000);
    const i = sec % 60;
    if (this.stamps[i] !== sec) {
      this.stamps[i] = sec;
      this.counts[i] = 0;
    }
    this.counts[i]! += n;
  }

  sum(now: number): number {
    const sec = Math.floor(now / 1000);
    let s = 0;
    for (let i = 0; i < 60; i++) if (sec - this.stamps[i]! < 60) s += this.counts[i]!;
    return s;
  }

  /** When the sum falls below `limit` (epoch ms): `now` if it is below already. */
  freeAt(limit: number, now: number): number {
    let s = this.sum(now);
    if (s < limit) return now;
    const sec = Math.floor(now / 1000);
    const live: number[] = [];
    for (let i = 0; i < 60; i++) if (sec - this.stamps[i]! < 60 && this.counts[i]! > 0) live.push(i);
    live.sort((a, b) => this.stamps[a]! - this.stamps[b]!);
    for (const i of live) {
      s -= this.counts[i]!;
      // a bucket of second S counts while sec - S < 60: it is gone at second S + 60
      if (s < limit) return (this.stamps[i]! + 60) * 1000;
    }
    return now + 60_000;
  }
}

/** Failures and verdicts over a sliding window of `windowMs`, in 20 buckets (no allocation per verdict). */
export class OutcomeWindow {
  static readonly BUCKETS = 20;
  private readonly fails = new Float64Array(OutcomeWindow.BUCKETS);
  private readonly totals = new Float64Array(OutcomeWindow.BUCKETS);
  private readonly stamps = new Float64Array(OutcomeWindow.BUCKETS).fill(-1);
  private bucketMs: number;

  constructor(windowMs: number) {
    this.bucketMs = Math.max(1, Math.ceil(windowMs / OutcomeWindow.BUCKETS));
  }

  /** a new window length keeps nothing (the buckets meant something else) */
  resize(windowMs: number): void {
    const b = Math.max(1, Math.ceil(windowMs / OutcomeWindow.BUCKETS));
    if (b !== this.bucketMs) {
      this.bucketMs = b;
      this.clear();
    }
  }

  add(failed: boolean, now: number): void {
    const slot = Math.floor(now / this.bucketMs);
    const i = slot % OutcomeWindow.BUCKETS;
    if (this.stamps[i] !== slot) {
      this.stamps[i] = slot;
      this.fails[i] = 0;
      this.totals[i] = 0;
    }
    this.totals[i]!++;
    if (failed) this.fails[i]!++;
  }

  /** [failures, verdicts] in the window ending now */
  counts(now: number): [number, number] {
    const slot = Math.floor(now / this.bucketMs);
    let f = 0;
    let n = 0;
    for (let i = 0; i < OutcomeWindow.BUCKETS; i++) {
      if (slot - this.stamps[i]! < OutcomeWindow.BUCKETS) {
        f += this.fails[i]!;
        n += this.totals[i]!;
      }
    }
    return [f, n];
  }

  clear(): void {
    this.stamps.fill(-1);
    this.fails.fill(0);
    this.totals.fill(0);
  }
}

/**
 * Latencies as a histogram: 8 bins per doubling from 1 ms (bin 0 holds what took under 1 ms, the last one 2^20 ms,
 * about 17 minutes, and more). A sample finds its bin with one log2; a percentile read back is the middle of its bin,
 * within 4.5 % of the samples there. Merging two histograms (two instances, two time buckets) is adding them.
 */
export const LATENCY_BINS = 162;
const BINS_PER_DOUBLING = 8;

export function latencyBin(ms: number): number {
  if (!(ms >= 1)) return 0;
  const b = 1 + Math.floor(Math.log2(ms) * BINS_PER_DOUBLING);
  return b < LATENCY_BINS ? b : LATENCY_BINS - 1;
}

/** what a bin stands for (ms): the geometric middle of its bounds */
export function binValue(b: number): number {
  return b <= 0 ? 0.5 : 2 ** ((b - 0.5) / BINS_PER_DOUBLING);
}

/** Adds a histogram in its sparse form (`[bin, count, bin, count, ...]`) into `into`; bad pairs are skipped. */
export function addSparse(into: Float64Array, sparse: readonly number[]): void {
  for (let i = 0; i + 1 < sparse.length; i += 2) {
    const b = sparse[i]!;
    const n = sparse[i + 1]!;
    if (Number.isInteger(b) && b >= 0 && b < LATENCY_BINS && Number.isFinite(n) && n > 0) into[b]! += n;
  }
}

/** The `q` quantile (0-1) of a histogram, by the nearest rank, in ms; undefined when it holds no sample. */
export function percentile(bins: ArrayLike<number>, q: number): number | undefined {
  let total = 0;
  for (let i = 0; i < bins.length; i++) total += bins[i]!;
  if (total === 0) return undefined;
  const rank = Math.max(1, Math.ceil(q * total));
  let seen = 0;
  for (let i = 0; i < bins.length; i++) {
    seen += bins[i]!;
    if (seen >= rank) return binValue(i);
  }
  return binValue(bins.length - 1);
}

/** The figures of one deployment over the health window, as DeploymentStats.read gives them. */
export interface WindowFigures {
  /** tries that ended in the window */
  requests: number;
  /** of which failed (see DeploymentStats.ended) */
  failures: number;
  /** latencies of the tries answered whole, and times to the first output of streams: sparse histograms */
  latency: number[];
  ttft: number[];
}

/**
 * What the operators' health view shows of a deployment (GET /v1/admin/health): its tries over the last minute,
 * how many failed, how long the answers took and how soon streams gave their first output. Twelve buckets of 5 s
 * (a sliding minute), each with its counts and two latency histograms; the histograms are made at the first
 * sample (a deployment nobody calls holds two small arrays). A try costs a bucket check, an add or two and one
 * log2, no allocation; the histograms are merged only when read.
 */
export class DeploymentStats {
  static readonly WINDOW_MS = 60_000;
  static readonly BUCKETS = 12;
  static readonly BUCKET_MS = DeploymentStats.WINDOW_MS / DeploymentStats.BUCKETS;
  private readonly stamps = new Float64Array(DeploymentStats.BUCKETS).fill(-1);
  private readonly tries = new Float64Array(DeploymentStats.BUCKETS);
  private readonly fails = new Float64Array(DeploymentStats.BUCKETS);
  private latency: Uint32Array | undefined = undefined;
  private ttft: Uint32Array | undefined = undefined;

  /** the bucket of `now`, emptied when it last held an older time */
  private bucket(now: number): number {
    const slot = Math.floor(now / DeploymentStats.BUCKET_MS);
    const i = slot % DeploymentStats.BUCKETS;
    if (this.stamps[i] !== slot) {
      this.stamps[i] = slot;
      this.tries[i] = 0;
      this.fails[i] = 0;
      this.latency?.fill(0, i * LATENCY_BINS, (i + 1) * LATENCY_BINS);
      this.ttft?.fill(0, i * LATENCY_BINS, (i + 1) * LATENCY_BINS);
    }
    return i;
  }

  /** A try ended: `failed` by the deployment, or not; `ms`: how long its answer took when it ended whole. */
  ended(failed: boolean, ms: number | undefined, now: number): void {
    const i = this.bucket(now);
    this.tries[i]!++;
    if (failed) this.fails[i]!++;
    if (ms !== undefined) (this.latency ??= new Uint32Array(DeploymentStats.BUCKETS * LATENCY_BINS))[i * LATENCY_BINS + latencyBin(ms)]!++;
  }

  /** A stream's first output came `ms` after its try began. */
  firstOutput(ms: number, now: number): void {
    const i = this.bucket(now);
    (this.ttft ??= new Uint32Array(DeploymentStats.BUCKETS * LATENCY_BINS))[i * LATENCY_BINS + latencyBin(ms)]!++;
  }

  /** The window ending now: counts, and each histogram merged over its buckets (sparse). */
  read(now: number): WindowFigures {
    const slot = Math.floor(now / DeploymentStats.BUCKET_MS);
    let requests = 0;
    let failures = 0;
    const live: number[] = [];
    for (let i = 0; i < DeploymentStats.BUCKETS; i++) {
      const age = slot - this.stamps[i]!;
      if (this.stamps[i]! >= 0 && age >= 0 && age < DeploymentStats.BUCKETS) {
        live.push(i);
        requests += this.tries[i]!;
        failures += this.fails[i]!;
      }
    }
    return { requests, failures, latency: merged(this.latency, live), ttft: merged(this.ttft, live) };
  }
}

function merged(h: Uint32Array | undefined, buckets: number[]): number[] {
  const out: number[] = [];
  if (h === undefined) return out;
  for (let b = 0; b < LATENCY_BINS; b++) {
    let n = 0;
    for (const i of buckets) n += h[i * LATENCY_BINS + b]!;
    if (n > 0) out.push(b, n);
  }
  return out;
}

export type BreakerState = 'closed' | 'open' | 'half-open';

/** A breaker's change as other instances hear it. */
export interface BreakerMessage {
  /** the instance that saw it (its own messages are not applied twice) */
  from: string;
  deployment: string;
  state: 'open' | 'closed';
  /** open: until when (epoch ms) */
  until?: number;
  /** open: why (the failure's message), for the operators' view of the other instances */
  why?: string;
}

export interface BreakerPolicy {
  /** the fewest failures in the window that open it */
  failures: number;
  /** the share of the window's verdicts that must be failures (0-1] */
  failureRate: number;
  windowMs: number;
  cooldownMs: number;
}

export const DEFAULT_BREAKER: BreakerPolicy = { failures: 5, failureRate: 0.5, windowMs: 60_000, cooldownMs: 30_000 };

/** The share of failures that takes a model's only deployment out (it fails nearly everything). */
export const ONLY_DEPLOYMENT_RATE = 0.9;

export class DeploymentHealth {
  inflight = 0;
  /** open until (epoch ms); 0: closed */
  openUntil = 0;
  /** half-open: the one probe is under way */
  probing = false;
  /** the upstream asked not to be called before this (retry-after), epoch ms */
  notBefore = 0;
  /** why it opened last (the last failure's message): for the operator's view and the 503 a client gets */
  lastError: string | undefined = undefined;
  /** the active health check's last verdict: undefined before the first probe (or with no check) */
  checkOk: boolean | undefined = undefined;
  readonly outcomes: OutcomeWindow;
  /** requests begun and tokens served in the last minute: checked against `rpm`/`tpm` when set, shown always */
  requests = new MinuteWindow();
  tokens = new MinuteWindow();
  /** the operators' figures of the last minute (tries, failures, latencies) */
  stats = new DeploymentStats();

  constructor(
    readonly id: string,
    readonly rpm: number | undefined,
    readonly tpm: number | undefined,
    windowMs = DEFAULT_BREAKER.windowMs,
  ) {
    this.outcomes = new OutcomeWindow(windowMs);
  }

  state(now: number): BreakerState {
    if (this.openUntil === 0) return 'closed';
    return now < this.openUntil ? 'open' : 'half-open';
  }

  /** May a request go there now? */
  usable(now: number): boolean {
    if (this.openUntil !== 0) {
      if (now < this.openUntil || this.probing) return false;
    }
    if (this.notBefore > now) return false;
    if (this.rpm !== undefined && this.requests.sum(now) >= this.rpm) return false;
    if (this.tpm !== undefined && this.tokens.sum(now) >= this.tpm) return false;
    return true;
  }

  /** Out because of its breaker (as opposed to a limit or a retry-after). */
  broken(now: number): boolean {
    return this.openUntil !== 0 && (now < this.openUntil || this.probing);
  }

  /** When it can take a request again, as far as is known now (epoch ms; `now` when it can). */
  usableAt(now: number): number {
    let at = now;
    if (this.openUntil !== 0) at = Math.max(at, this.openUntil);
    if (this.notBefore > at) at = this.notBefore;
    if (this.rpm !== undefined) at = Math.max(at, this.requests.freeAt(this.rpm, now));
    if (this.tpm !== undefined) at = Math.max(at, this.tokens.freeAt(this.tpm, now));
    return at;
  }

  /** Why it is not usable, for the error a client gets when no deployment is. */
  reason(now: number): string {
    if (this.broken(now)) return 'circuit open';
    if (this.notBefore > now) return 'rate limited upstream';
    if (this.rpm !== undefined && this.requests.sum(now) >= this.rpm) return 'at its rpm limit';
    if (this.tpm !== undefined && this.tokens.sum(now) >= this.tpm) return 'at its tpm limit';
    return 'available';
  }
}

/** Where breaker changes go to and come from (the change feed of src/platform/cluster/feed.ts fits). */
export interface HealthShare {
  publish(channel: string, message: Record<string, unknown>): Promise<void>;
  subscribe(channel: string, handler: (message: Record<string, unknown>) => void): void;
}

export const HEALTH_CHANNEL = 'route_health';

/** What a breaker change is told to, in this instance (the log, the metrics). */
export type BreakerListener = (deployment: string, state: 'open' | 'closed', why: string | undefined) => void;

/** Every deployment's health, by deployment id, with the breaker rules and the sharing across instances. */
export class HealthBoard {
  private readonly byId = new Map<string, DeploymentHealth>();
  private readonly instance = Math.random().toString(36).slice(2);
  private readonly listeners: BreakerListener[] = [];

  constructor(
    private readonly share?: HealthShare,
    private readonly onError: (e: unknown) => void = () => {},
  ) {
    share?.subscribe(HEALTH_CHANNEL, (m) => this.apply(m as unknown as BreakerMessage));
  }

  /** Told of every opening and closing seen by this instance or heard from another. */
  onChange(l: BreakerListener): void {
    this.listeners.push(l);
  }

  /** The health of a deployment if it was routed to already (read only). */
  peek(id: string): DeploymentHealth | undefined {
    return this.byId.get(id);
  }

  /** The health of a deployment (made on first use; the limits and the window are the deployment's). */
  of(id: string, rpm?: number, tpm?: number, windowMs = DEFAULT_BREAKER.windowMs): DeploymentHealth {
    let h = this.byId.get(id);
    if (!h || h.rpm !== rpm || h.tpm !== tpm) {
      const fresh = new DeploymentHealth(id, rpm, tpm, windowMs);
      if (h) {
        fresh.openUntil = h.openUntil;
        fresh.notBefore = h.notBefore;
        fresh.lastError = h.lastError;
        fresh.checkOk = h.checkOk;
        // what was counted stays (a breaker message made it before the deployment's limits were known)
        fresh.requests = h.requests;
        fresh.tokens = h.tokens;
        fresh.stats = h.stats;
      }
      h = fresh;
      this.byId.set(id, h);
    } else h.outcomes.resize(windowMs);
    return h;
  }

  get(id: string): DeploymentHealth | undefined {
    return this.byId.get(id);
  }

  /** A try is starting: a half-open breaker lets this one through and no other until it ends. Gives: it is the probe. */
  begin(h: DeploymentHealth, now: number): boolean {
    h.inflight++;
    h.requests.add(1, now);
    if (h.openUntil !== 0 && now >= h.openUntil && !h.probing) {
      h.probing = true;
      return true;
    }
    return false;
  }

  /** The try gave its first output: a breaker that was open (its probe) closes, everywhere. */
  answered(h: DeploymentHealth): void {
    if (h.openUntil !== 0) {
      h.openUntil = 0;
      h.probing = false;
      h.outcomes.clear();
      this.tell({ from: this.instance, deployment: h.id, state: 'closed' });
      this.changed(h.id, 'closed', undefined);
    }
  }

  /** The request's answer from this deployment ended whole. */
  succeeded(h: DeploymentHealth, now: number): void {
    h.outcomes.add(false, now);
  }

  /**
   * The deployment failed the request (once per request: the caller keeps count). A failed probe opens it again at
   * once; otherwise it opens when the window's failures reach the policy's count and rate (`only`: the model's
   * only deployment, which must fail nearly everything).
   */
  failed(h: DeploymentHealth, policy: BreakerPolicy, now: number, why: string | undefined, probe: boolean, only: boolean): void {
    h.outcomes.add(true, now);
    h.lastError = why;
    if (h.openUntil !== 0 && now < h.openUntil) return; // open already (another instance, or a try that began before)
    const [f, n] = h.outcomes.counts(now);
    const rate = only ? Math.max(policy.failureRate, ONLY_DEPLOYMENT_RATE) : policy.failureRate;
    const least = only ? Math.max(policy.failures, 10) : policy.failures;
    if (probe || (f >= least && f >= rate * n)) this.open(h, now + policy.cooldownMs, why);
  }

  /** The upstream asked to be left alone until `now + ms` (a 429's retry-after): not a failure. */
  backOff(h: DeploymentHealth, now: number, ms: number): void {
    if (ms > 0) h.notBefore = Math.max(h.notBefore, now + ms);
  }

  /** Opens the breaker until `until` (a failed probe, the failure rate, or an active health check). */
  open(h: DeploymentHealth, until: number, why: string | undefined): void {
    if (why !== undefined) h.lastError = why;
    h.probing = false;
    h.openUntil = until;
    h.outcomes.clear();
    this.tell({ from: this.instance, deployment: h.id, state: 'open', until, why });
    this.changed(h.id, 'open', why);
  }

  /** The try ended (after its verdict, or without one when the client left). */
  release(h: DeploymentHealth, probe: boolean): void {
    h.inflight--;
    if (probe) h.probing = false;
  }

  /** Tokens the deployment served, for its `tpm`. */
  tokensUsed(h: DeploymentHealth, n: number, now: number): void {
    h.tokens.add(n, now);
  }

  /** Forgets a deployment (it was removed or changed by a reload of the model file). */
  forget(id: string): void {
    this.byId.delete(id);
  }

  private changed(id: string, state: 'open' | 'closed', why: string | undefined) {
    for (const l of this.listeners) {
      try {
        l(id, state, why);
      } catch {
        // a listener's failure is not the breaker's
      }
    }
  }

  private tell(m: BreakerMessage) {
    // off the request path: a breaker change is rare, and a lost message only costs the others a few tries
    this.share?.publish(HEALTH_CHANNEL, m as unknown as Record<string, unknown>).catch(this.onError);
  }

  private apply(m: BreakerMessage) {
    if (!m || m.from === this.instance || typeof m.deployment !== 'string') return;
    const h = this.byId.get(m.deployment) ?? this.of(m.deployment);
    if (m.state === 'open' && typeof m.until === 'number' && m.until > h.openUntil) {
      h.openUntil = m.until;
      h.probing = false;
      h.outcomes.clear();
      if (typeof m.why === 'string') h.lastError = m.why.slice(0, 300);
      this.changed(h.id, 'open', 'opened by another instance');
    } else if (m.state === 'closed' && h.openUntil !== 0) {
      h.openUntil = 0;
      h.probing = false;
      h.outcomes.clear();
      this.changed(h.id, 'closed', undefined);
    }
  }
}
