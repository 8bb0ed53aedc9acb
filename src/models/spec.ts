/**
 * One model as Portico serves it: the keys every entry has, plus its provider's own keys (checked against the
 * provider's schema when the model file is read, see ./config.ts).
 */
import { Type, type Static } from 'typebox';
import type { Capability } from '../engines/provider.js';
import type { AnyProviderOptions } from '../engines/providers.js';

/** credits per million tokens / per audio second / per character, for the usage ledger and budgets */
export const PricingSchema = Type.Object(
  {
    input_per_million: Type.Optional(Type.Number({ minimum: 0 })),
    output_per_million: Type.Optional(Type.Number({ minimum: 0 })),
    cached_input_per_million: Type.Optional(Type.Number({ minimum: 0 })),
    per_audio_second: Type.Optional(Type.Number({ minimum: 0 })),
    per_character: Type.Optional(Type.Number({ minimum: 0 })),
  },
  { additionalProperties: false },
);
export type Pricing = Static<typeof PricingSchema>;

/** The keys of every entry, whatever its provider. */
export const COMMON_KEYS = {
  name: Type.String({ minLength: 1, maxLength: 200, description: 'the name clients send (unique)' }),
  provider: Type.String({ description: 'which provider serves it' }),
  type: Type.Optional(Type.String({ description: "what it does; default: the provider's first capability" })),
  owned_by: Type.Optional(Type.String({ maxLength: 200, description: 'shown in GET /v1/models' })),
  pricing: Type.Optional(PricingSchema),
};

/** Built-in audio models carry how they are served; no model file entry can set it. */
export type BuiltinModel = 'embedded-tts' | 'auto-recognizer';

export type ModelSpec = {
  name: string;
  provider: string;
  type: Capability;
  owned_by?: string;
  pricing?: Pricing;
  builtin?: BuiltinModel;
} & AnyProviderOptions;

/** The name an upstream knows the model by. */
export function upstreamName(spec: ModelSpec): string {
  return spec.upstream_model ?? spec.name;
}

const deployments = new WeakMap<ModelSpec, string>();

/**
 * What serves a model, as the request log and the per-model metrics name it: the provider, and for an upstream
 * its host (`openai-compatible:127.0.0.1:11434`), never its credentials or path. Computed once per entry. (When
 * one model has several deployments, routing names the one that served the request instead.)
 */
export function deploymentName(spec: ModelSpec): string {
  let d = deployments.get(spec);
  if (d === undefined) {
    d = spec.provider;
    const base = (spec as { base_url?: unknown }).base_url;
    if (typeof base === 'string') {
      try {
        d += ':' + new URL(base).host;
      } catch {
        // an invalid URL never gets this far (the model file is checked); the provider alone names it then
      }
    }
    deployments.set(spec, d);
  }
  return d;
}
