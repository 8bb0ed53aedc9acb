/**
 * The operators' health view across instances (GET /v1/admin/health; docs/architecture.md, "The router").
 *
 * Each instance knows its own deployments (Router.deploymentHealth: breaker, the last minute's tries, failures and
 * latency histograms, in flight, rpm/tpm used). The others' figures travel over the change feed, and only while
 * somebody looks:
 *
 * - a GET publishes an ask (`health_ask`) and waits, at most `waitMs` (300 ms), until every instance it heard from
 *   lately has answered it; the first ask after a quiet minute waits the whole `waitMs`, since it cannot know who
 *   is there;
 * - an instance that is asked publishes its snapshot (`health_snapshot`) at once, then every `everyMs` (2 s) until
 *   `keepMs` (a minute) after the last ask: an idle cluster sends nothing, and a page that polls every 3 s finds
 *   fresh figures of every instance without waiting for them;
 * - a snapshot is kept `maxAgeMs` (10 s) from its arrival: an instance that stopped answering drops out, one that
 *   closes says so (`bye`) and drops out at once.
 *
 * A snapshot goes in parts of at most `partBytes` of JSON (PostgreSQL's NOTIFY takes under 8000 bytes), its rows as
 * arrays and its latencies as sparse histograms, so a part is a few hundred bytes a deployment. A message that does
 * not read as one (another version, a broken part) is dropped. The local feed (one process, no Redis or
 * PostgreSQL) has no other instance: nothing is published there.
 */
import type { ChangeFeed } from '../platform/cluster/feed.js';
import { settledWithin } from '../platform/within.js';
import { addSparse, DeploymentStats, LATENCY_BINS, percentile, type BreakerState } from '../models/router/health.js';
import type { DeploymentReport } from '../models/router/index.js';
import type { Static } from 'typebox';
import type { HealthAnswer } from './schemas.js';

export interface InstanceInfo {
  /** the runtime's instance id (the background runner's id: `responses.runner_id`) */
  id: string;
  host: string;
  pid: number;
  /** unix seconds */
  startedAt: number;
}

/** What the runtime hands the admin feature: this instance, and its deployments now. */
export interface HealthSource {
  instance: InstanceInfo;
  deployments(): DeploymentReport[];
}

export const ASK_CHANNEL = 'health_ask';
export const SNAPSHOT_CHANNEL = 'health_snapshot';

export const HEALTH_DEFAULTS = { waitMs: 300, everyMs: 2_000, keepMs: 60_000, maxAgeMs: 10_000, partBytes: 7_000 } as const;

export interface ClusterHealthOptions {
  log?: { debug(o: object, msg?: string): void };
  /** tests: the clock (epoch ms) and the timings */
  now?: () => number;
  waitMs?: number;
  everyMs?: number;
  keepMs?: number;
  maxAgeMs?: number;
  partBytes?: number;
}

/** the answer of GET /v1/admin/health (its schema: ./schemas.ts) */
export type HealthData = Static<typeof HealthAnswer>;
type HealthDeployment = HealthData['deployments'][number];
type Figures = Omit<HealthDeployment['instances'][number], 'instance' | 'state' | 'rpm_used' | 'tpm_used'>;

interface Peer {
  info: InstanceInfo;
  /** the last whole snapshot, and when it arrived (epoch ms, this instance's clock) */
  rows?: DeploymentReport[];
  at: number;
  /** the parts of a snapshot still coming */
  pending?: { seq: number; parts: number; got: Map<number, DeploymentReport[]>; since: number };
}

const STATES: readonly BreakerState[] = ['closed', 'half-open', 'open'];

export class ClusterHealth {
  private readonly peers = new Map<string, Peer>();
  private readonly waiters = new Set<() => void>();
  private readonly now: () => number;
  private readonly waitMs: number;
  private readonly everyMs: number;
  private readonly keepMs: number;
  private readonly maxAgeMs: number;
  private readonly partBytes: number;
  /** this instance publishes its snapshot until then (epoch ms): it was asked */
  private askedUntil = 0;
  private timer: NodeJS.Timeout | undefined;
  private lastAskAt = -Infinity;
  private seq = 0;
  private publishing: Promise<void> | undefined;
  private again = false;
  /** when this instance last published a snapshot (epoch ms): the others know it only then */
  private publishedAt = -Infinity;
  private closed = false;

  constructor(
    private readonly source: HealthSource,
    private readonly feed: ChangeFeed | undefined,
    private readonly o: ClusterHealthOptions = {},
  ) {
    this.now = o.now ?? Date.now;
    this.waitMs = o.waitMs ?? HEALTH_DEFAULTS.waitMs;
    this.everyMs = o.everyMs ?? HEALTH_DEFAULTS.everyMs;
    this.keepMs = o.keepMs ?? HEALTH_DEFAULTS.keepMs;
    this.maxAgeMs = o.maxAgeMs ?? HEALTH_DEFAULTS.maxAgeMs;
    this.partBytes = o.partBytes ?? HEALTH_DEFAULTS.partBytes;
    if (this.shared()) {
      feed!.subscribe(ASK_CHANNEL, (m) => this.asked(m));
      feed!.subscribe(SNAPSHOT_CHANNEL, (m) => this.heard(m));
    }
  }

  private shared(): boolean {
    return this.feed !== undefined && this.feed.kind !== 'local';
  }

  /** Every instance's figures and their sums: this instance's now, the others' as they last told them. */
  async read(model?: string): Promise<HealthData> {
    if (this.shared()) await this.askAround();
    const now = this.now();
    this.prune(now);
    const self: Peer = { info: this.source.instance, rows: this.source.deployments(), at: now };
    const all = [self, ...[...this.peers.values()].filter((p) => p.rows !== undefined)].sort(
      (a, b) => a.info.startedAt - b.info.startedAt || (a.info.id < b.info.id ? -1 : a.info.id > b.info.id ? 1 : 0),
    );
    return {
      generated_at: Math.floor(now / 1000),
      window_seconds: DeploymentStats.WINDOW_MS / 1000,
      instances: all.map((p) => ({
        id: p.info.id,
        host: p.info.host,
        pid: p.info.pid,
        started_at: p.info.startedAt,
        seen_at: Math.floor(p.at / 1000),
        self: p === self,
      })),
      deployments: summed(all, self, model),
    };
  }

  /** Stops publishing, and tells the others this instance is gone (when they know it: it published lately). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    for (const w of this.waiters) w();
    if (!this.shared()) return;
    await this.publishing;
    if (this.now() - this.publishedAt >= this.maxAgeMs) return;
    // a feed that is reconnecting does not hold the shutdown: the others drop this instance after maxAgeMs anyway
    await settledWithin(
      this.feed!.publish(SNAPSHOT_CHANNEL, { from: this.source.instance.id, bye: true }).catch((e) => this.failed(e)),
      this.waitMs,
    );
  }

  /**
   * Asks the others, and waits until every instance heard from lately has answered, at most waitMs from now (the
   * publish included: a feed that is reconnecting does not hold the GET longer).
   */
  private askAround(): Promise<void> {
    const at = this.now();
    // nobody asked for a minute: the others stopped publishing, and who is there is not known
    const discovering = at - this.lastAskAt >= this.keepMs;
    this.lastAskAt = at;
    return new Promise<void>((resolve) => {
      let sent = false;
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(check);
        resolve();
      };
      const check = () => {
        if (this.closed) return done();
        if (!sent || discovering) return;
        for (const p of this.peers.values()) if (p.rows !== undefined && p.at >= at - this.maxAgeMs && p.at < at) return;
        done();
      };
      const timer = setTimeout(done, this.waitMs);
      this.waiters.add(check);
      this.feed!.publish(ASK_CHANNEL, { from: this.source.instance.id }).then(
        () => {
          sent = true;
          check();
        },
        (e: unknown) => {
          this.failed(e);
          done();
        },
      );
    });
  }

  /** another instance asked: publish now, and every everyMs until keepMs after its last ask */
  private asked(m: Record<string, unknown>): void {
    if (this.closed || m.from === this.source.instance.id) return;
    this.askedUntil = this.now() + this.keepMs;
    this.publish();
    if (this.timer === undefined) {
      this.timer = setInterval(() => {
        if (this.now() >= this.askedUntil) {
          clearInterval(this.timer);
          this.timer = undefined;
        } else this.publish();
      }, this.everyMs);
      this.timer.unref();
    }
  }

  private publish(): void {
    // an ask that comes while a snapshot goes out gets one made after it
    if (this.publishing) {
      this.again = true;
      return;
    }
    this.publishing = this.publishSnapshot()
      .catch((e) => this.failed(e))
      .finally(() => {
        this.publishing = undefined;
        if (this.again && !this.closed) {
          this.again = false;
          this.publish();
        }
      });
  }

  private async publishSnapshot(): Promise<void> {
    const i = this.source.instance;
    const head = { from: i.id, host: i.host, pid: i.pid, started: i.startedAt, seq: ++this.seq };
    const parts: unknown[][] = [[]];
    let size = 0;
    for (const r of this.source.deployments()) {
      const row = encodeRow(r);
      const n = Buffer.byteLength(JSON.stringify(row)) + 1;
      if (size > 0 && size + n > this.partBytes) {
        parts.push([]);
        size = 0;
      }
      parts[parts.length - 1]!.push(row);
      size += n;
    }
    this.publishedAt = this.now();
    for (let p = 0; p < parts.length; p++) await this.feed!.publish(SNAPSHOT_CHANNEL, { ...head, part: p, parts: parts.length, d: parts[p] });
  }

  /** a snapshot's part (or a goodbye) from another instance */
  private heard(m: Record<string, unknown>): void {
    const from = m.from;
    if (typeof from !== 'string' || from === this.source.instance.id || from.length > 200) return;
    if (m.bye === true) {
      this.peers.delete(from);
      return;
    }
    const { host, pid, started, seq, part, parts, d } = m;
    if (typeof host !== 'string' || !isCount(pid) || !isCount(started) || !isCount(seq) || !isCount(part) || !isCount(parts) || part >= parts || parts > 1000 || !Array.isArray(d))
      return;
    const rows = d.map(decodeRow);
    if (rows.some((r) => r === undefined)) return;
    const now = this.now();
    let peer = this.peers.get(from);
    if (!peer) {
      peer = { info: { id: from, host: host.slice(0, 255), pid, startedAt: started }, at: 0 };
      this.peers.set(from, peer);
    }
    let whole: DeploymentReport[] | undefined;
    if (parts === 1) whole = rows as DeploymentReport[];
    else {
      if (!peer.pending || peer.pending.seq !== seq) {
        if (peer.pending && peer.pending.seq > seq) return; // a part of an older snapshot
        peer.pending = { seq, parts, got: new Map(), since: now };
      }
      peer.pending.got.set(part, rows as DeploymentReport[]);
      if (peer.pending.got.size === peer.pending.parts) {
        whole = [];
        for (let p = 0; p < peer.pending.parts; p++) whole.push(...(peer.pending.got.get(p) ?? []));
        peer.pending = undefined;
      }
    }
    if (whole === undefined) return;
    peer.info = { id: from, host: host.slice(0, 255), pid, startedAt: started };
    peer.rows = whole;
    peer.at = now;
    this.prune(now);
    for (const w of this.waiters) w();
  }

  private prune(now: number): void {
    for (const [id, p] of this.peers) {
      const last = Math.max(p.at, p.pending?.since ?? 0);
      if (last < now - this.maxAgeMs) this.peers.delete(id);
    }
  }

  private failed(e: unknown): void {
    this.o.log?.debug({ err: (e as Error)?.message }, 'the health view could not reach the other instances');
  }
}

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;
const isLimit = (v: unknown): v is number | null => v === null || isNumber(v);
/** a sparse histogram: pairs of a bin (in range) and its count */
const isSparse = (v: unknown): v is number[] =>
  Array.isArray(v) && v.length % 2 === 0 && v.length <= 2 * LATENCY_BINS && v.every((x, i) => isNumber(x) && (i % 2 === 1 || (Number.isInteger(x) && x < LATENCY_BINS)));
const isName = (v: unknown): v is string => typeof v === 'string' && v.length <= 1000;

/** a row as it travels: an array, in this order */
function encodeRow(r: DeploymentReport): unknown[] {
  return [r.model, r.deployment, r.provider, r.state, r.reason, r.requests, r.failures, r.inFlight, r.rpmUsed, r.tpmUsed, r.rpmLimit, r.tpmLimit, r.latency, r.ttft];
}

function decodeRow(v: unknown): DeploymentReport | undefined {
  if (!Array.isArray(v) || v.length !== 14) return undefined;
  const [model, deployment, provider, state, reason, requests, failures, inFlight, rpmUsed, tpmUsed, rpmLimit, tpmLimit, latency, ttft] = v as unknown[];
  if (!isName(model) || !isName(deployment) || !isName(provider) || !STATES.includes(state as BreakerState)) return undefined;
  if (reason !== null && !isName(reason)) return undefined;
  if (!isNumber(requests) || !isNumber(failures) || !isNumber(inFlight) || !isNumber(rpmUsed) || !isNumber(tpmUsed)) return undefined;
  if (!isLimit(rpmLimit) || !isLimit(tpmLimit) || !isSparse(latency) || !isSparse(ttft)) return undefined;
  return { model, deployment, provider, state: state as BreakerState, reason, requests, failures, inFlight, rpmUsed, tpmUsed, rpmLimit, tpmLimit, latency, ttft };
}

/** ms as the answer gives them: a tenth of a ms (the histogram is coarser than that anyway) */
const ms = (v: number | undefined): number | null => (v === undefined ? null : Math.round(v * 10) / 10);

/** the figures of a deployment, on one instance or summed */
function figures(requests: number, failures: number, latency: Float64Array, ttft: Float64Array, inFlight: number): Figures {
  return {
    requests,
    failures,
    error_rate: requests > 0 ? failures / requests : 0,
    p50_ms: ms(percentile(latency, 0.5)),
    p95_ms: ms(percentile(latency, 0.95)),
    ttft_p50_ms: ms(percentile(ttft, 0.5)),
    ttft_p95_ms: ms(percentile(ttft, 0.95)),
    in_flight: inFlight,
  };
}

/**
 * The deployments of every instance, one entry each (this instance's order first, then any only others serve):
 * counts summed, histograms merged before the percentiles are read, the worst state (and its reason), and the
 * limits summed over the instances that report the deployment (each keeps its own window: docs/models.md).
 */
function summed(all: Peer[], self: Peer, model: string | undefined): HealthDeployment[] {
  const byKey = new Map<string, { first: DeploymentReport; rows: Array<{ id: string; r: DeploymentReport }> }>();
  const order = [self, ...all.filter((p) => p !== self)];
  for (const p of order) {
    for (const r of p.rows!) {
      if (model !== undefined && r.model !== model) continue;
      const k = r.model + '\u0000' + r.deployment;
      let e = byKey.get(k);
      if (!e) byKey.set(k, (e = { first: r, rows: [] }));
      if (!e.rows.some((x) => x.id === p.info.id)) e.rows.push({ id: p.info.id, r });
    }
  }
  const rank = new Map(all.map((p, i) => [p.info.id, i]));
  const out: HealthDeployment[] = [];
  for (const { first, rows } of byKey.values()) {
    rows.sort((a, b) => rank.get(a.id)! - rank.get(b.id)!);
    const lat = new Float64Array(LATENCY_BINS);
    const ttft = new Float64Array(LATENCY_BINS);
    let state: BreakerState = 'closed';
    let reason: string | null = null;
    let requests = 0;
    let failures = 0;
    let inFlight = 0;
    let rpmUsed = 0;
    let tpmUsed = 0;
    let rpmLimit: number | null = 0;
    let tpmLimit: number | null = 0;
    const instances: HealthDeployment['instances'] = [];
    for (const { id, r } of rows) {
      // the worst state, and the reason of the first instance in it
      if (STATES.indexOf(r.state) > STATES.indexOf(state)) {
        state = r.state;
        reason = r.reason;
      } else if (r.state === state && reason === null) reason = r.reason;
      requests += r.requests;
      failures += r.failures;
      inFlight += r.inFlight;
      rpmUsed += r.rpmUsed;
      tpmUsed += r.tpmUsed;
      rpmLimit = rpmLimit === null || r.rpmLimit === null ? null : rpmLimit + r.rpmLimit;
      tpmLimit = tpmLimit === null || r.tpmLimit === null ? null : tpmLimit + r.tpmLimit;
      addSparse(lat, r.latency);
      addSparse(ttft, r.ttft);
      const own = new Float64Array(LATENCY_BINS);
      const ownTtft = new Float64Array(LATENCY_BINS);
      addSparse(own, r.latency);
      addSparse(ownTtft, r.ttft);
      instances.push({ instance: id, state: r.state, ...figures(r.requests, r.failures, own, ownTtft, r.inFlight), rpm_used: r.rpmUsed, tpm_used: r.tpmUsed });
    }
    out.push({
      model: first.model,
      deployment: first.deployment,
      provider: first.provider,
      state,
      reason: state === 'closed' ? null : reason,
      ...figures(requests, failures, lat, ttft, inFlight),
      rpm: { used: rpmUsed, limit: rpmLimit },
      tpm: { used: tpmUsed, limit: tpmLimit },
      instances,
    });
  }
  return out;
}
