import { sql } from 'kysely';
import type { Db } from '../../platform/db/index.js';
import type { ApiKeyTable } from '../../platform/db/schema.js';
import type { KeyKind } from '../../platform/auth/api-key-format.js';

export type KeyRow = ApiKeyTable;

/** A key row as the verifier reads it: with whether its maker is an administrator of its organization now. */
export type VerifiedKeyRow = KeyRow & { owner_is_admin: boolean | null };

const DEFAULT_ORG = 'default';

export interface ListFilter {
  kind: KeyKind;
  userId: string;
  orgId?: string;
  status?: KeyRow['status'];
  /** a piece of the name, description, id or display form (case-insensitive) */
  search?: string;
  limit: number;
  offset: number;
}

/** SQL for API keys. Nothing outside this file writes the api_keys table. */
export class KeyStore {
  constructor(private readonly db: Db) {}

  /**
   * Inserts a key unless the owner already has `limit` usable active keys of this kind in the org.
   * The count and the insert run in one transaction under an advisory lock on (kind, user, org), so
   * concurrent creates cannot overshoot the limit. Returns false when the limit is reached. An org key also records
   * its maker as an administrator of the org as of `adminSince` (the iat of the token that made it).
   */
  async insertWithinLimit(row: KeyRow, limit: number, now: number, adminSince = now): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      await this.lockOwner(tx as unknown as Db, row.kind, row.user_id, row.org_id);
      const active = await this.countActive(tx as unknown as Db, row.kind, row.user_id, row.org_id, now);
      if (active >= limit) return false;
      await tx.insertInto('api_keys').values(row).execute();
      if (row.org_id !== DEFAULT_ORG) await this.markAdmin(tx as unknown as Db, row.org_id, row.user_id, adminSince);
      return true;
    });
  }

  /** Sets a key active again if it is revoked and the active limit allows; returns the outcome. */
  async restoreWithinLimit(kind: KeyKind, userId: string, id: string, limit: number, now: number): Promise<'not_found' | 'not_revoked' | 'limit' | KeyRow> {
    return this.db.transaction().execute(async (tx) => {
      const t = tx as unknown as Db;
      const row = await this.findOwned(t, kind, userId, id);
      if (!row) return 'not_found';
      await this.lockOwner(t, kind, userId, row.org_id);
      const fresh = await this.findOwned(t, kind, userId, id);
      if (!fresh) return 'not_found';
      if (fresh.status !== 'revoked') return 'not_revoked';
      if ((await this.countActive(t, kind, userId, fresh.org_id, now)) >= limit) return 'limit';
      const updated = await t.updateTable('api_keys').set({ status: 'active', updated_at: now }).where('id', '=', id).returningAll().executeTakeFirstOrThrow();
      return updated;
    });
  }

  private async lockOwner(db: Db, kind: string, userId: string, orgId: string) {
    await sql`select pg_advisory_xact_lock(hashtextextended(${JSON.stringify([kind, userId, orgId])}, 0))`.execute(db);
  }

  private async countActive(db: Db, kind: KeyKind, userId: string, orgId: string, now: number): Promise<number> {
    const r = await db
      .selectFrom('api_keys')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('kind', '=', kind)
      .where('user_id', '=', userId)
      .where('org_id', '=', orgId)
      .where('status', '=', 'active')
      .where('deleted_at', 'is', null)
      // an expired key no longer works, so it does not hold a place under the limit
      .where((eb) => eb.or([eb('expires_at', '=', 0), eb('expires_at', '>', now)]))
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  /** The user's usable active keys of one kind per organization (what the active limit counts). */
  async activeCounts(kind: KeyKind, userId: string, now: number): Promise<Record<string, number>> {
    const rows = await this.db
      .selectFrom('api_keys')
      .select(['org_id', (eb) => eb.fn.countAll<number>().as('n')])
      .where('kind', '=', kind)
      .where('user_id', '=', userId)
      .where('status', '=', 'active')
      .where('deleted_at', 'is', null)
      .where((eb) => eb.or([eb('expires_at', '=', 0), eb('expires_at', '>', now)]))
      .groupBy('org_id')
      .execute();
    return Object.fromEntries(rows.map((r) => [r.org_id, Number(r.n)]));
  }

  private findOwned(db: Db, kind: KeyKind, userId: string, id: string): Promise<KeyRow | undefined> {
    return db.selectFrom('api_keys').selectAll().where('id', '=', id).where('kind', '=', kind).where('user_id', '=', userId).where('deleted_at', 'is', null).executeTakeFirst();
  }

  getOwned(kind: KeyKind, userId: string, id: string): Promise<KeyRow | undefined> {
    return this.findOwned(this.db, kind, userId, id);
  }

  /** A not deleted key of this kind by id, whoever made it (the service decides who may manage it). */
  getById(kind: KeyKind, id: string): Promise<KeyRow | undefined> {
    return this.db.selectFrom('api_keys').selectAll().where('id', '=', id).where('kind', '=', kind).where('deleted_at', 'is', null).executeTakeFirst();
  }

  /**
   * The keys a user manages: their personal keys, and every key of the organizations in `adminOrgs` (whoever
   * made it); `orgId` narrows to one of those scopes.
   */
  async list(f: ListFilter & { adminOrgs: string[] }): Promise<{ rows: KeyRow[]; total: number }> {
    let q = this.db.selectFrom('api_keys').where('kind', '=', f.kind).where('deleted_at', 'is', null);
    const orgs = f.adminOrgs.filter((o) => o !== DEFAULT_ORG);
    q = q.where((eb) =>
      orgs.length > 0
        ? eb.or([eb.and([eb('org_id', '=', DEFAULT_ORG), eb('user_id', '=', f.userId)]), eb('org_id', 'in', orgs)])
        : eb.and([eb('org_id', '=', DEFAULT_ORG), eb('user_id', '=', f.userId)]),
    );
    if (f.orgId !== undefined) q = q.where('org_id', '=', f.orgId);
    if (f.status !== undefined) q = q.where('status', '=', f.status);
    if (f.search !== undefined && f.search !== '') {
      // LIKE's own wildcards in the search text match themselves
      const pattern = `%${f.search.replace(/[\\%_]/g, (c) => '\\' + c)}%`;
      q = q.where((eb) =>
        eb.or([
          eb('name', 'ilike', pattern),
          eb('description', 'ilike', pattern),
          eb('id', 'ilike', pattern),
          eb(sql<string>`display_prefix || '...' || display_suffix`, 'ilike', pattern),
        ]),
      );
    }
    const [rows, count] = await Promise.all([
      q
        .selectAll()
        .orderBy('created_at', 'desc')
        .orderBy(sql`seq`, 'desc')
        .limit(f.limit)
        .offset(f.offset)
        .execute(),
      q.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow(),
    ]);
    return { rows, total: Number(count.n) };
  }

  /** Applies `patch` to an owned, not deleted key; returns the updated row. */
  async updateOwned(
    kind: KeyKind,
    userId: string,
    id: string,
    patch: Partial<Pick<KeyRow, 'name' | 'description' | 'status' | 'deleted_at' | 'updated_at' | 'max_concurrency'>>,
    onlyFromStatus?: KeyRow['status'][],
  ): Promise<KeyRow | undefined> {
    let q = this.db.updateTable('api_keys').set(patch).where('id', '=', id).where('kind', '=', kind).where('user_id', '=', userId).where('deleted_at', 'is', null);
    if (onlyFromStatus) q = q.where('status', 'in', onlyFromStatus);
    return q.returningAll().executeTakeFirst();
  }

  /** Operator enable: disabled -> active, under the owner's lock and within the active limit. */
  async enableWithinLimit(kind: KeyKind, id: string, limit: number, now: number): Promise<'not_found' | 'not_disabled' | 'limit' | KeyRow> {
    return this.db.transaction().execute(async (tx) => {
      const t = tx as unknown as Db;
      const row = await t.selectFrom('api_keys').selectAll().where('id', '=', id).where('kind', '=', kind).where('deleted_at', 'is', null).executeTakeFirst();
      if (!row) return 'not_found';
      await this.lockOwner(t, kind, row.user_id, row.org_id);
      const fresh = await this.findOwned(t, kind, row.user_id, id);
      if (!fresh) return 'not_found';
      if (fresh.status !== 'disabled') return 'not_disabled';
      if ((await this.countActive(t, kind, row.user_id, row.org_id, now)) >= limit) return 'limit';
      return t.updateTable('api_keys').set({ status: 'active', updated_at: now }).where('id', '=', id).returningAll().executeTakeFirstOrThrow();
    });
  }

  /** Operator change of status (the CLI's disable); any owner. */
  async setStatusById(id: string, status: KeyRow['status'], now: number): Promise<KeyRow | undefined> {
    return this.db.updateTable('api_keys').set({ status, updated_at: now }).where('id', '=', id).where('deleted_at', 'is', null).returningAll().executeTakeFirst();
  }

  /** Operator change of a key's rate limits (null = the configured default). */
  async setLimitsById(id: string, rpm: number | null, tpm: number | null, now: number): Promise<KeyRow | undefined> {
    return this.db
      .updateTable('api_keys')
      .set({ rpm_limit: rpm, tpm_limit: tpm, updated_at: now })
      .where('id', '=', id)
      .where('deleted_at', 'is', null)
      .returningAll()
      .executeTakeFirst();
  }

  /**
   * The digests of the keys not deleted, newest first, at most `limit` (the key verifier's set of existing keys,
   * read once at start), with their seq.
   */
  async knownDigests(limit: number): Promise<Array<{ digest: string; seq: number }>> {
    const rows = await this.db
      .selectFrom('api_keys')
      .select(['digest', sql<string>`seq`.as('seq')])
      .where('deleted_at', 'is', null)
      .orderBy(sql`seq`, 'desc')
      .limit(limit)
      .execute();
    return rows.map((r) => ({ digest: r.digest, seq: Number(r.seq) }));
  }

  /** The digests of the keys whose seq is above `seq` (made since), in seq order, at most `limit` (index api_keys_seq). */
  async digestsAfter(seq: number, limit: number): Promise<Array<{ digest: string; seq: number }>> {
    const rows = await this.db
      .selectFrom('api_keys')
      .select(['digest', sql<string>`seq`.as('seq')])
      .where(sql<boolean>`seq > ${seq}`)
      .orderBy(sql`seq`)
      .limit(limit)
      .execute();
    return rows.map((r) => ({ digest: r.digest, seq: Number(r.seq) }));
  }

  /** Operator change of an inference key's concurrency (null = the configured default, 0 = unlimited). */
  async setConcurrencyById(id: string, max: number | null, now: number): Promise<KeyRow | undefined> {
    return this.db
      .updateTable('api_keys')
      .set({ max_concurrency: max, updated_at: now })
      .where('id', '=', id)
      .where('kind', '=', 'inference')
      .where('deleted_at', 'is', null)
      .returningAll()
      .executeTakeFirst();
  }

  /** The key with this digest, and whether its maker is an administrator of its organization now (null: no record). */
  findByDigest(digest: string): Promise<VerifiedKeyRow | undefined> {
    return this.db
      .selectFrom('api_keys')
      .leftJoin('org_admins', (j) => j.onRef('org_admins.org_id', '=', 'api_keys.org_id').onRef('org_admins.user_id', '=', 'api_keys.user_id'))
      .selectAll('api_keys')
      .select('org_admins.is_admin as owner_is_admin')
      .where('api_keys.digest', '=', digest)
      .executeTakeFirst();
  }

  /** Records that the user is an administrator of the organization (they just made a key there as one). */
  async markAdmin(db: Db, orgId: string, userId: string, at: number) {
    await db
      .insertInto('org_admins')
      .values({ org_id: orgId, user_id: userId, is_admin: true, updated_at: at })
      .onConflict((oc) => oc.columns(['org_id', 'user_id']).doUpdateSet({ is_admin: true, updated_at: sql`greatest(org_admins.updated_at, excluded.updated_at)` }))
      .execute();
  }

  /**
   * Brings the user's recorded administrator roles in line with a token issued at `issuedAt` that makes them an
   * administrator of exactly `adminOrgs`. Only organizations the user made keys in are recorded; a token older
   * than the last one recorded changes nothing. Returns the organizations whose record changed.
   */
  async syncAdmin(userId: string, adminOrgs: string[], issuedAt: number): Promise<string[]> {
    const lost = this.db
      .updateTable('org_admins')
      .set({ is_admin: false, updated_at: issuedAt })
      .where('user_id', '=', userId)
      .where('is_admin', '=', true)
      .where('updated_at', '<=', issuedAt);
    const demoted = await (adminOrgs.length > 0 ? lost.where('org_id', 'not in', adminOrgs) : lost).returning('org_id').execute();
    const promoted =
      adminOrgs.length === 0
        ? []
        : await this.db
            .updateTable('org_admins')
            .set({ is_admin: true, updated_at: issuedAt })
            .where('user_id', '=', userId)
            .where('is_admin', '=', false)
            .where('org_id', 'in', adminOrgs)
            .where('updated_at', '<=', issuedAt)
            .returning('org_id')
            .execute();
    return [...demoted, ...promoted].map((r) => r.org_id);
  }

  /** The user's keys (both kinds) in these organizations, deleted ones included (a cached verification may be dropped). */
  keysOf(userId: string, orgIds: string[]): Promise<KeyRow[]> {
    if (orgIds.length === 0) return Promise.resolve([]);
    return this.db.selectFrom('api_keys').selectAll().where('user_id', '=', userId).where('org_id', 'in', orgIds).execute();
  }

  async touchLastUsed(id: string, at: number): Promise<void> {
    await this.db.updateTable('api_keys').set({ last_used_at: at }).where('id', '=', id).where('last_used_at', '<', at).execute();
  }
}
