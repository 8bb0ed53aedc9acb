import { AppError, msg, type Texts } from '../../platform/errors.js';
import type { KeyKind } from '../../platform/auth/api-key-format.js';

/**
 * The scope values each kind of key understands (docs/api.md, "Scopes"). A key is made with these or none:
 * a typo (`usage.read`) or a duplicate would make a key that silently does something else than its maker meant.
 *
 * Inference keys: the endpoint families are the features' route scopes, which the runtime collects from the
 * feature modules and gives to the key service (`routeScopes`, in the order of the modules); this layer names
 * none of them. `models` (a key that may only list the models), `*` (every family) and `model:NAME` are the
 * keys' own.
 */
/** Management API Key scopes: one per query API. */
export const QUERY_SCOPES = { usage: 'usage:read', balance: 'balance:read' } as const;
/**
 * The Management API Key scope of the operators' API (/v1/admin): only an operator may make a key with it, and the key
 * works there only while its owner is an operator. A key made without scopes does not have it.
 */
export const OPERATOR_SCOPE = 'admin';
/** an inference-key scope that opens no endpoint family: listing the models is open to every key anyway */
export const MODELS_SCOPE = 'models';

/** `model:NAME`: a model name as model configs allow it (no spaces or control characters). */
const MODEL_SCOPE = /^model:[^\s\u0000-\u001f\u007f]{1,44}$/;

/** The endpoint-family scopes of inference keys: the features' route scopes, then `models`. */
export function endpointScopes(routeScopes: readonly string[]): string[] {
  return [...routeScopes, MODELS_SCOPE];
}

export function allowedScopes(kind: KeyKind, routeScopes: readonly string[]): string[] {
  return kind === 'management' ? [...Object.values(QUERY_SCOPES), OPERATOR_SCOPE] : [...endpointScopes(routeScopes), '*', 'model:NAME'];
}

/** Refuses unknown and repeated scopes with a 400 that lists the allowed values (in English and Chinese). */
export function assertScopes(kind: KeyKind, scopes: string[], routeScopes: readonly string[]) {
  const values = allowedScopes(kind, routeScopes);
  const quoted = values.map((s) => `'${s}'`);
  const allowed: Texts = { en: quoted.join(', '), zh: quoted.join('、') };
  const endpoints = endpointScopes(routeScopes);
  const seen = new Set<string>();
  for (const [i, s] of scopes.entries()) {
    const known = kind === 'management' ? values.includes(s) : endpoints.includes(s) || s === '*' || MODEL_SCOPE.test(s);
    if (!known) {
      const kindName = msg(kind === 'management' ? 'kind_management' : 'kind_inference');
      throw new AppError('validation_error', msg('scope_unknown', { index: i, value: s, kind: kindName, allowed }), `scopes[${i}]`, { detail: 'invalid_value' });
    }
    if (seen.has(s)) {
      throw new AppError('validation_error', msg('scope_repeated', { index: i, value: s, allowed }), `scopes[${i}]`, { detail: 'invalid_value' });
    }
    seen.add(s);
  }
}
