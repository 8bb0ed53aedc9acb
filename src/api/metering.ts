/**
 * The sequence every feature runs around its engine, written once: the model the request names (its `model:`
 * scope checked, the request's facts told), the engine made for it (a failure noted and mapped to the client's
 * error), and the usage charged (priced by the model's pricing, recorded under the feature's operation, the
 * request's facts told). Plain functions and one small object: no layer of its own around the engine's output.
 */
import type { AppError } from '../platform/errors.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { RequestFacts } from '../platform/ops/facts.js';
import type { Capability } from '../engines/provider.js';
import type { ModelRegistry } from '../models/registry.js';
import { deploymentName, type ModelSpec } from '../models/spec.js';
import { Prices, type Metered } from '../models/pricing.js';
import type { UsageEvent, UsageHold, UsageService } from '../portal/usage/service.js';
import { assertModelScope } from './scopes.js';
import { fromEngineError } from './engine-errors.js';

/** The model a request names, of the type the endpoint serves, if the key may use it; the facts name it. */
export function resolveModel(models: Pick<ModelRegistry, 'require'>, name: string, type: Capability, key: KeyPrincipal, facts?: RequestFacts): ModelSpec {
  const spec = models.require(name, type);
  assertModelScope(key, spec.name);
  if (facts) {
    facts.model = spec.name;
    facts.deployment = deploymentName(spec);
  }
  return spec;
}

/**
 * The engine, as `make` gives it (`engines.text(spec)`, ...): a failure to make it (not configured, not
 * installed, not loaded) is noted in the facts and thrown as the client's error (`toClient`, by default the
 * engine-error mapping of src/api/engine-errors.ts).
 */
export async function resolveEngine<E>(make: () => Promise<E>, facts?: RequestFacts, toClient: (e: unknown) => AppError = (e) => fromEngineError(e)): Promise<E> {
  try {
    return await make();
  } catch (e) {
    facts?.failed(e);
    throw toClient(e);
  }
}

/** One request's usage, to be priced and recorded. */
export interface Charge {
  requestId: string;
  key: UsageEvent['key'];
  /** the model that served: its name goes in the record, its pricing makes the cost */
  spec: Pick<ModelSpec, 'name' | 'pricing'>;
  /** one of the operations the feature declares (FeatureModule.operations) */
  operation: string;
  used: Metered;
  /** the deployment that served, when the model was routed (RouteNote.deployment) */
  deployment?: string;
  /** what the request reserved at admission: this record settles it */
  hold?: UsageHold;
  facts?: RequestFacts;
}

/** Charges usage: the one place a feature's usage is priced and recorded. */
export class Metering {
  private current: Prices;

  /**
   * `prices`: the units the features meter. The runtime builds the modules with this object, then gives it what
   * they declared (usePrices), before any request.
   */
  constructor(
    private readonly usage: Pick<UsageService, 'record'>,
    prices: Prices = new Prices(),
  ) {
    this.current = prices;
  }

  get prices(): Prices {
    return this.current;
  }

  usePrices(prices: Prices) {
    this.current = prices;
  }

  /** what `used` costs on `spec`, in micro-credits */
  cost(spec: Pick<ModelSpec, 'pricing'>, used: Metered): number {
    return this.current.costMicros(spec, used);
  }

  /**
   * Prices the usage and records it (the journal first: see UsageService.record), and tells the request's facts.
   * The ledger keeps the counts of the units it has columns for (`characters`, `audio_seconds` taken in,
   * `output_audio_seconds` produced); another unit is in the record by its cost.
   */
  charge(c: Charge): Promise<void> {
    const u = c.used;
    const characters = u.units?.characters;
    const audioSeconds = u.units?.audio_seconds;
    const outputAudioSeconds = u.units?.output_audio_seconds;
    const costMicros = this.current.costMicros(c.spec, u);
    c.facts?.used({ inputTokens: u.inputTokens, outputTokens: u.outputTokens, characters, audioSeconds, outputAudioSeconds, costMicros, operation: c.operation });
    return this.usage.record({
      requestId: c.requestId,
      key: c.key,
      model: c.spec.name,
      operation: c.operation,
      ...(u.inputTokens !== undefined ? { inputTokens: u.inputTokens } : {}),
      ...(u.outputTokens !== undefined ? { outputTokens: u.outputTokens } : {}),
      ...(u.cachedTokens !== undefined ? { cachedTokens: u.cachedTokens } : {}),
      ...(u.cacheWriteTokens !== undefined ? { cacheWriteTokens: u.cacheWriteTokens } : {}),
      ...(characters !== undefined ? { characters } : {}),
      ...(audioSeconds !== undefined ? { audioSeconds } : {}),
      ...(outputAudioSeconds !== undefined ? { outputAudioSeconds } : {}),
      costMicros,
      ...(c.deployment !== undefined ? { deployment: c.deployment } : {}),
      ...(c.hold ? { hold: c.hold } : {}),
    });
  }
}
