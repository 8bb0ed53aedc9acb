import { AppError, msg } from '../platform/errors.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import { ROUTE_SCOPES } from '../portal/keys/scopes.js';

/**
 * Inference-key scopes. A key without scopes may call everything. `responses`, `chat`, `embeddings` and
 * `audio` limit the endpoints (a key that names none of them may call every endpoint; listing models is open
 * to every key; `responses` does not open /chat/completions: each endpoint family is its own scope);
 * `model:NAME` entries limit the models (a key that names none may use every model).
 */
export { ROUTE_SCOPES };

export function assertRouteScope(key: KeyPrincipal, scope: string | undefined) {
  if (!scope || key.scopes.length === 0) return;
  const routeScopes = key.scopes.filter((s) => (ROUTE_SCOPES as readonly string[]).includes(s) || s === '*');
  if (routeScopes.length === 0 || routeScopes.includes('*') || routeScopes.includes(scope)) return;
  throw new AppError('insufficient_scope', msg('scope_endpoint_missing', { scope }));
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
