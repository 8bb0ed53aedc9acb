import { sql, type RawBuilder } from 'kysely';
import type { Db } from '../platform/db/index.js';
import { jsonb, jsonbSized, type SizedJsonb } from '../platform/db/jsonb.js';
import type { StoredItem } from './input.js';
import type { ResponseObject } from './object.js';
import type { StreamEvent } from './builder.js';

export interface StoredResponse {
  id: string;
  userId: string;
  orgId: string;
  keyId: string;
  object: ResponseObject;
  inputItems: StoredItem[];
  request: unknown;
  /** the instance holding a queued job (in-process queue) */
  runner?: string;
  /**
   * The row's job state: `queued` while a background response waits for a worker (its object says
   * `in_progress`, the only status the specification has for it), else the object's status. Written as `queued`
   * by insert() when given so, moved to `in_progress` by claim().
   */
  job?: JobState;
}

/**
 * A stored response without its input items and request: what reading its state needs (GET, cancel, the waits on
 * its status). The items may weigh 16 MiB; read only where they are used.
 */
export type StoredHead = Omit<StoredResponse, 'inputItems' | 'request'>;

/** A stored response's job state: the object's status, or `queued` (a background job no worker has taken yet). */
export type JobState = 'queued' | ResponseObject['status'];

/**
 * jsonb refuses NUL and unpaired surrogates, which a client's input or a model's output may contain: strings are
 * stored with NUL removed and lone surrogates replaced (U+FFFD), instead of failing after the work was done.
 */
const jsonSafe = (_k: string, v: unknown) => {
  if (typeof v !== 'string') return v;
  // the checks first: most strings need neither, and each would copy them
  const w = v as string & { isWellFormed(): boolean; toWellFormed(): string };
  const s = w.isWellFormed() ? v : w.toWellFormed();
  return s.includes('\u0000') ? s.replace(/\u0000/g, '') : s;
};
const json = (v: unknown) => sql`${JSON.stringify(v, jsonSafe)}::jsonb`;

/**
 * A stored response's input items are read one row per item (jsonb_array_elements), the response's own columns
 * on its first row only: the 4096 items of the largest request as one value would be parsed by node-postgres in
 * one JSON.parse on the event loop (~100 ms), and come from the PGlite thread as one message (17-66 ms to copy
 * out); as rows, node-postgres parses each as it arrives and the PGlite thread sends a large result in batches
 * (platform/batches.ts). A response without items has one row, its item null.
 */
interface ItemRow {
  id: string;
  /** on the first row of each response */
  object: ResponseObject | null;
  item: StoredItem | null;
}

/** rows of item-per-row reads, grouped by response in the order they come */
function byResponse<R extends ItemRow>(rows: readonly R[]): Array<{ first: R; inputItems: StoredItem[] }> {
  const out: Array<{ first: R; inputItems: StoredItem[] }> = [];
  let cur: { first: R; inputItems: StoredItem[] } | undefined;
  for (const r of rows) {
    if (!cur || r.object !== null) out.push((cur = { first: r, inputItems: [] }));
    if (r.item !== null) cur.inputItems.push(r.item);
  }
  return out;
}

/** a stored response's jsonb values (with their sizes, written beside them), made before it is written */
interface JsonbValues {
  object: SizedJsonb;
  inputItems: SizedJsonb;
  request: RawBuilder<unknown> | null;
}

/** one response of a chain, newest first, as chainSizes() measures it */
export interface ChainLink {
  id: string;
  /** the row's job state (`queued`, `in_progress`, or the object's final status) */
  status: JobState;
  /** the UTF-8 bytes of its stored input items and object */
  bytes: number;
}

/**
 * A stored response's size in SQL: the sizes written with it (migration 0009), or for a row stored before, its
 * values measured where they lie (never sent to this process)
 */
const storedBytes = sql`coalesce(r.input_bytes + r.object_bytes, octet_length(r.input_items::text)::bigint + octet_length(r.object::text)::bigint)`;

/** SQL for stored responses and their event logs (background replay). */
export class ResponseStore {
  constructor(private readonly db: Db) {}

  /**
   * Stores a response, with its first events when there are some (a background job's). Without events it is one
   * statement, atomic by itself: no transaction, so one trip to the database instead of two (PGlite's thread) or
   * three (BEGIN, INSERT, COMMIT on PostgreSQL) for every stored response.
   */
  async insert(r: StoredResponse, events?: StreamEvent[]): Promise<void> {
    // made first (before a transaction, which holds PGlite's one connection): large values in slices (platform/db/jsonb.ts)
    let object = jsonbSized(r.object, jsonSafe);
    let inputItems = jsonbSized(r.inputItems, jsonSafe);
    let request = r.request === undefined ? null : jsonb(r.request, jsonSafe);
    if (object instanceof Promise || inputItems instanceof Promise || request instanceof Promise) [object, inputItems, request] = await Promise.all([object, inputItems, request]);
    const values: JsonbValues = { object, inputItems, request };
    if (!events?.length) return this.insertRow(this.db, r, values);
    await this.db.transaction().execute(async (tx) => {
      await this.insertRow(tx as unknown as Db, r, values);
      await this.insertEvents(tx as unknown as Db, r.id, events);
    });
  }

  private async insertRow(db: Db, r: StoredResponse, v: JsonbValues): Promise<void> {
    const now = Math.floor(Date.now() / 1000);
    await db
      .insertInto('responses')
      .values({
        id: r.id,
        user_id: r.userId,
        org_id: r.orgId,
        key_id: r.keyId,
        model: r.object.model,
        status: r.job ?? r.object.status,
        background: r.object.background,
        previous_response_id: r.object.previous_response_id,
        object: v.object.sql,
        input_items: v.inputItems.sql,
        input_bytes: v.inputItems.bytes,
        object_bytes: v.object.bytes,
        request: v.request,
        runner_id: r.runner ?? null,
        heartbeat_at: r.runner ? Date.now() : null,
        created_at: r.object.created_at,
        updated_at: now,
        deleted_at: null,
      } as any)
      .execute();
  }

  private async insertEvents(db: Db, id: string, events: StreamEvent[]) {
    // a few hundred rows per statement keeps the parameter count well under PostgreSQL's limit
    for (let i = 0; i < events.length; i += 500) {
      await db
        .insertInto('response_events')
        .values(events.slice(i, i + 500).map((e) => ({ response_id: id, seq: e.sequence_number, event: json(e) as any })))
        .onConflict((oc) => oc.columns(['response_id', 'seq']).doNothing())
        .execute();
    }
  }

  /** Writes the object's new state; `onlyIf` guards against overwriting a cancel. Returns whether it wrote. */
  async update(obj: ResponseObject, events?: StreamEvent[], onlyIfStatusIn?: string[]): Promise<boolean> {
    let object = jsonbSized(obj, jsonSafe);
    if (object instanceof Promise) object = await object;
    const { sql: value, bytes } = object;
    return this.db.transaction().execute(async (tx) => {
      let q = tx
        .updateTable('responses')
        .set({ status: obj.status, model: obj.model, object: value as any, object_bytes: bytes, updated_at: Math.floor(Date.now() / 1000) })
        .where('id', '=', obj.id)
        .where('deleted_at', 'is', null);
      if (onlyIfStatusIn) q = q.where('status', 'in', onlyIfStatusIn);
      const r = await q.executeTakeFirst();
      const wrote = Number(r.numUpdatedRows) > 0;
      if (wrote && events?.length) await this.insertEvents(tx as unknown as Db, obj.id, events);
      return wrote;
    });
  }

  async appendEvents(id: string, events: StreamEvent[]): Promise<void> {
    if (events.length) await this.insertEvents(this.db, id, events);
  }

  async get(id: string, userId: string): Promise<StoredResponse | undefined> {
    return this.read(sql`r.id = ${id} and r.user_id = ${userId} and r.deleted_at is null`);
  }

  /** Its object and job state only (StoredHead): none of its input items leave the database. */
  async head(id: string, userId: string): Promise<StoredHead | undefined> {
    const r = await sql<{ id: string; user_id: string; org_id: string; key_id: string; status: JobState; object: ResponseObject }>`
      select id, user_id, org_id, key_id, status, object from responses where id = ${id} and user_id = ${userId} and deleted_at is null`.execute(this.db);
    const row = r.rows[0];
    return row && { id: row.id, userId: row.user_id, orgId: row.org_id, keyId: row.key_id, object: row.object, job: row.status };
  }

  /**
   * A page of a stored response's input items, as GET /v1/responses/{id}/input_items pages them: after the item
   * `after` (its first place in `order`), at most `limit`, and whether more follow. Only the page leaves the
   * database. Undefined when the response is not stored; `afterMissing` when `after` is not one of its items.
   */
  async inputItemsPage(
    id: string,
    userId: string,
    q: { after?: string; limit: number; order: 'asc' | 'desc' },
  ): Promise<{ items: StoredItem[]; hasMore: boolean } | { afterMissing: true } | undefined> {
    if (!(await this.head(id, userId))) return undefined;
    const items = sql`responses r cross join lateral jsonb_array_elements(r.input_items) with ordinality as e(item, n)
       where r.id = ${id} and r.user_id = ${userId} and r.deleted_at is null`;
    let from: number | undefined;
    if (q.after !== undefined) {
      const at = await sql<{ n: number | null }>`select ${sql.raw(q.order === 'asc' ? 'min' : 'max')}(e.n)::int as n from ${items} and e.item->>'id' = ${q.after}`.execute(this.db);
      if (at.rows[0]?.n === null || at.rows[0]?.n === undefined) return { afterMissing: true };
      from = at.rows[0].n;
    }
    const past = from === undefined ? sql`` : q.order === 'asc' ? sql`and e.n > ${from}` : sql`and e.n < ${from}`;
    const r = await sql<{ item: StoredItem }>`
      select e.item from ${items} ${past} order by e.n ${sql.raw(q.order === 'asc' ? 'asc' : 'desc')} limit ${q.limit + 1}`.execute(this.db);
    const rows = r.rows.map((x) => x.item);
    return { items: rows.slice(0, q.limit), hasMore: rows.length > q.limit };
  }

  /** A response whoever owns it (background jobs). */
  async getAny(id: string): Promise<StoredResponse | undefined> {
    return this.read(sql`r.id = ${id} and r.deleted_at is null`);
  }

  /** one stored response, its items a row each (see ItemRow) */
  private async read(where: RawBuilder<unknown>): Promise<StoredResponse | undefined> {
    const r = await sql<ItemRow & { user_id: string; org_id: string; key_id: string; request: unknown; status: JobState }>`
      select r.id, r.user_id, r.org_id, r.key_id, r.status,
             case when e.n is null or e.n = 1 then r.object end as object,
             case when e.n is null or e.n = 1 then r.request end as request,
             e.item
        from responses r left join lateral jsonb_array_elements(r.input_items) with ordinality as e(item, n) on true
       where ${where}
       order by e.n`.execute(this.db);
    const got = byResponse(r.rows)[0];
    if (!got) return undefined;
    const row = got.first;
    return { id: row.id, userId: row.user_id, orgId: row.org_id, keyId: row.key_id, object: row.object!, inputItems: got.inputItems, request: row.request, job: row.status };
  }

  /** Takes a queued job for this instance: queued -> in_progress with a heartbeat. False if someone else has it. */
  async claim(id: string, runner: string): Promise<boolean> {
    // the object already says in_progress (what a client sees of a waiting job); only the job state moves
    const r = await sql`
      update responses set status = 'in_progress', runner_id = ${runner}, heartbeat_at = ${Date.now()}, updated_at = ${Math.floor(Date.now() / 1000)}
       where id = ${id} and status = 'queued' and deleted_at is null`.execute(this.db);
    return Number(r.numAffectedRows ?? 0) > 0;
  }

  async heartbeat(ids: string[], runner: string): Promise<void> {
    if (!ids.length) return;
    await this.db.updateTable('responses').set({ heartbeat_at: Date.now() }).where('id', 'in', ids).where('runner_id', '=', runner).execute();
  }

  /** Ends running jobs whose instance has not said it runs them since `before` (ms). Returns how many. */
  /**
   * Background responses still queued, never claimed and without a heartbeat (their job is on BullMQ), created
   * before `beforeSeconds`: their job may be gone (Redis lost it, or an older version queued it under another
   * prefix). At most `limit`, oldest first.
   */
  async unclaimed(beforeSeconds: number, limit = 100): Promise<string[]> {
    const rows = await this.db
      .selectFrom('responses')
      .select('id')
      .where('status', '=', 'queued')
      .where('heartbeat_at', 'is', null)
      .where('deleted_at', 'is', null)
      .where('created_at', '<', beforeSeconds)
      .orderBy('created_at')
      .limit(limit)
      .execute();
    return rows.map((r) => r.id);
  }

  async failStale(before: number, message: string, includeUnclaimed = false): Promise<number> {
    const error = JSON.stringify({ code: 'server_error', type: 'server_error', message });
    const r = await sql<{ id: string; object: ResponseObject }>`
      update responses
         set status = 'failed', updated_at = ${Math.floor(Date.now() / 1000)},
             object = object || jsonb_build_object('status', 'failed', 'error', ${error}::jsonb)
       where status in ('queued', 'in_progress') and deleted_at is null
         and ((heartbeat_at is not null and heartbeat_at < ${before}) or ${includeUnclaimed})
       returning id, object`.execute(this.db);
    // a replay of such a response ends the way a live stream would: with response.failed
    for (const row of r.rows) {
      const last = await this.db
        .selectFrom('response_events')
        .select((eb) => eb.fn.max('seq').as('seq'))
        .where('response_id', '=', row.id)
        .executeTakeFirst();
      const seq = last?.seq === null || last?.seq === undefined ? 0 : Number(last.seq) + 1;
      await this.appendEvents(row.id, [{ type: 'response.failed', sequence_number: seq, response: row.object }]);
    }
    return r.rows.length;
  }

  /** The chain ending at `id` (oldest first), as far as it is stored; empty when `id` itself is not. */
  async chain(id: string, userId: string, maxDepth = 1000): Promise<Array<{ id: string; object: ResponseObject; inputItems: StoredItem[] }>> {
    const r = await sql<ItemRow>`
      with recursive chain as (
        select id, previous_response_id, object, input_items, 0 as depth
          from responses where id = ${id} and user_id = ${userId} and deleted_at is null
        union all
        select r.id, r.previous_response_id, r.object, r.input_items, c.depth + 1
          from responses r join chain c on r.id = c.previous_response_id
         where r.user_id = ${userId} and r.deleted_at is null and c.depth < ${maxDepth}
      )
      select c.id, case when e.n is null or e.n = 1 then c.object end as object, e.item
        from chain c left join lateral jsonb_array_elements(c.input_items) with ordinality as e(item, n) on true
       order by c.depth desc, e.n`.execute(this.db);
    return byResponse(r.rows).map((g) => ({ id: g.first.id, object: g.first.object!, inputItems: g.inputItems }));
  }

  /**
   * The chain ending at `id`, newest first, each response with its stored size and no more: the sizes written with
   * the rows are summed in SQL and nothing of the items or objects leaves the database. The walk stops after
   * `maxDepth` earlier responses, and after the first response that brings the total past `maxBytes` (so a chain
   * far over a cap is measured only as far as the cap). Empty when `id` itself is not stored (or not the user's).
   */
  async chainSizes(id: string, userId: string, maxBytes: number, maxDepth = 1000): Promise<ChainLink[]> {
    const r = await sql<{ id: string; status: JobState; bytes: number | string }>`
      with recursive chain as (
        select r.id, r.previous_response_id, r.status, 0 as depth, s.bytes, s.bytes as total
          from responses r cross join lateral (select ${storedBytes} as bytes) s
         where r.id = ${id} and r.user_id = ${userId} and r.deleted_at is null
        union all
        select r.id, r.previous_response_id, r.status, c.depth + 1, s.bytes, c.total + s.bytes
          from chain c join responses r on r.id = c.previous_response_id cross join lateral (select ${storedBytes} as bytes) s
         where r.user_id = ${userId} and r.deleted_at is null and c.depth < ${maxDepth} and c.total <= ${maxBytes}
      )
      select id, status, bytes::float8 as bytes from chain order by depth`.execute(this.db);
    return r.rows.map((x) => ({ id: x.id, status: x.status, bytes: Number(x.bytes) }));
  }

  /**
   * These responses of a chain (ids oldest first, as chain() gives them), with their items; a response that is
   * no longer stored (deleted meanwhile) is missing from the answer.
   */
  async chainPart(ids: readonly string[], userId: string): Promise<Array<{ id: string; object: ResponseObject; inputItems: StoredItem[] }>> {
    if (!ids.length) return [];
    const wanted = sql.join(ids.map((id, i) => sql`(${id}::text, ${i}::int)`));
    const r = await sql<ItemRow>`
      select r.id, case when e.n is null or e.n = 1 then r.object end as object, e.item
        from (values ${wanted}) as w(id, pos) join responses r on r.id = w.id
        left join lateral jsonb_array_elements(r.input_items) with ordinality as e(item, n) on true
       where r.user_id = ${userId} and r.deleted_at is null
       order by w.pos, e.n`.execute(this.db);
    return byResponse(r.rows).map((g) => ({ id: g.first.id, object: g.first.object!, inputItems: g.inputItems }));
  }

  async events(id: string, after: number): Promise<StreamEvent[]> {
    const rows = await this.db.selectFrom('response_events').select('event').where('response_id', '=', id).where('seq', '>', after).orderBy('seq').execute();
    return rows.map((r) => r.event as StreamEvent);
  }

  async softDelete(id: string, userId: string): Promise<boolean> {
    const r = await this.db
      .updateTable('responses')
      .set({ deleted_at: Math.floor(Date.now() / 1000) })
      .where('id', '=', id)
      .where('user_id', '=', userId)
      .where('deleted_at', 'is', null)
      .executeTakeFirst();
    if (Number(r.numUpdatedRows) > 0) {
      await this.db.deleteFrom('response_events').where('response_id', '=', id).execute();
      return true;
    }
    return false;
  }
}
