import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { UserPrincipal } from '../platform/auth/jwt.js';
import { AppError } from '../platform/errors.js';
import type { WebSessionStore } from './store.js';
import { readSignInLink } from './link.js';

export interface Session {
  principal: UserPrincipal;
  csrfToken: string;
  method: 'link' | 'oidc';
  createdAt: number;
  expiresAt: number;
}

const now = () => Math.floor(Date.now() / 1000);
const digest = (value: string) => createHash('sha256').update(value).digest('base64url');
/** a session cookie's value: 32 random bytes, base64url */
const VALUE_RE = /^[A-Za-z0-9_-]{43}$/;
const SWEEP_EVERY_S = 600;

/**
 * Browser sessions of the web page. The cookie holds an opaque random value; the database keeps only its SHA-256
 * (someone who reads the table cannot sign in with it), the principal as at sign-in, a CSRF token and the expiry.
 * Sessions last SESSION_TTL_MS from sign-in; signing out deletes the row, so every instance refuses it at once.
 */
export class SessionService {
  private lastSweep = 0;

  constructor(
    private readonly store: WebSessionStore,
    private readonly pepper: Buffer,
    private readonly ttlSeconds: number,
    /** the roles an operator set, read at every use of a session (so a change applies at once) */
    private readonly orgRoles?: (user: UserPrincipal) => Promise<UserPrincipal>,
  ) {}

  /** Starts a session; returns the cookie's value (shown to nobody else) and the session. */
  async create(principal: UserPrincipal, method: Session['method']): Promise<{ value: string; session: Session }> {
    const t = now();
    if (t - this.lastSweep > SWEEP_EVERY_S) {
      this.lastSweep = t;
      await this.store.sweep(t);
    }
    const value = randomBytes(32).toString('base64url');
    const session: Session = { principal, csrfToken: randomBytes(24).toString('base64url'), method, createdAt: t, expiresAt: t + this.ttlSeconds };
    await this.store.insert({
      id: digest(value),
      user_id: principal.userId,
      org_roles: principal.orgRoles,
      operator: principal.operator === true,
      csrf_token: session.csrfToken,
      method,
      created_at: t,
      expires_at: session.expiresAt,
    });
    return { value, session };
  }

  /** The live session of a cookie value, or undefined (unknown, signed out or expired). */
  async get(value: string): Promise<Session | undefined> {
    if (!VALUE_RE.test(value)) return undefined;
    const row = await this.store.get(digest(value));
    if (!row) return undefined;
    if (row.expires_at <= now()) {
      await this.store.delete(row.id);
      return undefined;
    }
    const roles = typeof row.org_roles === 'string' ? JSON.parse(row.org_roles) : row.org_roles;
    const signedIn: UserPrincipal = {
      userId: row.user_id,
      orgRoles: roles && typeof roles === 'object' ? (roles as Record<string, string>) : {},
      ...(row.operator === true ? { operator: true as const } : {}),
    };
    return {
      principal: this.orgRoles ? await this.orgRoles(signedIn) : signedIn,
      csrfToken: row.csrf_token,
      method: row.method === 'oidc' ? 'oidc' : 'link',
      createdAt: row.created_at,
      expiresAt: row.expires_at,
    };
  }

  async destroy(value: string): Promise<void> {
    if (VALUE_RE.test(value)) await this.store.delete(digest(value));
  }

  /** Redeems a sign-in link: verifies it, records it as used (once only), starts a session. */
  async redeemLink(token: string): Promise<{ value: string; session: Session }> {
    const link = await readSignInLink(this.pepper, token);
    if (!(await this.store.useLink(link.jti, link.userId, now(), link.expiresAt))) throw new AppError('sign_in_link_used');
    return this.create({ userId: link.userId, orgRoles: link.orgRoles }, 'link');
  }
}

/** Constant-time comparison of a sent CSRF token with the session's. */
export function csrfMatches(sent: unknown, expected: string): boolean {
  if (typeof sent !== 'string' || sent.length !== expected.length) return false;
  return timingSafeEqual(Buffer.from(sent), Buffer.from(expected));
}
