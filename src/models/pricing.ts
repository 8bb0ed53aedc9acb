import type { MeteredUnit } from '../platform/module.js';
import type { ModelSpec } from './spec.js';

/**
 * What one request used: tokens (every text and embeddings model is priced in them), and counts of the units
 * the features declare (`MeteredUnit`: characters and audio seconds for audio, ...), by unit name.
 */
export interface Metered {
  inputTokens?: number;
  outputTokens?: number;
  /** the part of inputTokens served from a cache */
  cachedTokens?: number;
  units?: Readonly<Record<string, number>>;
}

/**
 * The prices of the model file applied to what requests used: the one place prices are applied. Tokens are priced
 * per million (`input_per_million`, `output_per_million`, `cached_input_per_million`: cached input at its own price
 * when set, else the input price); every other unit by the pricing key its feature declared (`per_character`
 * prices the `characters` unit: credits per one).
 */
export class Prices {
  private readonly priceOf: ReadonlyMap<string, `per_${string}`>;

  /** `units`: what the feature modules declare (collected by the runtime) */
  constructor(readonly units: readonly MeteredUnit[] = []) {
    this.priceOf = new Map(units.map((u) => [u.unit, u.price]));
  }

  /** The cost in micro-credits (the ledger's unit). A unit no feature declared costs nothing. */
  costMicros(spec: Pick<ModelSpec, 'pricing'>, m: Metered): number {
    const pr = spec.pricing;
    if (!pr) return 0;
    const cached = Math.min(m.cachedTokens ?? 0, m.inputTokens ?? 0);
    const input = (m.inputTokens ?? 0) - cached;
    // per million tokens and micro-credits: the two factors cancel
    let cost = input * (pr.input_per_million ?? 0) + cached * (pr.cached_input_per_million ?? pr.input_per_million ?? 0) + (m.outputTokens ?? 0) * (pr.output_per_million ?? 0);
    if (m.units) {
      for (const [unit, n] of Object.entries(m.units)) {
        const key = this.priceOf.get(unit);
        if (key !== undefined && n > 0) cost += n * (pr[key] ?? 0) * 1_000_000;
      }
    }
    return cost;
  }
}
