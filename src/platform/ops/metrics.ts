import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** Buckets of the per-model latency histograms (seconds): model answers take from milliseconds to minutes. */
const MODEL_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300];

/** The series of one model and deployment, bound to their labels once (a request then costs no label lookup). */
export interface ModelSeries {
  requests: Counter.Internal;
  duration: Histogram.Internal<string>;
  ttft: Histogram.Internal<string>;
  upstream: Histogram.Internal<string>;
  tokensIn: Counter.Internal;
  tokensOut: Counter.Internal;
}

/** Prometheus metrics of one Portico process (served at /metrics). */
export class Metrics {
  readonly registry = new Registry();
  readonly requests = new Counter({
    name: 'portico_http_requests_total',
    help: 'HTTP requests by route and status',
    labelNames: ['method', 'route', 'status'],
    registers: [this.registry],
  });
  readonly latency = new Histogram({
    name: 'portico_http_request_duration_seconds',
    help: 'HTTP request latency by route (to the end of the response)',
    labelNames: ['method', 'route'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });
  readonly tokens = new Counter({ name: 'portico_tokens_total', help: 'Tokens by model and direction', labelNames: ['model', 'direction'], registers: [this.registry] });
  readonly audioSeconds = new Counter({
    name: 'portico_audio_seconds_total',
    help: 'Audio seconds transcribed or synthesized by model',
    labelNames: ['model', 'operation'],
    registers: [this.registry],
  });
  readonly characters = new Counter({ name: 'portico_speech_characters_total', help: 'Characters synthesized by model', labelNames: ['model'], registers: [this.registry] });
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
  readonly modelRequests = new Counter({
    name: 'portico_model_requests_total',
    help: 'Requests that reached a model, by model and deployment',
    labelNames: ['model', 'deployment'],
    registers: [this.registry],
  });
  readonly modelErrors = new Counter({
    name: 'portico_model_errors_total',
    help: 'Requests to a model that failed, by model, deployment and error type (the error code the client got)',
    labelNames: ['model', 'deployment', 'type'],
    registers: [this.registry],
  });
  readonly modelDuration = new Histogram({
    name: 'portico_model_request_duration_seconds',
    help: 'Latency of requests to a model, to the end of the answer',
    labelNames: ['model', 'deployment'],
    buckets: MODEL_BUCKETS,
    registers: [this.registry],
  });
  readonly modelTtft = new Histogram({
    name: 'portico_model_time_to_first_token_seconds',
    help: "Time from the engine or upstream call to the model's first output",
    labelNames: ['model', 'deployment'],
    buckets: MODEL_BUCKETS,
    registers: [this.registry],
  });
  readonly modelUpstream = new Histogram({
    name: 'portico_model_upstream_duration_seconds',
    help: 'Time spent in the engine or upstream call, to the end of its answer (the rest of a request is Portico)',
    labelNames: ['model', 'deployment'],
    buckets: MODEL_BUCKETS,
    registers: [this.registry],
  });
  readonly modelTokens = new Counter({
    name: 'portico_model_tokens_total',
    help: 'Tokens of requests answered in the request, by model, deployment and direction (background jobs: portico_tokens_total)',
    labelNames: ['model', 'deployment', 'direction'],
    registers: [this.registry],
  });
  /** incremented by routing at each try after the first */
  readonly modelRetries = new Counter({
    name: 'portico_model_retries_total',
    help: 'Upstream tries after the first, by model and the deployment retried',
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

  private readonly series = new Map<string, ModelSeries>();

  /** The per-model series of a model and deployment, made on first use. */
  modelSeries(model: string, deployment: string): ModelSeries {
    const k = model + '\u0000' + deployment;
    let s = this.series.get(k);
    if (s === undefined) {
      s = {
        requests: this.modelRequests.labels(model, deployment),
        duration: this.modelDuration.labels(model, deployment),
        ttft: this.modelTtft.labels(model, deployment),
        upstream: this.modelUpstream.labels(model, deployment),
        tokensIn: this.modelTokens.labels(model, deployment, 'input'),
        tokensOut: this.modelTokens.labels(model, deployment, 'output'),
      };
      this.series.set(k, s);
    }
    return s;
  }

  constructor(defaults = true) {
    if (defaults) collectDefaultMetrics({ register: this.registry, prefix: 'portico_' });
  }
}
