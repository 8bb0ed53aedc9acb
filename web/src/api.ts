/** Calls to Portico: the portal API (session cookie + CSRF token) and the public API (an inference key). */

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
export async function portal<T>(method: string, path: string, body?: unknown, opts: { quietAuth?: boolean } = {}): Promise<T> {
  const headers: Record<string, string> = { 'accept-language': acceptLanguage };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET') headers['x-csrf-token'] = csrfToken;
  const res = await network(
    fetch(`/v1/portal${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin', cache: 'no-store' }),
  );
  let json: any;
  try {
    json = await res.json();
  } catch {
    throw new ApiError(res.status, 'bad_response', `HTTP ${res.status}`);
  }
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
  let e: any;
  try {
    e = (await res.json())?.error;
  } catch {
    e = undefined;
  }
  throw new ApiError(res.status, e?.code ?? 'error', e?.message ?? `HTTP ${res.status}`, res.headers.get('x-request-id') ?? undefined);
}

// ------------------------------------------------------------------------------------------ shapes

export interface Session {
  user_id: string;
  org_roles: Record<string, string>;
  method: 'link' | 'oidc';
  created_at: number;
  expires_at: number;
  csrf_token: string;
}

export interface KindSummary {
  limit: number;
  active: Record<string, number>;
  scopes: string[];
}

export interface Me {
  user_id: string;
  org_roles: Record<string, string>;
  admin_orgs: string[];
  api_keys: KindSummary;
  management_api_keys: KindSummary;
  models: Array<{ id: string; type: 'text' | 'speech' | 'transcription' }>;
}

export interface KeyRecord {
  id: string;
  org_id: string;
  name: string;
  description: string;
  status: 'active' | 'disabled' | 'revoked';
  display: string;
  last_used_at: number;
  expires_at: number;
  created_at: number;
  scopes: string[];
  api_key?: string;
}

export type KeyKind = 'api_keys' | 'management_api_keys';
export const KEY_PATH: Record<KeyKind, string> = { api_keys: '/api-keys', management_api_keys: '/management/api-keys' };
