/**
 * Tracing with the official OpenTelemetry packages: a BasicTracerProvider whose spans a BatchSpanProcessor sends
 * to an OTLP/HTTP collector (JSON over HTTP, @opentelemetry/exporter-trace-otlp-http). Loaded by the runtime
 * only when tracing is configured (./tracing.ts is what the rest of Portico imports).
 *
 * No global OpenTelemetry state is registered (no global tracer provider, context manager or propagator): the
 * request's span is carried in Portico's own AsyncLocalStorage (./tracing.ts), spans are started with their
 * parent context given explicitly, and the W3C propagator is used directly, so several instances in one process
 * (tests) and an application's own OpenTelemetry set-up do not interfere.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { AsyncLocalStorage } from 'node:async_hooks';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, defaultTextMapGetter, defaultTextMapSetter, trace, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { ATTR_ERROR_TYPE, ATTR_HTTP_REQUEST_METHOD, ATTR_HTTP_RESPONSE_STATUS_CODE, ATTR_HTTP_ROUTE, ATTR_SERVICE_NAME, ATTR_URL_PATH } from '@opentelemetry/semantic-conventions';
import { spanStorage, type ServerSpan, type ServerSpanEnd, type Tracing, type UpstreamSpan } from './tracing.js';

export interface OtelTracingOptions {
  /** the collector's traces URL (…/v1/traces) */
  url: string;
  /** headers for the collector (OTEL_EXPORTER_OTLP_HEADERS, e.g. an API key) */
  headers?: Record<string, string>;
  serviceName: string;
  /** the instance's id, when it has one (service.instance.id) */
  instanceId?: string;
  /** how often batches are sent (default 1000 ms) */
  batchDelayMs?: number;
}

const propagator = new W3CTraceContextPropagator();

class ClientSpan implements UpstreamSpan {
  private open = true;
  constructor(private readonly span: Span) {}
  status(code: number): void {
    this.span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, code);
  }
  fail(err: unknown): void {
    if (!this.open) return;
    const e = err as { message?: unknown; code?: unknown; upstreamStatus?: unknown };
    this.span.setStatus({ code: SpanStatusCode.ERROR, message: typeof e?.message === 'string' ? e.message.slice(0, 500) : String(err) });
    this.span.setAttribute(ATTR_ERROR_TYPE, typeof e?.code === 'string' ? e.code : typeof e?.upstreamStatus === 'number' ? String(e.upstreamStatus) : 'error');
  }
  end(): void {
    if (!this.open) return;
    this.open = false;
    this.span.end();
  }
}

class RequestSpan implements ServerSpan {
  constructor(
    readonly method: string,
    readonly span: Span,
    readonly ctx: Context,
    private readonly tracer: Tracer,
  ) {}
  child(name: string, attributes: Record<string, string | number>, headers: Record<string, string>): UpstreamSpan {
    const span = this.tracer.startSpan(name, { kind: SpanKind.CLIENT, attributes }, this.ctx);
    propagator.inject(trace.setSpan(this.ctx, span), headers, defaultTextMapSetter);
    return new ClientSpan(span);
  }
}

export class OtelTracing implements Tracing {
  private readonly provider: BasicTracerProvider;
  private readonly tracer: Tracer;
  private readonly storage: AsyncLocalStorage<ServerSpan>;

  constructor(o: OtelTracingOptions) {
    const exporter = new OTLPTraceExporter({ url: o.url, headers: o.headers });
    this.provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: o.serviceName, ...(o.instanceId ? { 'service.instance.id': o.instanceId } : {}) }),
      spanProcessors: [new BatchSpanProcessor(exporter, { scheduledDelayMillis: o.batchDelayMs ?? 1000 })],
    });
    this.tracer = this.provider.getTracer('portico');
    this.storage = spanStorage();
  }

  start(method: string, path: string, headers: IncomingHttpHeaders): ServerSpan {
    const parent = headers.traceparent === undefined ? ROOT_CONTEXT : propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter);
    const span = this.tracer.startSpan(method, { kind: SpanKind.SERVER, attributes: { [ATTR_HTTP_REQUEST_METHOD]: method, [ATTR_URL_PATH]: path } }, parent);
    return new RequestSpan(method, span, trace.setSpan(parent, span), this.tracer);
  }

  enter(span: ServerSpan, fn: () => void): void {
    this.storage.run(span, fn);
  }

  end(s: ServerSpan, how: ServerSpanEnd): void {
    const { span, method } = s as RequestSpan;
    span.updateName(`${method} ${how.route}`);
    span.setAttribute(ATTR_HTTP_ROUTE, how.route);
    span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, how.status);
    for (const k in how.attributes) {
      const v = how.attributes[k];
      if (v !== undefined) span.setAttribute(k, v);
    }
    if (how.error !== undefined) {
      span.setAttribute(ATTR_ERROR_TYPE, how.error);
      // a server span is an error for a 5xx only (a 4xx is the client's; OpenTelemetry's HTTP conventions)
      if (how.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR, message: how.error });
    }
    span.end();
  }

  flush(): Promise<void> {
    return this.provider.forceFlush();
  }

  close(): Promise<void> {
    return this.provider.shutdown();
  }
}
