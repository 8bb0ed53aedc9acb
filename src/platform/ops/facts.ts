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
 *
 * A client that leaves before its answer is finished (src/compose/http.ts, the response's `close`): the request is
 * written as status 499 once its work has stopped, so that its line says what it was charged. That work is the
 * route's handler (`handling`, set by the HTTP layer) and whatever the service hands to `keep` because it goes on
 * after the handler returned (a stream's producer, a streamed body).
 */
export class RequestFacts {
  /** the model the client named, as configured (set once it is resolved: unknown names are not labels) */
  model: string | undefined = undefined;
  /** what served it: an engine or an upstream (and, with routing, the deployment chosen) */
  deployment: string | undefined = undefined;
  inputTokens = 0;
  outputTokens = 0;
  characters = 0;
  /** seconds of audio taken in, and produced */
  audioSeconds = 0;
  outputAudioSeconds = 0;
  /** ms from the engine call to the end of its answer (for an upstream: its latency as Portico saw it) */
  upstreamMs: number | undefined = undefined;
  /** ms from the engine call to its first output */
  ttftMs: number | undefined = undefined;
  /** the error code the client got (src/platform/errors.ts), also when a stream ended in an error event */
  errorCode: string | undefined = undefined;
  /** the message the client got with it (English; never a secret): the request log's error */
  errorMessage: string | undefined = undefined;
  /** what the request was charged, in micro-credits, and under which operation (src/api/metering.ts) */
  costMicros = 0;
  operation: string | undefined = undefined;
  /** the id of the response stored for it (the Responses API with store), for the request log */
  responseId: string | undefined = undefined;
  /** an engine or upstream failure: the upstream's HTTP status when it answered one, and its (redacted) reason */
  upstreamStatus: number | undefined = undefined;
  upstreamError: string | undefined = undefined;
  /** routing: tries after the first, and the model fallen back to (the routing helper sets them) */
  retries = 0;
  fallback: string | undefined = undefined;
  /** the request's server span when tracing is on (./tracing.ts) */
  span: ServerSpan | undefined = undefined;
  /** the client closed the connection before its answer was finished (the request is logged with status 499) */
  clientClosed = false;
  /** the request's line, metrics and span are written (once: src/compose/http.ts) */
  ended = false;
  /** the route handler's promise, while it runs (src/compose/http.ts) */
  handling: PromiseLike<unknown> | undefined = undefined;
  private kept: PromiseLike<unknown>[] | undefined = undefined;
  private engineAt = 0;
  private firstAt = 0;
  /** when the request came: the wall clock (Unix ms, the request log's time) and the monotonic one */
  readonly receivedAt = Date.now();
  private readonly startedAt = performance.now();

  /** the router's note of the request (src/models/router fills it as it tries deployments): read at the end */
  route: { deployment?: string; fallback?: string; tries?: number } | undefined = undefined;

  /** what the router noted of the request (src/models/router): the deployment that served, tries, fallback */
  routed(route: { deployment?: string; fallback?: string; tries?: number } | undefined): void {
    if (route === undefined) return;
    if (route.deployment !== undefined) this.deployment = route.deployment;
    if (route.fallback !== undefined) this.fallback = route.fallback;
    if (route.tries !== undefined && route.tries > 1) this.retries = route.tries - 1;
  }

  /**
   * What the answer's headers say of the routing (docs/models.md, "What the client is told"): the deployment that
   * served (`x-portico-deployment`), the tries after the first (`x-portico-retries`) and the model fallen back to
   * (`x-portico-fallback`); undefined when the request was not routed (yet).
   */
  routeHeaders(): Record<string, string> | undefined {
    const r = this.route;
    if (r?.deployment === undefined) return undefined;
    const h: Record<string, string> = { 'x-portico-deployment': headerValue(r.deployment), 'x-portico-retries': String(Math.max(0, (r.tries ?? 1) - 1)) };
    if (r.fallback !== undefined) h['x-portico-fallback'] = headerValue(r.fallback);
    return h;
  }

  /** the engine (or upstream) call starts now */
  engineStarted(): void {
    this.engineAt = performance.now();
    this.upstreamMs = undefined;
    this.ttftMs = undefined;
    this.firstAt = 0;
  }

  /** the engine's first output came */
  firstOutput(): void {
    if (this.ttftMs === undefined && this.engineAt !== 0) {
      this.firstAt = performance.now();
      this.ttftMs = this.firstAt - this.engineAt;
    }
  }

  /** ms from the request's start to the engine's first output (undefined: none came): the request log's first output */
  firstOutputMs(): number | undefined {
    return this.firstAt === 0 ? undefined : this.firstAt - this.startedAt;
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

  /**
   * Work for this request that goes on after its handler returned (a stream's producer that charges what a client
   * that left was sent): a request whose client closed is written once it has settled. Only its settling is this
   * object's business: a failure of the work is the work's own to report (a stream destroyed with an error rejects
   * `once(stream, 'close')`), never an unhandled rejection because nobody asked for settled().
   */
  keep(work: PromiseLike<unknown>): void {
    const kept = Promise.resolve(work);
    kept.catch(() => {});
    (this.kept ??= []).push(kept);
  }

  /** settles when the handler and the work kept for the request have (undefined: nothing is running) */
  settled(): Promise<unknown> | undefined {
    const all = this.kept ? [...this.kept] : [];
    if (this.handling) all.push(this.handling);
    if (all.length === 0) return undefined;
    return Promise.allSettled(all);
  }

  /** what the request is charged for (added: a spoken answer is charged tokens and characters) */
  used(u: { inputTokens?: number; outputTokens?: number; characters?: number; audioSeconds?: number; outputAudioSeconds?: number; costMicros?: number; operation?: string }): void {
    if (u.costMicros) this.costMicros += u.costMicros;
    if (u.operation !== undefined) this.operation ??= u.operation;
    // a count that is no count (negative, not finite) is 0, as the ledger records it (src/portal/usage/service.ts)
    this.inputTokens += positive(u.inputTokens);
    this.outputTokens += positive(u.outputTokens);
    this.characters += positive(u.characters);
    this.audioSeconds += positive(u.audioSeconds);
    this.outputAudioSeconds += positive(u.outputAudioSeconds);
  }
}

const positive = (n: number | undefined) => (n !== undefined && Number.isFinite(n) && n > 0 ? n : 0);

/** A name as a header value: printable ASCII as it is, anything else percent-encoded (a header carries no other). */
function headerValue(name: string): string {
  return /^[\x21-\x7e]+$/.test(name) ? name : encodeURIComponent(name);
}
