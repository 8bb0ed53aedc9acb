import type { ModelSpec } from './spec.js';

/** What one request used, in the units models are priced in. */
export interface Metered {
  inputTokens?: number;
  outputTokens?: number;
  /** the part of inputTokens served from a cache */
  cachedTokens?: number;
  characters?: number;
  audioSeconds?: number;
}

/**
 * The cost of a request in micro-credits (the ledger's unit), from the model's `pricing`: credits per million
 * tokens (cached input at its own price when set, else the input price), per character and per audio second.
 * The one place prices are applied.
 */
export function costMicros(spec: Pick<ModelSpec, 'pricing'>, m: Metered): number {
  const pr = spec.pricing;
  if (!pr) return 0;
  const cached = Math.min(m.cachedTokens ?? 0, m.inputTokens ?? 0);
  const input = (m.inputTokens ?? 0) - cached;
  // per million tokens and micro-credits: the two factors cancel
  const tokens = input * (pr.input_per_million ?? 0) + cached * (pr.cached_input_per_million ?? pr.input_per_million ?? 0) + (m.outputTokens ?? 0) * (pr.output_per_million ?? 0);
  const audio = (m.characters ?? 0) * (pr.per_character ?? 0) * 1_000_000 + (m.audioSeconds ?? 0) * (pr.per_audio_second ?? 0) * 1_000_000;
  return tokens + audio;
}
