import type { KyselyPlugin } from 'kysely';
import { openDb, sql, type DbOptions, type OpenedDb } from '../../src/platform/db/index.js';

/**
 * The in-memory PGlite databases of one test process, used again: an app's database, once its core has closed it, is
 * emptied back to the suite's template (every table but the migrations' truncated, its sequences restarted, its
 * session reset) and the next app of the same file gets it, instead of a new PGlite started from the template (a
 * thread, the WebAssembly instance, the template's files unpacked and PostgreSQL's start: ~1-1.5 s of CPU; the
 * reset is ~20-40 ms). A database whose tables, sequences or migrations are no longer the template's (a test made
 * or dropped one), or that fails its reset (its thread gone, a transaction left open), is closed instead.
 *
 * Each app gets its own view of the database: once it has given the database back, a query through that view
 * fails, as it would on a closed database, instead of reaching the next app's. PORTICO_TEST_PGLITE_POOL=off: every
 * app starts a database of its own (docs/performance.md, "The test suite").
 */
const idle = new Map<string, OpenedDb[]>();
/** what a database made from the template holds, per template: its relations and its migrations */
const shapes = new Map<string, string>();
/** the most databases kept waiting per template: the apps of a file mostly run one after the other */
const KEEP = 2;
/** what the pool did in this process: databases started, lent again after a reset, and closed instead of kept */
const counts = { started: 0, reused: 0, closed: 0 };
export const poolCounts = () => ({ ...counts });

export async function openPooled(options: DbOptions): Promise<OpenedDb> {
  const poolable = options.inMemory && options.template && !options.databaseUrl && options.thread !== false && process.env.PORTICO_TEST_PGLITE_POOL !== 'off';
  if (!poolable) return openDb(options);
  const key = JSON.stringify([options.template, options.sharedBuffersMb ?? null]);
  let opened = idle.get(key)?.pop();
  if (opened) counts.reused++;
  else {
    opened = await openDb(options);
    counts.started++;
    if (!shapes.has(key)) {
      try {
        shapes.set(key, (await onlyMigrationRows(opened)) ? await shapeOf(opened) : 'not poolable');
      } catch (e) {
        await opened.close();
        throw e;
      }
    }
  }
  return lend(key, opened);
}

function lend(key: string, opened: OpenedDb): OpenedDb {
  let given = false;
  const guard: KyselyPlugin = {
    transformQuery(args) {
      if (given) throw new Error('the database was closed (given back to the test pool)');
      return args.node;
    },
    transformResult: async (args) => args.result,
  };
  return {
    ...opened,
    db: opened.db.withPlugin(guard),
    async close() {
      if (given) return;
      given = true;
      await giveBack(key, opened);
    },
  };
}

async function giveBack(key: string, opened: OpenedDb): Promise<void> {
  const waiting = idle.get(key) ?? [];
  try {
    if (waiting.length >= KEEP) throw new Error('enough waiting');
    // DISCARD ALL refuses to run inside a transaction: one left open closes the database
    await sql`discard all`.execute(opened.db);
    if ((await shapeOf(opened)) !== shapes.get(key)) throw new Error('no longer the template');
    const tables = await tablesOf(opened);
    if (tables.length > 0) await sql.raw(`truncate ${tables.join(', ')} restart identity cascade`).execute(opened.db);
    const sequences = await sql<{ s: string }>`select quote_ident(relname) as s from pg_class where relnamespace = current_schema()::regnamespace and relkind = 'S'`.execute(
      opened.db,
    );
    for (const { s } of sequences.rows) await sql.raw(`alter sequence ${s} restart`).execute(opened.db);
  } catch {
    counts.closed++;
    await opened.close().catch(() => {});
    return;
  }
  waiting.push(opened);
  idle.set(key, waiting);
}

/** the tables a core writes (every one but the migrations'), quoted */
async function tablesOf(opened: OpenedDb): Promise<string[]> {
  const r = await sql<{
    t: string;
  }>`select quote_ident(relname) as t from pg_class where relnamespace = current_schema()::regnamespace and relkind in ('r', 'p') and relname <> 'portico_migrations'`.execute(
    opened.db,
  );
  return r.rows.map((row) => row.t);
}

/** a template whose migrations put rows in other tables would lose them to the reset: such a template is not pooled */
async function onlyMigrationRows(opened: OpenedDb): Promise<boolean> {
  for (const t of await tablesOf(opened)) {
    if ((await sql.raw<{ n: number }>(`select count(*)::int as n from ${t}`).execute(opened.db)).rows[0]!.n > 0) return false;
  }
  return true;
}

/** the relations of the database's schema with their kinds and columns, and the migrations applied */
async function shapeOf(opened: OpenedDb): Promise<string> {
  const r = await sql<{ s: string }>`select
      (select string_agg(c.relname || ':' || c.relkind::text || ':' || coalesce((select string_agg(a.attname || '/' || a.atttypid::text, ',' order by a.attnum) from pg_attribute a where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped), ''), ';' order by c.relname)
         from pg_class c where c.relnamespace = current_schema()::regnamespace)
      || '|' || (select string_agg(name, ',' order by name) from portico_migrations)
      || '|' || (select count(*) from pg_proc where pronamespace = current_schema()::regnamespace) as s`.execute(opened.db);
  return r.rows[0]!.s;
}
