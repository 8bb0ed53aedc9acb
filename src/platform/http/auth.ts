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
  if (req.routeOptions.config?.browserSocket === true) {
    const fromProtocol = subprotocolKey(req);
    if (fromProtocol !== undefined) {
      if (req.headers.authorization !== undefined && req.headers.authorization.trim() !== '') throw new AppError('invalid_authorization_format', msg('subprotocol_key_conflict'));
      return fromProtocol;
    }
  }
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

/** the subprotocol a browser's WebSocket carries its key in (OpenAI's browser clients): `openai-insecure-api-key.<key>` */
export const KEY_SUBPROTOCOL = 'openai-insecure-api-key.';

/** The key of a WebSocket upgrade given as a subprotocol, if one is (two different ones are refused). */
function subprotocolKey(req: FastifyRequest): string | undefined {
  const h = req.headers['sec-websocket-protocol'];
  if (typeof h !== 'string') return undefined;
  let key: string | undefined;
  for (const p of h.split(',')) {
    const t = p.trim();
    if (!t.startsWith(KEY_SUBPROTOCOL)) continue;
    const k = t.slice(KEY_SUBPROTOCOL.length);
    if (k === '' || (key !== undefined && key !== k)) throw new AppError('invalid_authorization_format', msg('subprotocol_key_conflict'));
    key = k;
  }
  return key;
}
