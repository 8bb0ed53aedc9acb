/**
 * Request tracing, the light half: what the HTTP layer and the upstream clients see. The OpenTelemetry SDK and
 * its OTLP exporter (./tracing-otel.ts) are loaded only when tracing is configured (OTEL_EXPORTER_OTLP_ENDPOINT
 * or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); without them nothing here creates an object or a context: the
 * request's span lives in an AsyncLocalStorage made on the first configured Tracing, and upstreamSpan() is one
 * check of an unset variable.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { IncomingHttpHeaders } from 'node:http';

/** A client span of one upstream HTTP call (one per try). */
export interface UpstreamSpan {
  /** the upstream answered with this HTTP status */
  status(code: number): void;
  /** the call failed (an error status, a broken or refused connection, a timeout) */
  fail(err: unknown): void;
  /** ended: idempotent */
  end(): void;
}

/** The span of one request to Portico. */
export interface ServerSpan {
  /** a child client span; its trace context is written into `headers` (W3C traceparent, tracestate) */
  child(name: string, attributes: Record<string, string | number>, headers: Record<string, string>): UpstreamSpan;
}

/** What one request's span is told when the request ends (src/compose/http.ts, onResponse). */
export interface ServerSpanEnd {
  route: string;
  status: number;
  attributes: Record<string, string | number | undefined>;
  /** an error code when the request failed */
  error?: string;
}

/** Tracing as the HTTP layer uses it (./tracing-otel.ts builds the real one). */
export interface Tracing {
  /** a server span for a request; an incoming W3C traceparent makes it that trace's child */
  start(method: string, path: string, headers: IncomingHttpHeaders): ServerSpan;
  /** runs `fn` (the rest of the request) with `span` as the active one, so upstream calls made in it are its children */
  enter(span: ServerSpan, fn: () => void): void;
  end(span: ServerSpan, how: ServerSpanEnd): void;
  /** sends the spans ended so far */
  flush(): Promise<void>;
  /** flushes and stops the exporter */
  close(): Promise<void>;
}

let active: AsyncLocalStorage<ServerSpan> | undefined;

/** The storage of the active request span, made once per process (only when tracing is configured). */
export function spanStorage(): AsyncLocalStorage<ServerSpan> {
  active ??= new AsyncLocalStorage<ServerSpan>();
  return active;
}

/**
 * The same for a call whose headers are shared by every call (the upstream clients' fixed headers): the span and
 * a copy of the headers with the trace context, made only when the request is traced; otherwise undefined after
 * one check, and nothing is allocated.
 */
export function tracedCall(
  name: string,
  attributes: Record<string, string | number>,
  headers: Readonly<Record<string, string>>,
  redact?: (text: string) => string,
): { span: UpstreamSpan; headers: Record<string, string> } | undefined {
  if (active === undefined) return undefined;
  const server = active.getStore();
  if (server === undefined) return undefined;
  const withContext = { ...headers };
  return { span: redacting(server.child(name, attributes, withContext), redact), headers: withContext };
}

/**
 * A span whose failure messages pass through `redact` (the upstream's credentials cut out: a span's status is a
 * sink like a log line or an error body, and gets the same redaction).
 */
function redacting(span: UpstreamSpan, redact: ((text: string) => string) | undefined): UpstreamSpan {
  if (redact === undefined) return span;
  return {
    status: (code) => span.status(code),
    fail(err) {
      const e = err as { message?: unknown; code?: unknown; upstreamStatus?: unknown } | undefined;
      const message = redact(typeof e?.message === 'string' ? e.message : String(err));
      span.fail({ message, code: e?.code, upstreamStatus: e?.upstreamStatus });
    },
    end: () => span.end(),
  };
}

/**
 * A client span for an upstream call made while a traced request is active, with its trace context written
 * into `headers`; undefined (at the cost of one check) when tracing is off or no traced request is active.
 */
export function upstreamSpan(
  name: string,
  attributes: Record<string, string | number>,
  headers: Record<string, string>,
  redact?: (text: string) => string,
): UpstreamSpan | undefined {
  if (active === undefined) return undefined;
  const span = active.getStore()?.child(name, attributes, headers);
  return span === undefined ? undefined : redacting(span, redact);
}
