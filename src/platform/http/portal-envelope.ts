/**
 * The portal's envelope (spec 2.1), written in this one file: every answer under {portal_base_url} is
 * `{ meta: { code, message, request_id, error?, detail? }, data }`. On success `code` is 0, `message` 'success' and
 * `data` the answer (`ok`); on failure `code` is the error's portal code of the one table (src/platform/errors.ts),
 * `message` in the caller's language, `error` its name and `data` null (`portalErrorBody`, rendered by
 * sendPortalError in ./errors.ts). The schemas below describe both for the OpenAPI document.
 */
import type { FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import { ERRORS, localizedMessage, type AppError } from '../errors.js';

/** A portal route's answer: its data in the envelope. */
export function ok<T>(req: FastifyRequest, data: T) {
  return { meta: { code: 0, message: 'success', request_id: req.id }, data };
}

/** A portal failure in the envelope. */
export function portalErrorBody(e: AppError, req: Pick<FastifyRequest, 'id' | 'headers'>) {
  return {
    meta: {
      code: ERRORS[e.code].portal,
      message: localizedMessage(e, req.headers['accept-language']),
      request_id: req.id,
      error: e.code,
      ...(e.detail ? { detail: e.detail } : {}),
    },
    data: null,
  };
}

/** `meta` of a portal answer, as the routes declare it. */
const Meta = Type.Object({
  code: Type.Integer(),
  message: Type.String(),
  request_id: Type.String(),
  error: Type.Optional(Type.String()),
});

/** The schema of a portal route's 200 answer: `data` in the envelope. */
export function envelope<T extends object>(data: T) {
  return Type.Object({ meta: Meta, data: data as any });
}

/** The portal's envelope on failure (every portal route's 4XX and 5XX: ./error-schemas.ts). */
export const PortalErrorSchema = Type.Object(
  {
    meta: Type.Object({
      code: Type.Integer({ description: 'the portal code of docs/api.md, "Error codes" (never 0 on failure)' }),
      message: Type.String({ description: "in the caller's language (Accept-Language)" }),
      request_id: Type.String(),
      error: Type.Optional(Type.String({ description: 'the error name' })),
      detail: Type.Optional(Type.String({ description: 'validation_error: the rule that failed (unknown_parameter, invalid_type, ...)' })),
    }),
    data: Type.Null(),
  },
  { description: 'An error, in the portal envelope' },
);
