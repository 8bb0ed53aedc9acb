/**
 * What every realtime session keeps an eye on, whatever serves it: its longest life, its idleness, and its key
 * (verified again every `verifyEveryMs`: a revoked, disabled or deleted key ends the session within it).
 */
import type { FastifyRequest } from 'fastify';
import { AppError } from '../platform/errors.js';
import { toAppError } from '../platform/http/errors.js';
import type { RealtimeLimits } from './service.js';
import { errType } from './protocol.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';

export interface Watched {
  /** ends the session with an error event and a close code */
  fail(code: string, message: string, closeCode?: number, type?: string): void;
  /** a response is in progress (an idle session is one without a client event and without a response) */
  busy(): boolean;
  /** the last client event, or the end of the last response (the idle clock starts again there) */
  lastEventAt(): number;
}

/** Starts the clocks; gives what stops them. */
export function watch(s: Watched, l: RealtimeLimits, admit: (req: FastifyRequest) => Promise<KeyPrincipal>, req: FastifyRequest): () => void {
  const age = setTimeout(() => s.fail('session_expired', `Your session hit the maximum duration of ${Math.round(l.maxSessionMs / 60_000)} minutes.`, 1000), l.maxSessionMs);
  // The idle clock counts the client's time only. A tick that comes late measures a stall of this server's own event
  // loop (a busy machine, a long synchronous task): the client's events may be waiting unread behind this very timer
  // (timers run before sockets are read), so the stall is added to the bound and the tick decides nothing.
  const every = Math.max(50, Math.min(l.idleMs / 4, 30_000));
  // it starts here, when the session is ready (session.created), not when the socket came (an upstream's link or the
  // first session's turn detector may take a while): the client has nothing to say before
  let tickAt = Date.now();
  let seen = s.lastEventAt();
  let from = Math.max(seen, tickAt);
  let stalled = 0;
  const idle = setInterval(() => {
    const now = Date.now();
    const late = Math.max(0, now - tickAt - every);
    tickAt = now;
    if (s.lastEventAt() !== seen) {
      seen = s.lastEventAt();
      from = Math.max(from, seen);
      stalled = 0;
    }
    stalled += late;
    if (late > every / 2) return;
    if (!s.busy() && now - from - stalled >= l.idleMs) s.fail('session_idle_timeout', `The session had no event for ${Math.round(l.idleMs / 1000)} seconds and was closed.`, 1000);
  }, every);
  let checking = false;
  const verify = setInterval(() => {
    if (checking) return;
    checking = true;
    admit(req)
      .catch((e: unknown) => {
        const a = e instanceof AppError ? e : toAppError(e, req);
        // a rate limit or a spent budget is a turn's business; only the key itself ends the session
        if (a.status === 401 || a.status === 403) s.fail(a.code, a.message, 1008, errType(a));
      })
      .finally(() => (checking = false));
  }, l.verifyEveryMs);
  for (const t of [age, idle, verify]) t.unref();
  return () => {
    clearTimeout(age);
    clearInterval(idle);
    clearInterval(verify);
  };
}
