/**
 * What every realtime session keeps an eye on, whatever serves it: its longest life, its idleness, and its key
 * (verified again every `verifyEveryMs`: a revoked, disabled or deleted key ends the session within it).
 */
import type { FastifyRequest } from 'fastify';
import { AppError } from '../platform/errors.js';
import { idleClock } from '../platform/idle-clock.js';
import { toAppError } from '../platform/http/errors.js';
import type { RealtimeLimits } from './service.js';
import { errType } from './protocol.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';

export interface Watched {
  /** ends the session with an error event and a close code */
  fail(code: string, message: string, closeCode?: number, type?: string): void;
  /** a response is in progress (an idle session is one without a client event and without a response) */
  busy(): boolean;
  /** the last client event, or the end of the last response (the idle clock starts again there; performance.now()) */
  lastEventAt(): number;
}

/** Starts the clocks; gives what stops them. */
export function watch(s: Watched, l: RealtimeLimits, admit: (req: FastifyRequest) => Promise<KeyPrincipal>, req: FastifyRequest): () => void {
  const age = setTimeout(() => s.fail('session_expired', `Your session hit the maximum duration of ${Math.round(l.maxSessionMs / 60_000)} minutes.`, 1000), l.maxSessionMs);
  // idle: the client's silence with no response in progress, its time only (src/platform/idle-clock.ts). It starts
  // here, when the session is ready (session.created), not when the socket came (an upstream's link or the first
  // session's turn detector may take a while): the client has nothing to say before
  const ready = performance.now();
  const stopIdle = idleClock(
    {
      lastActivity: () => Math.max(s.lastEventAt(), ready),
      busy: () => s.busy(),
      onIdle: () => s.fail('session_idle_timeout', `The session had no event for ${Math.round(l.idleMs / 1000)} seconds and was closed.`, 1000),
    },
    l.idleMs,
  );
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
  for (const t of [age, verify]) t.unref();
  return () => {
    clearTimeout(age);
    stopIdle();
    clearInterval(verify);
  };
}
