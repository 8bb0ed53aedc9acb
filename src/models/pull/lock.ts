/**
 * Lock files for the models directory, which may be shared by several hosts (NFS, a shared volume): a lock is a
 * file created exclusively, holding who took it; a holder that keeps working refreshes its mtime, and a lock
 * whose mtime is older than `staleMs` is taken over (its holder died). Nothing here relies on process ids,
 * which mean nothing on another host.
 */
import { hostname } from 'node:os';
import { open, readFile, stat, unlink, utimes } from 'node:fs/promises';

export interface HeldLock {
  release(): Promise<void>;
}

export interface LockOptions {
  /** a lock untouched this long is taken over (ms); default 30 s */
  staleMs?: number;
  /** how long to wait for a live lock before giving up (ms); 0 = do not wait */
  waitMs?: number;
  /** refresh the mtime this often while held (ms); 0 = never (short critical sections) */
  heartbeatMs?: number;
}

export class LockBusyError extends Error {
  constructor(
    readonly path: string,
    readonly holder: string,
  ) {
    super(`locked by ${holder || 'another process'}`);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function acquireLock(path: string, opts: LockOptions = {}): Promise<HeldLock> {
  const staleMs = opts.staleMs ?? 30_000;
  const deadline = Date.now() + (opts.waitMs ?? 0);
  const me = `pid ${process.pid} on ${hostname()}`;
  for (;;) {
    try {
      const fh = await open(path, 'wx');
      await fh.writeFile(`${me} since ${new Date().toISOString()}\n`);
      await fh.close();
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    let holder = '';
    try {
      const [s, text] = await Promise.all([stat(path), readFile(path, 'utf8')]);
      holder = text.trim();
      if (Date.now() - s.mtimeMs > staleMs) {
        await unlink(path).catch(() => {});
        continue;
      }
    } catch {
      continue; // released between our open and stat: try again
    }
    if (Date.now() >= deadline) throw new LockBusyError(path, holder);
    await sleep(20 + Math.random() * 30);
  }
  let timer: NodeJS.Timeout | undefined;
  if (opts.heartbeatMs) {
    timer = setInterval(() => {
      const now = new Date();
      utimes(path, now, now).catch(() => {});
    }, opts.heartbeatMs);
    timer.unref();
  }
  let released = false;
  return {
    async release() {
      if (released) return;
      released = true;
      if (timer) clearInterval(timer);
      await unlink(path).catch(() => {});
    },
  };
}
