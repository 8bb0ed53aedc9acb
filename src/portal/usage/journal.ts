import { closeSync, existsSync, ftruncateSync, mkdirSync, openSync, readFileSync, writeSync, fsyncSync } from 'node:fs';
import { join } from 'node:path';
import type { UsageInsert } from './store.js';

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

  constructor(dir: string) {
    mkdirSync(dir, { recursive: true });
    this.path = join(dir, 'usage-journal.ndjson');
  }

  /** Records left by a previous run (a torn last line from a crash is skipped). */
  recover(): UsageInsert[] {
    if (!existsSync(this.path)) return [];
    const rows: UsageInsert[] = [];
    for (const line of readFileSync(this.path, 'utf8').split('\n')) {
      if (!line) continue;
      try {
        rows.push(JSON.parse(line) as UsageInsert);
      } catch {
        // a partial line written when the process died: its request was never acknowledged
      }
    }
    return rows;
  }

  private open(): number {
    this.fd ??= openSync(this.path, 'a');
    return this.fd;
  }

  append(row: UsageInsert): void {
    writeSync(this.open(), JSON.stringify(row) + '\n');
  }

  /** Everything written so far is in the database: start the spool afresh. */
  clear(): void {
    const fd = this.open();
    ftruncateSync(fd, 0);
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
