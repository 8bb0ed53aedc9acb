import { chmodSync, lstatSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { isMainThread } from 'node:worker_threads';

/**
 * DATA_DIR holds the embedded database (stored prompts and answers, key digests), the usage journal and
 * generated secrets: only Portico's own user may read it. The directory is created 0700; an existing one, and
 * anything in it that group or others could read or write (PGlite writes its files 0666 less the umask; an
 * older Portico created the directory 0755), is made private at start. Returns what was fixed, for a log line.
 * The process umask (set to 077 by the `portico` command) keeps new files private from then on.
 */
/** what Portico creates in DATA_DIR */
const OWN_ENTRIES = /^(pglite|workers|models|usage-journal\.ndjson|usage-refused\.ndjson|jwt-secret|key-pepper|portico\.lock|web-.*|before-restore-.*|.*\.tmp)$/;

export function secureDataDir(dir: string): { fixed: number; dirWasOpen: boolean } {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const dirWasOpen = (lstatSync(dir).mode & 0o077) !== 0;
  let fixed = 0;
  // the folder itself and what Portico keeps in it, never whatever else a DATA_DIR pointed at a shared place holds
  const own = lstatSync(dir).mode & 0o777 & 0o077;
  if (own) {
    chmodSync(dir, lstatSync(dir).mode & 0o700);
    fixed++;
  }
  for (const name of readdirSync(dir)) if (OWN_ENTRIES.test(name)) fixed += makePrivate(join(dir, name));
  return { fixed, dirWasOpen };
}

/** The umask the `portico` command runs with: files and folders it creates are its user's alone. */
export const PRIVATE_UMASK = 0o077;

/**
 * Makes the process umask private (group and other bits cleared, the rest kept) and returns the umask it had.
 * For what writes files for the life of the process beyond Portico's own opens (PGlite's data files): the
 * `portico` command sets it at start; a process that embeds Portico gets it when the embedded database opens.
 * Worker threads cannot change it (the main thread's applies to them).
 */
export function privateUmask(): number {
  if (!isMainThread) return process.umask();
  const was = process.umask();
  if ((was & PRIVATE_UMASK) !== PRIVATE_UMASK) process.umask(was | PRIVATE_UMASK);
  return was;
}

/**
 * Clears the group and other bits of a file, or of a folder and everything in it (symbolic links are not
 * followed). Returns how many it changed. PGlite extracts a new database with explicit modes (0666 and 0777
 * whatever the umask), so the database folder is walked again once it is open.
 */
export function makePrivate(path: string): number {
  let fixed = 0;
  const walk = (p: string, depth: number) => {
    const st = lstatSync(p);
    if (st.isSymbolicLink()) return;
    const mode = st.mode & 0o777;
    if (mode & 0o077) {
      chmodSync(p, mode & 0o700);
      fixed++;
    }
    // pulled models can be many files in few folders; the database a few thousand: bounded either way
    if (st.isDirectory() && depth < 8) for (const name of readdirSync(p)) walk(join(p, name), depth + 1);
  };
  walk(path, 1);
  return fixed;
}
