import { AppError } from '../platform/errors.js';
import type { ModelSpec } from './config.js';

/** The models this Portico offers, by the names clients send. */
export class ModelRegistry {
  private readonly byName = new Map<string, ModelSpec>();
  readonly createdAt = Math.floor(Date.now() / 1000);

  constructor(specs: ModelSpec[]) {
    for (const s of specs) this.byName.set(s.name, s);
  }

  list(): ModelSpec[] {
    return [...this.byName.values()];
  }

  get(name: string): ModelSpec | undefined {
    return this.byName.get(name);
  }

  /** The model of that name and type, or 404 model_not_found naming the ones that exist. */
  require(name: string, type: ModelSpec['type']): ModelSpec {
    const m = this.byName.get(name);
    if (m && m.type === type) return m;
    const known = this.list().filter((x) => x.type === type).map((x) => x.name);
    throw new AppError(
      'model_not_found',
      `The model '${name}' does not exist or is not a ${type} model. Available: ${known.length ? known.join(', ') : '(none configured)'}`,
      'model',
    );
  }
}
