import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import type { FastifyBaseLogger } from 'fastify';
import type { Db } from '../platform/db/index.js';
import type { BudgetTable } from '../platform/db/schema.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { ChangeFeed } from '../platform/cluster/feed.js';
import { AppError, msg, type MessageKey } from '../platform/errors.js';
import type { UsageEvent } from '../portal/usage/service.js';

export type BudgetRow = BudgetTable;
export type BudgetPeriod = BudgetRow['period'];
export type BudgetScope = BudgetRow['scope'];

const DEFAULT_ORG = 'default';
const MICROS = 1_000_000;
/** the feed channel that tells every instance the budgets changed */
const CHANNEL = 'budgets';

/** The current period of a budget (UTC): a day, an ISO week (from Monday), a calendar month; [start, end) in Unix seconds. */
export function periodBounds(period: BudgetPeriod, now = new Date()): { start: number; end: number } {
  const y = now.getUTCFullYear();
  const m = now.getUTCMonth();
  const d = now.getUTCDate();
  if (period === 'monthly') return { start: Date.UTC(y, m, 1) / 1000, end: Date.UTC(y, m + 1, 1) / 1000 };
  if (period === 'daily') return { start: Date.UTC(y, m, d) / 1000, end: Date.UTC(y, m, d + 1) / 1000 };
  const back = (now.getUTCDay() + 6) % 7;
  return { start: Date.UTC(y, m, d - back) / 1000, end: Date.UTC(y, m, d - back + 7) / 1000 };
}

/** SQL of the budgets and of what the ledger says was spent under one. Nothing else writes the budgets table. */
export class BudgetStore {
  constructor(private readonly db: Db) {}

  async list(): Promise<BudgetRow[]> {
    const rows = await this.db.selectFrom('budgets').selectAll().orderBy('scope').orderBy('target').orderBy('period').execute();
    return rows.map(numbers);
  }

  async get(scope: BudgetScope, target: string, period: BudgetPeriod): Promise<BudgetRow | undefined> {
    const r = await this.db.selectFrom('budgets').selectAll().where('scope', '=', scope).where('target', '=', target).where('period', '=', period).executeTakeFirst();
    return r && numbers(r);
  }

  /** sets the budget of (scope, target, period), made or replaced */
  async put(row: Omit<BudgetRow, 'id' | 'created_at'> & { created_at?: number }): Promise<BudgetRow> {
    const r = await this.db
      .insertInto('budgets')
      .values({ ...row, id: `budget_${randomBytes(12).toString('base64url')}`, created_at: row.created_at ?? row.updated_at })
      .onConflict((oc) =>
        oc.columns(['scope', 'target', 'period']).doUpdateSet({
          limit_micros: row.limit_micros,
          soft_micros: row.soft_micros,
          webhook_url: row.webhook_url,
          updated_at: row.updated_at,
        }),
      )
      .returningAll()
      .executeTakeFirstOrThrow();
    return numbers(r);
  }

  async remove(id: string): Promise<BudgetRow | undefined> {
    const r = await this.db.deleteFrom('budgets').where('id', '=', id).returningAll().executeTakeFirst();
    return r && numbers(r);
  }

  /** micro-credits the ledger holds for the budget's target since `from` */
  async spent(scope: BudgetScope, target: string, from: number): Promise<number> {
    const column = scope === 'key' ? 'key_id' : scope === 'user' ? 'user_id' : 'org_id';
    const r = await this.db
      .selectFrom('usage_records')
      .select(sql<string>`coalesce(sum(cost_micros), 0)`.as('n'))
      .where(column, '=', target)
      .where('created_at', '>=', from)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }
}

const numbers = (r: BudgetRow): BudgetRow => ({
  ...r,
  limit_micros: Number(r.limit_micros),
  soft_micros: r.soft_micros === null ? null : Number(r.soft_micros),
  created_at: Number(r.created_at),
  updated_at: Number(r.updated_at),
});

interface Spend {
  start: number;
  micros: number;
  /** when the ledger was read (ms) */
  at: number;
}

export interface BudgetsOptions {
  log: Pick<FastifyBaseLogger, 'warn' | 'info'>;
  feed?: ChangeFeed;
  /** how long a budget's spend read from the ledger is used (the records this instance makes are added meanwhile) */
  freshMs?: number;
  /** how the soft limit's webhook is posted (tests) */
  post?: (url: string, body: unknown) => Promise<void>;
}

/**
 * The budgets of keys, users and organizations, checked by the {base_url} gate on each request: a request whose
 * key, owner or organization has spent its budget's limit in the current period is refused (429 budget_exceeded,
 * naming the budget and when it resets); past the soft limit, once per budget and period on each instance, a
 * warning line and a POST to the budget's webhook. The budgets are held in memory (read again when one changes,
 * here or on another instance through the change feed); the spend of each is read from the ledger at most once per
 * `freshMs`, with the records this instance makes added in between. So a limit may be passed by what other
 * instances spend within that second and by the request that crosses it; it is a spending limit, not the balance.
 */
export class Budgets {
  private byTarget = new Map<string, BudgetRow[]>();
  private count = 0;
  private loading?: Promise<void>;
  private loaded = false;
  private readonly spend = new Map<string, Spend>();
  private readonly warned = new Set<string>();
  private readonly freshMs: number;

  constructor(
    private readonly store: BudgetStore,
    private readonly opts: BudgetsOptions,
  ) {
    this.freshMs = opts.freshMs ?? 1000;
    opts.feed?.subscribe(CHANNEL, () => this.invalidate());
  }

  /** the budgets are read again at the next check */
  invalidate() {
    this.stale = true;
  }

  /** the budgets held are to be read again; they stay in use if the database cannot be read */
  private stale = false;

  private async load(): Promise<void> {
    this.loading ??= (async () => {
      try {
        const rows = await this.store.list();
        const by = new Map<string, BudgetRow[]>();
        for (const r of rows) {
          const k = `${r.scope}:${r.target}`;
          by.set(k, [...(by.get(k) ?? []), r]);
        }
        this.byTarget = by;
        this.count = rows.length;
        this.loaded = true;
      } finally {
        this.loading = undefined;
      }
    })();
    return this.loading;
  }

  /** a budget changed here: every instance reads them again */
  async changed(): Promise<void> {
    this.invalidate();
    await this.opts.feed?.publish(CHANNEL, {}).catch((e) => this.opts.log.warn({ err: (e as Error).message }, 'budget change not broadcast'));
  }

  private applying(key: Pick<KeyPrincipal, 'keyId' | 'userId' | 'orgId'>): BudgetRow[] {
    const out = [...(this.byTarget.get(`key:${key.keyId}`) ?? []), ...(this.byTarget.get(`user:${key.userId}`) ?? [])];
    if (key.orgId !== DEFAULT_ORG) out.push(...(this.byTarget.get(`org:${key.orgId}`) ?? []));
    return out;
  }

  /** micro-credits spent under the budget in its current period */
  async spentOf(b: BudgetRow, now = new Date()): Promise<number> {
    const { start } = periodBounds(b.period, now);
    const had = this.spend.get(b.id);
    if (had && had.start === start && Date.now() - had.at < this.freshMs) return had.micros;
    let micros: number;
    try {
      micros = await this.store.spent(b.scope, b.target, start);
    } catch (e) {
      // the database is away: the spend last read (and counted here since) stands rather than refusing every request
      if (had && had.start === start) return had.micros;
      throw e;
    }
    this.spend.set(b.id, { start, micros, at: Date.now() });
    return micros;
  }

  /** the gate: refuses a request whose key, owner or organization has spent a budget's limit */
  async check(key: KeyPrincipal): Promise<void> {
    if (!this.loaded) await this.load();
    else if (this.stale) {
      this.stale = false;
      await this.load().catch((e) => {
        this.stale = true;
        this.opts.log.warn({ err: (e as Error).message }, 'budgets not read again (the database is away): the ones held stay in use');
      });
    }
    if (this.count === 0) return;
    const now = new Date();
    for (const b of this.applying(key)) {
      const spent = await this.spentOf(b, now);
      const { start, end } = periodBounds(b.period, now);
      if (spent >= b.limit_micros) {
        throw new AppError(
          'budget_exceeded',
          msg('budget_reached', {
            period: msg(`budget_period_${b.period}` as MessageKey & `budget_period_${string}`),
            scope: msg(`budget_scope_${b.scope}` as MessageKey & `budget_scope_${string}`),
            target: b.target,
            limit: b.limit_micros / MICROS,
            spent: spent / MICROS,
            resets: new Date(end * 1000).toISOString(),
          }),
          null,
          { headers: { 'retry-after': String(Math.max(1, end - Math.floor(now.getTime() / 1000))) } },
        );
      }
      if (b.soft_micros !== null && spent >= b.soft_micros) this.warn(b, spent, start, end);
    }
  }

  /** a record made on this instance counts at once in the spend of the budgets it falls under */
  record(e: UsageEvent): void {
    if (this.count === 0 || !e.costMicros) return;
    const now = new Date();
    for (const b of this.applying(e.key)) {
      const s = this.spend.get(b.id);
      if (s && s.start === periodBounds(b.period, now).start) s.micros += e.costMicros;
    }
  }

  private warn(b: BudgetRow, spent: number, start: number, end: number) {
    const once = `${b.id}:${start}`;
    if (this.warned.has(once)) return;
    this.warned.add(once);
    const what = {
      budget_id: b.id,
      scope: b.scope,
      target: b.target,
      period: b.period,
      spent: spent / MICROS,
      soft_limit: (b.soft_micros ?? 0) / MICROS,
      limit: b.limit_micros / MICROS,
      period_start: start,
      resets_at: end,
    };
    this.opts.log.warn(what, `budget ${b.id}: the soft limit is passed`);
    if (b.webhook_url) {
      const post = this.opts.post ?? postJson;
      post(b.webhook_url, { type: 'budget.soft_limit', ...what }).catch((e) =>
        this.opts.log.warn({ budget_id: b.id, err: (e as Error).message }, `budget ${b.id}: the soft-limit webhook failed`),
      );
    }
  }
}

async function postJson(url: string, body: unknown): Promise<void> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(5000) });
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
}
