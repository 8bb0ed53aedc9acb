import { SignJWT, createRemoteJWKSet, jwtVerify, errors, type JWTPayload, type JWTVerifyGetKey } from 'jose';
import { AppError, msg, type Texts } from '../errors.js';
import { codePoints } from '../code-points.js';
import type { Config, OperatorClaim } from '../config.js';

/** Where the verifier reports an identity provider it cannot reach (pino's logger fits). */
export interface JwtLog {
  warn(obj: object, msg: string): void;
}

/** Who is calling a portal endpoint. */
export interface UserPrincipal {
  userId: string;
  /** org id -> role name, from the token's org roles claim */
  orgRoles: Record<string, string>;
  /** when the token that says so was issued (Unix seconds), if it says */
  issuedAt?: number;
  /**
   * the token's claim makes the user an operator of the installation (PORTICO_OPERATOR_CLAIM); absent: it does
   * not say so (the user may still be one by `portico operators add`, which the operators service knows)
   */
  operator?: true;
}

export const DEFAULT_ORG = 'default';

export interface JwtVerifier {
  verify(token: string): Promise<UserPrincipal>;
}

const ASYMMETRIC = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'];

/**
 * Why a subject cannot name a user, or null when it can. A subject is the user id every key, grant and usage
 * record is filed under, so it must be stored and compared exactly: no control characters (C0, DEL, C1: NUL
 * cannot be stored by PostgreSQL, the others hide in logs) and no lone UTF-16 surrogate (it would be stored as
 * U+FFFD, merging two identities into one).
 */
export function subjectProblem(sub: unknown): Texts | null {
  if (typeof sub !== 'string' || sub.length === 0) return msg('subject_missing');
  // characters as every limit counts them (code points: an emoji is one)
  if (sub.length > MAX_SUBJECT && codePoints(sub) > MAX_SUBJECT) return msg('subject_too_long', { max: MAX_SUBJECT });
  if (/[\u0000-\u001f\u007f-\u009f]/.test(sub)) return msg('subject_control_character');
  if (/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(sub)) return msg('subject_lone_surrogate');
  return null;
}

/** the longest subject (user id), and organization id of the roles claim, in characters */
export const MAX_SUBJECT = 255;

/** The identity provider's key set could not be fetched (network error, timeout, non-200, not a JWKS). */
class JwksUnavailable extends Error {}

/**
 * Verifies portal access tokens with jose: signature, exp (required), nbf, and issuer/audience when configured;
 * with JWT_MAX_AGE_SECONDS also iat (required) and the token's age. Algorithms are pinned per key source (HS256
 * for the shared secret, asymmetric ones for the JWKS), which refuses `alg: none` and algorithm confusion (an
 * HS256 token signed with a public key). A JWKS that cannot be fetched is the server's trouble, not the
 * caller's: 503 with retry-after and a log line, not 401.
 */
export function createJwtVerifier(jwt: Config['jwt'], log?: JwtLog): JwtVerifier {
  const remote = jwt.jwksUrl ? createRemoteJWKSet(new URL(jwt.jwksUrl), { cooldownDuration: 30_000, timeoutDuration: 5_000 }) : undefined;
  const jwks: JWTVerifyGetKey | undefined = remote
    ? async (header, token) => {
        try {
          return await remote(header, token);
        } catch (e) {
          // no key with that kid (or several) is the token's fault; anything else is the fetch of the key set
          if (e instanceof errors.JWKSNoMatchingKey || e instanceof errors.JWKSMultipleMatchingKeys) throw e;
          log?.warn({ jwks_url: jwt.jwksUrl, err: (e as Error).message }, 'the JWKS of the identity provider cannot be fetched; portal tokens are answered 503');
          throw new JwksUnavailable((e as Error).message);
        }
      }
    : undefined;
  const secret = jwt.secret;
  const algorithms = [...(secret ? ['HS256'] : []), ...(jwks ? ASYMMETRIC : [])];
  const getKey: JWTVerifyGetKey = async (header, token) => {
    if (header.alg === 'HS256') {
      if (!secret) throw new errors.JOSEAlgNotAllowed('HS256 tokens are not accepted');
      return secret;
    }
    if (!jwks) throw new errors.JOSEAlgNotAllowed(`${header.alg} tokens are not accepted`);
    return jwks(header, token);
  };
  return {
    async verify(token: string): Promise<UserPrincipal> {
      let payload: JWTPayload;
      try {
        ({ payload } = await jwtVerify(token, getKey, {
          algorithms,
          issuer: jwt.issuer,
          audience: jwt.audience,
          requiredClaims: jwt.maxAgeSeconds ? ['sub', 'exp', 'iat'] : ['sub', 'exp'],
          maxTokenAge: jwt.maxAgeSeconds || undefined,
          clockTolerance: 5,
        }));
      } catch (e) {
        if (e instanceof JwksUnavailable) {
          throw new AppError('service_unavailable', msg('jwks_unavailable'), null, { headers: { 'retry-after': '5' } });
        }
        if ((e instanceof errors.JWTClaimValidationFailed || e instanceof errors.JWTExpired) && e.claim === 'iat') {
          throw new AppError('invalid_token', msg('token_too_old', { max: jwt.maxAgeSeconds }));
        }
        if (e instanceof errors.JWTExpired) throw new AppError('invalid_token', msg('token_expired'));
        if (e instanceof errors.JWTClaimValidationFailed && e.claim === 'exp') throw new AppError('invalid_token', msg('token_no_expiry'));
        throw new AppError('invalid_token');
      }
      const problem = subjectProblem(payload.sub);
      if (problem) throw new AppError('invalid_token', msg('token_bad_subject', { problem }));
      return {
        userId: payload.sub!,
        orgRoles: orgRolesFromClaims(payload, jwt.orgRolesClaim),
        issuedAt: typeof payload.iat === 'number' ? payload.iat : undefined,
        ...(operatorFromClaims(payload, jwt.operatorClaim) ? { operator: true as const } : {}),
      };
    },
  };
}

/** The org -> role map of a token's claims (the claim named by JWT_ORG_ROLES_CLAIM); anything else is ignored. */
export function orgRolesFromClaims(claims: Record<string, unknown>, claim: string): Record<string, string> {
  const rawRoles = claims[claim];
  const orgRoles: Record<string, string> = {};
  if (rawRoles && typeof rawRoles === 'object' && !Array.isArray(rawRoles)) {
    for (const [org, role] of Object.entries(rawRoles as Record<string, unknown>)) {
      // an org id is stored and compared like a user id: the same characters are refused (NUL would not even store)
      if (typeof role === 'string' && subjectProblem(org) === null) orgRoles[org] = role;
    }
  }
  return orgRoles;
}

/**
 * Whether a token's claims make its user an operator (PORTICO_OPERATOR_CLAIM): `NAME` wants the claim true (or the
 * string "true"); `NAME=VALUE` wants the claim VALUE, or a list holding VALUE (a groups claim). Unset: never.
 */
export function operatorFromClaims(claims: Record<string, unknown>, spec: OperatorClaim | undefined): boolean {
  if (!spec) return false;
  const v = claims[spec.name];
  if (spec.value === undefined) return v === true || v === 'true';
  if (Array.isArray(v)) return v.some((x) => x === spec.value);
  return v === spec.value;
}

export function isOrgAdmin(p: UserPrincipal, orgId: string, adminRole: string): boolean {
  return Object.prototype.hasOwnProperty.call(p.orgRoles, orgId) && p.orgRoles[orgId] === adminRole;
}

/** Parses a TTL like 30s, 15m, 1h, 7d into seconds. */
export function parseTtl(ttl: string): number {
  const m = /^(\d+)\s*([smhd]?)$/.exec(ttl.trim());
  if (!m) throw new Error(`invalid TTL "${ttl}": use a number with s, m, h or d (e.g. 1h)`);
  const n = Number(m[1]);
  const mult = { '': 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2] as '' | 's' | 'm' | 'h' | 'd'];
  if (n <= 0) throw new Error('TTL must be positive');
  return n * mult;
}

/** Mints an HS256 token (the `portico token` command and tests). */
export async function signToken(
  secret: Uint8Array,
  opts: {
    userId: string;
    orgRoles?: Record<string, string>;
    ttlSeconds?: number;
    issuer?: string;
    audience?: string;
    claim?: string;
    /** other claims the token carries (an operator claim, groups) */
    claims?: Record<string, unknown>;
  },
): Promise<string> {
  const jwt = new SignJWT({ ...opts.claims, [opts.claim ?? 'org_roles']: opts.orgRoles ?? {} })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(opts.userId)
    .setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + (opts.ttlSeconds ?? 3600));
  if (opts.issuer) jwt.setIssuer(opts.issuer);
  if (opts.audience) jwt.setAudience(opts.audience);
  return jwt.sign(secret);
}
