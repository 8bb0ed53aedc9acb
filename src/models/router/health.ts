/**
 * What the router knows of each deployment: requests in flight, its circuit breaker, a retry-after it was
 * given, and its requests and tokens of the last minute (for `rpm`/`tpm`). All of it is read and written in
 * memory on the request path; only a breaker that opens or closes is told to the other instances (through the
 * change feed: Redis pub/sub when REDIS_URL is set), so a healthy deployment costs no round trip at all.
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
}

export interface BreakerPolicy {
  failures: number;
  cooldownMs: number;
}

export const DEFAULT_BREAKER: BreakerPolicy = { failures: 5, cooldownMs: 30_000 };

export class DeploymentHealth {
  inflight = 0;
  /** consecutive failures */
  failures = 0;
  /** open until (epoch ms); 0: closed */
  openUntil = 0;
  /** half-open: the one probe is under way */
  probing = false;
  /** the upstream asked not to be called before this (retry-after), epoch ms */
  notBefore = 0;
  readonly requests?: MinuteWindow;
  readonly tokens?: MinuteWindow;

  constructor(
    readonly id: string,
    readonly rpm: number | undefined,
    readonly tpm: number | undefined,
  ) {
    if (rpm) this.requests = new MinuteWindow();
    if (tpm) this.tokens = new MinuteWindow();
  }

  state(now: number): BreakerState {
    if (this.openUntil === 0) return 'closed';
    return now < this.openUntil ? 'open' : 'half-open';
  }

  /** May a request go there now? (`ignoreLimits`: the breaker only, for a last resort) */
  usable(now: number): boolean {
    if (this.openUntil !== 0) {
      if (now < this.openUntil || this.probing) return false;
    }
    if (this.notBefore > now) return false;
    if (this.requests && this.requests.sum(now) >= this.rpm!) return false;
    if (this.tokens && this.tokens.sum(now) >= this.tpm!) return false;
    return true;
  }

  /** Why it is not usable, for the error a client gets when no deployment is. */
  reason(now: number): string {
    if (this.openUntil !== 0 && (now < this.openUntil || this.probing)) return 'circuit open';
    if (this.notBefore > now) return 'rate limited upstream';
    if (this.requests && this.requests.sum(now) >= this.rpm!) return 'at its rpm limit';
    if (this.tokens && this.tokens.sum(now) >= this.tpm!) return 'at its tpm limit';
    return 'available';
  }
}

/** Where breaker changes go to and come from (the change feed of src/platform/cluster/feed.ts fits). */
export interface HealthShare {
  publish(channel: string, message: Record<string, unknown>): Promise<void>;
  subscribe(channel: string, handler: (message: Record<string, unknown>) => void): void;
}

export const HEALTH_CHANNEL = 'route_health';

/** Every deployment's health, by deployment id, with the breaker rules and the sharing across instances. */
export class HealthBoard {
  private readonly byId = new Map<string, DeploymentHealth>();
  private readonly instance = Math.random().toString(36).slice(2);

  constructor(
    private readonly share?: HealthShare,
    private readonly onError: (e: unknown) => void = () => {},
  ) {
    share?.subscribe(HEALTH_CHANNEL, (m) => this.apply(m as unknown as BreakerMessage));
  }

  /** The health of a deployment if it was routed to already (read only). */
  peek(id: string): DeploymentHealth | undefined {
    return this.byId.get(id);
  }

  /** The health of a deployment (made on first use; the limits are the deployment's). */
  of(id: string, rpm?: number, tpm?: number): DeploymentHealth {
    let h = this.byId.get(id);
    if (!h || h.rpm !== rpm || h.tpm !== tpm) {
      const fresh = new DeploymentHealth(id, rpm, tpm);
      if (h) {
        fresh.failures = h.failures;
        fresh.openUntil = h.openUntil;
        fresh.notBefore = h.notBefore;
      }
      h = fresh;
      this.byId.set(id, h);
    }
    return h;
  }

  get(id: string): DeploymentHealth | undefined {
    return this.byId.get(id);
  }

  /** A try is starting: a half-open breaker lets this one through and no other until it ends. */
  begin(h: DeploymentHealth, now: number): void {
    h.inflight++;
    if (h.openUntil !== 0 && now >= h.openUntil) h.probing = true;
    h.requests?.add(1, now);
  }

  /** The try gave its first output: a breaker that was open (or probing) closes, everywhere. */
  success(h: DeploymentHealth): void {
    h.failures = 0;
    if (h.openUntil !== 0) {
      h.openUntil = 0;
      h.probing = false;
      this.tell({ from: this.instance, deployment: h.id, state: 'closed' });
    }
  }

  /**
   * The try failed in a way that is the deployment's (`counts`: a retryable failure; a refusal of the request's
   * content is not the deployment's fault). A probe that fails, or the `failures`-th failure in a row, opens it.
   */
  failure(h: DeploymentHealth, counts: boolean, policy: BreakerPolicy, now: number, retryAfterMs?: number): void {
    if (retryAfterMs !== undefined && retryAfterMs > 0) h.notBefore = Math.max(h.notBefore, now + retryAfterMs);
    if (!counts) {
      if (h.probing) h.probing = false;
      return;
    }
    h.failures++;
    if (h.probing || h.failures >= policy.failures) {
      h.probing = false;
      h.openUntil = now + policy.cooldownMs;
      this.tell({ from: this.instance, deployment: h.id, state: 'open', until: h.openUntil });
    }
  }

  /** The try ended (after its verdict, or without one when the client left). */
  release(h: DeploymentHealth): void {
    h.inflight--;
    h.probing = false;
  }

  /** Tokens the deployment served, for its `tpm`. */
  tokensUsed(h: DeploymentHealth, n: number, now: number): void {
    h.tokens?.add(n, now);
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
    } else if (m.state === 'closed') {
      h.openUntil = 0;
      h.failures = 0;
      h.probing = false;
    }
  }
}
