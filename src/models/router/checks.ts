/**
 * Active health checks (docs/models.md, "Active health checks"): each deployment with a `health_check` is probed
 * every `interval_ms` (`GET /models`, or the smallest generation), each probe bounded by `timeout_ms`. `failures`
 * failed probes in a row open its breaker (for twice the interval, or the cooldown if longer, renewed while the
 * probes fail), before a user's request meets the failure; a good probe closes an open breaker, everywhere (the
 * change goes through the health board and its feed like any other). Each instance probes on its own.
 *
 * The probes run off the request path, one timer per deployment, unref'd; `sync` takes the models as they are
 * now (at start, and after the model file changed), starting the checks of new deployments and stopping those
 * that went away.
 */
import { EngineError, type ProbeKind } from '../../engines/types.js';
import type { DeploymentSpec, HealthCheck, ModelSpec } from '../spec.js';
import type { Router } from './index.js';

export const CHECK_DEFAULTS = { probe: 'models', intervalMs: 30_000, timeoutMs: 5_000, failures: 2 } as const;

interface Check {
  dep: DeploymentSpec;
  model: ModelSpec;
  cfg: HealthCheck;
  timer?: NodeJS.Timeout;
  failedInRow: number;
  running?: AbortController;
  stopped: boolean;
}

export interface CheckLog {
  warn(o: object, msg?: string): void;
  info(o: object, msg?: string): void;
}

export class HealthChecks {
  private readonly checks = new Map<string, Check>();

  constructor(
    private readonly router: Router,
    private readonly log?: CheckLog,
  ) {}

  /** Starts the checks of these models' deployments that have one (and stops the others). */
  sync(models: readonly ModelSpec[]): void {
    const want = new Map<string, { dep: DeploymentSpec; model: ModelSpec }>();
    for (const m of models) {
      if (!m.health_check && !m.deployments?.some((d) => d.health_check)) continue;
      for (const dep of this.router.route(m).targets.map((t) => t.dep)) if (dep.health_check) want.set(dep.id, { dep, model: m });
    }
    for (const [id, c] of this.checks) {
      const w = want.get(id);
      // a deployment that went away, or whose check or keys changed: its check starts again from the new keys
      if (!w || JSON.stringify(w.dep) !== JSON.stringify(c.dep)) this.stop(id);
      else c.model = w.model;
    }
    for (const [id, { dep, model }] of want) {
      if (this.checks.has(id)) continue;
      const c: Check = { dep, model, cfg: dep.health_check!, failedInRow: 0, stopped: false };
      this.checks.set(id, c);
      // the first probe at once: a deployment that is down is known before the first request meets it
      c.timer = setTimeout(() => void this.run(c), 0);
      c.timer.unref();
    }
  }

  /** Probes one deployment now (the timer's work; tests call it to not wait for the interval). */
  async run(c: Check): Promise<boolean> {
    if (c.stopped) return false;
    const kind: ProbeKind = c.cfg.probe ?? CHECK_DEFAULTS.probe;
    const timeoutMs = c.cfg.timeout_ms ?? CHECK_DEFAULTS.timeoutMs;
    const ctl = new AbortController();
    c.running = ctl;
    const timer = setTimeout(() => ctl.abort(new EngineError(`the health check gave no answer within ${timeoutMs} ms`, 'upstream_timeout', 504, { retryable: true })), timeoutMs);
    let ok = false;
    let why: string | undefined;
    try {
      const engine = c.model.type === 'embeddings' ? await this.router.engine(c.dep, (e, d) => e.embeddings(d)) : await this.router.engine(c.dep, (e, d) => e.text(d));
      if (!engine.probe) throw new EngineError(`the engine of ${c.dep.id} cannot be probed`, 'engine_unavailable', 503);
      // the abort ends the wait at once, whatever the transport is still doing (a connect that hangs)
      await new Promise<void>((resolve, reject) => {
        ctl.signal.addEventListener('abort', () => reject(ctl.signal.reason), { once: true });
        engine.probe!(kind, c.dep.upstream_model, ctl.signal).then(resolve, reject);
      });
      ok = true;
    } catch (e) {
      why = ctl.signal.aborted && ctl.signal.reason instanceof EngineError ? ctl.signal.reason.message : ((e as Error)?.message ?? String(e));
    } finally {
      clearTimeout(timer);
      c.running = undefined;
    }
    if (c.stopped) return ok;
    this.verdict(c, ok, why);
    c.timer = setTimeout(() => void this.run(c), c.cfg.interval_ms ?? CHECK_DEFAULTS.intervalMs);
    c.timer.unref();
    return ok;
  }

  private verdict(c: Check, ok: boolean, why: string | undefined): void {
    const board = this.router.health;
    const h = this.router.route(c.model).targets.find((t) => t.dep.id === c.dep.id)?.health;
    if (!h) return;
    const was = h.checkOk;
    h.checkOk = ok;
    if (ok) {
      c.failedInRow = 0;
      if (h.openUntil !== 0) {
        board.answered(h);
        this.log?.info({ model: c.model.name, deployment: c.dep.id }, `health check of '${c.dep.id}' passed: its circuit breaker is closed`);
      } else if (was === false) this.log?.info({ model: c.model.name, deployment: c.dep.id }, `health check of '${c.dep.id}' passes again`);
      return;
    }
    c.failedInRow++;
    if (was !== false) this.log?.warn({ model: c.model.name, deployment: c.dep.id, err: why }, `health check of '${c.dep.id}' failed`);
    if (c.failedInRow < (c.cfg.failures ?? CHECK_DEFAULTS.failures)) return;
    const policy = this.router.route(c.model).policy;
    const now = Date.now();
    const until = now + Math.max(policy.cooldownMs, 2 * (c.cfg.interval_ms ?? CHECK_DEFAULTS.intervalMs));
    if (h.openUntil === 0) this.log?.warn({ model: c.model.name, deployment: c.dep.id, err: why }, `circuit breaker of '${c.dep.id}' opened by its health check`);
    // open, or kept open while the probes fail (a half-open breaker is not probed by a user's request meanwhile)
    if (h.openUntil === 0 || h.openUntil < until) board.open(h, until, `health check: ${why ?? 'failed'}`);
  }

  /** The check of a deployment, if it has one (tests). */
  get(id: string): Check | undefined {
    return this.checks.get(id);
  }

  private stop(id: string): void {
    const c = this.checks.get(id);
    if (!c) return;
    c.stopped = true;
    clearTimeout(c.timer);
    c.running?.abort();
    this.checks.delete(id);
  }

  close(): void {
    for (const id of [...this.checks.keys()]) this.stop(id);
  }
}
