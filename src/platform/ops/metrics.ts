import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics, type Metric } from 'prom-client';
import { LOOP_LAG_SERIES, registerLoopLag, type LoopLag } from './loop-lag.js';

/** Buckets of the per-model latency histograms (seconds): model answers take from milliseconds to minutes. */
const MODEL_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300];

/**
 * A counter or histogram whose series are bound to their label values once and then cost a few additions per
 * update: prom-client hashes the labels of every inc() and observe() (about a microsecond each), which the
 * per-model series would pay six times a request. Registered in the prom-client registry like its own metrics
 * (it reads them through get()), so the text of /metrics is the same.
 */
class BoundSeries {
  readonly aggregator = 'sum';
  private readonly children: Array<{ labels: Record<string, string>; child: BoundCounter | BoundHistogram }> = [];

  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: 'counter' | 'histogram',
    private readonly labelNames: readonly string[],
    private readonly buckets: readonly number[] = [],
  ) {}

  /** the series of these label values (in labelNames order): made once, kept by the caller */
  child(...values: string[]): BoundCounter | BoundHistogram {
    const labels: Record<string, string> = {};
    this.labelNames.forEach((n, i) => (labels[n] = values[i]!));
    const child = this.type === 'counter' ? new BoundCounter() : new BoundHistogram(this.buckets);
    this.children.push({ labels, child });
    return child;
  }

  get() {
    const values: Array<{ value: number; labels: Record<string, string | number>; metricName?: string }> = [];
    for (const { labels, child } of this.children) {
      if (child instanceof BoundCounter) {
        values.push({ value: child.value, labels });
        continue;
      }
      let cumulative = 0;
      for (let i = 0; i < this.buckets.length; i++) {
        cumulative += child.counts[i]!;
        values.push({ metricName: `${this.name}_bucket`, labels: { ...labels, le: this.buckets[i]! }, value: cumulative });
      }
      values.push({ metricName: `${this.name}_bucket`, labels: { ...labels, le: '+Inf' }, value: child.count });
      values.push({ metricName: `${this.name}_sum`, labels, value: child.sum });
      values.push({ metricName: `${this.name}_count`, labels, value: child.count });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  reset(): void {
    for (const { child } of this.children) child.reset();
  }
}

export class BoundCounter {
  value = 0;
  inc(n = 1): void {
    this.value += n;
  }
  reset(): void {
    this.value = 0;
  }
}

export class BoundHistogram {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  constructor(private readonly buckets: readonly number[]) {
    this.counts = new Float64Array(buckets.length + 1);
  }
  observe(v: number): void {
    const b = this.buckets;
    let i = 0;
    while (i < b.length && v > b[i]!) i++;
    this.counts[i]!++;
    this.sum += v;
    this.count++;
  }
  reset(): void {
    this.counts.fill(0);
    this.sum = 0;
    this.count = 0;
  }
}

/** The series of one model and deployment, bound to their labels once (a request then costs no label lookup). */
export interface ModelSeries {
  requests: BoundCounter;
  duration: BoundHistogram;
  ttft: BoundHistogram;
  upstream: BoundHistogram;
  tokensIn: BoundCounter;
  tokensOut: BoundCounter;
  clientClosed: BoundCounter;
}

/** Prometheus metrics of one Portico process (served at /metrics). */
export class Metrics {
  readonly registry = new Registry();
  readonly requests = this.bound('portico_http_requests_total', 'HTTP requests by route and status', 'counter', ['method', 'route', 'status']);
  readonly latency = this.bound(
    'portico_http_request_duration_seconds',
    'HTTP request latency by route (to the end of the response)',
    'histogram',
    ['method', 'route'],
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
  );
  readonly tokens = this.bound('portico_tokens_total', 'Tokens by model and direction', 'counter', ['model', 'direction']);
  readonly audioSeconds = new Counter({
    name: 'portico_audio_seconds_total',
    help: 'Audio seconds transcribed or synthesized by model',
    labelNames: ['model', 'operation'],
    registers: [this.registry],
  });
  readonly characters = new Counter({ name: 'portico_speech_characters_total', help: 'Characters synthesized by model', labelNames: ['model'], registers: [this.registry] });
  private readonly voiceSessionsOpen = new Gauge({ name: 'portico_realtime_sessions', help: 'Realtime sessions open on this instance', registers: [this.registry] });
  private readonly voiceTurnLatency = new Histogram({
    name: 'portico_realtime_turn_latency_seconds',
    help: "Realtime turns: from the end of the user's speech (or the commit) to the answer's first audio or text",
    labelNames: ['model'],
    buckets: [0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30],
    registers: [this.registry],
  });
  private readonly voiceAudio = new Counter({
    name: 'portico_realtime_audio_seconds_total',
    help: 'Realtime audio seconds by model and direction (in: heard, out: spoken)',
    labelNames: ['model', 'direction'],
    registers: [this.registry],
  });
  /** what the realtime sessions report (src/realtime/service.ts, RealtimeMetrics) */
  readonly voiceSessions = {
    sessionOpened: () => this.voiceSessionsOpen.inc(),
    sessionClosed: () => this.voiceSessionsOpen.dec(),
    turnLatency: (model: string, seconds: number) => this.voiceTurnLatency.observe({ model }, seconds),
    audioSeconds: (model: string, direction: 'in' | 'out', seconds: number) => this.voiceAudio.inc({ model, direction }, seconds),
  };
  readonly activeStreams = new Gauge({ name: 'portico_active_streams', help: 'Streaming responses in progress (SSE and audio)', registers: [this.registry] });
  readonly queueDepth = new Gauge({ name: 'portico_background_queue_depth', help: 'Background responses queued or running in this process', registers: [this.registry] });
  readonly keyCacheHits = new Gauge({ name: 'portico_key_cache_hits', help: 'API key verifications served from memory', registers: [this.registry] });
  readonly keyCacheMisses = new Gauge({ name: 'portico_key_cache_misses', help: 'API key verifications that read the database', registers: [this.registry] });
  readonly keyCacheHitRatio = new Gauge({ name: 'portico_key_cache_hit_ratio', help: 'Share of API key verifications served from memory', registers: [this.registry] });
  readonly usageRefused = new Counter({
    name: 'portico_usage_records_refused_total',
    help: 'Usage records the database refused for their content, set aside in DATA_DIR/usage-refused.ndjson',
    registers: [this.registry],
  });
  readonly requestLogDropped = new Counter({
    name: 'portico_request_log_dropped_total',
    help: 'Request log rows dropped: the buffer was full (PORTICO_REQUEST_LOG_DAYS, docs/operations.md) or the database refused their batch',
    registers: [this.registry],
  });
  readonly rateLimited = new Counter({
    name: 'portico_rate_limited_total',
    help: 'Requests refused by rate limits or budgets',
    labelNames: ['reason'],
    registers: [this.registry],
  });

  // ---------------------------------------------------------------- per model and deployment
  // `model` is a configured model name (never what a client sent before it was resolved), `deployment` what served
  // it (src/models/spec.ts deploymentName; routing names the deployment it chose). Filled from each request's facts
  // (src/platform/ops/facts.ts) when it ends, in src/compose/http.ts.
  readonly modelRequests = this.bound('portico_model_requests_total', 'Requests that reached a model, by model and deployment', 'counter', ['model', 'deployment']);
  /**
   * Requests to a model whose client closed the connection before the answer was finished (status 499): counted
   * in portico_model_requests_total too, and not an error (the client left; nothing failed)
   */
  readonly modelClientClosed = this.bound(
    'portico_model_client_closed_total',
    'Requests to a model whose client closed the connection before the answer was finished (status 499), by model and deployment',
    'counter',
    ['model', 'deployment'],
  );
  readonly modelErrors = new Counter({
    name: 'portico_model_errors_total',
    help: 'Requests to a model that failed, by model, deployment and error type (the error code the client got)',
    labelNames: ['model', 'deployment', 'type'],
    registers: [this.registry],
  });
  readonly modelDuration = this.bound(
    'portico_model_request_duration_seconds',
    'Latency of requests to a model, to the end of the answer',
    'histogram',
    ['model', 'deployment'],
    MODEL_BUCKETS,
  );
  readonly modelTtft = this.bound(
    'portico_model_time_to_first_token_seconds',
    "Time from the engine or upstream call to the model's first output",
    'histogram',
    ['model', 'deployment'],
    MODEL_BUCKETS,
  );
  readonly modelUpstream = this.bound(
    'portico_model_upstream_duration_seconds',
    'Time spent in the engine or upstream call, to the end of its answer (the rest of a request is Portico)',
    'histogram',
    ['model', 'deployment'],
    MODEL_BUCKETS,
  );
  readonly modelTokens = this.bound(
    'portico_model_tokens_total',
    'Tokens of requests answered in the request, by model, deployment and direction (background jobs: portico_tokens_total)',
    'counter',
    ['model', 'deployment', 'direction'],
  );
  /** incremented by routing at each try after the first */
  readonly modelRetries = new Counter({
    name: 'portico_model_retries_total',
    help: 'Upstream tries after the first, by model and the deployment whose failure was retried',
    labelNames: ['model', 'deployment'],
    registers: [this.registry],
  });
  /** incremented by routing when a model's deployments all failed and another model was tried */
  readonly modelFallbacks = new Counter({
    name: 'portico_model_fallbacks_total',
    help: 'Requests that fell back to another model, by the model and deployment that failed',
    labelNames: ['model', 'deployment'],
    registers: [this.registry],
  });
  /** set by routing's circuit breaker */
  readonly circuitState = new Gauge({
    name: 'portico_model_circuit_state',
    help: 'Circuit breaker of a deployment: 0 closed (serving), 1 half-open (on trial), 2 open (taken out)',
    labelNames: ['model', 'deployment'],
    registers: [this.registry],
  });

  readonly healthCheck = new Gauge({
    name: 'portico_deployment_health_check_up',
    help: 'The last active health check of a deployment: 1 passed, 0 failed (only deployments with a health_check)',
    labelNames: ['model', 'deployment'],
    registers: [this.registry],
  });

  readonly breakerChanges = new Counter({
    name: 'portico_circuit_breaker_changes_total',
    help: 'Circuit breakers opened and closed, seen by this instance (its own verdicts and those heard from others)',
    labelNames: ['deployment', 'state'],
    registers: [this.registry],
  });

  private readonly series = new Map<string, ModelSeries>();
  private readonly httpCounts = new Map<string, BoundCounter>();
  private readonly httpLatency = new Map<string, BoundHistogram>();
  private readonly tokenSeries = new Map<string, { input: BoundCounter; output: BoundCounter }>();

  /**
   * One HTTP request ended: its count by method, route and status, and its latency by method and route (a
   * WebSocket turn is counted without a latency).
   */
  httpRequest(method: string, route: string, status: number, seconds?: number): void {
    const k = method + ' ' + route;
    if (seconds !== undefined) {
      let h = this.httpLatency.get(k);
      if (h === undefined) this.httpLatency.set(k, (h = this.latency.child(method, route) as BoundHistogram));
      h.observe(seconds);
    }
    const ks = k + ' ' + status;
    let c = this.httpCounts.get(ks);
    if (c === undefined) this.httpCounts.set(ks, (c = this.requests.child(method, route, String(status)) as BoundCounter));
    c.inc();
  }

  /** Tokens a model used (portico_tokens_total). */
  tokensUsed(model: string, input: number, output: number): void {
    let t = this.tokenSeries.get(model);
    if (t === undefined) {
      t = { input: this.tokens.child(model, 'input') as BoundCounter, output: this.tokens.child(model, 'output') as BoundCounter };
      this.tokenSeries.set(model, t);
    }
    if (input) t.input.inc(input);
    if (output) t.output.inc(output);
  }

  /** The per-model series of a model and deployment, made on first use. */
  modelSeries(model: string, deployment: string): ModelSeries {
    const k = model + '\u0000' + deployment;
    let s = this.series.get(k);
    if (s === undefined) {
      s = {
        requests: this.modelRequests.child(model, deployment) as BoundCounter,
        duration: this.modelDuration.child(model, deployment) as BoundHistogram,
        ttft: this.modelTtft.child(model, deployment) as BoundHistogram,
        upstream: this.modelUpstream.child(model, deployment) as BoundHistogram,
        tokensIn: this.modelTokens.child(model, deployment, 'input') as BoundCounter,
        tokensOut: this.modelTokens.child(model, deployment, 'output') as BoundCounter,
        clientClosed: this.modelClientClosed.child(model, deployment) as BoundCounter,
      };
      this.series.set(k, s);
    }
    return s;
  }

  private bound(name: string, help: string, type: 'counter' | 'histogram', labelNames: string[], buckets?: number[]): BoundSeries {
    const m = new BoundSeries(name, help, type, labelNames, buckets);
    this.registry.registerMetric(m as unknown as Metric);
    return m;
  }

  /** the event-loop lag series' sampler (with the default metrics only) */
  readonly loopLag: LoopLag | undefined;

  constructor(defaults = true) {
    if (!defaults) return;
    // prom-client's event-loop lag series sample every 10 ms (eventLoopMonitoringPrecision), which woke an idle
    // process ~90 times a second, and read the resolution itself on an idle loop: they are replaced by Portico's
    // own of the same names (src/platform/ops/loop-lag.ts). prom-client's sampler is given a resolution so coarse
    // (~25 days) that it never wakes the process, and its series are taken out of the registry.
    collectDefaultMetrics({ register: this.registry, prefix: 'portico_', eventLoopMonitoringPrecision: 2 ** 31 - 1 });
    for (const name of LOOP_LAG_SERIES) this.registry.removeSingleMetric('portico_' + name);
    this.loopLag = registerLoopLag(this.registry, 'portico_');
  }
}
