/**
 * What the feature modules declare (src/platform/module.ts, FeatureDeclaration), collected once when the runtime
 * is built and handed down as data: the keys' scope vocabulary, the usage operations, the units prices apply to.
 * The layers below the features read these lists and name no feature themselves (test/architecture.test.ts).
 */
import type { FeatureModule, MeteredUnit } from '../platform/module.js';

export interface Declared {
  /** the inference-key scopes of the features' routes, in the order of the modules */
  readonly scopes: readonly string[];
  /** every usage operation a feature records */
  readonly operations: readonly string[];
  /** every unit a feature charges besides tokens, with its pricing key */
  readonly units: readonly MeteredUnit[];
  /** the modules that declared something, by name */
  readonly features: readonly string[];
}

/** scope values the keys themselves define: no feature may declare them */
const RESERVED_SCOPES = ['*', 'models'];

/**
 * Collects the declarations of `modules`. Throws (the runtime is not built) on a declaration that would make
 * the lists ambiguous: a scope twice or reserved, one unit priced by two keys, one pricing key for two units.
 */
export function collectDeclarations(modules: readonly FeatureModule[]): Declared {
  const scopes: string[] = [];
  const operations = new Set<string>();
  const units = new Map<string, MeteredUnit>();
  const features: string[] = [];
  for (const m of modules) {
    if (m.scope === undefined && !m.operations?.length && !m.units?.length) continue;
    features.push(m.name);
    if (m.scope !== undefined) {
      if (!/^[a-z][a-z0-9_.-]{0,49}$/.test(m.scope) || RESERVED_SCOPES.includes(m.scope)) throw new Error(`module ${m.name}: '${m.scope}' cannot be a route scope`);
      if (scopes.includes(m.scope)) throw new Error(`module ${m.name}: the route scope '${m.scope}' is declared by another module too`);
      scopes.push(m.scope);
    }
    for (const o of m.operations ?? []) operations.add(o);
    for (const u of m.units ?? []) {
      const had = units.get(u.unit);
      if (had && had.price !== u.price) throw new Error(`module ${m.name}: the unit '${u.unit}' is priced by '${had.price}' elsewhere, not '${u.price}'`);
      const other = [...units.values()].find((x) => x.price === u.price && x.unit !== u.unit);
      if (other) throw new Error(`module ${m.name}: the pricing key '${u.price}' prices the unit '${other.unit}' already`);
      units.set(u.unit, had ? { ...had, on: [...new Set([...had.on, ...u.on])] } : u);
    }
  }
  return { scopes, operations: [...operations], units: [...units.values()], features };
}
