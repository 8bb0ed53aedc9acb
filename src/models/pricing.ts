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
  /** the part of inputTokens written to a prompt cache */
  cacheWriteTokens?: number;
  /** the part of cacheWriteTokens written to a one-hour cache */
  cacheWrite1hTokens?: number;
  units?: Readonly<Record<string, number>>;
}

/**
 * The prices of the model file applied to what requests used: the one place prices are applied. Tokens are priced
 * per million (`input_per_million`, `output_per_million`, `cached_input_per_million`: cached input at its own price
 * when set, else the input price; `cache_write_input_per_million`: input written to a prompt cache, else at the
 * input price; `cache_write_1h_input_per_million`: the part written to a one-hour cache, else at the cache-write
 * price); every other unit by the pricing key its feature declared (`per_character`
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
    // the parts of the input, each at most what is left of it (counts from upstreams are not trusted to add up)
    const all = Math.max(0, m.inputTokens ?? 0);
    const cached = clamp(m.cachedTokens, all);
    const written = clamp(m.cacheWriteTokens, all - cached);
    const written1h = clamp(m.cacheWrite1hTokens, written);
    const input = all - cached - written;
    const inputPrice = pr.input_per_million ?? 0;
    const writePrice = pr.cache_write_input_per_million ?? inputPrice;
    // per million tokens and micro-credits: the two factors cancel
    let cost =
      input * inputPrice +
      cached * (pr.cached_input_per_million ?? inputPrice) +
      (written - written1h) * writePrice +
      written1h * (pr.cache_write_1h_input_per_million ?? writePrice) +
      (m.outputTokens ?? 0) * (pr.output_per_million ?? 0);
    if (m.units) {
      for (const [unit, n] of Object.entries(m.units)) {
        const key = this.priceOf.get(unit);
        if (key !== undefined && n > 0) cost += n * (pr[key] ?? 0) * 1_000_000;
      }
    }
    return cost;
  }
}

/** a count within [0, most] (absent, negative or not finite: 0) */
function clamp(n: number | undefined, most: number): number {
  return n !== undefined && Number.isFinite(n) && n > 0 ? Math.min(n, most) : 0;
}
