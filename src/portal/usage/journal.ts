import { closeSync, existsSync, fchmodSync, ftruncateSync, mkdirSync, openSync, readFileSync, renameSync, writeSync, fsyncSync } from 'node:fs';
import { join } from 'node:path';
import type { UsageInsert } from './store.js';

/** keepOnly() rewrites the spool once it holds this many characters (~4,000 records) */
const REWRITE_AT = 1 << 20;

/**
 * A local append-only spool of usage records that are not in the database yet. A record is written here
 * (one synchronous append, a few microseconds) before the request is acknowledged, then shipped to the
 * database in batches. A process that stops, or a database that is away, loses nothing: the spool is
 * replayed at the next start and shipped when the database answers again (record ids make a second
 * delivery harmless). Each instance needs a DATA_DIR of its own.
 */
export class UsageJournal {
  private fd: number | undefined;
  private readonly path: string;
  /** characters written since the file was last emptied or rewritten (its size, near enough) */
  private written = 0;
  private readonly rewriteAt: number;

  /**
   * `rewriteAt`: the size (characters) the spool may reach, shipped records included, before keepOnly() rewrites
   * it. Rewriting means a new file renamed over the old one, which ext4 makes cost 0.2-3 ms (it writes the new
   * file's blocks out at the rename); doing that after every shipment (10 a second under load) was ~10% of the
   * main thread's busy time in bench:responses. A shipped record left in the spool is harmless: a replay after a
   * crash inserts it again and its record id makes that a no-op.
   */
  constructor(dir: string, opts: { rewriteAt?: number } = {}) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    this.path = join(dir, 'usage-journal.ndjson');
    this.rewriteAt = opts.rewriteAt ?? REWRITE_AT;
  }

  /**
   * Records left by a previous run (a torn last line from a crash is skipped), as this release inserts them: a line
   * written by an earlier release lacks the columns added since, and gets what those columns hold for the rows
   * before them (the ledger's insert takes every column from the line: a missing one would be a null it refuses).
   */
  recover(): UsageInsert[] {
    if (!existsSync(this.path)) return [];
    const rows: UsageInsert[] = [];
    const text = readFileSync(this.path, 'utf8');
    this.written = text.length;
    for (const line of text.split('\n')) {
      if (!line) continue;
      try {
        rows.push(fromLine(JSON.parse(line) as Partial<UsageInsert>));
      } catch {
        // a partial line written when the process died: its request was never acknowledged
      }
    }
    return rows;
  }

  /** the journal holds who used what: 0600 whatever the umask, and an existing file is made private on open */
  private open(): number {
    if (this.fd === undefined) {
      const fd = openSync(this.path, 'a', 0o600);
      fchmodSync(fd, 0o600);
      this.fd = fd;
    }
    return this.fd;
  }

  append(row: UsageInsert): void {
    const line = JSON.stringify(row) + '\n';
    writeSync(this.open(), line);
    this.written += line.length;
  }

  /** Everything written so far is in the database: start the spool afresh. */
  clear(): void {
    if (this.written === 0 && this.fd !== undefined) return;
    const fd = this.open();
    ftruncateSync(fd, 0);
    this.written = 0;
  }

  /**
   * What the spool holds is in the database but for `rows` (records that came while a batch was shipped). With
   * nothing pending the spool is emptied; otherwise, once it has reached `rewriteAt`, it becomes exactly those
   * rows, so it stays bounded under a load that leaves no moment with nothing pending. A new file is written and
   * renamed over the old one (a crash meanwhile leaves one or the other, both complete); the caller runs this
   * synchronously, so no append can come in between.
   */
  keepOnly(rows: readonly UsageInsert[]): void {
    if (rows.length === 0) return this.clear();
    if (this.written < this.rewriteAt) return;
    const tmp = this.path + '.next';
    const fd = openSync(tmp, 'w', 0o600);
    try {
      fchmodSync(fd, 0o600);
      let text = '';
      for (const r of rows) text += JSON.stringify(r) + '\n';
      writeSync(fd, text);
      renameSync(tmp, this.path);
      this.written = text.length;
    } catch (e) {
      closeSync(fd);
      throw e;
    }
    if (this.fd !== undefined) closeSync(this.fd);
    // the descriptor was opened for writing at offset 0 and wrote the whole file: appends go on at its end
    this.fd = fd;
  }

  close(): void {
    if (this.fd !== undefined) {
      try {
        fsyncSync(this.fd);
      } catch {
        // nothing more to do
      }
      closeSync(this.fd);
      this.fd = undefined;
    }
  }
}

/**
 * A journal line as a record: the columns added after the journal's first release default as their migrations do
 * (spend_epoch 0005, deployment 0007: null; output_audio_seconds 0016, cache_write_tokens 0017: 0). The other way
 * round, an older release replaying a newer line (a rollback) ignores a column it does not know: its insert names
 * its own columns.
 */
function fromLine(r: Partial<UsageInsert>): UsageInsert {
  return {
    ...r,
    spend_epoch: r.spend_epoch ?? null,
    deployment: r.deployment ?? null,
    output_audio_seconds: r.output_audio_seconds ?? 0,
    cache_write_tokens: r.cache_write_tokens ?? 0,
  } as UsageInsert;
}

/** One line of DATA_DIR/usage-refused.ndjson. */
export interface RefusedLine {
  /** Unix seconds when it was set aside */
  refused_at: number;
  /** the database's message */
  reason: string;
  /** the record as it was to be inserted (a line of the usage journal) */
  record: UsageInsert;
}

/**
 * Usage records the database refused for their content (not for an outage), kept in
 * DATA_DIR/usage-refused.ndjson (mode 0600) so that none is lost: each is written and synced before the journal
 * that held it is emptied. An operator reads the file, fixes the cause and replays the records (each line's
 * `record` is a usage-journal line; record ids make a replay of an already stored record harmless).
 */
export class RefusedRecords {
  readonly path: string;
  private fd: number | undefined;

  /** nothing is written (not even the directory) until a record is set aside */
  constructor(private readonly dir: string) {
    this.path = join(dir, 'usage-refused.ndjson');
  }

  /** Appends one record durably; throws if it cannot (the caller then keeps the record where it was). */
  append(record: UsageInsert, reason: string): void {
    if (this.fd === undefined) {
      mkdirSync(this.dir, { recursive: true });
      const fd = openSync(this.path, 'a', 0o600);
      // an existing file keeps its mode on open: make it private as well
      fchmodSync(fd, 0o600);
      this.fd = fd;
    }
    const line: RefusedLine = { refused_at: Math.floor(Date.now() / 1000), reason, record };
    writeSync(this.fd, JSON.stringify(line) + '\n');
    fsyncSync(this.fd);
  }

  /** What has been set aside so far (for tests and tools). */
  read(): RefusedLine[] {
    if (!existsSync(this.path)) return [];
    const lines: RefusedLine[] = [];
    for (const l of readFileSync(this.path, 'utf8').split('\n')) {
      if (!l) continue;
      try {
        lines.push(JSON.parse(l) as RefusedLine);
      } catch {
        // a line torn by a crash while it was written: its record is still in the journal
      }
    }
    return lines;
  }

  close(): void {
    if (this.fd !== undefined) {
      closeSync(this.fd);
      this.fd = undefined;
    }
  }
}
