import { existsSync, mkdirSync, openAsBlob, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { ConfigError, DEFAULT_PGLITE_SHARED_BUFFERS_MB, type Config } from '../config.js';
import { join } from 'node:path';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { PGliteDialect } from './pglite-dialect.js';
import { makePrivate, privateUmask } from '../data-dir.js';
import { PGliteWorkerClient, type PGliteQueryable } from './pglite-client.js';
import { JsonbText } from './jsonb.js';
import { migrations as builtIn } from './migrations.js';
import type { Database } from './schema.js';

export type Db = Kysely<Database>;

export interface DbOptions {
  databaseUrl?: string;
  dataDir: string;
  inMemory?: boolean;
  /** PGlite only: on a worker thread of its own (the default) or on this thread (false) */
  thread?: boolean;
  /** PGlite only: its shared buffers in MB (PGLITE_SHARED_BUFFERS_MB; default 8) */
  sharedBuffersMb?: number;
  /**
   * PGlite only: a new database (in memory, or a data directory without one yet) starts as a copy of this dump of
   * a migrated data directory (`OpenedDb.dump`) instead of being created by initdb: the test suite's databases
   * (test/helpers/db-template.ts)
   */
  template?: string;
  /** PostgreSQL only: a schema of its own (tests run side by side in one database) */
  schema?: string;
  poolSize?: number;
}

/** The database the configuration names: PostgreSQL (DATABASE_URL) or the embedded PGlite and its settings. */
export function dbOptionsOf(config: Config, extra: Partial<DbOptions> = {}): DbOptions {
  return {
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    inMemory: config.inMemoryDb,
    thread: config.pgliteThread,
    sharedBuffersMb: config.pgliteSharedBuffersMb,
    template: config.pgliteTemplate,
    ...extra,
  };
}

const INT8 = 20;
const NUMERIC = 1700;
const toNumber = (v: string) => (v === null ? null : Number(v));

export interface OpenedDb {
  db: Db;
  driver: 'pglite' | 'postgres';
  /** Applies every pending migration and gives their names; throws with the failing migration's name. */
  migrate(): Promise<string[]>;
  /** PGlite only: the data directory as a tar file, a template for later databases (DbOptions.template) */
  dump?(): Promise<Uint8Array>;
  /** The migrations not applied yet, in the order they would run (changes nothing). */
  pending(): Promise<string[]>;
  close(): Promise<void>;
}

/**
 * PGlite is one process's database: a second process opening the same files would not see the first one's
 * changes (an operator's `portico keys disable` would silently do nothing) and could damage them. The data
 * directory is locked by the process that has it open.
 */
export function lockDataDir(dataDir: string): () => void {
  const path = join(dataDir, 'portico.lock');
  const mine = String(process.pid);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(path, mine, { flag: 'wx' });
      return () => {
        try {
          if (readFileSync(path, 'utf8') === mine) unlinkSync(path);
        } catch {
          // already gone
        }
      };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const holder = Number(readFileSync(path, 'utf8').trim());
      let alive = false;
      try {
        alive = Number.isInteger(holder) && holder > 0 && holder !== process.pid && (process.kill(holder, 0), true);
      } catch {
        alive = false;
      }
      if (alive) {
        throw new ConfigError(
          `the embedded database in ${dataDir} is in use by process ${holder} (a running Portico). Stop it first, or run Portico on PostgreSQL (DATABASE_URL), where operator commands work while it serves.`,
        );
      }
      unlinkSync(path); // left by a process that is gone
    }
  }
  throw new ConfigError(`could not lock ${path}`);
}

/** The migrations recorded in a database that this release does not have (a newer release made them), in order. */
export function newerMigrations(done: Iterable<string>): string[] {
  return [...done].filter((n) => !Object.hasOwn(builtIn, n)).sort();
}

/**
 * A database a newer release has migrated is not opened by an older one: its code does not know the newer tables and
 * columns, and could write rows the newer release misreads (a downgrade is a restore of the backup taken before the
 * upgrade: docs/deployment.md, "Upgrades").
 */
function refuseNewer(done: Set<string>): void {
  const newer = newerMigrations(done);
  if (newer.length === 0) return;
  throw new ConfigError(
    `the database was migrated by a newer Portico: it has ${newer.length} migration${newer.length === 1 ? '' : 's'} this release does not know (${newer.join(', ')}). Run that release or a newer one; to go back to this release, restore the backup taken before the upgrade (docs/deployment.md, "Upgrades").`,
  );
}

/** PGlite on the calling thread (PORTICO_PGLITE_THREAD=off): the comparison baseline of bench:memory. */
async function openInThread(o: { dir?: string; postgresqlconf: string[]; template?: string }): Promise<PGliteQueryable & { dump(): Promise<Uint8Array> }> {
  const { PGlite } = await import('@electric-sql/pglite');
  const pglite = await PGlite.create(o.dir, {
    parsers: { [INT8]: toNumber, [NUMERIC]: toNumber } as any,
    postgresqlconf: o.postgresqlconf,
    ...(o.template ? { loadDataDir: await openAsBlob(o.template) } : {}),
  });
  return {
    async query<R>(sql: string, params?: unknown[], before?: string) {
      if (before) await pglite.query(before);
      return pglite.query<R>(
        sql,
        params?.map((p) => (p instanceof JsonbText ? p.json.text() : p)),
      );
    },
    close: () => pglite.close(),
    dump: async () => new Uint8Array(await (await pglite.dumpDataDir('none')).arrayBuffer()),
    get closed() {
      return pglite.closed;
    },
  };
}

export async function openDb(opts: DbOptions): Promise<OpenedDb> {
  let releaseLock: (() => void) | undefined;
  let db: Db;
  let driver: OpenedDb['driver'];
  let dump: OpenedDb['dump'];
  if (opts.databaseUrl) {
    // node-postgres is loaded only for PostgreSQL: a start on the embedded database does without it (~65 ms)
    const { default: pg } = await import('pg');
    const pool = new pg.Pool({
      connectionString: opts.databaseUrl,
      max: opts.poolSize ?? 10,
      connectionTimeoutMillis: 5_000,
      options: opts.schema ? `-c search_path=${opts.schema}` : undefined,
      types: {
        getTypeParser: ((oid: number, format?: any) => (oid === INT8 || oid === NUMERIC ? toNumber : pg.types.getTypeParser(oid, format))) as any,
      },
    });
    // an idle client losing its server must not crash the process; the next query reconnects
    pool.on('error', () => {});
    // pg-pool removes its error listener while a client is checked out (e.g. between the statements of a
    // transaction): a connection reset then would be an unhandled 'error' event that ends the process. The
    // query in flight fails on its own (503) and the broken client is dropped when it is released.
    pool.on('connect', (client) => client.on('error', () => {}));
    if (opts.schema) {
      const c = await pool.connect();
      try {
        await c.query(`create schema if not exists "${opts.schema.replace(/"/g, '')}"`);
      } finally {
        c.release();
      }
    }
    db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    driver = 'postgres';
  } else {
    let dir: string | undefined;
    if (!opts.inMemory) {
      dir = join(opts.dataDir, 'pglite');
      // PGlite creates its files 0666 less the umask, for as long as it runs (WAL segments, the commit log):
      // the process keeps a private umask from here on, whatever it was started with (docs/security.md)
      privateUmask();
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      releaseLock = lockDataDir(opts.dataDir);
    }
    const options = {
      dir,
      // PostgreSQL's default 128 MB of shared buffers is the largest part of PGlite's memory; Portico's working
      // set is small (keys, the usage ledger, stored responses are read by id), and a page not in them is read
      // from the OS's page cache. 8 MB: idle RSS ~149 MiB once settled (16 MB: ~157); PostgreSQL's 128 MB held
      // ~100 MiB more and opened slower (docs/performance.md, "Start-up and memory")
      postgresqlconf: [`shared_buffers=${opts.sharedBuffersMb ?? DEFAULT_PGLITE_SHARED_BUFFERS_MB}MB`],
    };
    const fresh = dir !== undefined && !existsSync(join(dir, 'PG_VERSION'));
    const template = opts.template && (dir === undefined || fresh) ? opts.template : undefined;
    if (fresh && !template) {
      // creating the cluster (initdb) leaves ~600 MB of WebAssembly memory behind that the open database never
      // uses: create it in a thread of its own and end that thread, so a first start runs as lean as every later one
      await (await PGliteWorkerClient.open(options)).close();
    }
    // its own thread: PGlite's WebAssembly never holds up the requests on the main thread
    // (docs/architecture.md, "The embedded database")
    const pglite = opts.thread === false ? await openInThread({ ...options, template }) : await PGliteWorkerClient.open({ ...options, template });
    dump = () => pglite.dump();
    // a new database is extracted with modes of its own (0666/0777): private now, and private stays what the
    // database creates from here on (the umask above)
    if (dir !== undefined) makePrivate(dir);
    db = new Kysely<Database>({ dialect: new PGliteDialect(pglite) });
    driver = 'pglite';
  }
  return {
    db,
    driver,
    dump,
    /**
     * Applies pending migrations in name order, each in its own transaction with its log row, under an advisory
     * lock (several instances starting at once migrate one at a time). Portico's own runner rather than
     * Kysely's: Kysely's looks for its tables by introspecting every schema of the database, so with a
     * search_path it could take another schema's log for ours, and it fails when another schema is dropped
     * while it looks. Names are unqualified: they resolve through the connection's search_path.
     */
    async pending() {
      const exists = await sql<{ t: string | null }>`select to_regclass('portico_migrations')::text as t`.execute(db);
      const done = exists.rows[0]?.t ? new Set((await sql<{ name: string }>`select name from portico_migrations`.execute(db)).rows.map((r) => r.name)) : new Set<string>();
      refuseNewer(done);
      return Object.keys(builtIn)
        .sort()
        .filter((n) => !done.has(n));
    },
    async migrate() {
      const applied: string[] = [];
      await db.connection().execute(async (conn) => {
        await sql`select pg_advisory_lock(hashtext('portico_migrations:' || current_schema()))`.execute(conn);
        try {
          await sql`create table if not exists portico_migrations (name varchar(255) not null primary key, timestamp varchar(255) not null)`.execute(conn);
          const done = new Set((await sql<{ name: string }>`select name from portico_migrations`.execute(conn)).rows.map((r) => r.name));
          refuseNewer(done);
          for (const name of Object.keys(builtIn).sort()) {
            if (done.has(name)) continue;
            try {
              await conn.transaction().execute(async (tx) => {
                await builtIn[name]!.up(tx);
                await sql`insert into portico_migrations (name, timestamp) values (${name}, ${new Date().toISOString()})`.execute(tx);
              });
              applied.push(name);
            } catch (e) {
              throw new Error(`database migration ${name} failed: ${(e as Error).message ?? e}`);
            }
          }
        } finally {
          await sql`select pg_advisory_unlock(hashtext('portico_migrations:' || current_schema()))`.execute(conn);
        }
      });
      return applied;
    },
    async close() {
      await db.destroy();
      releaseLock?.();
    },
  };
}

export { sql };
