import { createHmac, randomUUID } from 'node:crypto';
import { SignJWT, jwtVerify } from 'jose';
import { AppError } from '../platform/errors.js';
import { MAX_SUBJECT, orgRolesFromClaims, subjectProblem } from '../platform/auth/jwt.js';
import { codePoints } from '../platform/code-points.js';

/**
 * Sign-in links: what `portico login --user alice` prints, for the embedded default with no identity provider.
 *
 * The link carries a short-lived HS256 token in its fragment (`/signin#token=...`): the fragment never reaches a
 * server log or a Referer header, and the page removes it from the address bar before it redeems it. The token is
 * signed with a key derived from KEY_PEPPER (which every instance shares), not with the portal JWT secret, so a
 * link's token is not a portal JWT and a portal JWT is not a link. Minting needs no database, so the operator
 * can print a link while the server holds the embedded database. Single use is enforced where it is redeemed
 * (the token's jti is recorded; a second redemption is refused).
 */
const AUDIENCE = 'portico:sign-in-link';
const CLAIM = 'org_roles';
/** a link may live at most this long */
export const MAX_LINK_TTL_SECONDS = 3600;
export const DEFAULT_LINK_TTL_SECONDS = 15 * 60;

export function linkKey(pepper: Buffer): Uint8Array {
  return createHmac('sha256', pepper).update('portico/web/sign-in-link/v1').digest();
}

export interface SignInLink {
  url: string;
  jti: string;
  expiresAt: number;
}

export async function mintSignInLink(opts: { pepper: Buffer; publicUrl: string; userId: string; orgRoles?: Record<string, string>; ttlSeconds?: number }): Promise<SignInLink> {
  const ttl = opts.ttlSeconds ?? DEFAULT_LINK_TTL_SECONDS;
  if (!Number.isInteger(ttl) || ttl <= 0 || ttl > MAX_LINK_TTL_SECONDS) throw new Error(`a sign-in link lives at most ${MAX_LINK_TTL_SECONDS / 60} minutes`);
  // characters as every limit counts them (code points), as the subject is checked when the link is used
  if (opts.userId.length === 0 || codePoints(opts.userId) > MAX_SUBJECT) throw new Error(`the user id must be 1 to ${MAX_SUBJECT} characters`);
  const jti = randomUUID();
  const expiresAt = Math.floor(Date.now() / 1000) + ttl;
  const token = await new SignJWT({ [CLAIM]: opts.orgRoles ?? {} })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(opts.userId)
    .setAudience(AUDIENCE)
    .setJti(jti)
    .setIssuedAt()
    .setExpirationTime(expiresAt)
    .sign(linkKey(opts.pepper));
  return { url: `${opts.publicUrl}/signin#token=${token}`, jti, expiresAt };
}

export interface RedeemedLink {
  userId: string;
  orgRoles: Record<string, string>;
  jti: string;
  expiresAt: number;
}

/** Verifies a link's token (signature, audience, expiry); throws `sign_in_link_invalid`. Does not mark it used. */
export async function readSignInLink(pepper: Buffer, token: string): Promise<RedeemedLink> {
  try {
    const { payload } = await jwtVerify(token, linkKey(pepper), { algorithms: ['HS256'], audience: AUDIENCE, requiredClaims: ['sub', 'jti', 'exp'], clockTolerance: 5 });
    const sub = payload.sub!;
    if (subjectProblem(sub) !== null || payload.jti!.length > 100) throw new Error('bad claims');
    if (payload.exp! - (payload.iat ?? 0) > MAX_LINK_TTL_SECONDS) throw new Error('lives too long');
    return { userId: sub, orgRoles: orgRolesFromClaims(payload, CLAIM), jti: payload.jti!, expiresAt: payload.exp! };
  } catch {
    throw new AppError('sign_in_link_invalid');
  }
}
