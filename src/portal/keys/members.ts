import { sql } from 'kysely';
import type { Db } from '../../platform/db/index.js';
import { DEFAULT_ORG, type UserPrincipal } from '../../platform/auth/jwt.js';
import type { KeyRow, KeyStore } from './store.js';

export type MemberRole = 'admin' | 'member';

/**
 * The organization roles an operator sets where roles are Portico's own (the embedded default: Portico signs its
 * tokens and sign-in links, no identity provider). A role set here wins over the one a sign-in link or token
 * carries for that organization, and applies at once: every session and token of the user is read through
 * `apply`, and the record of who administers the organization (org_admins: an organization key works, and is
 * managed, only while its maker is an administrator) is changed with it, dropping the cached verifications of
 * the user's keys there. Organizations the operator set no role in keep the role the link or token carries.
 */
export class OrgMembers {
  constructor(
    private readonly db: Db,
    private readonly keys: KeyStore,
    /** the role name that makes an administrator (JWT_ADMIN_ROLE) */
    private readonly adminRole: string,
    /** told about every key whose maker's role changed, so cached verifications are dropped (here and elsewhere) */
    private readonly changed: (row: KeyRow) => void,
  ) {}

  async role(orgId: string, userId: string): Promise<MemberRole | undefined> {
    const row = await this.db.selectFrom('org_members').select('role').where('org_id', '=', orgId).where('user_id', '=', userId).executeTakeFirst();
    return row?.role;
  }

  async set(orgId: string, userId: string, role: MemberRole, by: string): Promise<void> {
    const at = Math.floor(Date.now() / 1000);
    await this.db.transaction().execute(async (tx) => {
      await tx
        .insertInto('org_members')
        .values({ org_id: orgId, user_id: userId, role, updated_by: by, updated_at: at })
        .onConflict((oc) => oc.columns(['org_id', 'user_id']).doUpdateSet({ role, updated_by: by, updated_at: at }))
        .execute();
      await tx
        .insertInto('org_admins')
        .values({ org_id: orgId, user_id: userId, is_admin: role === 'admin', updated_at: at })
        .onConflict((oc) => oc.columns(['org_id', 'user_id']).doUpdateSet({ is_admin: role === 'admin', updated_at: sql`greatest(org_admins.updated_at, excluded.updated_at)` }))
        .execute();
    });
    for (const row of await this.keys.keysOf(userId, [orgId])) this.changed(row);
  }

  /** the principal with the roles set here in place of those its link or token carries (the same object when none is set) */
  async apply(p: UserPrincipal): Promise<UserPrincipal> {
    const rows = await this.db.selectFrom('org_members').select(['org_id', 'role']).where('user_id', '=', p.userId).execute();
    if (rows.length === 0) return p;
    const orgRoles = { ...p.orgRoles };
    for (const r of rows) if (r.org_id !== DEFAULT_ORG) orgRoles[r.org_id] = r.role === 'admin' ? this.adminRole : 'member';
    return { ...p, orgRoles };
  }
}
