/**
 * The control socket of a running `portico serve`: a Unix socket at DATA_DIR/portico.sock (a named pipe on
 * Windows) through which an operator command on the same machine asks the server to do something and reads the
 * answer (`portico models reload`, `portico backup`). One JSON line in, one JSON line out, then the connection ends.
 *
 * Why a socket in DATA_DIR rather than a pid file and a signal, or an HTTP endpoint (docs/architecture.md,
 * "Decisions"): only the user that owns DATA_DIR (0700) can reach it, so it needs no token and is never on the
 * network or behind a reverse proxy; the answer comes back on the same connection, so the command can say what
 * the server did and exit non-zero when it refused; a pid file can name a process that died and whose pid was
 * given to another; and it needs no database, so it works on the embedded one, which the server holds.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, unlinkSync } from 'node:fs';
import net from 'node:net';
import { dirname, join } from 'node:path';

/** the longest command line accepted */
const MAX_LINE = 4096;

/** Where the control socket of a server with this DATA_DIR (absolute) is. */
export function controlSocketPath(dataDir: string): string {
  if (process.platform === 'win32') return `\\\\.\\pipe\\portico-${createHash('sha256').update(dataDir.toLowerCase()).digest('hex').slice(0, 24)}`;
  return join(dataDir, 'portico.sock');
}

export type ControlHandler = (command: string) => Promise<Record<string, unknown>>;

export interface ControlServer {
  readonly path: string;
  close(): Promise<void>;
}

/** Whether a server answers on that socket now (a socket file left by a process that died answers nothing). */
function answers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const c = net.connect(path);
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });
}

/**
 * Listens on the control socket; each connection sends one line `{"command": "..."}` and gets `handle`'s answer.
 * A socket file left by a process that no longer runs is replaced; one a running server answers on is left
 * alone, and this resolves with a reason instead (two servers on one DATA_DIR).
 */
export async function startControlServer(path: string, handle: ControlHandler): Promise<ControlServer | { refused: string }> {
  // DATA_DIR is its user's alone (0700): so is the socket in it
  if (process.platform !== 'win32') mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const server = net.createServer((socket) => {
    let buf = '';
    socket.setEncoding('utf8');
    socket.on('error', () => {});
    socket.on('data', (chunk: string) => {
      buf += chunk;
      const nl = buf.indexOf('\n');
      if (nl < 0 && buf.length <= MAX_LINE) return;
      socket.removeAllListeners('data');
      socket.pause();
      let command = '';
      try {
        const msg = JSON.parse(nl < 0 ? '' : buf.slice(0, nl)) as { command?: unknown };
        if (typeof msg.command === 'string') command = msg.command;
      } catch {
        // answered below
      }
      const answer = command
        ? handle(command).catch((e: unknown) => ({ ok: false, error: (e as Error)?.message ?? String(e) }))
        : Promise.resolve({ ok: false, error: 'expected one line of JSON: {"command": "..."}' });
      void answer.then((a) => socket.end(JSON.stringify(a) + '\n'));
    });
  });
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => {
        server.off('error', reject);
        resolve();
      });
    });
  try {
    await listen();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EADDRINUSE') return { refused: (e as Error).message };
    if (await answers(path)) return { refused: `another Portico process answers on ${path} (two servers on one DATA_DIR?)` };
    try {
      unlinkSync(path);
      await listen();
    } catch (e2) {
      return { refused: (e2 as Error).message };
    }
  }
  return {
    path,
    close: () =>
      new Promise<void>((resolve) => {
        // node removes a Unix socket's file when it stops listening
        server.close(() => resolve());
      }),
  };
}

/** Why a command could not reach a server: no server (`noServer`: nothing listens on the socket), or it did not answer. */
export class ControlUnreachable extends Error {
  constructor(
    message: string,
    readonly noServer = false,
  ) {
    super(message);
  }
}

/** Sends one command to the server on that socket and gives its answer (within `timeoutMs`). */
export function sendControl(path: string, command: string, timeoutMs: number): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const c = net.connect(path);
    let buf = '';
    let done = false;
    const finish = (f: () => void) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      c.destroy();
      f();
    };
    const timer = setTimeout(() => finish(() => reject(new ControlUnreachable(`the server did not answer within ${Math.round(timeoutMs / 1000)} s`))), timeoutMs);
    c.setEncoding('utf8');
    c.once('connect', () => c.write(JSON.stringify({ command }) + '\n'));
    c.on('data', (chunk: string) => {
      buf += chunk;
      const nl = buf.indexOf('\n');
      if (nl < 0) return;
      finish(() => {
        try {
          resolve(JSON.parse(buf.slice(0, nl)) as Record<string, unknown>);
        } catch {
          reject(new ControlUnreachable('the server answered something that is not JSON'));
        }
      });
    });
    c.once('end', () => finish(() => reject(new ControlUnreachable('the server closed the connection without an answer'))));
    c.once('error', (e: NodeJS.ErrnoException) =>
      finish(() =>
        reject(
          new ControlUnreachable(
            e.code === 'ENOENT' || e.code === 'ECONNREFUSED'
              ? `no running Portico server uses this DATA_DIR (nothing answers on ${path}): start it, or run the command with the server's DATA_DIR`
              : `could not reach the server on ${path}: ${e.message}`,
            e.code === 'ENOENT' || e.code === 'ECONNREFUSED',
          ),
        ),
      ),
    );
  });
}
