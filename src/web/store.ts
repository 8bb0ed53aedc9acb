import { sql, type Db } from '../platform/db/index.js';
import type { WebSessionTable } from '../platform/db/schema.js';

export type SessionRow = WebSessionTable;

/** SQL of the web page's sessions and used sign-in links. Nothing else writes these tables. */
export class WebSessionStore {
  constructor(private readonly db: Db) {}

  async insert(row: SessionRow): Promise<void> {
    await this.db
      .insertInto('web_sessions')
      .values({ ...row, org_roles: sql`${JSON.stringify(row.org_roles)}::jsonb` })
      .execute();
  }

  get(id: string): Promise<SessionRow | undefined> {
    return this.db.selectFrom('web_sessions').selectAll().where('id', '=', id).executeTakeFirst();
  }

  async delete(id: string): Promise<void> {
    await this.db.deleteFrom('web_sessions').where('id', '=', id).execute();
  }

  /** Records a link as used; false when it already was (the primary key decides, so two instances agree). */
  async useLink(jti: string, userId: string, usedAt: number, expiresAt: number): Promise<boolean> {
    const r = await this.db
      .insertInto('web_sign_in_links')
      .values({ jti, user_id: userId, used_at: usedAt, expires_at: expiresAt })
      .onConflict((oc) => oc.column('jti').doNothing())
      .returning('jti')
      .executeTakeFirst();
    return r !== undefined;
  }

  /** Drops sessions and used links past their expiry (a used link that expired cannot be redeemed anyway). */
  async sweep(now: number): Promise<void> {
    await this.db.deleteFrom('web_sessions').where('expires_at', '<=', now).execute();
    await this.db
      .deleteFrom('web_sign_in_links')
      .where('expires_at', '<=', now - 60)
      .execute();
  }
}
