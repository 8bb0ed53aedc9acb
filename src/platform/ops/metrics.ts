import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

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

  constructor(defaults = true) {
    if (defaults) collectDefaultMetrics({ register: this.registry, prefix: 'portico_' });
  }
}
