/** Calls to Portico: the portal API (session cookie + CSRF token) and the public API (an inference key). */
// The answers' shapes come from the TypeBox schemas the server's routes declare. Type-only imports: esbuild
// erases them (the bundle gets none of the server's code), and a field the server renames or drops is a type
// error in `npm run build` (tsc -p web/tsconfig.json) instead of an undefined at run time.
import type { Static } from 'typebox';
import type { CreatedKeyRecordSchema, CreateKeyBody, KeyListSchema, KeyRecordSchema, UpdateKeyBody } from '../../src/portal/keys/schemas.js';
import type { MeSchema } from '../../src/portal/me/schemas.js';
import type { BalanceSchema, UsageQuerySchema, UsageReportSchema } from '../../src/portal/query/schemas.js';
import type { PortalErrorSchema } from '../../src/platform/http/portal-envelope.js';
import type { OpenAIErrorSchema } from '../../src/platform/http/error-schemas.js';
import type { SessionSchema, SignInMethodsSchema } from '../../src/web/schemas.js';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    /** the error's name from the table of codes (meta.error / error.code), or 'network' */
    readonly code: string,
    message: string,
    readonly requestId?: string,
  ) {
    super(message);
  }
}

let csrfToken = '';
let acceptLanguage = 'en';
let sessionEnded: (code: string) => void = () => {};

export function setCsrfToken(t: string) {
  csrfToken = t;
}
export function setApiLanguage(lang: string) {
  acceptLanguage = lang === 'zh' ? 'zh-CN,zh;q=0.9,en;q=0.5' : 'en';
}
/** called when a portal call finds the session gone (expired or signed out elsewhere) */
export function onSessionEnded(f: (code: string) => void) {
  sessionEnded = f;
}

async function network<T>(p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (e) {
    if ((e as Error).name === 'AbortError') throw e;
    throw new ApiError(0, 'network', (e as Error).message);
  }
}

/** A portal call; answers `data` of the envelope or throws ApiError with the server's (localized) message. */
export function portal<T>(method: string, path: string, body?: unknown, opts: { quietAuth?: boolean } = {}): Promise<T> {
  return envelopeCall<T>('/v1/portal', method, path, body, opts);
}

/**
 * An admin API call (/v1/admin: the operator's console), with the page's session and CSRF token, in the same
 * envelope as the portal's. Its answers' types are in console/api.ts (the console's own chunk).
 */
export function admin<T>(method: string, path: string, body?: unknown, opts: { quietAuth?: boolean } = {}): Promise<T> {
  return envelopeCall<T>('/v1/admin', method, path, body, opts);
}

async function envelopeCall<T>(base: string, method: string, path: string, body: unknown, opts: { quietAuth?: boolean }): Promise<T> {
  const headers: Record<string, string> = { 'accept-language': acceptLanguage };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET') headers['x-csrf-token'] = csrfToken;
  const res = await network(
    fetch(`${base}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin', cache: 'no-store' }),
  );
  let json: { meta?: PortalAnswer; data?: T } | undefined;
  try {
    json = await res.json();
  } catch {
    throw new ApiError(res.status, 'bad_response', `HTTP ${res.status}`);
  }
  if (!res.ok && typeof json?.meta?.message !== 'string') throw new ApiError(res.status, 'bad_response', `HTTP ${res.status}`);
  if (!res.ok || json?.meta?.code !== 0) {
    const err = new ApiError(res.status, json?.meta?.error ?? 'error', json?.meta?.message ?? `HTTP ${res.status}`, json?.meta?.request_id);
    if (res.status === 401 && !opts.quietAuth && (err.code === 'session_expired' || err.code === 'unauthorized')) sessionEnded(err.code);
    throw err;
  }
  return json.data as T;
}

/** A call to {base_url} with an inference key; answers the Response when it is 2xx, else throws its error. */
export async function v1(path: string, key: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${key}`);
  headers.set('accept-language', acceptLanguage);
  const res = await network(fetch(`/v1${path}`, { ...init, headers, credentials: 'omit', cache: 'no-store' }));
  if (res.ok) return res;
  let e: Partial<V1Error> | undefined;
  try {
    e = (await res.json())?.error;
  } catch {
    e = undefined;
  }
  // no error object: not Portico's answer (a gateway's or proxy's page)
  if (!e || typeof e.message !== 'string') throw new ApiError(res.status, 'bad_response', `HTTP ${res.status}`, res.headers.get('x-request-id') ?? undefined);
  throw new ApiError(res.status, e.code ?? 'error', e.message, res.headers.get('x-request-id') ?? undefined);
}

// ------------------------------------------------------------------------------------------ shapes

/** the page's session (GET /session, POST /session/link) */
export type Session = Static<typeof SessionSchema>;
/** GET /session/methods: how a person can sign in */
export type SignInMethods = Static<typeof SignInMethodsSchema>;

/** GET /me */
export type Me = Static<typeof MeSchema>;
/** one key, as every key route answers it */
export type KeyRecord = Static<typeof KeyRecordSchema>;
/** POST api-keys: the key with its full secret (`api_key`), shown only in this answer */
export type CreatedKeyRecord = Static<typeof CreatedKeyRecordSchema>;
/** GET api-keys: one page of keys */
export type KeyList = Static<typeof KeyListSchema>;
/** the bodies of POST and PUT api-keys */
export type CreateKeyRequest = Static<typeof CreateKeyBody>;
export type UpdateKeyRequest = Static<typeof UpdateKeyBody>;
/** GET /query/balance */
export type Balance = Static<typeof BalanceSchema>;
/** GET /query/usage: the usage report; its rows carry the columns named in `group_by` */
export type UsageReport = Static<typeof UsageReportSchema>;
export type UsageRow = UsageReport['list'][number];
/** GET /query/usage's parameters */
export type UsageQuery = Static<typeof UsageQuerySchema>;
/** the portal's envelope (its meta is the same on success, with code 0) and the OpenAI error object of {base_url} */
type PortalAnswer = Static<typeof PortalErrorSchema>['meta'];
type V1Error = Static<typeof OpenAIErrorSchema>['error'];

export type KeyKind = 'api_keys' | 'management_api_keys';
export const KEY_PATH: Record<KeyKind, string> = { api_keys: '/api-keys', management_api_keys: '/management/api-keys' };
