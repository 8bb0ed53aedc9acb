/**
 * `portico backup` / `portico restore` of the embedded database: one file holding a consistent copy of the PGlite
 * data directory and what else in DATA_DIR a restored installation needs to work (docs/deployment.md, "Backups").
 *
 * The file: the magic line `PORTICO-BACKUP\n`, the manifest's length (4 bytes, big-endian) and the manifest (JSON),
 * then the files the manifest lists, one after the other, each with its size and SHA-256 in the manifest. A file
 * that is not a backup, a truncated or damaged one, or one from a newer release is refused before anything is
 * changed.
 */
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, openSync, readFileSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { sql, type Kysely } from 'kysely';
import type { OpenedDb } from './index.js';
import { newerMigrations } from './index.js';

const MAGIC = Buffer.from('PORTICO-BACKUP\n', 'utf8');
export const BACKUP_FORMAT_VERSION = 1;
/** the largest manifest read (it lists a few files and the tables' row counts) */
const MAX_MANIFEST = 1 << 20;

/**
 * What a backup may hold, and nothing else (a name is never a path): the database, the generated secrets a restored
 * installation needs (without the pepper no stored key digest would verify) and, from a stopped server, the usage
 * records its journal had not shipped yet.
 */
export const BACKUP_FILES = ['pglite.tar.gz', 'key-pepper', 'jwt-secret', 'usage-journal.ndjson'] as const;
export type BackupFileName = (typeof BACKUP_FILES)[number];

export interface BackupManifest {
  format: 'portico-backup';
  version: number;
  created_at: string;
  portico_version: string;
  database: 'pglite';
  /** taken from a running server (through its control socket) or from a data directory no process had open */
  online: boolean;
  /** the migrations the database had, in order */
  migrations: string[];
  /** rows per table at the moment of the copy */
  tables: Record<string, number>;
  files: Array<{ name: BackupFileName; bytes: number; sha256: string }>;
}

/** A backup file that cannot be used, said in one line. */
export class BackupFileError extends Error {}

export interface Snapshot {
  /** the data directory as a tar file (PGlite's dumpDataDir) */
  tar: Uint8Array;
  migrations: string[];
  tables: Record<string, number>;
}

/**
 * A consistent copy of an open embedded database: it waits for the transaction in progress to end and holds the
 * database's one session while it counts the rows, checkpoints and dumps, so no statement runs in between: the
 * counts describe the copy, and the copy is one moment of the database.
 */
export async function snapshotDatabase(opened: OpenedDb): Promise<Snapshot> {
  const dump = opened.dump;
  if (!dump) throw new Error('only the embedded database can be copied this way (PostgreSQL: pg_dump)');
  return opened.db.connection().execute(async (conn) => {
    const migrations = (await sql<{ name: string }>`select name from portico_migrations order by name`.execute(conn)).rows.map((r) => r.name);
    const tables: Record<string, number> = {};
    for (const t of await tableNames(conn)) tables[t] = Number((await sql<{ n: number }>`select count(*)::bigint as n from ${sql.id(t)}`.execute(conn)).rows[0]!.n);
    // what is in the shared buffers goes to the files first: the copy then needs no recovery when it is opened
    await sql`checkpoint`.execute(conn);
    return { tar: await dump(), migrations, tables };
  });
}

/** The tables of the database's current schema, by name. */
export async function tableNames(db: Kysely<any>): Promise<string[]> {
  return (await sql<{ t: string }>`select tablename as t from pg_tables where schemaname = current_schema() order by tablename`.execute(db)).rows.map((r) => r.t);
}

/** Where a server answering `backup` on its control socket puts the snapshot for the command to take (in DATA_DIR: the server's own folder). */
export function snapshotPath(dataDir: string): string {
  return join(dataDir, `backup-${process.pid}-${randomBytes(4).toString('hex')}.tmp`);
}

/** Writes `bytes` to `path` privately (0600) and durably: a temporary file beside it, flushed, renamed into place. */
export function writeFileAtomic(path: string, parts: Uint8Array[]): void {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(3).toString('hex')}.tmp`);
  const fd = openSync(tmp, 'wx', 0o600);
  try {
    try {
      for (const p of parts) {
        let off = 0;
        while (off < p.length) off += writeSync(fd, p, off, p.length - off);
      }
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  } catch (e) {
    try {
      unlinkSync(tmp);
    } catch {
      // not made, or already renamed
    }
    throw e;
  }
  // the rename itself reaches the disk with its folder
  try {
    const d = openSync(dirname(path), 'r');
    try {
      fsyncSync(d);
    } finally {
      closeSync(d);
    }
  } catch {
    // a folder that cannot be opened for reading (some file systems): the file is written all the same
  }
}

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

/** The bytes of a backup file: header, manifest, then the files in the manifest's order. */
export function encodeBackup(meta: Omit<BackupManifest, 'format' | 'version' | 'files'>, files: Array<{ name: BackupFileName; data: Uint8Array }>): Uint8Array[] {
  const manifest: BackupManifest = {
    format: 'portico-backup',
    version: BACKUP_FORMAT_VERSION,
    ...meta,
    files: files.map((f) => ({ name: f.name, bytes: f.data.length, sha256: sha256(f.data) })),
  };
  const json = Buffer.from(JSON.stringify(manifest), 'utf8');
  const len = Buffer.alloc(4);
  len.writeUInt32BE(json.length);
  return [MAGIC, len, json, ...files.map((f) => f.data)];
}

/** Reads and checks a whole backup file: its manifest and its files, every size and digest verified. */
export function readBackup(path: string): { manifest: BackupManifest; files: Map<BackupFileName, Buffer> } {
  let buf: Buffer;
  try {
    buf = readFileSync(path);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new BackupFileError(
      code === 'ENOENT' ? `${path}: no such file` : code === 'EISDIR' ? `${path} is a folder, not a backup file` : `${path} cannot be read: ${(e as Error).message}`,
    );
  }
  const notOurs = `${path} is not a Portico backup (made by \`portico backup\`)`;
  if (buf.length < MAGIC.length + 4 || !buf.subarray(0, MAGIC.length).equals(MAGIC)) throw new BackupFileError(notOurs);
  const len = buf.readUInt32BE(MAGIC.length);
  const start = MAGIC.length + 4;
  if (len > MAX_MANIFEST) throw new BackupFileError(`${path} is damaged: its manifest claims ${len} bytes`);
  if (start + len > buf.length) throw new BackupFileError(`${path} is truncated: it ends inside its manifest (${buf.length} bytes)`);
  let manifest: BackupManifest;
  try {
    manifest = JSON.parse(buf.subarray(start, start + len).toString('utf8')) as BackupManifest;
  } catch {
    throw new BackupFileError(`${path} is damaged: its manifest is not JSON`);
  }
  if (manifest?.format !== 'portico-backup' || !Array.isArray(manifest.files) || !Array.isArray(manifest.migrations) || typeof manifest.tables !== 'object')
    throw new BackupFileError(`${notOurs}: its manifest is not a Portico backup's`);
  if (manifest.version !== BACKUP_FORMAT_VERSION)
    throw new BackupFileError(
      `${path} is a backup of format ${manifest.version} (made by Portico ${manifest.portico_version}); this release reads format ${BACKUP_FORMAT_VERSION}: restore it with that release or a newer one`,
    );
  if (manifest.database !== 'pglite') throw new BackupFileError(`${path} holds a ${String(manifest.database)} database; this release restores embedded (pglite) backups`);
  const files = new Map<BackupFileName, Buffer>();
  let at = start + len;
  for (const f of manifest.files) {
    if (!BACKUP_FILES.includes(f?.name) || !Number.isSafeInteger(f.bytes) || f.bytes < 0 || typeof f.sha256 !== 'string' || files.has(f.name))
      throw new BackupFileError(`${path} is damaged: its manifest lists ${JSON.stringify(f?.name)}, which a backup does not hold`);
    if (at + f.bytes > buf.length) throw new BackupFileError(`${path} is truncated: ${f.name} should be ${f.bytes} bytes, the file ends ${at + f.bytes - buf.length} bytes short`);
    const data = buf.subarray(at, at + f.bytes);
    if (sha256(data) !== f.sha256) throw new BackupFileError(`${path} is damaged: ${f.name} does not match its SHA-256`);
    files.set(f.name, data);
    at += f.bytes;
  }
  if (at !== buf.length) throw new BackupFileError(`${path} is damaged: ${buf.length - at} bytes follow the last file it lists`);
  if (!files.has('pglite.tar.gz')) throw new BackupFileError(`${path} holds no database`);
  const newer = newerMigrations(manifest.migrations);
  if (newer.length)
    throw new BackupFileError(
      `${path} was made by a newer Portico (${manifest.portico_version}): its database has ${newer.length} migration${newer.length === 1 ? '' : 's'} this release does not know (${newer.join(', ')}). Restore it with that release or a newer one.`,
    );
  return { manifest, files };
}
