import { sql, type RawBuilder } from 'kysely';
import type { Db } from '../platform/db/index.js';
import type { ApiKeyTable } from '../platform/db/schema.js';
import { readSums, usageSums } from '../portal/usage/store.js';

const DEFAULT_ORG = 'default';

/** LIKE's own wildcards in a search text match themselves */
const likePattern = (text: string) => `%${text.replace(/[\\%_]/g, (c) => '\\' + c)}%`;

/** One user as the operators' list shows them; money in micro-credits. */
export interface UserSummaryRow {
  user_id: string;
  keys_total: number;
  keys_active: number;
  keys_disabled: number;
  granted_micros: number;
  used_micros: number;
  period_requests: number;
  period_tokens: number;
  period_cost_micros: number;
  last_activity: number;
  operator: boolean;
}

/** One organization as the operators' list shows it; money in micro-credits. */
export interface OrgSummaryRow {
  org_id: string;
  members: number;
  admins: number;
  keys_total: number;
  keys_active: number;
  keys_disabled: number;
  granted_micros: number;
  used_micros: number;
  period_requests: number;
  period_tokens: number;
  period_cost_micros: number;
  last_activity: number;
}

export type AdminGroupBy = 'day' | 'model' | 'key' | 'operation' | 'user' | 'org' | 'deployment';

export interface LedgerFilter {
  from: number;
  to: number;
  userId?: string;
  orgId?: string;
  keyId?: string;
  model?: string;
  deployment?: string;
  operation?: string;
  requestId?: string;
}

export interface RequestRow {
  id: string;
  request_id: string;
  created_at: number;
  user_id: string;
  org_id: string;
  key_id: string;
  model: string;
  deployment: string | null;
  operation: string;
  input_tokens: number;
  output_tokens: number;
  cached_tokens: number;
  characters: number;
  audio_seconds: number;
  cost_micros: number;
}

const n = (v: unknown) => Number(v ?? 0);

/**
 * The operators' reads across every user and organization: the keys, the credit grants, the usage ledger and the
 * operators, put together. It writes nothing (keys change through the key services, credits through the ledger).
 */
export class AdminStore {
  constructor(private readonly db: Db) {}

  /** every user Portico knows of: made a key, used one, was granted personal credits, or is a recorded operator */
  private readonly users = sql`(
    select user_id from api_keys where deleted_at is null
    union select user_id from usage_records
    union select user_id from credit_grants where user_id <> ''
    union select user_id from operators
  )`;

  async listUsers(f: { search?: string; userId?: string; limit: number; offset: number; periodStart: number }): Promise<{ rows: UserSummaryRow[]; total: number }> {
    const where: RawBuilder<unknown> = f.userId !== undefined ? sql`u.user_id = ${f.userId}` : f.search ? sql`u.user_id ilike ${likePattern(f.search)}` : sql`true`;
    const p = f.periodStart;
    const [rows, count] = await Promise.all([
      sql<Record<string, unknown>>`select u.user_id,
          (select count(*) from api_keys k where k.user_id = u.user_id and k.deleted_at is null) as keys_total,
          (select count(*) from api_keys k where k.user_id = u.user_id and k.deleted_at is null and k.status = 'active') as keys_active,
          (select count(*) from api_keys k where k.user_id = u.user_id and k.deleted_at is null and k.status = 'disabled') as keys_disabled,
          (select coalesce(sum(g.amount_micros), 0) from credit_grants g where g.user_id = u.user_id and g.org_id = ${DEFAULT_ORG}) as granted_micros,
          (select coalesce(sum(r.cost_micros), 0) from usage_records r where r.user_id = u.user_id and r.org_id = ${DEFAULT_ORG}) as used_micros,
          (select count(*) from usage_records r where r.user_id = u.user_id and r.created_at >= ${p}) as period_requests,
          (select coalesce(sum(r.input_tokens + r.output_tokens), 0) from usage_records r where r.user_id = u.user_id and r.created_at >= ${p}) as period_tokens,
          (select coalesce(sum(r.cost_micros), 0) from usage_records r where r.user_id = u.user_id and r.created_at >= ${p}) as period_cost_micros,
          greatest(
            (select coalesce(max(r.created_at), 0) from usage_records r where r.user_id = u.user_id),
            (select coalesce(max(k.last_used_at), 0) from api_keys k where k.user_id = u.user_id)
          ) as last_activity,
          exists (select 1 from operators o where o.user_id = u.user_id) as operator
        from ${this.users} u where ${where} order by u.user_id limit ${f.limit} offset ${f.offset}`.execute(this.db),
      sql<{ n: unknown }>`select count(*) as n from ${this.users} u where ${where}`.execute(this.db),
    ]);
    return {
      rows: rows.rows.map((r) => ({
        user_id: String(r.user_id),
        keys_total: n(r.keys_total),
        keys_active: n(r.keys_active),
        keys_disabled: n(r.keys_disabled),
        granted_micros: n(r.granted_micros),
        used_micros: n(r.used_micros),
        period_requests: n(r.period_requests),
        period_tokens: n(r.period_tokens),
        period_cost_micros: n(r.period_cost_micros),
        last_activity: n(r.last_activity),
        operator: r.operator === true || r.operator === 't',
      })),
      total: n(count.rows[0]?.n),
    };
  }

  /** every organization Portico knows of: keys made in it, usage, credits, recorded administrators */
  private readonly orgs = sql`(
    select org_id from api_keys where deleted_at is null and org_id <> ${DEFAULT_ORG}
    union select org_id from usage_records where org_id <> ${DEFAULT_ORG}
    union select org_id from credit_grants where org_id <> ${DEFAULT_ORG}
    union select org_id from org_admins
  )`;

  async listOrgs(f: { search?: string; orgId?: string; limit: number; offset: number; periodStart: number }): Promise<{ rows: OrgSummaryRow[]; total: number }> {
    const where: RawBuilder<unknown> = f.orgId !== undefined ? sql`o.org_id = ${f.orgId}` : f.search ? sql`o.org_id ilike ${likePattern(f.search)}` : sql`true`;
    const p = f.periodStart;
    const [rows, count] = await Promise.all([
      sql<Record<string, unknown>>`select o.org_id,
          (select count(*) from (select k.user_id from api_keys k where k.org_id = o.org_id and k.deleted_at is null
             union select r.user_id from usage_records r where r.org_id = o.org_id
             union select a.user_id from org_admins a where a.org_id = o.org_id) m) as members,
          (select count(*) from org_admins a where a.org_id = o.org_id and a.is_admin) as admins,
          (select count(*) from api_keys k where k.org_id = o.org_id and k.deleted_at is null) as keys_total,
          (select count(*) from api_keys k where k.org_id = o.org_id and k.deleted_at is null and k.status = 'active') as keys_active,
          (select count(*) from api_keys k where k.org_id = o.org_id and k.deleted_at is null and k.status = 'disabled') as keys_disabled,
          (select coalesce(sum(g.amount_micros), 0) from credit_grants g where g.org_id = o.org_id and g.user_id = '') as granted_micros,
          (select coalesce(sum(r.cost_micros), 0) from usage_records r where r.org_id = o.org_id) as used_micros,
          (select count(*) from usage_records r where r.org_id = o.org_id and r.created_at >= ${p}) as period_requests,
          (select coalesce(sum(r.input_tokens + r.output_tokens), 0) from usage_records r where r.org_id = o.org_id and r.created_at >= ${p}) as period_tokens,
          (select coalesce(sum(r.cost_micros), 0) from usage_records r where r.org_id = o.org_id and r.created_at >= ${p}) as period_cost_micros,
          greatest(
            (select coalesce(max(r.created_at), 0) from usage_records r where r.org_id = o.org_id),
            (select coalesce(max(k.last_used_at), 0) from api_keys k where k.org_id = o.org_id)
          ) as last_activity
        from ${this.orgs} o where ${where} order by o.org_id limit ${f.limit} offset ${f.offset}`.execute(this.db),
      sql<{ n: unknown }>`select count(*) as n from ${this.orgs} o where ${where}`.execute(this.db),
    ]);
    return {
      rows: rows.rows.map((r) => ({
        org_id: String(r.org_id),
        members: n(r.members),
        admins: n(r.admins),
        keys_total: n(r.keys_total),
        keys_active: n(r.keys_active),
        keys_disabled: n(r.keys_disabled),
        granted_micros: n(r.granted_micros),
        used_micros: n(r.used_micros),
        period_requests: n(r.period_requests),
        period_tokens: n(r.period_tokens),
        period_cost_micros: n(r.period_cost_micros),
        last_activity: n(r.last_activity),
      })),
      total: n(count.rows[0]?.n),
    };
  }

  /** a user's keys of both kinds (not deleted), newest first */
  keysOfUser(userId: string): Promise<ApiKeyTable[]> {
    return this.db
      .selectFrom('api_keys')
      .selectAll()
      .where('user_id', '=', userId)
      .where('deleted_at', 'is', null)
      .orderBy('created_at', 'desc')
      .orderBy(sql`seq`, 'desc')
      .execute();
  }

  /** the keys of an organization (not deleted), newest first */
  keysOfOrg(orgId: string): Promise<ApiKeyTable[]> {
    return this.db
      .selectFrom('api_keys')
      .selectAll()
      .where('org_id', '=', orgId)
      .where('deleted_at', 'is', null)
      .orderBy('created_at', 'desc')
      .orderBy(sql`seq`, 'desc')
      .execute();
  }

  /** a key by id, either kind (not deleted) */
  key(id: string): Promise<ApiKeyTable | undefined> {
    return this.db.selectFrom('api_keys').selectAll().where('id', '=', id).where('deleted_at', 'is', null).executeTakeFirst();
  }

  /** keys by id, either kind, deleted ones too (usage outlives its key) */
  keysById(ids: string[]): Promise<ApiKeyTable[]> {
    if (ids.length === 0) return Promise.resolve([]);
    return this.db.selectFrom('api_keys').selectAll().where('id', 'in', ids).execute();
  }

  /** an organization's members (as `listOrgs` counts them) with the role last recorded for each */
  async membersOfOrg(orgId: string): Promise<Array<{ user_id: string; role: 'admin' | 'member' }>> {
    const r = await sql<{ user_id: string; is_admin: unknown }>`select m.user_id, coalesce(a.is_admin, false) as is_admin from (
        select k.user_id from api_keys k where k.org_id = ${orgId} and k.deleted_at is null
        union select r.user_id from usage_records r where r.org_id = ${orgId}
        union select a.user_id from org_admins a where a.org_id = ${orgId}
      ) m left join org_admins a on a.org_id = ${orgId} and a.user_id = m.user_id order by m.user_id`.execute(this.db);
    return r.rows.map((x) => ({ user_id: x.user_id, role: x.is_admin === true || x.is_admin === 't' ? 'admin' : 'member' }));
  }

  /** the organizations a user is recorded an administrator of */
  async adminOrgsOf(userId: string): Promise<string[]> {
    const rows = await this.db.selectFrom('org_admins').select('org_id').where('user_id', '=', userId).where('is_admin', '=', true).orderBy('org_id').execute();
    return rows.map((r) => r.org_id);
  }

  private ledger(f: LedgerFilter) {
    let q = this.db.selectFrom('usage_records').where('created_at', '>=', f.from).where('created_at', '<', f.to);
    if (f.userId !== undefined) q = q.where('user_id', '=', f.userId);
    if (f.orgId !== undefined) q = q.where('org_id', '=', f.orgId);
    if (f.keyId !== undefined) q = q.where('key_id', '=', f.keyId);
    if (f.model !== undefined) q = q.where('model', '=', f.model);
    if (f.deployment !== undefined) q = q.where('deployment', '=', f.deployment);
    if (f.operation !== undefined) q = q.where('operation', '=', f.operation);
    if (f.requestId !== undefined) q = q.where('request_id', '=', f.requestId);
    return q;
  }

  /** usage over every user and organization, grouped */
  async aggregate(f: LedgerFilter, groupBy: AdminGroupBy[]) {
    const cols = {
      day: sql<string>`to_char(to_timestamp(created_at) at time zone 'UTC', 'YYYY-MM-DD')`.as('date'),
      model: sql<string>`model`.as('model'),
      key: sql<string>`key_id`.as('key_id'),
      operation: sql<string>`operation`.as('operation'),
      user: sql<string>`user_id`.as('user_id'),
      org: sql<string>`org_id`.as('org_id'),
      deployment: sql<string>`deployment`.as('deployment'),
    };
    const names = { day: 'date', model: 'model', key: 'key_id', operation: 'operation', user: 'user_id', org: 'org_id', deployment: 'deployment' } as const;
    let s = this.ledger(f).select(usageSums());
    for (const g of groupBy) s = s.select(cols[g]);
    for (const g of groupBy) s = s.groupBy(sql.ref(names[g]) as never).orderBy(sql.ref(names[g]) as never);
    const rows = (await s.execute()) as Array<Record<string, unknown>>;
    return rows.map((r) => {
      const out: Record<string, unknown> = {};
      for (const g of groupBy) out[names[g]] = r[names[g]] ?? null;
      return { ...out, ...readSums(r) };
    });
  }

  /** the ledger's records, newest first */
  async requests(f: LedgerFilter, limit: number, offset: number, withTotal = true): Promise<{ rows: RequestRow[]; total: number }> {
    const q = this.ledger(f);
    const [rows, count] = await Promise.all([
      q
        .select([
          'id',
          'request_id',
          'created_at',
          'user_id',
          'org_id',
          'key_id',
          'model',
          'deployment',
          'operation',
          'input_tokens',
          'output_tokens',
          'cached_tokens',
          'characters',
          'audio_seconds',
          'cost_micros',
        ])
        .orderBy('created_at', 'desc')
        .orderBy('id', 'desc')
        .limit(limit)
        .offset(offset)
        .execute(),
      withTotal ? q.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow() : Promise.resolve({ n: 0 }),
    ]);
    return {
      rows: rows.map((r) => ({
        ...r,
        id: String(r.id),
        created_at: n(r.created_at),
        input_tokens: n(r.input_tokens),
        output_tokens: n(r.output_tokens),
        cached_tokens: n(r.cached_tokens),
        characters: n(r.characters),
        audio_seconds: n(r.audio_seconds),
        cost_micros: n(r.cost_micros),
      })),
      total: n(count.n),
    };
  }
}
