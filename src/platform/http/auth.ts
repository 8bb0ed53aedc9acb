import type { FastifyRequest } from 'fastify';
import { AppError, msg } from '../errors.js';

/**
 * The bearer token of a request, or the spec's errors: no header -> `unauthorized`; a header that is not
 * `Bearer <token>` -> `unauthorized: invalid authorization format`.
 */
export function bearerToken(req: FastifyRequest): string {
  const h = req.headers.authorization;
  if (h === undefined || h.trim() === '') throw new AppError('unauthorized');
  const sp = h.indexOf(' ');
  if (sp <= 0 || h.slice(0, sp).toLowerCase() !== 'bearer') throw new AppError('invalid_authorization_format');
  const token = h.slice(sp + 1).trim();
  if (token === '' || /\s/.test(token)) throw new AppError('invalid_authorization_format');
  return token;
}

/**
 * The inference key of a {base_url} request: the bearer token, or, on a route that speaks Anthropic's wire
 * (`config.wire: 'anthropic-api'`), the `x-api-key` header its SDK sends. Only such a route reads `x-api-key`, so no
 * other route gains a way in. Both headers with different keys are refused (which one was meant is not known).
 */
export function inferenceKeyToken(req: FastifyRequest): string {
  const h = req.headers['x-api-key'];
  if (req.routeOptions.config?.wire !== 'anthropic-api' || h === undefined) return bearerToken(req);
  const key = Array.isArray(h) ? undefined : h.trim();
  if (!key || /\s/.test(key)) throw new AppError('invalid_authorization_format', msg('x_api_key_malformed'));
  if (req.headers.authorization !== undefined && req.headers.authorization.trim() !== '') {
    let bearer: string | undefined;
    try {
      bearer = bearerToken(req);
    } catch {
      bearer = undefined;
    }
    if (bearer !== key) throw new AppError('invalid_authorization_format', msg('x_api_key_conflict'));
  }
  return key;
}
