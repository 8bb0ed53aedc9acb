import type { FastifyRequest } from 'fastify';
import { AppError, msg } from '../platform/errors.js';
import { bearerToken } from '../platform/http/auth.js';
import { looksLikeApiKey } from '../platform/auth/api-key-format.js';
import type { UserPrincipal } from '../platform/auth/jwt.js';
import type { OperatorPrincipal } from '../platform/auth/principal.js';
import type { KeyVerifier } from '../portal/keys/verifier.js';
import { OPERATOR_SCOPE } from '../portal/keys/scopes.js';
import type { Operators } from '../portal/operators/service.js';

export interface OperatorGateDeps {
  verifier: KeyVerifier;
  operators: Operators;
  /** the portal's way of recognizing a user: a bearer JWT, or the web page's session (with its CSRF check) */
  authenticate: (req: FastifyRequest) => Promise<UserPrincipal>;
}

/**
 * Who may call /v1/admin: an operator, by their JWT or their session on the page, or by a Management API Key with the
 * operator scope whose owner is a recorded operator (a key carries no claim: an operator by claim alone is recorded
 * when they make one). Everyone else is refused with 403 (no credentials: 401), whatever their role in an
 * organization.
 */
export function operatorGate(d: OperatorGateDeps): (req: FastifyRequest) => Promise<OperatorPrincipal> {
  return async (req) => {
    if (req.headers.authorization !== undefined) {
      const token = bearerToken(req);
      if (looksLikeApiKey(token)) {
        const key = await d.verifier.verify(token, 'management', req.ip);
        if (!key.scopes.includes(OPERATOR_SCOPE)) throw new AppError('insufficient_scope', msg('admin_key_scope_missing', { scope: OPERATOR_SCOPE }));
        if (!(await d.operators.isRecorded(key.userId))) throw new AppError('permission_denied', msg('admin_key_owner_not_operator'));
        d.verifier.markUsed(key);
        return { userId: key.userId, keyId: key.keyId };
      }
    }
    const user = await d.authenticate(req);
    // the claim (or its absence) in this token is what the record of an operator by claim follows
    await d.operators.followClaim(user);
    if (!(await d.operators.isOperator(user))) throw new AppError('permission_denied', msg('admin_operators_only'));
    return { userId: user.userId };
  };
}
