import { AppError, ERRORS, VALIDATION_DETAILS, type ErrorCode, type ValidationDetail } from '../platform/errors.js';
import { EngineError } from '../engines/types.js';

/**
 * The one mapping from an engine's failure to a client-facing error (Responses and audio alike): an engine code
 * the error table knows is kept; otherwise the engine's HTTP-status hint decides. Anything that is not an engine
 * error is a failed engine, with a fixed message (its own text may describe internals).
 */
export function fromEngineError(e: unknown, what = 'the model engine'): AppError {
  if (e instanceof AppError) return e;
  if (e instanceof EngineError) {
    const app = engineAppError(e);
    // a refusal that says when to come back (the router's 503 and 429, an upstream's 429): retry-after in
    // seconds and retry-after-ms, which the official SDKs honour
    if (e.retryAfterMs !== undefined && (app.status === 429 || app.status === 503)) {
      const ms = Math.max(1, Math.round(e.retryAfterMs));
      app.headers = { ...app.headers, 'retry-after': String(Math.max(1, Math.ceil(ms / 1000))), 'retry-after-ms': String(ms) };
    }
    return app;
  }
  return new AppError('engine_error', `${what} failed`);
}

function engineAppError(e: EngineError): AppError {
  // a timeout is a timeout whatever the engine calls it (the openai-compatible transport says upstream_unavailable, 504)
  if (e.status === 504) return new AppError('upstream_timeout', e.message);
  // a refusal with one of OpenAI's validation codes (an upstream's, or an engine's own) keeps it
  if (e.status === 400 && (VALIDATION_DETAILS as readonly string[]).includes(e.code))
    return new AppError('validation_error', e.message, null, { detail: e.code as ValidationDetail });
  // an engine's own code keeps its meaning; an upstream's code that happens to be one of ours (an upstream 400 with
  // code `conflict`, say) does not make a refusal of another status (a 409) out of it
  if (e.code in ERRORS && ERRORS[e.code as ErrorCode].status === e.status) return new AppError(e.code as ErrorCode, e.message);
  const s = e.status;
  const code: ErrorCode =
    s === 429
      ? 'rate_limit_exceeded'
      : s === 503
        ? 'engine_unavailable'
        : s === 504
          ? 'upstream_timeout'
          : s === 413
            ? 'payload_too_large'
            : s >= 500
              ? 'engine_error'
              : 'validation_error';
  return new AppError(code, e.message);
}
