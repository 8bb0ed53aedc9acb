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

/** the requests' filters: the ledger's, and how the request ended, and a request id prefix */
export interface RequestFilter extends LedgerFilter {
  /** 'ok': answered without an error; 'error': an HTTP error, or an answer that ended in one; a number: that HTTP status */
  status?: 'ok' | 'error' | number;
  /** request ids that start with this */
  q?: string;
}

/** One request: its request-log row with the ledger's charge, or (no log row: before the log, or not an HTTP request) the ledger's records of it. */
export interface RequestRow {
  id: string;
  request_id: string;
  created_at: number;
  received_at_ms: number;
  user_id: string | null;
  org_id: string | null;
  key_id: string | null;
  route: string | null;
  model: string | null;
  deployment: string | null;
  operation: string;
  status: number;
  error_code: string | null;
  error_message: string | null;
  latency_ms: number | null;
  ttft_ms: number | null;
  engine_ms: number | null;
  input_tokens: number;
  output_tokens: number;
  cached_tokens: number;
  cache_write_tokens: number;
  characters: number;
  audio_seconds: number;
  output_audio_seconds: number;
  cost_micros: number;
  response_id: string | null;
  /** where the row comes from */
  source: 'log' | 'ledger';
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

  /**
   * The requests, newest first: the request log's rows (src/platform/ops/request-log.ts), and the requests the ledger
   * charged that have no row there (made before the log, or pruned from it, or not HTTP requests: WebSocket turns,
   * background runs), each once with its records summed (status 200: charged requests were answered). A log row
   * carries the ledger's charge of its request when there is one (tokens, cost), else what its facts said.
   */
  async requests(f: RequestFilter, limit: number, offset: number, withTotal = true): Promise<{ rows: RequestRow[]; total: number }> {
    const logWhere: RawBuilder<unknown>[] = [sql`l.created_at >= ${f.from}`, sql`l.created_at < ${f.to}`];
    const ledWhere: RawBuilder<unknown>[] = [sql`u.created_at >= ${f.from}`, sql`u.created_at < ${f.to}`];
    const both = (col: string, v: string | undefined) => {
      if (v === undefined) return;
      logWhere.push(sql`${sql.ref(`l.${col}`)} = ${v}`);
      ledWhere.push(sql`${sql.ref(`u.${col}`)} = ${v}`);
    };
    both('user_id', f.userId);
    both('org_id', f.orgId);
    both('key_id', f.keyId);
    both('model', f.model);
    both('deployment', f.deployment);
    both('operation', f.operation);
    both('request_id', f.requestId);
    if (f.q !== undefined) {
      const prefix = `${f.q.replace(/[\\%_]/g, (c) => '\\' + c)}%`;
      logWhere.push(sql`l.request_id like ${prefix}`);
      ledWhere.push(sql`u.request_id like ${prefix}`);
    }
    let ledger = true;
    if (f.status === 'ok') logWhere.push(sql`l.status < 400 and l.error_code is null`);
    else if (f.status === 'error') {
      logWhere.push(sql`(l.status >= 400 or l.error_code is not null)`);
      ledger = false;
    } else if (typeof f.status === 'number') {
      logWhere.push(sql`l.status = ${f.status}`);
      ledger = f.status === 200;
    }
    const logPart = sql`select cast(l.seq as text) as id, l.request_id, l.created_at, l.received_at_ms, l.user_id, l.org_id, l.key_id, l.route,
        l.model, l.deployment, l.operation, l.status, l.error_code, l.error_message, l.latency_ms, l.ttft_ms, l.engine_ms,
        l.input_tokens, l.output_tokens, cast(0 as bigint) as cached_tokens, cast(0 as bigint) as cache_write_tokens, l.characters, l.audio_seconds, l.output_audio_seconds,
        l.cost_micros, l.response_id, 'log' as source
      from request_log l where ${sql.join(logWhere, sql` and `)}`;
    const ledgerPart = sql`select cast(min(u.id) as text) as id, u.request_id, min(u.created_at) as created_at, min(u.created_at) * 1000 as received_at_ms,
        min(u.user_id) as user_id, min(u.org_id) as org_id, min(u.key_id) as key_id, cast(null as text) as route, min(u.model) as model,
        min(u.deployment) as deployment, min(u.operation) as operation, 200 as status, cast(null as text) as error_code, cast(null as text) as error_message,
        cast(null as double precision) as latency_ms, cast(null as double precision) as ttft_ms, cast(null as double precision) as engine_ms,
        sum(u.input_tokens) as input_tokens, sum(u.output_tokens) as output_tokens, sum(u.cached_tokens) as cached_tokens, sum(u.cache_write_tokens) as cache_write_tokens,
        sum(u.characters) as characters,
        sum(u.audio_seconds) as audio_seconds, sum(u.output_audio_seconds) as output_audio_seconds, sum(u.cost_micros) as cost_micros, cast(null as text) as response_id, 'ledger' as source
      from usage_records u where ${sql.join(ledWhere, sql` and `)}
        and not exists (select 1 from request_log l2 where l2.request_id = u.request_id)
      group by u.request_id`;
    const all = ledger ? sql`(${logPart} union all ${ledgerPart})` : sql`(${logPart})`;
    const [rows, count] = await Promise.all([
      sql<Record<string, unknown>>`select * from ${all} r order by r.received_at_ms desc, r.id desc limit ${limit} offset ${offset}`.execute(this.db),
      withTotal ? sql<{ n: unknown }>`select count(*) as n from ${all} r`.execute(this.db) : Promise.resolve({ rows: [{ n: 0 }] }),
    ]);
    const out = rows.rows.map(requestRow);
    // a log row's charge: the ledger's records of its request (the cost charged, capped at what was reserved), read
    // through the ledger's index of key and time (a request is charged under its key, at or after it came)
    const logged = out.filter((r) => r.source === 'log' && r.key_id !== null);
    if (logged.length > 0) {
      const charged = await this.db
        .selectFrom('usage_records')
        .where('key_id', 'in', [...new Set(logged.map((r) => r.key_id!))])
        .where('created_at', '>=', Math.min(...logged.map((r) => r.created_at)))
        .where('request_id', 'in', [...new Set(logged.map((r) => r.request_id))])
        .select(['request_id'])
        .select(usageSums())
        .groupBy('request_id')
        .execute();
      const byId = new Map(charged.map((c) => [c.request_id, charge(c as Record<string, unknown>)]));
      for (const r of out) {
        const c = r.source === 'log' ? byId.get(r.request_id) : undefined;
        if (c) Object.assign(r, c);
      }
    }
    return { rows: out, total: n(count.rows[0]?.n) };
  }

  /** a request by its id: the newest log row of it (with its charge), else the ledger's records of it */
  async request(requestId: string): Promise<RequestRow | undefined> {
    const { rows } = await this.requests({ from: 0, to: Number.MAX_SAFE_INTEGER, requestId }, 1, 0, false);
    return rows[0];
  }

  /** a stored response's input and output (undefined: none, or deleted) */
  async storedResponse(id: string): Promise<{ id: string; input: unknown; output: unknown } | undefined> {
    const row = await this.db.selectFrom('responses').select(['id', 'input_items', 'object']).where('id', '=', id).where('deleted_at', 'is', null).executeTakeFirst();
    if (!row) return undefined;
    const parse = (v: unknown) => (typeof v === 'string' ? (JSON.parse(v) as unknown) : v);
    const object = parse(row.object) as { output?: unknown } | null;
    return { id: row.id, input: parse(row.input_items), output: object?.output ?? null };
  }
}

const nullableNumber = (v: unknown) => (v === null || v === undefined ? null : Number(v));
const text = (v: unknown) => (v === null || v === undefined ? null : String(v));

/** the tokens, units and cost of a row (the ledger's sums, as read) */
function charge(r: Record<string, unknown>) {
  const { requests: _, ...sums } = readSums(r);
  return sums;
}

function requestRow(r: Record<string, unknown>): RequestRow {
  return {
    id: String(r.id),
    request_id: String(r.request_id),
    created_at: n(r.created_at),
    received_at_ms: n(r.received_at_ms),
    user_id: text(r.user_id),
    org_id: text(r.org_id),
    key_id: text(r.key_id),
    route: text(r.route),
    model: text(r.model),
    deployment: text(r.deployment),
    operation: String(r.operation),
    status: n(r.status),
    error_code: text(r.error_code),
    error_message: text(r.error_message),
    latency_ms: nullableNumber(r.latency_ms),
    ttft_ms: nullableNumber(r.ttft_ms),
    engine_ms: nullableNumber(r.engine_ms),
    ...charge(r),
    response_id: text(r.response_id),
    source: r.source === 'log' ? 'log' : 'ledger',
  };
}
