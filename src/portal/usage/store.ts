import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Db } from '../../platform/db/index.js';
import type { UsageTable } from '../../platform/db/schema.js';

export type UsageInsert = Omit<UsageTable, 'id'>;

export interface UsageScope {
  orgId: string;
  /** undefined: every user of the org (org-level access) */
  userId?: string;
  /** only this key's records */
  keyId?: string;
}

export type GroupBy = 'day' | 'model' | 'key' | 'operation';

export interface UsageRow {
  date?: string;
  model?: string;
  key_id?: string;
  /** with `key`: the key's name now (null for an id no key has: records written by tests or tools) */
  key_name?: string | null;
  /** with `key`: whether the key has been deleted */
  key_deleted?: boolean;
  operation?: string;
  requests: number;
  input_tokens: number;
  output_tokens: number;
  cached_tokens: number;
  cache_write_tokens: number;
  characters: number;
  audio_seconds: number;
  output_audio_seconds: number;
  cost_micros: number;
}

/** what every usage report sums over its records */
export type UsageSums = Pick<
  UsageRow,
  'requests' | 'input_tokens' | 'output_tokens' | 'cached_tokens' | 'cache_write_tokens' | 'characters' | 'audio_seconds' | 'output_audio_seconds' | 'cost_micros'
>;

/** the selections of an aggregate over usage_records that give UsageSums (the user's report and the operator's) */
export function usageSums() {
  return [
    sql<number>`count(*)`.as('requests'),
    sql<number>`coalesce(sum(input_tokens), 0)`.as('input_tokens'),
    sql<number>`coalesce(sum(output_tokens), 0)`.as('output_tokens'),
    sql<number>`coalesce(sum(cached_tokens), 0)`.as('cached_tokens'),
    sql<number>`coalesce(sum(cache_write_tokens), 0)`.as('cache_write_tokens'),
    sql<number>`coalesce(sum(characters), 0)`.as('characters'),
    sql<number>`coalesce(sum(audio_seconds), 0)`.as('audio_seconds'),
    sql<number>`coalesce(sum(output_audio_seconds), 0)`.as('output_audio_seconds'),
    sql<number>`coalesce(sum(cost_micros), 0)`.as('cost_micros'),
  ] as const;
}

/** those sums read back from a row (the drivers give bigint sums as strings) */
export function readSums(r: Record<string, unknown>): UsageSums {
  const n = (v: unknown) => Number(v ?? 0);
  return {
    requests: n(r.requests),
    input_tokens: n(r.input_tokens),
    output_tokens: n(r.output_tokens),
    cached_tokens: n(r.cached_tokens),
    cache_write_tokens: n(r.cache_write_tokens),
    characters: n(r.characters),
    audio_seconds: n(r.audio_seconds),
    output_audio_seconds: n(r.output_audio_seconds),
    cost_micros: n(r.cost_micros),
  };
}

/** the columns a usage record is inserted with (every one but the generated id) */
const INSERT_COLUMNS = [
  'record_id',
  'request_id',
  'key_id',
  'user_id',
  'org_id',
  'model',
  'operation',
  'input_tokens',
  'output_tokens',
  'cached_tokens',
  'cache_write_tokens',
  'characters',
  'audio_seconds',
  'output_audio_seconds',
  'cost_micros',
  'created_at',
  'spend_epoch',
  'deployment',
].join(', ');

/** SQL for the usage ledger and credit grants. */
export class UsageStore {
  constructor(private readonly db: Db) {}

  /**
   * One INSERT for a batch, its rows as one JSON parameter (json_populate_recordset): the statement's text is the
   * same for every batch and one string crosses to the database (PGlite's thread, or pg's socket), where a VALUES
   * list would be compiled anew for each batch size with sixteen parameters a row.
   *
   * A record id is new unless the journal is replayed after a crash (its records may have reached the ledger
   * already): the batch is inserted plainly first, and only when a record id is already there (23505) again
   * with ON CONFLICT DO NOTHING. The conflict check costs PGlite about a third of a row's insert (docs/performance.md).
   */
  async insert(rows: UsageInsert[]): Promise<void> {
    if (rows.length === 0) return;
    const json = JSON.stringify(rows);
    try {
      await sql`INSERT INTO usage_records (${sql.raw(INSERT_COLUMNS)})
        SELECT ${sql.raw(INSERT_COLUMNS)} FROM json_populate_recordset(NULL::usage_records, ${json}::json)`.execute(this.db);
    } catch (e) {
      if ((e as { code?: string }).code !== '23505') throw e;
      await sql`INSERT INTO usage_records (${sql.raw(INSERT_COLUMNS)})
        SELECT ${sql.raw(INSERT_COLUMNS)} FROM json_populate_recordset(NULL::usage_records, ${json}::json)
        ON CONFLICT (record_id) DO NOTHING`.execute(this.db);
    }
  }

  async aggregate(scope: UsageScope, from: number, to: number, groupBy: GroupBy[]): Promise<UsageRow[]> {
    const cols = {
      day: sql<string>`to_char(to_timestamp(created_at) at time zone 'UTC', 'YYYY-MM-DD')`.as('date'),
      model: sql<string>`model`.as('model'),
      key: sql<string>`key_id`.as('key_id'),
      operation: sql<string>`operation`.as('operation'),
    };
    const names = { day: 'date', model: 'model', key: 'key_id', operation: 'operation' } as const;
    let q = this.db.selectFrom('usage_records').where('org_id', '=', scope.orgId).where('created_at', '>=', from).where('created_at', '<', to);
    if (scope.userId !== undefined) q = q.where('user_id', '=', scope.userId);
    if (scope.keyId !== undefined) q = q.where('key_id', '=', scope.keyId);
    let s = q.select(usageSums());
    for (const g of groupBy) s = s.select(cols[g]);
    // a key's name as it is now, for people reading the report (the ledger keeps the id; a deleted key keeps its row)
    if (groupBy.includes('key'))
      s = s.select([
        sql<string | null>`(select k.name from api_keys k where k.id = usage_records.key_id)`.as('key_name'),
        sql<boolean>`coalesce((select k.deleted_at is not null from api_keys k where k.id = usage_records.key_id), false)`.as('key_deleted'),
      ]);
    for (const g of groupBy) s = s.groupBy(sql.ref(names[g]) as any).orderBy(sql.ref(names[g]) as any);
    const rows = await s.execute();
    return rows.map((r: any) => ({ ...r, ...readSums(r) }));
  }

  /** A random id of this ledger, made once and kept in its database (settings `ledger_id`). */
  async ledgerId(): Promise<string> {
    await this.db
      .insertInto('settings')
      .values({ key: 'ledger_id', value: randomUUID() })
      .onConflict((oc) => oc.column('key').doNothing())
      .execute();
    const row = await this.db.selectFrom('settings').select('value').where('key', '=', 'ledger_id').executeTakeFirstOrThrow();
    return row.value;
  }

  async grant(userId: string, orgId: string, amountMicros: number, note: string, at: number): Promise<void> {
    await this.db.insertInto('credit_grants').values({ user_id: userId, org_id: orgId, amount_micros: amountMicros, note, created_at: at }).execute();
  }

  /**
   * Credits granted to the scope and micro-credits its records cost. With `exceptEpoch`, records charged under
   * that running-spend epoch are left out (the running spend counts them; see BudgetGuard).
   */
  async balance(scope: UsageScope, exceptEpoch?: string): Promise<{ granted: number; used: number }> {
    let g = this.db
      .selectFrom('credit_grants')
      .select(sql<number>`coalesce(sum(amount_micros), 0)`.as('n'))
      .where('org_id', '=', scope.orgId);
    let u = this.db
      .selectFrom('usage_records')
      .select(sql<number>`coalesce(sum(cost_micros), 0)`.as('n'))
      .where('org_id', '=', scope.orgId);
    if (scope.userId !== undefined) {
      g = g.where('user_id', '=', scope.userId);
      u = u.where('user_id', '=', scope.userId);
    } else {
      g = g.where('user_id', '=', '');
    }
    if (exceptEpoch !== undefined) u = u.where((eb) => eb.or([eb('spend_epoch', 'is', null), eb('spend_epoch', '!=', exceptEpoch)]));
    const [gr, ur] = await Promise.all([g.executeTakeFirstOrThrow(), u.executeTakeFirstOrThrow()]);
    return { granted: Number(gr.n), used: Number(ur.n) };
  }
}
