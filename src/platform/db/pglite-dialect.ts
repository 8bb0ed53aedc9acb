import type { PGliteQueryable } from './pglite-client.js';
import {
  CompiledQuery,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  type DatabaseConnection,
  type Dialect,
  type Driver,
  type Kysely,
  type QueryResult,
  type TransactionSettings,
} from 'kysely';

/**
 * Kysely on embedded PGlite, in this thread or on its own worker thread (PGliteWorkerClient). PGlite is one session, so the driver hands out that one connection to one
 * user at a time (a transaction holds it until commit/rollback); everyone else waits in line.
 */
export class PGliteDialect implements Dialect {
  constructor(private readonly db: PGliteQueryable) {}
  createAdapter() {
    return new PostgresAdapter();
  }
  createDriver(): Driver {
    return new PGliteDriver(this.db);
  }
  createIntrospector(db: Kysely<any>) {
    return new PostgresIntrospector(db);
  }
  createQueryCompiler() {
    return new PostgresQueryCompiler();
  }
}

class PGliteConnection implements DatabaseConnection {
  /**
   * A `begin` not sent yet: it goes with the transaction's first statement, in one trip to the database's
   * thread instead of two (a transaction that runs nothing sends nothing).
   */
  pendingBegin: string | undefined;
  constructor(private readonly db: PGliteQueryable) {}
  async executeQuery<R>(q: CompiledQuery): Promise<QueryResult<R>> {
    const before = this.pendingBegin;
    this.pendingBegin = undefined;
    const r = await this.db.query<R>(q.sql, q.parameters as unknown[], before);
    return {
      rows: r.rows,
      numAffectedRows: r.affectedRows !== undefined ? BigInt(r.affectedRows) : undefined,
    };
  }
  // eslint-disable-next-line require-yield
  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error('streaming queries are not supported on PGlite');
  }
}

class PGliteDriver implements Driver {
  private readonly connection: PGliteConnection;
  private queue: Promise<void> = Promise.resolve();
  private release: (() => void) | undefined;

  constructor(private readonly db: PGliteQueryable) {
    this.connection = new PGliteConnection(db);
  }
  async init() {}
  async acquireConnection(): Promise<DatabaseConnection> {
    const previous = this.queue;
    let release!: () => void;
    this.queue = new Promise<void>((r) => (release = r));
    await previous;
    this.release = release;
    return this.connection;
  }
  async beginTransaction(conn: DatabaseConnection, settings: TransactionSettings) {
    let sql = 'begin';
    if (settings.isolationLevel) sql += ` isolation level ${settings.isolationLevel}`;
    (conn as PGliteConnection).pendingBegin = sql;
  }
  async commitTransaction(conn: DatabaseConnection) {
    if (this.unbegun(conn)) return;
    await conn.executeQuery(CompiledQuery.raw('commit'));
  }
  async rollbackTransaction(conn: DatabaseConnection) {
    if (this.unbegun(conn)) return;
    await conn.executeQuery(CompiledQuery.raw('rollback'));
  }
  /** a transaction whose begin was never sent: nothing to end */
  private unbegun(conn: DatabaseConnection) {
    const c = conn as PGliteConnection;
    if (c.pendingBegin === undefined) return false;
    c.pendingBegin = undefined;
    return true;
  }
  async releaseConnection() {
    this.connection.pendingBegin = undefined;
    const r = this.release;
    this.release = undefined;
    r?.();
  }
  async destroy() {
    await this.queue;
    if (!this.db.closed) await this.db.close();
  }
}
