import { sql } from 'kysely';
import type { Db } from '../platform/db/index.js';

/** One change, as it is written: who made it, what it was, on what, and the record before and after (no secret). */
export interface AuditEntry {
  /** the operator's user id (`cli` for an operator command run on the server) */
  actor: string;
  /** the Management API Key the change was made with */
  actorKeyId?: string;
  /** what was done, `<thing>.<verb>`: `credits.grant`, `key.disable`, `operator.add`, ... */
  action: string;
  /** what it was done to: a user id, an organization id, a key id */
  target: string;
  before: unknown;
  after: unknown;
  requestId?: string;
}

/** An entry as the API answers it. */
export interface AuditRecord {
  id: string;
  at: number;
  actor: string;
  actor_key_id: string | null;
  action: string;
  target: string;
  before: unknown;
  after: unknown;
  request_id: string | null;
}

export interface AuditFilter {
  actor?: string;
  action?: string;
  target?: string;
  from?: number;
  to?: number;
  limit: number;
  offset: number;
}

const json = (v: unknown) => (v === undefined || v === null ? null : sql`${JSON.stringify(v)}::jsonb`);
/** jsonb comes back parsed from PostgreSQL and as text from the embedded database's thread */
const parsed = (v: unknown) => (typeof v === 'string' ? (JSON.parse(v) as unknown) : (v ?? null));

/** The audit log (table audit_log): every change an operator makes. Nothing outside this file writes it. */
export class AuditLog {
  constructor(private readonly db: Db) {}

  async write(e: AuditEntry, at = Math.floor(Date.now() / 1000)): Promise<void> {
    await this.db
      .insertInto('audit_log')
      .values({
        at,
        actor: e.actor,
        actor_key_id: e.actorKeyId ?? null,
        action: e.action,
        target: e.target,
        before: json(e.before),
        after: json(e.after),
        request_id: e.requestId ?? null,
      })
      .execute();
  }

  /** newest first, with the number of entries the filter matches */
  async list(f: AuditFilter): Promise<{ rows: AuditRecord[]; total: number }> {
    let q = this.db.selectFrom('audit_log');
    if (f.actor !== undefined) q = q.where('actor', '=', f.actor);
    if (f.action !== undefined) q = q.where('action', '=', f.action);
    if (f.target !== undefined) q = q.where('target', '=', f.target);
    if (f.from !== undefined) q = q.where('at', '>=', f.from);
    if (f.to !== undefined) q = q.where('at', '<', f.to);
    const [rows, count] = await Promise.all([
      q.selectAll().orderBy('at', 'desc').orderBy('id', 'desc').limit(f.limit).offset(f.offset).execute(),
      q.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow(),
    ]);
    return {
      rows: rows.map((r) => ({
        id: String(r.id),
        at: Number(r.at),
        actor: r.actor,
        actor_key_id: r.actor_key_id,
        action: r.action,
        target: r.target,
        before: parsed(r.before),
        after: parsed(r.after),
        request_id: r.request_id,
      })),
      total: Number(count.n),
    };
  }
}
