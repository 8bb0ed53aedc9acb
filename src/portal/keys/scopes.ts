import { AppError, msg, type Texts } from '../../platform/errors.js';
import type { KeyKind } from '../../platform/auth/api-key-format.js';

/**
 * The scope values each kind of key understands (docs/api.md, "Scopes"). A key is made with these or none:
 * a typo (`usage.read`) or a duplicate would make a key that silently does something else than its maker meant.
 */
/** Inference-key endpoint families (src/api/scopes.ts enforces them); `*` names all of them. */
export const ROUTE_SCOPES = ['responses', 'chat', 'embeddings', 'audio', 'models'] as const;
/** Management API Key scopes: one per query API. */
export const QUERY_SCOPES = { usage: 'usage:read', balance: 'balance:read' } as const;

/** `model:NAME`: a model name as model configs allow it (no spaces or control characters). */
const MODEL_SCOPE = /^model:[^\s\u0000-\u001f\u007f]{1,44}$/;

export function allowedScopes(kind: KeyKind): string[] {
  return kind === 'management' ? Object.values(QUERY_SCOPES) : [...ROUTE_SCOPES, '*', 'model:NAME'];
}

/** Refuses unknown and repeated scopes with a 400 that lists the allowed values (in English and Chinese). */
export function assertScopes(kind: KeyKind, scopes: string[]) {
  const quoted = allowedScopes(kind).map((s) => `'${s}'`);
  const allowed: Texts = { en: quoted.join(', '), zh: quoted.join('、') };
  const seen = new Set<string>();
  for (const [i, s] of scopes.entries()) {
    const known = kind === 'management' ? allowedScopes(kind).includes(s) : (ROUTE_SCOPES as readonly string[]).includes(s) || s === '*' || MODEL_SCOPE.test(s);
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
