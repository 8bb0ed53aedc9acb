import { performance } from 'node:perf_hooks';
import type { ServerSpan } from './tracing.js';

/**
 * What one request did, in the one typed place the services fill and the request log line, the per-model
 * metrics and the request's trace span read (src/compose/http.ts, onResponse). Created for every request in
 * onRequest (`req.facts`); a plain object of fixed shape, so filling it costs a few stores.
 *
 * Who sets what: the service that resolves the model sets `model` and `deployment` (routing sets the deployment
 * that served the request by assigning it); the runner calls `engineStarted`, `firstOutput`, `engineEnded` and
 * `failed` around the engine, and `used` with what the usage record charges; toAppError sets `errorCode`.
 */
export class RequestFacts {
  /** the model the client named, as configured (set once it is resolved: unknown names are not labels) */
  model: string | undefined = undefined;
  /** what served it: an engine or an upstream (and, with routing, the deployment chosen) */
  deployment: string | undefined = undefined;
  inputTokens = 0;
  outputTokens = 0;
  characters = 0;
  audioSeconds = 0;
  /** ms from the engine call to the end of its answer (for an upstream: its latency as Portico saw it) */
  upstreamMs: number | undefined = undefined;
  /** ms from the engine call to its first output */
  ttftMs: number | undefined = undefined;
  /** the error code the client got (src/platform/errors.ts), also when a stream ended in an error event */
  errorCode: string | undefined = undefined;
  /** an engine or upstream failure: the upstream's HTTP status when it answered one, and its (redacted) reason */
  upstreamStatus: number | undefined = undefined;
  upstreamError: string | undefined = undefined;
  /** routing: tries after the first, and the model fallen back to (the routing helper sets them) */
  retries = 0;
  fallback: string | undefined = undefined;
  /** the request's server span when tracing is on (./tracing.ts) */
  span: ServerSpan | undefined = undefined;
  private engineAt = 0;

  /** the router's note of the request (src/models/router fills it as it tries deployments): read at the end */
  route: { deployment?: string; fallback?: string; tries?: number } | undefined = undefined;

  /** what the router noted of the request (src/models/router): the deployment that served, tries, fallback */
  routed(route: { deployment?: string; fallback?: string; tries?: number } | undefined): void {
    if (route === undefined) return;
    if (route.deployment !== undefined) this.deployment = route.deployment;
    if (route.fallback !== undefined) this.fallback = route.fallback;
    if (route.tries !== undefined && route.tries > 1) this.retries = route.tries - 1;
  }

  /** the engine (or upstream) call starts now */
  engineStarted(): void {
    this.engineAt = performance.now();
    this.upstreamMs = undefined;
    this.ttftMs = undefined;
  }

  /** the engine's first output came */
  firstOutput(): void {
    if (this.ttftMs === undefined && this.engineAt !== 0) this.ttftMs = performance.now() - this.engineAt;
  }

  /** the engine's answer ended (or failed) */
  engineEnded(): void {
    if (this.upstreamMs === undefined && this.engineAt !== 0) this.upstreamMs = performance.now() - this.engineAt;
  }

  /**
   * The engine failed: its reason (an EngineError's message, already redacted of upstream credentials by the
   * engines) and the upstream's HTTP status when it answered one. Kept once: the first failure is the cause.
   */
  failed(e: unknown): void {
    this.engineEnded();
    if (this.upstreamError !== undefined) return;
    const err = e as { message?: unknown; upstreamStatus?: unknown; name?: unknown } | undefined;
    const status = err?.upstreamStatus;
    if (typeof status === 'number') this.upstreamStatus = status;
    const message = typeof err?.message === 'string' ? err.message : String(e);
    this.upstreamError = message.length > 500 ? message.slice(0, 500) + '…' : message;
  }

  /** what the request is charged for (added: a spoken answer is charged tokens and characters) */
  used(u: { inputTokens?: number; outputTokens?: number; characters?: number; audioSeconds?: number }): void {
    if (u.inputTokens) this.inputTokens += u.inputTokens;
    if (u.outputTokens) this.outputTokens += u.outputTokens;
    if (u.characters) this.characters += u.characters;
    if (u.audioSeconds) this.audioSeconds += u.audioSeconds;
  }
}
