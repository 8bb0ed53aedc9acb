import { AppError, msg } from '../platform/errors.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import { endpointScopes } from '../portal/keys/scopes.js';

/**
 * Inference-key scopes. A key without scopes may call everything. The route scopes the features declare (their
 * routes' `config.scope`; the runtime collects them) limit the endpoints: a key that names none of them may call
 * every endpoint; listing models is open to every key; one family's scope does not open another's. `model:NAME`
 * entries limit the models (a key that names none may use every model).
 */
export class RouteScopes {
  private readonly endpoints: ReadonlySet<string>;

  /** `routeScopes`: what the feature modules declared (src/compose/declarations.ts) */
  constructor(routeScopes: readonly string[]) {
    this.endpoints = new Set(endpointScopes(routeScopes));
  }

  /** Throws 403 insufficient_scope when the key names endpoint scopes and not `scope` (nor `*`). */
  assert(key: KeyPrincipal, scope: string | undefined) {
    if (!scope || key.scopes.length === 0) return;
    const routeScopes = key.scopes.filter((s) => this.endpoints.has(s) || s === '*');
    if (routeScopes.length === 0 || routeScopes.includes('*') || routeScopes.includes(scope)) return;
    throw new AppError('insufficient_scope', msg('scope_endpoint_missing', { scope }));
  }
}

export function modelAllowed(key: KeyPrincipal, model: string): boolean {
  if (key.scopes.length === 0) return true;
  const models = key.scopes.filter((s) => s.startsWith('model:'));
  return models.length === 0 || models.includes(`model:${model}`);
}

export function assertModelScope(key: KeyPrincipal, model: string) {
  if (!modelAllowed(key, model)) {
    throw new AppError('insufficient_scope', msg('scope_model_forbidden', { model }), 'model');
  }
}
