import type { FastifyRequest } from 'fastify';
import { AppError } from '../errors.js';

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
