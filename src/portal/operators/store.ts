import type { Db } from '../../platform/db/index.js';
import type { OperatorTable } from '../../platform/db/schema.js';

export type OperatorRow = OperatorTable;

/** the settings row that says the first user of the installation was given the operator role (or that it was not fresh) */
const FIRST = 'first_operator';

/** SQL for the operators recorded in the database. Nothing outside this file writes the operators table. */
export class OperatorStore {
  constructor(private readonly db: Db) {}

  get(userId: string): Promise<OperatorRow | undefined> {
    return this.db.selectFrom('operators').selectAll().where('user_id', '=', userId).executeTakeFirst();
  }

  async list(): Promise<OperatorRow[]> {
    const rows = await this.db.selectFrom('operators').selectAll().orderBy('created_at').orderBy('user_id').execute();
    return rows.map((r) => ({ ...r, created_at: Number(r.created_at) }));
  }

  /** Records an operator; undefined when they already are one (the row is left as it is). */
  add(row: OperatorRow): Promise<OperatorRow | undefined> {
    return this.db
      .insertInto('operators')
      .values(row)
      .onConflict((oc) => oc.column('user_id').doNothing())
      .returningAll()
      .executeTakeFirst();
  }

  /** Removes an operator (only rows of these sources, when given); the row removed, or undefined. */
  remove(userId: string, sources?: OperatorRow['source'][]): Promise<OperatorRow | undefined> {
    let q = this.db.deleteFrom('operators').where('user_id', '=', userId);
    if (sources) q = q.where('source', 'in', sources);
    return q.returningAll().executeTakeFirst();
  }

  /** whether the first user was settled (given the role, or the installation was not fresh) */
  async firstSettled(): Promise<boolean> {
    return (await this.db.selectFrom('settings').select('key').where('key', '=', FIRST).executeTakeFirst()) !== undefined;
  }

  /**
   * Makes `userId` an operator if no one was made the first one yet: the settings row is the one winner among
   * every instance and request. Returns whether this user was.
   */
  async claimFirst(userId: string, at: number): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      const won = await tx
        .insertInto('settings')
        .values({ key: FIRST, value: userId })
        .onConflict((oc) => oc.column('key').doNothing())
        .returning('key')
        .executeTakeFirst();
      if (!won) return false;
      await tx
        .insertInto('operators')
        .values({ user_id: userId, source: 'first_user', added_by: '', created_at: at })
        .onConflict((oc) => oc.column('user_id').doNothing())
        .execute();
      return true;
    });
  }
}
