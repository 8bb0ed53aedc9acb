import { DEFAULT_ORG, type UserPrincipal } from '../../platform/auth/jwt.js';
import type { KeyRow, KeyStore } from './store.js';

/**
 * Keeps the record of who administers which organization (for org keys) in line with the tokens Portico sees.
 * An organization key works, and is managed, only while its maker is an administrator of the organization; the
 * identity provider says who is, in each token, so each verified token updates the record (at most once per
 * `recheckMs` per token and instance). A token older than the one recorded changes nothing.
 */
export class OrgRoles {
  private readonly seen = new Map<string, { admins: string; at: number }>();

  constructor(
    private readonly store: KeyStore,
    private readonly adminRole: string,
    /** told about every key whose maker's role changed, so cached verifications are dropped (here and elsewhere) */
    private readonly changed: (row: KeyRow) => void,
    private readonly recheckMs = 30_000,
    private readonly maxUsers = 100_000,
  ) {}

  async sync(user: UserPrincipal): Promise<void> {
    const adminOrgs = Object.keys(user.orgRoles)
      .filter((o) => o !== DEFAULT_ORG && user.orgRoles[o] === this.adminRole)
      .sort();
    const t = Date.now();
    const issuedAt = Math.min(user.issuedAt ?? Math.floor(t / 1000), Math.floor(t / 1000));
    // the same token again (same roles, same iat) changes nothing it did not change the first time
    const admins = JSON.stringify([issuedAt, adminOrgs]);
    const last = this.seen.get(user.userId);
    if (last && last.admins === admins && t - last.at < this.recheckMs) return;
    const orgs = await this.store.syncAdmin(user.userId, adminOrgs, issuedAt);
    if (orgs.length > 0) for (const row of await this.store.keysOf(user.userId, orgs)) this.changed(row);
    this.seen.delete(user.userId);
    if (this.seen.size >= this.maxUsers) this.seen.delete(this.seen.keys().next().value as string);
    this.seen.set(user.userId, { admins, at: t });
  }
}
