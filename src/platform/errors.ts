/**
 * The one table of error codes. Every error Portico answers is an AppError with one of these codes;
 * the portal renders it in its envelope (meta.code = `portal`), the {base_url} routes in the OpenAI shape
 * (error.type = `type`, error.code = the code name).
 */
export const ERRORS = {
  // 400
  validation_error: { status: 400, portal: 40000, type: 'invalid_request_error', message: 'invalid request' },
  api_key_id_required: { status: 400, portal: 40001, type: 'invalid_request_error', message: 'api_key_id is required' },
  invalid_expires_at: { status: 400, portal: 40002, type: 'invalid_request_error', message: 'expires_at must be 0 (never) or a Unix timestamp later than now' },
  unsupported_parameter: { status: 400, portal: 40003, type: 'invalid_request_error', message: 'unsupported parameter' },
  context_length_exceeded: { status: 400, portal: 40004, type: 'invalid_request_error', message: 'input exceeds the context window of the model' },
  invalid_json: { status: 400, portal: 40005, type: 'invalid_request_error', message: 'request body is not valid JSON' },
  invalid_file_format: { status: 400, portal: 40006, type: 'invalid_request_error', message: 'invalid file format' },
  audio_too_short: { status: 400, portal: 40007, type: 'invalid_request_error', message: 'audio file is too short' },
  unsupported_language: { status: 400, portal: 40008, type: 'invalid_request_error', message: 'language not supported by this model' },
  invalid_encrypted_content: { status: 400, portal: 40009, type: 'invalid_request_error', message: 'the encrypted content could not be verified' },
  websocket_connection_limit_reached: {
    status: 400,
    portal: 40010,
    type: 'invalid_request_error',
    message: 'Responses websocket connection limit reached: create a new websocket connection to continue',
  },
  // 401
  unauthorized: { status: 401, portal: 40100, type: 'authentication_error', message: 'unauthorized' },
  invalid_authorization_format: { status: 401, portal: 40101, type: 'authentication_error', message: 'unauthorized: invalid authorization format' },
  invalid_token: { status: 401, portal: 40102, type: 'authentication_error', message: 'unauthorized: invalid token' },
  invalid_format: { status: 401, portal: 40103, type: 'authentication_error', message: 'invalid API key format' },
  invalid_api_key: { status: 401, portal: 40104, type: 'authentication_error', message: 'unauthorized: invalid API key' },
  api_key_revoked: { status: 401, portal: 40105, type: 'authentication_error', message: 'unauthorized: API key has been revoked' },
  api_key_expired: { status: 401, portal: 40106, type: 'authentication_error', message: 'unauthorized: API key has expired' },
  api_key_disabled: { status: 401, portal: 40107, type: 'authentication_error', message: 'unauthorized: API key is disabled' },
  session_expired: { status: 401, portal: 40108, type: 'authentication_error', message: 'unauthorized: the session has expired or was signed out; sign in again' },
  sign_in_link_invalid: { status: 401, portal: 40109, type: 'authentication_error', message: 'unauthorized: this sign-in link is invalid or has expired; ask for a new one' },
  sign_in_link_used: { status: 401, portal: 40110, type: 'authentication_error', message: 'unauthorized: this sign-in link has already been used; ask for a new one' },
  // 403
  permission_denied: { status: 403, portal: 40300, type: 'permission_error', message: 'permission denied' },
  insufficient_scope: { status: 403, portal: 40301, type: 'permission_error', message: 'permission denied: the API key lacks the scope this operation needs' },
  csrf_failed: {
    status: 403,
    portal: 40302,
    type: 'permission_error',
    message: 'permission denied: missing or wrong CSRF token (x-csrf-token) for a request authenticated by the session cookie',
  },
  // 404
  not_found: { status: 404, portal: 40400, type: 'invalid_request_error', message: 'not found' },
  api_key_not_found: { status: 404, portal: 40401, type: 'invalid_request_error', message: 'API key not found' },
  model_not_found: { status: 404, portal: 40402, type: 'invalid_request_error', message: 'model not found' },
  previous_response_not_found: { status: 404, portal: 40403, type: 'invalid_request_error', message: 'previous response not found' },
  response_not_found: { status: 404, portal: 40404, type: 'invalid_request_error', message: 'response not found' },
  // 405 / 409 / 413 / 415
  method_not_allowed: { status: 405, portal: 40500, type: 'invalid_request_error', message: 'method not allowed' },
  active_key_limit: { status: 409, portal: 40900, type: 'invalid_request_error', message: 'active API key limit reached' },
  invalid_state: { status: 409, portal: 40901, type: 'invalid_request_error', message: 'operation not allowed in the current state' },
  uri_too_long: { status: 414, portal: 41400, type: 'invalid_request_error', message: 'a path parameter is too long' },
  payload_too_large: { status: 413, portal: 41300, type: 'invalid_request_error', message: 'request body too large' },
  unsupported_media_type: { status: 415, portal: 41500, type: 'invalid_request_error', message: 'unsupported content type' },
  upgrade_required: { status: 426, portal: 42600, type: 'invalid_request_error', message: 'this resource needs a WebSocket upgrade' },
  // 429
  rate_limit_exceeded: { status: 429, portal: 42900, type: 'requests', message: 'rate limit exceeded' },
  insufficient_quota: { status: 429, portal: 42901, type: 'insufficient_quota', message: 'insufficient quota: the balance is spent' },
  // 5xx
  internal_error: { status: 500, portal: 50000, type: 'server_error', message: 'internal server error' },
  engine_error: { status: 502, portal: 50200, type: 'server_error', message: 'the model engine failed' },
  upstream_unavailable: { status: 502, portal: 50201, type: 'server_error', message: 'the upstream model server is unavailable' },
  engine_unavailable: { status: 503, portal: 50300, type: 'server_error', message: 'no engine is available for this model' },
  service_unavailable: { status: 503, portal: 50301, type: 'server_error', message: 'service temporarily unavailable' },
  upstream_timeout: { status: 504, portal: 50400, type: 'server_error', message: 'the upstream model server timed out' },
} as const satisfies Record<string, { status: number; portal: number; type: string; message: string }>;

export type ErrorCode = keyof typeof ERRORS;

/** Messages in other languages, chosen by Accept-Language (the spec's "internationalized" errors). */
const I18N: Partial<Record<ErrorCode, Record<string, string>>> = {
  invalid_format: {
    en: 'invalid API key format',
    zh: 'API 密钥格式无效',
  },
  invalid_api_key: { en: 'unauthorized: invalid API key', zh: '未授权：API 密钥无效' },
  api_key_revoked: { en: 'unauthorized: API key has been revoked', zh: '未授权：API 密钥已被吊销' },
  api_key_expired: { en: 'unauthorized: API key has expired', zh: '未授权：API 密钥已过期' },
  api_key_disabled: { en: 'unauthorized: API key is disabled', zh: '未授权：API 密钥已停用' },
  session_expired: { en: ERRORS.session_expired.message, zh: '未授权：会话已过期或已退出，请重新登录' },
  sign_in_link_invalid: { en: ERRORS.sign_in_link_invalid.message, zh: '未授权：登录链接无效或已过期，请索取新链接' },
  sign_in_link_used: { en: ERRORS.sign_in_link_used.message, zh: '未授权：登录链接已被使用，请索取新链接' },
};

/**
 * What a validation_error is, in OpenAI's own codes: the `code` the OpenAI error shape reports (the portal
 * reports them all as 40000 validation_error, with the detail beside it).
 */
export const VALIDATION_DETAILS = [
  'unknown_parameter',
  'missing_required_parameter',
  'invalid_type',
  'invalid_value',
  'string_above_max_length',
  'string_below_min_length',
  'array_above_max_length',
  'array_below_min_length',
  'integer_above_max_value',
  'integer_below_min_value',
  'decimal_above_max_value',
  'decimal_below_min_value',
] as const;
export type ValidationDetail = (typeof VALIDATION_DETAILS)[number];

export interface AppErrorExtra {
  /** response headers (retry-after, x-should-retry) */
  headers?: Record<string, string>;
  /** the message in other languages (e.g. validation messages, which name the parameter) */
  localized?: Partial<Record<'zh', string>>;
  /** validation_error: which rule failed, as OpenAI's code */
  detail?: ValidationDetail;
}

export class AppError extends Error {
  readonly status: number;
  headers?: Record<string, string>;
  readonly localized?: Partial<Record<'zh', string>>;
  readonly detail?: ValidationDetail;
  constructor(
    readonly code: ErrorCode,
    message?: string,
    readonly param: string | null = null,
    extra: AppErrorExtra = {},
  ) {
    super(message ?? ERRORS[code].message);
    this.name = 'AppError';
    this.status = ERRORS[code].status;
    this.headers = extra.headers;
    this.localized = extra.localized;
    this.detail = extra.detail;
  }

  /** The code the OpenAI error shape reports: the validation detail when there is one. */
  get openaiCode(): string {
    return this.detail ?? this.code;
  }
  /** whether the message is the table's default (so it may be translated) */
  get isDefaultMessage(): boolean {
    return this.message === ERRORS[this.code].message;
  }
}

/** Picks the best language of ours from an Accept-Language header (en default). */
export function pickLanguage(acceptLanguage: string | undefined): string {
  if (!acceptLanguage) return 'en';
  let best = 'en';
  let bestQ = -1;
  for (const part of acceptLanguage.split(',')) {
    const [tag = '', ...params] = part.trim().split(';');
    const lang = tag.trim().toLowerCase().split('-')[0];
    let q = 1;
    for (const p of params) {
      const m = /^\s*q=([0-9.]+)\s*$/.exec(p);
      if (m) q = Number(m[1]);
    }
    // q=0 means "not acceptable"
    if ((lang === 'zh' || lang === 'en') && q > 0 && q > bestQ) {
      best = lang;
      bestQ = q;
    }
  }
  return best;
}

export function localizedMessage(err: AppError, acceptLanguage: string | undefined): string {
  if (err.localized) {
    const lang = pickLanguage(acceptLanguage);
    return lang === 'zh' ? (err.localized.zh ?? err.message) : err.message;
  }
  const table = I18N[err.code];
  if (!table || !err.isDefaultMessage) return err.message;
  return table[pickLanguage(acceptLanguage)] ?? err.message;
}
