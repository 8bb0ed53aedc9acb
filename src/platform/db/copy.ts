/**
 * `portico migrate-data`: every row of one Portico database copied into another (the embedded one into PostgreSQL),
 * in one transaction of the target: tables in foreign-key order, in batches, every value through its text form
 * (jsonb, arrays, bigints and floats arrive exactly as they were), then the sequences set past the copied ids and
 * the rows counted on both sides. A failure anywhere rolls the whole copy back.
 */
import { sql, type Kysely } from 'kysely';
import { tableNames } from './backup.js';

/** rows read from the source at a time */
const READ_ROWS = 500;
/** an INSERT carries at most this many characters of values (large stored responses go a few at a time) */
const INSERT_CHARS = 8 << 20;
/** PostgreSQL's limit of parameters in one statement is 65535 */
const MAX_PARAMS = 60_000;

interface Column {
  name: string;
  /** format_type(): what the text form is cast back to */
  type: string;
  identityAlways: boolean;
}

async function columnsOf(db: Kysely<any>): Promise<Map<string, Column[]>> {
  const rows = (
    await sql<{ t: string; c: string; type: string; identity: string }>`
      select c.relname as t, a.attname as c, format_type(a.atttypid, a.atttypmod) as type, a.attidentity as identity
      from pg_attribute a join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = current_schema() and c.relkind = 'r' and a.attnum > 0 and not a.attisdropped and a.attgenerated = ''
      order by c.relname, a.attnum`.execute(db)
  ).rows;
  const out = new Map<string, Column[]>();
  for (const r of rows) {
    const list = out.get(r.t) ?? [];
    list.push({ name: r.c, type: r.type, identityAlways: r.identity === 'a' });
    out.set(r.t, list);
  }
  return out;
}

async function primaryKey(db: Kysely<any>, table: string): Promise<string[]> {
  return (
    await sql<{ c: string }>`
      select a.attname as c from pg_index i
      join pg_attribute a on a.attrelid = i.indrelid and a.attnum = any(i.indkey)
      where i.indrelid = (quote_ident(current_schema()) || '.' || quote_ident(${table}))::regclass and i.indisprimary
      order by array_position(i.indkey::int2[], a.attnum)`.execute(db)
  ).rows.map((r) => r.c);
}

/** The tables in an order where every table comes after those its foreign keys point at. */
export async function foreignKeyOrder(db: Kysely<any>, tables: string[]): Promise<string[]> {
  const edges = (
    await sql<{ child: string; parent: string }>`
      select c.relname as child, p.relname as parent from pg_constraint k
      join pg_class c on c.oid = k.conrelid join pg_class p on p.oid = k.confrelid
      join pg_namespace n on n.oid = c.relnamespace
      where k.contype = 'f' and n.nspname = current_schema()`.execute(db)
  ).rows;
  const parents = new Map<string, Set<string>>(tables.map((t) => [t, new Set()]));
  for (const e of edges) if (e.child !== e.parent && parents.has(e.child) && parents.has(e.parent)) parents.get(e.child)!.add(e.parent);
  const out: string[] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (t: string) => {
    if (state.get(t) === 'done') return;
    if (state.get(t) === 'visiting') throw new Error(`the foreign keys of ${t} form a cycle: it cannot be copied table by table`);
    state.set(t, 'visiting');
    for (const p of [...parents.get(t)!].sort()) visit(p);
    state.set(t, 'done');
    out.push(t);
  };
  for (const t of [...tables].sort()) visit(t);
  return out;
}

export async function countRows(db: Kysely<any>, tables: string[]): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const t of tables) out[t] = Number((await sql<{ n: number }>`select count(*)::bigint as n from ${sql.id(t)}`.execute(db)).rows[0]!.n);
  return out;
}

/**
 * Portico's tables (`portico`: the names to look at, the source's) in the target that hold rows, its migration log
 * aside: a target with data is not written to. Tables of other applications in the same schema are not looked at.
 */
export async function tablesWithRows(db: Kysely<any>, portico: string[]): Promise<Record<string, number>> {
  const have = await tableNames(db);
  if (!have.includes('portico_migrations')) return {};
  const counts = await countRows(
    db,
    have.filter((t) => t !== 'portico_migrations' && portico.includes(t)),
  );
  return Object.fromEntries(Object.entries(counts).filter(([, n]) => n > 0));
}

export interface CopyResult {
  /** table -> [rows in the source, rows in the target after the copy], in the order copied */
  tables: Array<{ table: string; source: number; target: number }>;
  sequences: Array<{ sequence: string; value: number }>;
}

/**
 * Copies every table of `source` (its migration log aside: the target has its own, at the same level) into the
 * same tables of `target`, which must exist and be empty, in one transaction of the target. The counts of the
 * source are taken first; the source must not change meanwhile (the embedded database is locked by its opener).
 */
export async function copyDatabase(source: Kysely<any>, target: Kysely<any>, progress?: (table: string, rows: number) => void): Promise<CopyResult> {
  const srcCols = await columnsOf(source);
  const tables = (await tableNames(source)).filter((t) => t !== 'portico_migrations');
  const before = await countRows(source, tables);
  return target.transaction().execute(async (tx) => {
    const dstCols = await columnsOf(tx);
    for (const t of tables) {
      const dst = dstCols.get(t);
      if (!dst) throw new Error(`table ${t} of the embedded database does not exist in the target (are both at the same migration level?)`);
      const missing = srcCols.get(t)!.filter((c) => !dst.some((d) => d.name === c.name));
      if (missing.length) throw new Error(`table ${t} of the target has no column ${missing.map((c) => c.name).join(', ')}`);
    }
    const full = await tablesWithRows(tx, tables);
    if (Object.keys(full).length)
      throw new Error(
        `the target already holds Portico data (${Object.entries(full)
          .map(([t, n]) => `${t}: ${n} rows`)
          .join(', ')})`,
      );
    const order = await foreignKeyOrder(tx, tables);
    const result: CopyResult = { tables: [], sequences: [] };
    for (const t of order) {
      const cols = srcCols.get(t)!;
      const types = new Map(dstCols.get(t)!.map((c) => [c.name, c]));
      const pk = await primaryKey(source, t);
      const overriding = cols.some((c) => types.get(c.name)!.identityAlways) ? sql` overriding system value` : sql``;
      const select = sql.join(cols.map((c) => sql`${sql.ref(c.name)}::text as ${sql.ref(c.name)}`));
      const insertCols = sql.join(cols.map((c) => sql.ref(c.name)));
      const maxRows = Math.max(1, Math.floor(MAX_PARAMS / cols.length));
      let last: Array<string | null> | undefined;
      let offset = 0;
      let copied = 0;
      for (;;) {
        // keyset paging on the primary key (each batch starts after the last row of the one before); a table without
        // one is read by offset (Portico's tables all have one)
        const order = pk.length ? sql` order by ${sql.join(pk.map((c) => sql.ref(c)))}` : sql``;
        const after =
          pk.length && last ? sql` where (${sql.join(pk.map((c) => sql.ref(c)))}) > (${sql.join(pk.map((c, i) => sql`${last![i]}::${sql.raw(types.get(c)!.type)}`))})` : sql``;
        const page = pk.length ? sql`` : sql` offset ${offset}`;
        const rows = (await sql<Record<string, string | null>>`select ${select} from ${sql.id(t)}${after}${order} limit ${READ_ROWS}${page}`.execute(source)).rows;
        if (rows.length === 0) break;
        offset += rows.length;
        last = pk.map((c) => rows[rows.length - 1]![c] ?? null);
        for (let i = 0; i < rows.length;) {
          const chunk: Array<Record<string, string | null>> = [];
          let chars = 0;
          while (i < rows.length && chunk.length < maxRows && (chunk.length === 0 || chars < INSERT_CHARS)) {
            const r = rows[i++]!;
            for (const c of cols) chars += r[c.name]?.length ?? 0;
            chunk.push(r);
          }
          const values = sql.join(chunk.map((r) => sql`(${sql.join(cols.map((c) => sql`${r[c.name] ?? null}::${sql.raw(types.get(c.name)!.type)}`))})`));
          await sql`insert into ${sql.id(t)} (${insertCols})${overriding} values ${values}`.execute(tx);
        }
        copied += rows.length;
        progress?.(t, copied);
        if (rows.length < READ_ROWS) break;
      }
      // serial and identity columns: the next id comes after every copied one (and after what the source had handed out)
      for (const c of dstCols.get(t)!) {
        const seq = (await sql<{ s: string | null }>`select pg_get_serial_sequence(quote_ident(${t}), ${c.name}) as s`.execute(tx)).rows[0]?.s;
        if (!seq) continue;
        const srcSeq = (await sql<{ s: string | null }>`select pg_get_serial_sequence(quote_ident(${t}), ${c.name}) as s`.execute(source)).rows[0]?.s;
        let handed = 0;
        if (srcSeq) {
          const s = (await sql<{ last_value: number; is_called: boolean }>`select last_value, is_called from ${sql.raw(srcSeq)}`.execute(source)).rows[0];
          if (s?.is_called) handed = Number(s.last_value);
        }
        const max = Number((await sql<{ m: number | null }>`select max(${sql.ref(c.name)})::bigint as m from ${sql.id(t)}`.execute(tx)).rows[0]?.m ?? 0);
        const value = Math.max(handed, max);
        if (value > 0) await sql`select setval(${seq}, ${value}, true)`.execute(tx);
        else await sql`select setval(${seq}, 1, false)`.execute(tx);
        result.sequences.push({ sequence: seq, value });
      }
    }
    const after = await countRows(tx, order);
    for (const t of order) result.tables.push({ table: t, source: before[t]!, target: after[t]! });
    const wrong = result.tables.filter((r) => r.source !== r.target);
    if (wrong.length)
      throw new Error(`row counts differ after the copy (${wrong.map((w) => `${w.table}: ${w.source} in the source, ${w.target} copied`).join('; ')}): nothing was kept`);
    return result;
  });
}
