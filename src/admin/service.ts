import { AppError, msg } from '../platform/errors.js';
import { toRecord, type KeyRecord, type KeyService } from '../portal/keys/service.js';
import type { Operators } from '../portal/operators/service.js';
import type { OperatorRow } from '../portal/operators/store.js';
import { MICROS, usageReport, type UsageService } from '../portal/usage/service.js';
import type { ApiKeyTable } from '../platform/db/schema.js';
import type { AuditLog, AuditRecord } from './audit.js';
import { periodBounds, type BudgetPeriod, type BudgetRow, type BudgetScope, type Budgets, type BudgetStore } from './budgets.js';
import type { AdminGroupBy, AdminStore, LedgerFilter, OrgSummaryRow, RequestFilter, RequestRow, UserSummaryRow } from './store.js';
import type { OrgMembers } from '../portal/keys/members.js';

const DEFAULT_ORG = 'default';
/** the most credits one grant may add or remove (as `portico credits grant`) */
export const MAX_GRANT = 1_000_000_000_000;

/** who made a change: the operator, the key they used, the request */
export interface Actor {
  userId: string;
  keyId?: string;
  requestId?: string;
}

export interface Page {
  page: number;
  per_page: number;
}

const credits = (micros: number) => micros / MICROS;

/** The first second of the current calendar month (UTC): "this period" of the lists. */
export function periodStart(now = new Date()): number {
  return Math.floor(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1) / 1000);
}

/** A key as the operator sees it: the owner's record, with its kind and owner. */
export type AdminKeyRecord = KeyRecord & { kind: ApiKeyTable['kind']; user_id: string };
const adminKey = (row: ApiKeyTable): AdminKeyRecord => ({ ...toRecord(row), kind: row.kind, user_id: row.user_id });

function userView(r: UserSummaryRow, start: number) {
  return {
    user_id: r.user_id,
    operator: r.operator,
    keys: { total: r.keys_total, active: r.keys_active, disabled: r.keys_disabled },
    balance: { granted: credits(r.granted_micros), used: credits(r.used_micros), balance: credits(r.granted_micros - r.used_micros) },
    period: { start_time: start, requests: r.period_requests, tokens: r.period_tokens, cost: credits(r.period_cost_micros) },
    last_activity: r.last_activity,
  };
}

function orgView(r: OrgSummaryRow, start: number) {
  return {
    org_id: r.org_id,
    members: r.members,
    admins: r.admins,
    keys: { total: r.keys_total, active: r.keys_active, disabled: r.keys_disabled },
    balance: { granted: credits(r.granted_micros), used: credits(r.used_micros), balance: credits(r.granted_micros - r.used_micros) },
    period: { start_time: start, requests: r.period_requests, tokens: r.period_tokens, cost: credits(r.period_cost_micros) },
    last_activity: r.last_activity,
  };
}

const requestView = (r: RequestRow) => ({
  id: r.id,
  request_id: r.request_id,
  created_at: r.created_at,
  user_id: r.user_id,
  org_id: r.org_id,
  key_id: r.key_id,
  model: r.model,
  deployment: r.deployment,
  operation: r.operation,
  route: r.route,
  status: r.status,
  error: r.error_code === null ? null : { code: r.error_code, message: r.error_message ?? '' },
  latency_ms: r.latency_ms,
  ttft_ms: r.ttft_ms,
  input_tokens: r.input_tokens,
  output_tokens: r.output_tokens,
  cached_tokens: r.cached_tokens,
  cache_write_tokens: r.cache_write_tokens,
  characters: r.characters,
  audio_seconds: r.audio_seconds,
  output_audio_seconds: r.output_audio_seconds,
  cost: credits(r.cost_micros),
  response_id: r.response_id,
});

export const REQUEST_CSV_COLUMNS = [
  'created_at',
  'request_id',
  'user_id',
  'org_id',
  'key_id',
  'model',
  'deployment',
  'operation',
  'route',
  'status',
  'error_code',
  'error_message',
  'latency_ms',
  'ttft_ms',
  'input_tokens',
  'output_tokens',
  'cached_tokens',
  'cache_write_tokens',
  'characters',
  'audio_seconds',
  'output_audio_seconds',
  'cost',
  'response_id',
] as const;

function csvValue(v: ReturnType<typeof requestView>, c: (typeof REQUEST_CSV_COLUMNS)[number]): unknown {
  if (c === 'created_at') return new Date(v.created_at * 1000).toISOString();
  if (c === 'error_code') return v.error?.code;
  if (c === 'error_message') return v.error?.message;
  return v[c];
}

/**
 * One CSV cell (RFC 4180): quoted when it holds a comma, a quote or a line break; a text a spreadsheet would take
 * for a formula (=, +, -, @, a tab or carriage return first) is prefixed with a quote mark, so opening the export
 * runs nothing a user put in a model or user name.
 */
export function csvCell(v: unknown): string {
  if (v === null || v === undefined) return '';
  if (typeof v === 'number') return String(v);
  let s = String(v);
  if (/^[=+\-@\t\r]/.test(s)) s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/**
 * What an operator does (/v1/admin): reads across every user and organization, and changes that are each written to
 * the audit log with the record before and after. Keys change through the key services (so every instance drops its
 * cached verification), credits through the ledger (so every budget reads them), operators through the operators
 * service.
 */
export class AdminService {
  constructor(
    private readonly d: {
      store: AdminStore;
      audit: AuditLog;
      operators: Operators;
      usage: UsageService;
      keys: { management: KeyService; inference: KeyService };
      budgets: { store: BudgetStore; guard: Budgets };
      /** the request log, flushed before it is read */
      requestLog?: { flush(): Promise<void> };
      /** the organization roles an operator sets; unset: the identity provider owns the roles */
      members?: OrgMembers;
    },
  ) {}

  private async record(actor: Actor, action: string, target: string, before: unknown, after: unknown) {
    await this.d.audit.write({ actor: actor.userId, actorKeyId: actor.keyId, requestId: actor.requestId, action, target, before, after });
  }

  async users(q: Page & { search?: string }) {
    await this.d.usage.flush();
    const start = periodStart();
    const { rows, total } = await this.d.store.listUsers({ search: q.search?.trim() || undefined, limit: q.per_page, offset: (q.page - 1) * q.per_page, periodStart: start });
    return { list: rows.map((r) => userView(r, start)), total, page: q.page, per_page: q.per_page };
  }

  async user(userId: string) {
    await this.d.usage.flush();
    const start = periodStart();
    const { rows } = await this.d.store.listUsers({ userId, limit: 1, offset: 0, periodStart: start });
    const row = rows[0];
    if (!row) throw new AppError('user_not_found', msg('admin_user_unknown', { user: userId }), 'user_id');
    const [keys, adminOrgs, operator] = await Promise.all([this.d.store.keysOfUser(userId), this.d.store.adminOrgsOf(userId), this.d.operators.get(userId)]);
    return {
      ...userView(row, start),
      operator_record: operator ? operatorView(operator) : null,
      admin_orgs: adminOrgs,
      api_keys: keys.map(adminKey),
    };
  }

  async orgs(q: Page & { search?: string }) {
    await this.d.usage.flush();
    const start = periodStart();
    const { rows, total } = await this.d.store.listOrgs({ search: q.search?.trim() || undefined, limit: q.per_page, offset: (q.page - 1) * q.per_page, periodStart: start });
    return { list: rows.map((r) => orgView(r, start)), total, page: q.page, per_page: q.per_page };
  }

  async org(orgId: string) {
    await this.d.usage.flush();
    const start = periodStart();
    const { rows } = await this.d.store.listOrgs({ orgId, limit: 1, offset: 0, periodStart: start });
    const row = rows[0];
    if (!row || orgId === DEFAULT_ORG) throw new AppError('organization_not_found', msg('admin_org_unknown', { org: orgId }), 'org_id');
    const [members, keys] = await Promise.all([this.d.store.membersOfOrg(orgId), this.d.store.keysOfOrg(orgId)]);
    return { ...orgView(row, start), member_list: members, api_keys: keys.map(adminKey) };
  }

  /**
   * Disables (or enables) a user's keys: one (`keyId`), or every one that is active (enabled: disabled). Each change
   * is audited; a key that cannot be enabled (its owner is at the active limit) is answered in `failed`.
   */
  async setKeysDisabled(actor: Actor, userId: string, disabled: boolean, keyId?: string) {
    const keys = await this.d.store.keysOfUser(userId);
    let targets: ApiKeyTable[];
    if (keyId !== undefined) {
      const row = keys.find((k) => k.id === keyId);
      if (!row) {
        const other = await this.d.store.key(keyId);
        throw new AppError('api_key_not_found', other ? msg('admin_key_of_other_user', { key: keyId, user: userId }) : undefined, 'api_key_id');
      }
      if (row.status === 'revoked') throw new AppError('invalid_state', msg('admin_key_revoked', { key: keyId }), 'api_key_id');
      targets = [row];
    } else {
      if (keys.length === 0 && !(await this.d.store.listUsers({ userId, limit: 1, offset: 0, periodStart: 0 })).rows.length) {
        throw new AppError('user_not_found', msg('admin_user_unknown', { user: userId }), 'user_id');
      }
      targets = keys.filter((k) => k.status === (disabled ? 'active' : 'disabled'));
    }
    const changed: AdminKeyRecord[] = [];
    const failed: Array<{ id: string; error: string; message: string }> = [];
    for (const row of targets) {
      const before = adminKey(row);
      try {
        const svc = row.kind === 'management' ? this.d.keys.management : this.d.keys.inference;
        // already in the state asked: nothing changes, nothing is audited
        if ((row.status === 'disabled') === disabled) {
          changed.push(before);
          continue;
        }
        const after = { ...(await svc.setDisabled(row.id, disabled)), kind: row.kind, user_id: row.user_id };
        await this.record(actor, disabled ? 'key.disable' : 'key.enable', row.id, before, after);
        changed.push(after);
      } catch (e) {
        if (!(e instanceof AppError)) throw e;
        failed.push({ id: row.id, error: e.code, message: e.message });
      }
    }
    return { user_id: userId, api_keys: changed, failed };
  }

  /** Grants (a positive amount) or removes (negative) credits of a user or an organization, with a note; audited. */
  async grant(actor: Actor, input: { user_id?: string; org_id?: string; amount: number; note?: string }) {
    if ((input.user_id === undefined) === (input.org_id === undefined)) throw new AppError('validation_error', msg('admin_grant_target'), 'user_id');
    if (input.org_id === DEFAULT_ORG) throw new AppError('validation_error', msg('admin_grant_default_org'), 'org_id');
    const amount = wholeMicros(input.amount, 'amount', true) / MICROS;
    const note = input.note ?? '';
    const scope = input.user_id !== undefined ? { orgId: DEFAULT_ORG, userId: input.user_id } : { orgId: input.org_id! };
    const who = input.user_id !== undefined ? { user_id: input.user_id } : { org_id: input.org_id! };
    const before = await this.d.usage.balance(scope);
    await this.d.usage.grant(input.user_id ?? '', input.user_id !== undefined ? DEFAULT_ORG : input.org_id!, amount, note);
    const after = await this.d.usage.balance(scope);
    const target = input.user_id !== undefined ? `user:${input.user_id}` : `org:${input.org_id}`;
    await this.record(actor, amount > 0 ? 'credits.grant' : 'credits.remove', target, { ...who, ...before }, { ...who, ...after, amount, note });
    return { ...who, amount, note, balance: after };
  }

  /** every budget with what is spent in its current period and when that resets */
  async budgetList() {
    await this.d.usage.flush();
    const now = new Date();
    const rows = await this.d.budgets.store.list();
    const list = [];
    for (const b of rows) {
      const { start, end } = periodBounds(b.period, now);
      list.push({ ...budgetView(b), period_start: start, resets_at: end, spent: (await this.d.budgets.store.spent(b.scope, b.target, start)) / MICROS });
    }
    return { list };
  }

  /** sets (makes or replaces) the budget of a key, user or organization for a period; audited */
  async budgetSet(actor: Actor, input: { scope: BudgetScope; target: string; period: BudgetPeriod; limit: number; soft_limit?: number | null; webhook_url?: string | null }) {
    const limit = wholeMicros(input.limit, 'limit', false);
    const soft = input.soft_limit === undefined || input.soft_limit === null ? null : wholeMicros(input.soft_limit, 'soft_limit', false);
    if (soft !== null && soft >= limit) throw new AppError('validation_error', msg('budget_soft_over_limit'), 'soft_limit', { detail: 'invalid_value' });
    const hook = input.webhook_url ?? null;
    if (hook !== null) {
      let ok = false;
      try {
        ok = ['http:', 'https:'].includes(new URL(hook).protocol);
      } catch {
        ok = false;
      }
      if (!ok) throw new AppError('validation_error', msg('budget_webhook_url'), 'webhook_url', { detail: 'invalid_value' });
    }
    if (input.scope === 'org' && input.target === DEFAULT_ORG) throw new AppError('validation_error', msg('admin_grant_default_org'), 'target');
    const before = await this.d.budgets.store.get(input.scope, input.target, input.period);
    const row = await this.d.budgets.store.put({
      scope: input.scope,
      target: input.target,
      period: input.period,
      limit_micros: limit,
      soft_micros: soft,
      webhook_url: hook,
      created_by: actor.userId,
      updated_at: Math.floor(Date.now() / 1000),
    });
    await this.d.budgets.guard.changed();
    await this.record(actor, 'budget.set', row.id, before ? budgetView(before) : null, budgetView(row));
    return budgetView(row);
  }

  async budgetRemove(actor: Actor, id: string) {
    const row = await this.d.budgets.store.remove(id);
    if (!row) throw new AppError('not_found', msg('budget_not_found', { id }), 'budget_id');
    await this.d.budgets.guard.changed();
    await this.record(actor, 'budget.remove', row.id, budgetView(row), null);
    return budgetView(row);
  }

  async operatorList() {
    return { list: (await this.d.operators.list()).map(operatorView) };
  }

  async operatorAdd(actor: Actor, userId: string) {
    const row = await this.d.operators.add(userId, 'api', actor.userId);
    if (!row) throw new AppError('invalid_state', msg('admin_operator_exists', { user: userId }), 'user_id');
    await this.record(actor, 'operator.add', userId, null, operatorView(row));
    return operatorView(row);
  }

  async operatorRemove(actor: Actor, userId: string) {
    if (userId === actor.userId) throw new AppError('invalid_state', msg('admin_operator_self'), 'user_id');
    const row = await this.d.operators.remove(userId);
    if (!row) throw new AppError('operator_not_found', msg('admin_operator_not_recorded', { user: userId }), 'user_id');
    await this.record(actor, 'operator.remove', userId, operatorView(row), null);
    return operatorView(row);
  }

  async auditList(q: Page & { actor?: string; action?: string; target?: string; start_time?: number; end_time?: number }) {
    const { rows, total } = await this.d.audit.list({
      actor: q.actor,
      action: q.action,
      target: q.target,
      from: q.start_time,
      to: q.end_time,
      limit: q.per_page,
      offset: (q.page - 1) * q.per_page,
    });
    return { list: rows as AuditRecord[], total, page: q.page, per_page: q.per_page };
  }

  async usage(f: LedgerFilter, groupBy: AdminGroupBy[]) {
    await this.d.usage.flush();
    const rows = await this.d.store.aggregate(f, groupBy);
    const report = usageReport(rows);
    // grouped by key: each key's name, owner and state beside its id (null: no such key was ever made)
    const keys = new Map<string, ApiKeyTable>();
    if (groupBy.includes('key')) {
      const ids = [...new Set(rows.map((r) => (r as { key_id?: unknown }).key_id).filter((k): k is string => typeof k === 'string'))];
      for (let i = 0; i < ids.length; i += 500) for (const k of await this.d.store.keysById(ids.slice(i, i + 500))) keys.set(k.id, k);
    }
    const keyInfo = (id: unknown) => {
      const k = typeof id === 'string' ? keys.get(id) : undefined;
      return k ? { name: k.name, kind: k.kind, user_id: k.user_id, org_id: k.org_id, status: k.deleted_at !== null ? 'deleted' : k.status } : null;
    };
    return {
      start_time: f.from,
      end_time: f.to,
      group_by: groupBy,
      list: report.list.map((r) => (groupBy.includes('key') ? { ...r, key: keyInfo((r as { key_id?: unknown }).key_id) } : r)),
      total: report.total,
    };
  }

  async requests(f: RequestFilter, q: Page) {
    await this.flushRequests();
    const { rows, total } = await this.d.store.requests(f, q.per_page, (q.page - 1) * q.per_page);
    return { start_time: f.from, end_time: f.to, list: rows.map(requestView), total, page: q.page, per_page: q.per_page };
  }

  /** the same records as CSV, newest first, at most `limit` rows */
  async requestsCsv(f: RequestFilter, limit: number): Promise<string> {
    await this.flushRequests();
    const { rows } = await this.d.store.requests(f, limit, 0, false);
    const lines = [REQUEST_CSV_COLUMNS.join(',')];
    for (const r of rows) {
      const v = requestView(r);
      lines.push(REQUEST_CSV_COLUMNS.map((c) => csvCell(csvValue(v, c))).join(','));
    }
    return lines.join('\r\n') + '\r\n';
  }

  /** one request: its row, its timings and, when its response was stored, that response's input and output */
  async request(requestId: string) {
    await this.flushRequests();
    const row = await this.d.store.request(requestId);
    if (!row) throw new AppError('not_found', msg('admin_request_unknown', { id: requestId }), 'request_id');
    const response = row.response_id !== null ? ((await this.d.store.storedResponse(row.response_id)) ?? null) : null;
    return {
      request: requestView(row),
      timings: { received_at_ms: row.received_at_ms, first_output_ms: row.ttft_ms, engine_ms: row.engine_ms, total_ms: row.latency_ms },
      response,
    };
  }

  /** what is on its way to the ledger and the request log is written before they are read */
  private async flushRequests() {
    await Promise.all([this.d.usage.flush(), this.d.requestLog?.flush()]);
  }

  /**
   * Sets a member's role in an organization, where roles are Portico's own (no identity provider): it wins over
   * the role their sign-in link or token carries for it, at once (their sessions and tokens are read with it, and
   * the organization keys they made work, and are managed, only while it is admin). Audited.
   */
  async setMemberRole(actor: Actor, orgId: string, userId: string, role: 'admin' | 'member') {
    const members = this.d.members;
    if (!members) throw new AppError('roles_from_identity_provider');
    if (orgId === DEFAULT_ORG) throw new AppError('validation_error', msg('admin_member_default_org'), 'org_id', { detail: 'invalid_value' });
    const before = await members.role(orgId, userId);
    await members.set(orgId, userId, role, actor.userId);
    await this.record(actor, 'org.member.role', `org:${orgId}/user:${userId}`, before === undefined ? null : { org_id: orgId, user_id: userId, role: before }, {
      org_id: orgId,
      user_id: userId,
      role,
    });
    return { org_id: orgId, user_id: userId, role };
  }
}

/**
 * Credits as whole micro-credits: non-zero, at most MAX_GRANT either way (negative only when `signed`), at most 6
 * decimals as the JSON number was written (1e-7 reads as an exponent); otherwise a 400 naming `field`.
 */
function wholeMicros(a: number, field: string, signed: boolean): number {
  const micros = Math.round(a * MICROS);
  const digits = String(Math.abs(a));
  const decimals = /e-/.test(digits) ? 7 : (digits.split('.')[1]?.length ?? 0);
  if (!Number.isFinite(a) || micros === 0 || (!signed && micros < 0) || Math.abs(a) > MAX_GRANT || decimals > 6) {
    throw new AppError('validation_error', msg('admin_grant_amount', { field, max: MAX_GRANT, amount: String(a) }), field, { detail: 'invalid_value' });
  }
  return micros;
}

export function budgetView(b: BudgetRow) {
  return {
    id: b.id,
    scope: b.scope,
    target: b.target,
    period: b.period,
    limit: b.limit_micros / MICROS,
    soft_limit: b.soft_micros === null ? null : b.soft_micros / MICROS,
    webhook_url: b.webhook_url,
    created_by: b.created_by,
    created_at: b.created_at,
    updated_at: b.updated_at,
  };
}

export function operatorView(r: OperatorRow) {
  return { user_id: r.user_id, source: r.source, added_by: r.added_by, created_at: Number(r.created_at) };
}
