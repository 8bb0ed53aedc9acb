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
  lastEventAt(): number;
}

/** Starts the clocks; gives what stops them. */
export function watch(s: Watched, l: RealtimeLimits, admit: (req: FastifyRequest) => Promise<KeyPrincipal>, req: FastifyRequest): () => void {
  const age = setTimeout(() => s.fail('session_expired', `Your session hit the maximum duration of ${Math.round(l.maxSessionMs / 60_000)} minutes.`, 1000), l.maxSessionMs);
  const idle = setInterval(
    () => {
      if (!s.busy() && Date.now() - s.lastEventAt() >= l.idleMs)
        s.fail('session_idle_timeout', `The session had no event for ${Math.round(l.idleMs / 1000)} seconds and was closed.`, 1000);
    },
    Math.max(50, Math.min(l.idleMs / 4, 30_000)),
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
  for (const t of [age, idle, verify]) t.unref();
  return () => {
    clearTimeout(age);
    clearInterval(idle);
    clearInterval(verify);
  };
}
