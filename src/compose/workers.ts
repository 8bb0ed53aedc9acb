import cluster, { type Worker } from 'node:cluster';
import { randomUUID } from 'node:crypto';
import type { Config } from '../platform/config.js';
import type { Logger } from '../platform/log.js';
import type { ReloadResult } from '../models/reload.js';
import { controlSocketPath, startControlServer } from '../platform/ops/control.js';

/**
 * `portico serve --workers N` (or WORKERS=N, `auto` = one per core): this process becomes a primary that forks
 * N workers, each a whole Portico (core, runtime, HTTP) sharing the listening port through node:cluster, and
 * serves nothing itself. Workers share what several instances share: PostgreSQL for records and Redis for
 * limits, spend, key changes, cancellation and the background queue, so the rules hold across workers exactly
 * as they hold across machines. The embedded PGlite is owned by one process and has no such path, so more than
 * one worker on it is refused at start (see docs/deployment.md).
 *
 * A worker that dies is forked again under the same id (its usage journal, DATA_DIR/workers/<id>, is shipped
 * by its successor), after a pause that grows while workers keep dying young. SIGTERM or SIGINT to the primary
 * is passed to every worker, which shuts down gracefully; the primary exits once they have, or kills what is
 * left at the grace deadline. A worker whose primary vanishes shuts itself down (see watchPrimary).
 *
 * The model file is each worker's to read: SIGHUP to the primary is passed to every worker, and the primary owns
 * the control socket (DATA_DIR/portico.sock), where `portico models reload` asks every worker over the cluster's
 * IPC channel and gets back what each one did (see reloadOnRequest).
 */

/** Why `workers` cannot run on this configuration, or undefined when it can. */
export function workersRefusal(config: Config): string | undefined {
  if (config.workers <= 1) return undefined;
  if (!config.databaseUrl || config.inMemoryDb) {
    return `WORKERS=${config.workers} needs PostgreSQL (DATABASE_URL): the embedded database belongs to one process. Set DATABASE_URL and REDIS_URL, or run one process (WORKERS=1)`;
  }
  if (!config.redisUrl) {
    return `WORKERS=${config.workers} needs Redis (REDIS_URL): workers share rate limits, spend, key changes, cancellation and background jobs through it. Set REDIS_URL, or run one process (WORKERS=1)`;
  }
  return undefined;
}

export interface PrimaryOptions {
  /** the worker's entry: the same `portico serve` command line */
  exec: string;
  args: string[];
}

/** A message between the primary and a worker about a model file reload (the cluster's IPC channel). */
interface ReloadMessage {
  portico: 'reload-models' | 'reload-models-result';
  nonce: string;
  result?: ReloadResult;
}

const isReloadMessage = (m: unknown): m is ReloadMessage =>
  typeof m === 'object' && m !== null && typeof (m as ReloadMessage).nonce === 'string' && ['reload-models', 'reload-models-result'].includes((m as ReloadMessage).portico);

/** the longest a worker may take to answer a reload (a file check and a switch: milliseconds in practice) */
const WORKER_RELOAD_MS = 60_000;

/** Runs the primary until it is told to stop; resolves with the exit code. */
export function runPrimary(config: Config, log: Logger, opts: PrimaryOptions): Promise<number> {
  const n = config.workers;
  cluster.setupPrimary({ exec: opts.exec, args: opts.args });
  const byId = new Map<number, Worker>();
  const startedAt = new Map<number, number>();
  let delay = 500;
  let stopping = false;

  const fork = (id: number) => {
    const w = cluster.fork({ PORTICO_WORKER_ID: String(id), WORKERS: String(n) });
    byId.set(id, w);
    startedAt.set(id, Date.now());
    w.on('exit', (code, signal) => {
      if (byId.get(id) === w) byId.delete(id);
      if (stopping) return;
      const lived = Date.now() - (startedAt.get(id) ?? 0);
      // a worker that ran a while and died gets a fresh start at once; one that keeps dying young waits longer each time
      delay = lived > 30_000 ? 500 : Math.min(delay * 2, 30_000);
      log.error({ worker: id, pid: w.process.pid, code, signal, restart_in_ms: delay }, `worker ${id} exited; starting it again`);
      setTimeout(() => {
        if (!stopping) fork(id);
      }, delay).unref();
    });
  };

  return new Promise<number>((resolve) => {
    let listening = 0;
    cluster.on('listening', (w, address) => {
      if (++listening === n) log.info({ workers: n, port: address.port }, `${n} workers serving on port ${address.port}`);
      void w;
    });
    const stop = (signal: NodeJS.Signals) => {
      if (stopping) {
        // a second signal: do not wait any longer
        for (const w of byId.values()) w.process.kill('SIGKILL');
        resolve(1);
        return;
      }
      stopping = true;
      log.info({ signal, workers: byId.size }, 'shutting down the workers');
      for (const w of byId.values()) w.process.kill('SIGTERM');
      const deadline = setTimeout(() => {
        log.warn({ workers: byId.size }, 'workers still running at the shutdown deadline: killing them');
        for (const w of byId.values()) w.process.kill('SIGKILL');
        resolve(1);
      }, config.shutdownGraceMs + 5_000);
      deadline.unref();
      const check = setInterval(() => {
        if (byId.size === 0) {
          clearInterval(check);
          clearTimeout(deadline);
          resolve(0);
        }
      }, 50);
    };
    process.on('SIGTERM', () => stop('SIGTERM'));
    process.on('SIGINT', () => stop('SIGINT'));
    // each worker reads the model file again (it holds its own models, engines and breakers)
    process.on('SIGHUP', () => {
      if (stopping) return;
      log.info({ workers: byId.size }, 'SIGHUP: every worker reloads the model file');
      for (const w of byId.values()) w.process.kill('SIGHUP');
    });
    for (let id = 1; id <= n; id++) fork(id);
    void startControlServer(controlSocketPath(config.dataDir), async (command) => {
      if (command !== 'reload-models') return { ok: false, error: `unknown command ${JSON.stringify(command)}` };
      const results = await Promise.all([...byId.entries()].map(([id, w]) => askReload(w, id)));
      return { ok: results.length > 0 && results.every((r) => r.ok), workers: results };
    }).then((c) => {
      if ('refused' in c) log.warn({ reason: c.refused }, '`portico models reload` cannot reach this server (no control socket); SIGHUP still reloads the model file');
      else controls.push(c);
    });
  });
}

/** the primary's control socket, closed when it exits */
const controls: Array<{ close(): Promise<void> }> = [];

/** Closes what the primary listens on besides the workers' port (its control socket). */
export async function closePrimary(): Promise<void> {
  await Promise.all(controls.splice(0).map((c) => c.close()));
}

/** Asks one worker to reload the model file; what it did, with its id (a worker that exits first says so). */
function askReload(w: Worker, id: number): Promise<ReloadResult & { worker: number }> {
  return new Promise((resolve) => {
    const nonce = randomUUID();
    const done = (r: ReloadResult) => {
      clearTimeout(timer);
      w.off('message', onMessage);
      w.off('exit', onExit);
      resolve({ ...r, worker: id });
    };
    const onMessage = (m: unknown) => {
      if (isReloadMessage(m) && m.portico === 'reload-models-result' && m.nonce === nonce && m.result) done(m.result);
    };
    const onExit = () => done({ ok: false, error: `worker ${id} exited before it answered (the one started in its place reads the model file as it starts)` });
    const timer = setTimeout(() => done({ ok: false, error: `worker ${id} did not answer within ${WORKER_RELOAD_MS / 1000} s` }), WORKER_RELOAD_MS);
    w.on('message', onMessage);
    w.once('exit', onExit);
    try {
      w.send({ portico: 'reload-models', nonce } satisfies ReloadMessage);
    } catch {
      onExit();
    }
  });
}

/** In a worker: reload the model file when the primary asks (`portico models reload`), and tell it what happened. */
export function reloadOnRequest(reload: () => Promise<ReloadResult>): void {
  if (!cluster.isWorker) return;
  process.on('message', (m: unknown) => {
    if (!isReloadMessage(m) || m.portico !== 'reload-models') return;
    void reload()
      .catch((e: unknown): ReloadResult => ({ ok: false, error: (e as Error)?.message ?? String(e) }))
      .then((result) => process.send?.({ portico: 'reload-models-result', nonce: m.nonce, result } satisfies ReloadMessage));
  });
}

/** In a worker: shut down when the primary goes away (it was killed, or it crashed). */
export function watchPrimary(onGone: () => void): void {
  if (!cluster.isWorker) return;
  process.on('disconnect', onGone);
}
