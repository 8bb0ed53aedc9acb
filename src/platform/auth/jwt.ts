import { SignJWT, createRemoteJWKSet, jwtVerify, errors, type JWTPayload, type JWTVerifyGetKey } from 'jose';
import { AppError } from '../errors.js';
import type { Config } from '../config.js';

/** Who is calling a portal endpoint. */
export interface UserPrincipal {
  userId: string;
  /** org id -> role name, from the token's org roles claim */
  orgRoles: Record<string, string>;
}

export const DEFAULT_ORG = 'default';

export interface JwtVerifier {
  verify(token: string): Promise<UserPrincipal>;
}

const ASYMMETRIC = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'];

/**
 * Verifies portal access tokens with jose: signature, exp, nbf, and issuer/audience when configured.
 * Algorithms are pinned per key source (HS256 for the shared secret, asymmetric ones for the JWKS), which
 * refuses `alg: none` and algorithm confusion (an HS256 token signed with a public key).
 */
export function createJwtVerifier(jwt: Config['jwt']): JwtVerifier {
  const jwks = jwt.jwksUrl ? createRemoteJWKSet(new URL(jwt.jwksUrl), { cooldownDuration: 30_000 }) : undefined;
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
          requiredClaims: ['sub'],
          clockTolerance: 5,
        }));
      } catch (e) {
        const expired = e instanceof errors.JWTExpired;
        throw new AppError('invalid_token', expired ? 'unauthorized: token has expired' : 'unauthorized: invalid token');
      }
      const sub = payload.sub;
      if (typeof sub !== 'string' || sub.length === 0 || sub.length > 255) throw new AppError('invalid_token', 'unauthorized: token has no valid subject');
      return { userId: sub, orgRoles: orgRolesFromClaims(payload, jwt.orgRolesClaim) };
    },
  };
}

/** The org -> role map of a token's claims (the claim named by JWT_ORG_ROLES_CLAIM); anything else is ignored. */
export function orgRolesFromClaims(claims: Record<string, unknown>, claim: string): Record<string, string> {
  const rawRoles = claims[claim];
  const orgRoles: Record<string, string> = {};
  if (rawRoles && typeof rawRoles === 'object' && !Array.isArray(rawRoles)) {
    for (const [org, role] of Object.entries(rawRoles as Record<string, unknown>)) {
      if (typeof role === 'string') orgRoles[org] = role;
    }
  }
  return orgRoles;
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
  opts: { userId: string; orgRoles?: Record<string, string>; ttlSeconds?: number; issuer?: string; audience?: string; claim?: string },
): Promise<string> {
  const jwt = new SignJWT({ [opts.claim ?? 'org_roles']: opts.orgRoles ?? {} })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(opts.userId)
    .setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + (opts.ttlSeconds ?? 3600));
  if (opts.issuer) jwt.setIssuer(opts.issuer);
  if (opts.audience) jwt.setAudience(opts.audience);
  return jwt.sign(secret);
}
