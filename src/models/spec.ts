/**
 * One model as Portico serves it: the keys every entry has, plus its provider's own keys (checked against the
 * provider's schema when the model file is read, see ./config.ts).
 */
import { Type, type Static } from 'typebox';
import type { Capability } from '../engines/provider.js';
import type { AnyProviderOptions } from '../engines/providers.js';

/** the pricing key of a unit a feature meters (FeatureModule.units): credits per one */
export const UNIT_PRICE_KEY = '^per_[a-z][a-z0-9_]{0,40}$';

/**
 * Credits per million tokens, and per one of each unit the features meter (`per_<unit>`: src/models/pricing.ts),
 * for the usage ledger and budgets. Which `per_` keys exist is what the feature modules declare
 * (FeatureModule.units): the model file is checked against them when they are known (CheckOptions.units).
 */
export const PricingSchema = Type.Object(
  {
    input_per_million: Type.Optional(Type.Number({ minimum: 0 })),
    output_per_million: Type.Optional(Type.Number({ minimum: 0 })),
    cached_input_per_million: Type.Optional(Type.Number({ minimum: 0 })),
    /** input written to a prompt cache (Anthropic's default five-minute cache, Bedrock's); absent: the input price */
    cache_write_input_per_million: Type.Optional(Type.Number({ minimum: 0 })),
    /** input written to a one-hour prompt cache; absent: cache_write_input_per_million */
    cache_write_1h_input_per_million: Type.Optional(Type.Number({ minimum: 0 })),
  },
  { additionalProperties: false, patternProperties: { [UNIT_PRICE_KEY]: Type.Number({ minimum: 0 }) } },
);
export type Pricing = Static<typeof PricingSchema> & { [unit: `per_${string}`]: number | undefined };

/** The keys of every entry, whatever its provider. */
export const COMMON_KEYS = {
  name: Type.String({ minLength: 1, maxLength: 200, description: 'the name clients send (unique)' }),
  provider: Type.String({ description: 'which provider serves it' }),
  type: Type.Optional(Type.String({ description: "what it does; default: the provider's first capability" })),
  owned_by: Type.Optional(Type.String({ maxLength: 200, description: 'shown in GET /v1/models' })),
  pricing: Type.Optional(PricingSchema),
};

/** A deployment's timeouts (docs/models.md has the defaults, src/models/router/route.ts applies them). */
export const TimeoutsSchema = Type.Object(
  {
    connect_ms: Type.Optional(Type.Integer({ minimum: 1, maximum: 3_600_000, description: 'opening a connection to the upstream' })),
    first_byte_ms: Type.Optional(Type.Integer({ minimum: 1, maximum: 3_600_000, description: 'from the try to the first output' })),
    total_ms: Type.Optional(Type.Integer({ minimum: 1, maximum: 86_400_000, description: 'the whole try, output included' })),
  },
  { additionalProperties: false },
);
export type Timeouts = Static<typeof TimeoutsSchema>;

/** The circuit breaker of each deployment of a model. */
export const BreakerSchema = Type.Object(
  {
    failures: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, description: 'the fewest failed requests in the window that open it (default 5)' })),
    failure_rate: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 1, description: "the share of the window's requests that must have failed (default 0.5)" })),
    window_ms: Type.Optional(Type.Integer({ minimum: 1000, maximum: 3_600_000, description: 'the window failures are counted over (default 60000)' })),
    cooldown_ms: Type.Optional(Type.Integer({ minimum: 1, maximum: 3_600_000, description: 'how long it stays open before one probe (default 30000)' })),
  },
  { additionalProperties: false },
);

/** An active health check of a deployment (docs/models.md, "Active health checks"). */
export const HealthCheckSchema = Type.Object(
  {
    probe: Type.Optional(Type.Union([Type.Literal('models'), Type.Literal('completion')], { description: 'GET /models (default), or the smallest generation' })),
    interval_ms: Type.Optional(Type.Integer({ minimum: 1000, maximum: 3_600_000, description: 'time between two checks (default 30000)' })),
    timeout_ms: Type.Optional(Type.Integer({ minimum: 100, maximum: 600_000, description: 'the longest one check may take (default 5000)' })),
    failures: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, description: 'failed checks in a row that open the breaker (default 2)' })),
  },
  { additionalProperties: false },
);
export type HealthCheck = Static<typeof HealthCheckSchema>;

/** The keys of one deployment (a plain entry is its model's one deployment). */
export const DEPLOYMENT_KEYS = {
  id: Type.Optional(Type.String({ minLength: 1, maxLength: 200, pattern: '^[^\\s]+$', description: 'the name usage records give it (default: name#index)' })),
  rpm: Type.Optional(Type.Integer({ minimum: 1, description: 'requests a minute this deployment takes (per instance)' })),
  tpm: Type.Optional(Type.Integer({ minimum: 1, description: 'tokens a minute this deployment takes (per instance)' })),
  timeouts: Type.Optional(TimeoutsSchema),
  health_check: Type.Optional(HealthCheckSchema),
};

/** Only in a `deployments` list: the share of requests. */
export const WEIGHT_KEY = {
  weight: Type.Optional(Type.Number({ minimum: 0, maximum: 1_000_000, description: 'relative share of requests (default 1; 0: only when the others cannot)' })),
};

/** How a model's requests are routed, retried and failed over (any entry). */
export const ROUTING_KEYS = {
  routing: Type.Optional(Type.Union([Type.Literal('weighted'), Type.Literal('least-busy')], { description: 'how a deployment is chosen' })),
  retries: Type.Optional(Type.Integer({ minimum: 0, maximum: 10, description: 'tries after the first, on retryable failures (default 2)' })),
  retry_backoff_ms: Type.Optional(Type.Integer({ minimum: 0, maximum: 60_000, description: 'first backoff before trying a deployment again (default 100, doubling)' })),
  max_retry_wait_ms: Type.Optional(Type.Integer({ minimum: 0, maximum: 300_000, description: 'longest wait before one retry, retry-after included (default 10000)' })),
  breaker: Type.Optional(BreakerSchema),
  fallbacks: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { maxItems: 10, description: 'models tried when every deployment failed' })),
  context_window_fallbacks: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { maxItems: 10, description: 'larger models tried on a context-window error' })),
  deployments: Type.Optional(Type.Array(Type.Unknown(), { minItems: 1, maxItems: 100, description: 'several servers for this one model' })),
};

/** One deployment as the router uses it: the engine's spec (name = the deployment id) and its limits. */
export type DeploymentSpec = {
  /** unique among all deployments: the engine registry keys engines by it, usage records name it */
  id: string;
  name: string;
  provider: string;
  type: Capability;
  weight: number;
  rpm?: number;
  tpm?: number;
  timeouts?: Timeouts;
  health_check?: HealthCheck;
  upstream_model: string;
} & AnyProviderOptions;

/** Built-in audio models carry how they are served; no model file entry can set it. */
export type BuiltinModel = 'embedded-tts' | 'auto-recognizer';

export type ModelSpec = {
  name: string;
  provider: string;
  type: Capability;
  owned_by?: string;
  pricing?: Pricing;
  builtin?: BuiltinModel;
  routing?: 'weighted' | 'least-busy';
  retries?: number;
  retry_backoff_ms?: number;
  max_retry_wait_ms?: number;
  breaker?: { failures?: number; failure_rate?: number; window_ms?: number; cooldown_ms?: number };
  fallbacks?: string[];
  context_window_fallbacks?: string[];
  id?: string;
  rpm?: number;
  tpm?: number;
  timeouts?: Timeouts;
  health_check?: HealthCheck;
  /**
   * Every deployment of the model, the first one's keys also being the entry's own (so code that reads one
   * engine's keys, e.g. `path` or `context_window`, sees the first). Set by the model file for every entry
   * (a plain entry is one deployment); unset for built-in models and models built by code.
   */
  deployments?: DeploymentSpec[];
} & AnyProviderOptions;

/** The name an upstream knows the model by. */
export function upstreamName(spec: ModelSpec): string {
  return spec.upstream_model ?? spec.name;
}

/**
 * What serves a model, as the request log, the per-model metrics and the usage ledger name it: the deployment id
 * the router uses (a deployment's `id` in the model file; for a model without `deployments`, its `id` or name).
 * The router names the deployment that served when a model has several (RequestFacts.route).
 */
export function deploymentName(spec: ModelSpec): string {
  return spec.deployments?.length === 1 ? spec.deployments[0]!.id : (spec.id ?? spec.name);
}
