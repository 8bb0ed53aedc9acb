import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, ERRORS, localizedMessage, msg, type ErrorCode } from '../errors.js';
import type { ErrorObject } from 'ajv';
import { describeValidationError } from './validation.js';
import { portalErrorBody } from './portal-envelope.js';

const UNAVAILABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ENOTFOUND', '57P01', '57P02', '57P03', '08000', '08001', '08003', '08006', '53300']);

/** A database or Redis that cannot be reached right now (as opposed to a bug). */
export function isUnavailable(err: unknown): boolean {
  const e = err as { code?: string; message?: string; name?: string } | undefined;
  if (!e) return false;
  if (e.code && UNAVAILABLE_CODES.has(e.code)) return true;
  const m = e.message ?? '';
  return (
    /Connection terminated|connect ECONNREFUSED|timeout exceeded when trying to connect|Client has encountered a connection error|Connection is closed|enableOfflineQueue|Stream isn't writeable|the database system is (starting up|shutting down)/.test(
      m,
    ) || e.name === 'MaxRetriesPerRequestError'
  );
}

function clientWentAway(err: unknown, req: FastifyRequest): boolean {
  const e = err as { message?: string; name?: string; code?: string } | undefined;
  if (e?.message === 'client disconnected' || e?.name === 'AbortError' || e?.code === 'ERR_STREAM_PREMATURE_CLOSE') return true;
  return req.raw.socket?.destroyed === true && (e?.code === 'ECONNRESET' || e?.code === 'EPIPE' || e?.message === 'aborted');
}

/**
 * Turns anything thrown in a route into an AppError (unknown errors become internal_error). The first error a
 * request ends with is noted in its facts (the request log line's `error`, the per-model error series).
 */
export function toAppError(err: unknown, req: FastifyRequest): AppError {
  // the client went away (its socket closed, the work behind its request aborted): nobody reads the answer, and
  // nothing is wrong with the server; a debug line, not a warning about storage or an error, and no error code in
  // the request's facts (its line says status 499, outcome client_closed: src/compose/http.ts)
  if (req.facts?.clientClosed || (!(err instanceof AppError) && clientWentAway(err, req))) {
    req.log.debug({ err: (err as Error)?.message }, 'client went away');
    return err instanceof AppError ? err : new AppError('service_unavailable', msg('client_gone'));
  }
  const e = appErrorOf(err, req);
  if (req.facts && req.facts.errorCode === undefined) {
    req.facts.errorCode = e.code;
    req.facts.errorMessage = e.message;
  }
  return e;
}

function appErrorOf(err: unknown, req: FastifyRequest): AppError {
  if (err instanceof AppError) return err;
  if (isUnavailable(err)) {
    req.log.warn({ err: (err as Error).message }, 'storage unavailable');
    return new AppError('service_unavailable', msg('storage_unavailable'), null, { headers: { 'retry-after': '1' } });
  }
  const fe = err as FastifyError & { validationContext?: string };
  if (fe && Array.isArray(fe.validation)) {
    const part = fe.validationContext;
    const data = part === 'body' ? req.body : part === 'querystring' ? req.query : part === 'params' ? req.params : part === 'headers' ? req.headers : undefined;
    const v = describeValidationError(fe.validation as ErrorObject[], part, data);
    return new AppError('validation_error', v.message, v.param, { localized: { zh: v.zh }, detail: v.detail });
  }
  switch (fe?.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new AppError(
        'unsupported_media_type',
        req.headers['content-type'] === undefined ? msg('content_type_missing') : msg('content_type_unsupported', { type: req.headers['content-type'] }),
      );
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new AppError('payload_too_large');
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new AppError('validation_error', msg('body_empty'));
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new AppError('validation_error', msg('content_length_mismatch'));
  }
  if (fe instanceof SyntaxError || fe?.code === 'FST_ERR_CTP_INVALID_JSON_BODY') {
    return new AppError('invalid_json');
  }
  const status = fe?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    const code: ErrorCode = status === 413 ? 'payload_too_large' : status === 415 ? 'unsupported_media_type' : status === 404 ? 'not_found' : 'validation_error';
    return new AppError(code, msg('request_refused', { reason: fe.message }));
  }
  req.log.error({ err }, 'unhandled error');
  return new AppError('internal_error');
}

/** A portal failure, in the portal's envelope (./portal-envelope.ts). */
export function sendPortalError(err: unknown, req: FastifyRequest, reply: FastifyReply) {
  const e = toAppError(err, req);
  if (e.headers) reply.headers(e.headers);
  return reply.code(e.status).send(portalErrorBody(e, req));
}

/** The OpenAI error shape for {base_url} routes. */
export function openAIErrorBody(e: AppError, acceptLanguage?: string) {
  return {
    error: {
      message: localizedMessage(e, acceptLanguage),
      type: ERRORS[e.code].type,
      param: e.param,
      code: e.openaiCode,
    },
  };
}

export function sendOpenAIError(err: unknown, req: FastifyRequest, reply: FastifyReply) {
  const e = toAppError(err, req);
  if (e.headers) reply.headers(e.headers);
  return reply.code(e.status).send(openAIErrorBody(e, req.headers['accept-language']));
}

/**
 * The error types of Anthropic's Messages API, by HTTP status (its API reference, "Errors"): the shape the routes
 * that speak Anthropic's wire answer in (`config.wire: 'anthropic-api'`), mapped here from the one error table, so
 * the status is the table's and Anthropic's SDK raises the typed error of that status (BadRequestError,
 * AuthenticationError, PermissionDeniedError, NotFoundError, RateLimitError, InternalServerError...).
 */
export function anthropicErrorType(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 402) return 'billing_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 413) return 'request_too_large';
  if (status === 429) return 'rate_limit_error';
  if (status === 503 || status === 529) return 'overloaded_error';
  if (status === 504) return 'timeout_error';
  if (status >= 500) return 'api_error';
  return 'invalid_request_error';
}

/**
 * Anthropic's error shape: `{"type":"error","error":{"type","message"},"request_id"}`. Portico's code and the
 * parameter have no field of their own there: the message names the parameter when the table's entry has one.
 */
export function anthropicErrorBody(e: AppError, requestId: string, acceptLanguage?: string) {
  const message = localizedMessage(e, acceptLanguage);
  return {
    type: 'error' as const,
    error: { type: anthropicErrorType(e.status), message: e.param && !message.includes(e.param) ? `${e.param}: ${message}` : message },
    request_id: requestId,
  };
}

export function sendAnthropicError(err: unknown, req: FastifyRequest, reply: FastifyReply) {
  const e = toAppError(err, req);
  if (e.headers) reply.headers(e.headers);
  return reply.code(e.status).send(anthropicErrorBody(e, req.id, req.headers['accept-language']));
}
