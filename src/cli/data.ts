/**
 * `portico backup`, `portico restore` and `portico migrate-data`: the embedded database (DATA_DIR) copied to one
 * file and back, or moved to PostgreSQL (docs/deployment.md, "Backups" and "From the embedded database to
 * PostgreSQL"). The server's side of an online backup (answerBackup) is asked over the control socket.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { gunzip, gzip } from 'node:zlib';
import { dataDirOf, DEFAULT_PGLITE_SHARED_BUFFERS_MB } from '../platform/config.js';
import { lockDataDir, openDb, type OpenedDb } from '../platform/db/index.js';
import {
  BackupFileError,
  encodeBackup,
  readBackup,
  snapshotDatabase,
  snapshotPath,
  tableNames,
  writeFileAtomic,
  type BackupFileName,
  type Snapshot,
} from '../platform/db/backup.js';
import { copyDatabase, countRows, tablesWithRows } from '../platform/db/copy.js';
import { controlSocketPath, ControlUnreachable, sendControl } from '../platform/ops/control.js';
import { createLogger } from '../platform/log.js';
import { UsageStore } from '../portal/usage/store.js';
import { UsageService } from '../portal/usage/service.js';
import { RefusedRecords, UsageJournal } from '../portal/usage/journal.js';
import type { Core } from '../compose/core.js';
import { UsageError } from './usage-error.js';

const gzipAsync = promisify(gzip);
const gunzipAsync = promisify(gunzip);

/** the generated secrets a restored installation needs, kept in DATA_DIR when not set in the environment */
const SECRETS = [
  { file: 'key-pepper', env: 'KEY_PEPPER', why: 'the pepper of the stored key digests: without it no existing API key verifies' },
  { file: 'jwt-secret', env: 'JWT_SECRET', why: "the portal tokens' signing secret" },
] as const;

const out = (line = '') => process.stdout.write(line + '\n');

function size(bytes: number): string {
  return bytes >= 1 << 20 ? `${(bytes / (1 << 20)).toFixed(1)} MiB` : bytes >= 1024 ? `${(bytes / 1024).toFixed(1)} KiB` : `${bytes} bytes`;
}

function tablesLine(tables: Record<string, number>): string {
  const names = Object.keys(tables).sort();
  const rows = names.reduce((n, t) => n + tables[t]!, 0);
  return `${names.length} tables, ${rows} rows (${names.map((t) => `${t} ${tables[t]}`).join(', ')})`;
}

function databaseUrlSet(): boolean {
  return !!process.env.DATABASE_URL?.trim();
}

/** What to run instead on PostgreSQL: the commands docs/deployment.md ("Backups") documents. */
export function postgresAdvice(what: 'backup' | 'restore'): string {
  const dump = 'pg_dump --format=custom --no-owner --file=portico.dump "$DATABASE_URL"';
  const restore = 'pg_restore --clean --if-exists --no-owner --single-transaction --dbname="$DATABASE_URL" portico.dump';
  return (
    `DATABASE_URL is set: this installation's database is PostgreSQL, which \`portico ${what}\` does not copy (it copies the embedded database in DATA_DIR). ` +
    `Use PostgreSQL's own tools (add --schema=NAME when Portico has a schema of its own):\n` +
    `  ${what === 'backup' ? dump : restore}\n` +
    `${what === 'restore' ? 'Then stop every instance, delete what this installation keeps in Redis (docs/deployment.md, "Backups"), and start them again.\n' : ''}` +
    `Keep KEY_PEPPER and JWT_SECRET with the dump: without the same KEY_PEPPER no restored API key verifies.`
  );
}

/** the pid holding DATA_DIR's lock, when that process is alive (a running Portico) */
function lockHolder(dataDir: string): number | undefined {
  try {
    const pid = Number(readFileSync(join(dataDir, 'portico.lock'), 'utf8').trim());
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) return undefined;
    process.kill(pid, 0);
    return pid;
  } catch (e) {
    // EPERM: alive, another user's
    if ((e as NodeJS.ErrnoException).code === 'EPERM') return -1;
    return undefined;
  }
}

function hasEmbeddedDatabase(dataDir: string): boolean {
  return existsSync(join(dataDir, 'pglite', 'PG_VERSION'));
}

/** opens DATA_DIR's embedded database (never creating one), as the `portico` command opens it */
async function openEmbedded(dataDir: string, template?: string): Promise<OpenedDb> {
  const mb = Number(process.env.PGLITE_SHARED_BUFFERS_MB);
  return openDb({
    dataDir,
    thread: process.env.PORTICO_PGLITE_THREAD !== 'off',
    sharedBuffersMb: Number.isInteger(mb) && mb >= 1 && mb <= 4096 ? mb : DEFAULT_PGLITE_SHARED_BUFFERS_MB,
    ...(template ? { template } : {}),
  });
}

/**
 * The server's part of `portico backup` (its control socket's `backup` command): the usage records waiting in the
 * journal go to the database first, then a consistent copy of the database is written to a private file in
 * DATA_DIR for the command to take (and remove).
 */
export async function answerBackup(core: Core): Promise<Record<string, unknown>> {
  if (core.db.driver !== 'pglite' || !core.db.dump) return { ok: false, error: 'this server runs on PostgreSQL: back it up with pg_dump (docs/deployment.md, "Backups")' };
  try {
    await core.usage.flush();
  } catch {
    // what could not be shipped stays in the journal: it comes after the copy, as records made after it do
  }
  // a copy an earlier command never took (it was killed, or gave up waiting) is not kept for ever
  for (const name of readdirSync(core.config.dataDir)) {
    const p = join(core.config.dataDir, name);
    if (/^backup-\d+-[0-9a-f]+\.tmp$/.test(name) && Date.now() - statSync(p).mtimeMs > 3_600_000) rmSync(p, { force: true });
  }
  const snap = await snapshotDatabase(core.db);
  const file = snapshotPath(core.config.dataDir);
  writeFileSync(file, snap.tar, { mode: 0o600 });
  // the secrets this server takes from its environment rather than from DATA_DIR: the command leaves their files out
  const fromEnv = [...(core.config.keyPepperFromEnv ? ['KEY_PEPPER'] : []), ...(core.config.jwt.secret && !core.config.jwt.secretGenerated ? ['JWT_SECRET'] : [])];
  return { ok: true, file, migrations: snap.migrations, tables: snap.tables, secrets_from_env: fromEnv };
}

export async function backupCommand(file: string, o: { force: boolean }, version: string): Promise<void> {
  if (databaseUrlSet()) throw new UsageError(postgresAdvice('backup'));
  if (process.env.PORTICO_DB === 'memory') throw new UsageError('PORTICO_DB=memory: the database is in the memory of a process, there is nothing on disk to back up');
  const dest = resolve(file);
  if (existsSync(dest)) {
    if (statSync(dest).isDirectory()) throw new UsageError(`${dest} is a folder: name the backup file to write`);
    if (!o.force) throw new UsageError(`${dest} exists: give --force to replace it`);
  }
  const parent = resolve(dest, '..');
  if (!existsSync(parent)) throw new UsageError(`${parent} does not exist: create the folder first`);
  const dataDir = dataDirOf();
  let snap: Snapshot;
  let online = false;
  // the secrets set in the environment (of the server, when one makes the copy): not in DATA_DIR's files
  let fromEnv: string[] = SECRETS.filter((s) => process.env[s.env]).map((s) => s.env);
  try {
    // a running server holds the database: it makes the copy
    const answer = await sendControl(controlSocketPath(dataDir), 'backup', 600_000);
    if (answer.ok !== true || typeof answer.file !== 'string') throw new UsageError(`the running server did not make the copy: ${String(answer.error ?? 'no reason given')}`);
    try {
      snap = { tar: readFileSync(answer.file), migrations: answer.migrations as string[], tables: answer.tables as Record<string, number> };
    } finally {
      rmSync(answer.file, { force: true });
    }
    online = true;
    if (Array.isArray(answer.secrets_from_env)) fromEnv = answer.secrets_from_env as string[];
  } catch (e) {
    if (!(e instanceof ControlUnreachable) || !e.noServer) throw e instanceof ControlUnreachable ? new UsageError(e.message) : e;
    // no server: the data directory is opened here (and locked meanwhile)
    if (!hasEmbeddedDatabase(dataDir)) throw new UsageError(`there is no embedded database in ${dataDir} (DATA_DIR): nothing to back up`);
    const pid = lockHolder(dataDir);
    if (pid)
      throw new UsageError(
        `the embedded database in ${dataDir} is held by process ${pid} (a running Portico) but no server answers on its control socket (${controlSocketPath(dataDir)}): wait until it has started, or stop it`,
      );
    const db = await openEmbedded(dataDir);
    try {
      snap = await snapshotDatabase(db);
    } finally {
      await db.close();
    }
  }
  const files: Array<{ name: BackupFileName; data: Uint8Array }> = [{ name: 'pglite.tar.gz', data: await gzipAsync(snap.tar) }];
  const notes: string[] = [];
  for (const s of SECRETS) {
    const p = join(dataDir, s.file);
    if (fromEnv.includes(s.env))
      notes.push(`${s.env} is set in the ${online ? "server's " : ''}environment: it is not in the backup; a restored installation needs the same ${s.env}`);
    else if (existsSync(p)) files.push({ name: s.file, data: readFileSync(p) });
  }
  // a stopped server's records not shipped yet (a running one shipped them before the copy)
  const journal = join(dataDir, 'usage-journal.ndjson');
  if (!online && existsSync(journal)) {
    const text = readFileSync(journal, 'utf8');
    const whole = text.slice(0, text.lastIndexOf('\n') + 1);
    if (whole) files.push({ name: 'usage-journal.ndjson', data: Buffer.from(whole, 'utf8') });
  }
  const parts = encodeBackup(
    { created_at: new Date().toISOString(), portico_version: version, database: 'pglite', online, migrations: snap.migrations, tables: snap.tables },
    files,
  );
  writeFileAtomic(dest, parts);
  const bytes = parts.reduce((n, p) => n + p.length, 0);
  out(`backup written to ${dest} (${size(bytes)}, readable by you only)`);
  out(
    `  database: ${online ? 'copied from the running server' : 'copied from the data directory (no server running)'}, ${snap.migrations.length} migrations (last ${snap.migrations.at(-1) ?? 'none'})`,
  );
  out(`  ${tablesLine(snap.tables)}`);
  const extra = files.filter((f) => f.name !== 'pglite.tar.gz').map((f) => f.name);
  if (extra.length) out(`  with: ${extra.join(', ')}`);
  for (const n of notes) out(`  note: ${n}`);
  out(`  not included: downloaded model files (MODELS_DIR, by default DATA_DIR/models): copy that folder or pull the models again`);
  out(`  The file holds key digests, the key pepper and stored requests: keep it as private as DATA_DIR.`);
}

/** What restore moves aside (the installation it replaces), in this order. */
const ASIDE = ['pglite', 'key-pepper', 'jwt-secret', 'usage-journal.ndjson'] as const;

export async function restoreCommand(file: string): Promise<void> {
  if (databaseUrlSet()) throw new UsageError(postgresAdvice('restore'));
  const path = resolve(file);
  let backup: ReturnType<typeof readBackup>;
  try {
    backup = readBackup(path);
  } catch (e) {
    if (e instanceof BackupFileError) throw new UsageError(`${e.message}; nothing was changed`);
    throw e;
  }
  let tar: Buffer;
  try {
    tar = await gunzipAsync(backup.files.get('pglite.tar.gz')!);
  } catch (e) {
    throw new UsageError(`${path} is damaged: its database does not unpack (${(e as Error).message}); nothing was changed`);
  }
  const { manifest, files } = backup;
  const dataDir = dataDirOf();
  const running = (pid: number) =>
    new UsageError(
      `a Portico server${pid > 0 ? ` (process ${pid})` : ''} is running on ${dataDir} (DATA_DIR): stop it first; restore replaces the database it has open. Nothing was changed.`,
    );
  const pid = lockHolder(dataDir);
  if (pid) throw running(pid);
  try {
    await sendControl(controlSocketPath(dataDir), 'ping', 5_000);
    throw running(0);
  } catch (e) {
    if (!(e instanceof ControlUnreachable) || !e.noServer) throw e instanceof ControlUnreachable ? running(0) : e;
  }
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  let unlock: () => void;
  try {
    unlock = lockDataDir(dataDir);
  } catch {
    throw running(lockHolder(dataDir) ?? 0);
  }
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const aside = join(dataDir, `before-restore-${stamp}`);
  const moved: string[] = [];
  const written: string[] = [];
  const tmpTar = join(dataDir, `restore-${process.pid}.tmp`);
  let tables: Record<string, number>;
  let pending: string[];
  try {
    for (const name of ASIDE) {
      if (!existsSync(join(dataDir, name))) continue;
      mkdirSync(aside, { recursive: true, mode: 0o700 });
      renameSync(join(dataDir, name), join(aside, name));
      moved.push(name);
    }
    for (const name of ['key-pepper', 'jwt-secret', 'usage-journal.ndjson'] as const) {
      const data = files.get(name);
      if (!data) continue;
      writeFileSync(join(dataDir, name), data, { mode: 0o600, flag: 'wx' });
      written.push(name);
    }
    writeFileSync(tmpTar, tar, { mode: 0o600 });
    // a new database made as a copy of the backup's (the way PORTICO_PGLITE_TEMPLATE makes one), then opened and
    // checked: the migrations this release knows, and every table's rows as the backup counted them
    const db = await openEmbedded(dataDir, tmpTar);
    try {
      pending = await db.pending();
      tables = await countRows(db.db, await tableNames(db.db));
    } finally {
      await db.close();
    }
    const wrong = Object.keys(manifest.tables).filter((t) => tables[t] !== manifest.tables[t]);
    if (wrong.length)
      throw new Error(
        `the restored database does not hold what the backup counted (${wrong.map((t) => `${t}: ${tables[t] ?? 'missing'} rows, ${manifest.tables[t]} expected`).join('; ')})`,
      );
  } catch (e) {
    // back as it was: the new files removed, the old ones returned
    rmSync(join(dataDir, 'pglite'), { recursive: true, force: true });
    for (const name of written) rmSync(join(dataDir, name), { force: true });
    for (const name of moved) renameSync(join(aside, name), join(dataDir, name));
    if (moved.length) rmSync(aside, { recursive: true, force: true });
    throw new UsageError(`the restore failed, nothing was changed: ${(e as Error).message}`);
  } finally {
    rmSync(tmpTar, { force: true });
    // openDb took the lock over and released it; this removes it only if it is still this process's
    unlock();
  }
  out(`restored ${path} (made ${manifest.created_at} by Portico ${manifest.portico_version}) into ${dataDir}`);
  out(`  ${tablesLine(tables)}: as the backup counted them`);
  if (pending.length) out(`  ${pending.length} migrations of this release will be applied at the next start (${pending.join(', ')})`);
  if (written.length) out(`  with: ${written.join(', ')}`);
  if (moved.length)
    out(`  the database it replaced (and its ${moved.filter((m) => m !== 'pglite').join(', ') || 'files'}) was moved to ${aside}: delete it once the restore is checked`);
  for (const s of SECRETS)
    if (!files.has(s.file))
      out(
        `  note: the backup holds no ${s.file} (${s.env} was set when it was made): start Portico with the same ${s.env}${s.file === 'key-pepper' ? ', or it refuses to start (the keys would not verify)' : ''}`,
      );
  out(`  If this installation uses Redis (REDIS_URL), delete its keys before starting it (docs/deployment.md, "Backups").`);
}

/** The URL as it may be printed: without its password. */
export function redactUrl(raw: string): string {
  try {
    const u = new URL(raw);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(the given URL)';
  }
}

function describeConnectError(e: unknown): string {
  const err = e as NodeJS.ErrnoException & { errors?: Error[] };
  const inner = err.errors?.[0] as (NodeJS.ErrnoException & { address?: string; port?: number }) | undefined;
  return [err.code ?? inner?.code, err.message || inner?.message].filter(Boolean).join(': ') || String(e);
}

export async function migrateDataCommand(o: { to: string }): Promise<void> {
  let target: URL;
  try {
    target = new URL(o.to);
  } catch {
    throw new UsageError('--to must be a PostgreSQL URL: postgres://USER:PASSWORD@HOST:5432/DATABASE');
  }
  if (target.protocol !== 'postgres:' && target.protocol !== 'postgresql:') throw new UsageError('--to must start with postgres:// or postgresql://');
  if (databaseUrlSet())
    throw new UsageError(
      'DATABASE_URL is set: migrate-data copies the embedded database in DATA_DIR to --to; run it without DATABASE_URL (set DATABASE_URL afterwards, to start Portico on PostgreSQL)',
    );
  const dataDir = dataDirOf();
  const shown = redactUrl(o.to);
  if (!hasEmbeddedDatabase(dataDir)) throw new UsageError(`there is no embedded database in ${dataDir} (DATA_DIR): nothing to copy`);
  const pid = lockHolder(dataDir);
  if (pid)
    throw new UsageError(
      `a Portico server${pid > 0 ? ` (process ${pid})` : ''} is running on ${dataDir} (DATA_DIR): stop it first (what it wrote during the copy would be lost). Nothing was changed.`,
    );
  const source = await openEmbedded(dataDir);
  try {
    const pendingHere = await source.pending();
    if (pendingHere.length)
      throw new UsageError(`the embedded database lacks ${pendingHere.length} migrations of this release (${pendingHere.join(', ')}): run \`portico migrate\` on DATA_DIR first`);
    // usage records a stopped server had not shipped go into the database first, as its next start would ship them
    const journal = new UsageJournal(dataDir);
    const usage = new UsageService(new UsageStore(source.db), journal, { log: createLogger('silent'), refused: new RefusedRecords(dataDir) });
    const shipped = await usage.recover();
    await usage.close();
    if (shipped) out(`usage journal: ${shipped} records not in the database yet were stored first`);

    const dest = await openDb({ databaseUrl: o.to, dataDir, poolSize: 2 });
    try {
      try {
        await dest.db.selectNoFrom((eb) => eb.val(1).as('one')).execute();
      } catch (e) {
        throw new UsageError(`cannot use the PostgreSQL database at ${shown}: ${describeConnectError(e)}. Nothing was written.`);
      }
      const full = await tablesWithRows(dest.db, await tableNames(source.db));
      if (Object.keys(full).length)
        throw new UsageError(
          `${shown} already holds Portico data (${Object.entries(full)
            .map(([t, n]) => `${t}: ${n} rows`)
            .join(', ')}): migrate-data writes only into an empty database. Nothing was written.`,
        );
      const applied = await dest.migrate();
      out(`target ${shown}: ${applied.length ? `${applied.length} migrations applied` : 'already at this release'}`);
      const { sql } = await import('kysely');
      const names = async (db: OpenedDb) => (await sql<{ name: string }>`select name from portico_migrations order by name`.execute(db.db)).rows.map((r) => r.name);
      const [mine, theirs] = [await names(source), await names(dest)];
      if (mine.join() !== theirs.join()) throw new UsageError(`the target's migrations (${theirs.join(', ')}) are not the embedded database's (${mine.join(', ')})`);
      let result;
      try {
        result = await copyDatabase(source.db, dest.db);
      } catch (e) {
        throw new UsageError(`the copy failed and was rolled back (the target holds no data of it): ${(e as Error).message}`);
      }
      out(`copied ${dataDir} (embedded) to ${shown} in one transaction; rows per table, source = target:`);
      for (const t of result.tables) out(`  ${t.table}: ${t.source} = ${t.target}`);
      out(`  ${result.tables.reduce((n, t) => n + t.target, 0)} rows; sequences set: ${result.sequences.map((s) => `${s.sequence} ${s.value}`).join(', ') || 'none'}`);
    } finally {
      await dest.close();
    }
  } finally {
    await source.close();
  }
  out('');
  out('Start Portico on it with DATABASE_URL set to that URL and the same secrets as this installation:');
  for (const s of SECRETS) {
    if (process.env[s.env]) out(`  ${s.env}: the same value as now (${s.why})`);
    else
      out(
        `  ${s.env} is not set: this installation uses the one generated in ${join(dataDir, s.file)} (${s.why}): copy that file into the DATA_DIR of every instance and leave ${s.env} unset there${s.file === 'key-pepper' ? ' (setting KEY_PEPPER to its text would be another pepper: every existing key would stop working)' : ', or the portal tokens issued so far stop working'}`,
      );
  }
  out(`The embedded database in ${dataDir} is unchanged; keep it until the new installation is checked.`);
}
