/**
 * Client secrets: short-lived credentials a server mints from an inference key for a browser, which opens a session
 * with one and never sees the key (OpenAI's `POST /v1/realtime/client_secrets`, values `ek_...`).
 *
 * A client secret is `ek_` and an encrypted JWT (JWE, dir + A256GCM, under a key derived from KEY_PEPPER, which every
 * instance shares): it holds the digest of the key it was minted from (never the key), when it expires, and what the
 * feature that minted it put in it (the session's configuration), all unreadable and unforgeable without the pepper.
 * Nothing is stored: each use verifies the key again by its digest (KeyVerifier.verifyDigest), so a client secret of
 * a key that was revoked, disabled or deleted stops working with the key, within the verifier's freshness.
 */
import { hkdfSync } from 'node:crypto';
import { EncryptJWT, errors, jwtDecrypt } from 'jose';
import { AppError } from '../../platform/errors.js';

export const CLIENT_SECRET_PREFIX = 'ek_';
/** OpenAI's bounds on `expires_after.seconds` */
export const CLIENT_SECRET_MIN_SECONDS = 10;
export const CLIENT_SECRET_MAX_SECONDS = 7200;
export const CLIENT_SECRET_DEFAULT_SECONDS = 600;
/** the longest client secret read (a session's configuration is bounded by the feature; this bounds the parse) */
const MAX_LENGTH = 64 * 1024;

export interface OpenedClientSecret {
  /** the digest of the inference key it was minted from */
  digest: string;
  /** what the minting feature put in it */
  payload: Record<string, unknown>;
  /** unix seconds */
  expiresAt: number;
}

export const isClientSecret = (token: string) => token.startsWith(CLIENT_SECRET_PREFIX);

export class ClientSecrets {
  private readonly key: Uint8Array;

  constructor(pepper: Buffer | string) {
    this.key = new Uint8Array(hkdfSync('sha256', pepper, Buffer.alloc(0), 'portico client secrets v1', 32));
  }

  async mint(digest: string, payload: Record<string, unknown>, seconds: number, now = Date.now()): Promise<{ value: string; expiresAt: number }> {
    const iat = Math.floor(now / 1000);
    const expiresAt = iat + seconds;
    const jwe = await new EncryptJWT({ dig: digest, p: payload })
      .setProtectedHeader({ alg: 'dir', enc: 'A256GCM' })
      .setIssuedAt(iat)
      .setExpirationTime(expiresAt)
      .encrypt(this.key);
    return { value: CLIENT_SECRET_PREFIX + jwe, expiresAt };
  }

  /** The client secret's contents; 401 `invalid_api_key` when it is not one of ours, or `client_secret_expired`. */
  async open(token: string, now = Date.now()): Promise<OpenedClientSecret> {
    if (!isClientSecret(token) || token.length > MAX_LENGTH) throw new AppError('invalid_api_key');
    let claims: Record<string, unknown>;
    try {
      // the claims' times against `now`, with no tolerance (jose refuses a tolerance that is not a finite number)
      ({ payload: claims } = await jwtDecrypt(token.slice(CLIENT_SECRET_PREFIX.length), this.key, { currentDate: new Date(now) }));
    } catch (e) {
      // decrypted (so ours) but past its expiry
      if (e instanceof errors.JWTExpired) throw new AppError('client_secret_expired');
      throw new AppError('invalid_api_key');
    }
    const { dig, p, exp } = claims;
    if (typeof dig !== 'string' || typeof exp !== 'number' || !p || typeof p !== 'object' || Array.isArray(p)) throw new AppError('invalid_api_key');
    if (exp * 1000 <= now) throw new AppError('client_secret_expired');
    return { digest: dig, payload: p as Record<string, unknown>, expiresAt: exp };
  }
}
