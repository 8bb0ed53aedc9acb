/**
 * The one table of error codes. Every error Portico answers is an AppError with one of these codes;
 * the portal renders it in its envelope (meta.code = `portal`), the {base_url} routes in the OpenAI shape
 * (error.type = `type`, error.code = the code name). Each code's default message is in English (`message`) and
 * Simplified Chinese (`zh`); the specific messages are in MESSAGES below, in both languages too. The caller's
 * `Accept-Language` picks one (pickLanguage).
 */
export const ERRORS = {
  // 400
  validation_error: { status: 400, portal: 40000, type: 'invalid_request_error', message: 'invalid request', zh: '请求无效' },
  api_key_id_required: { status: 400, portal: 40001, type: 'invalid_request_error', message: 'api_key_id is required', zh: '必须提供 api_key_id' },
  invalid_expires_at: {
    status: 400,
    portal: 40002,
    type: 'invalid_request_error',
    message: 'expires_at must be 0 (never) or a Unix timestamp later than now',
    zh: 'expires_at 必须为 0（永不过期）或晚于当前时间的 Unix 时间戳',
  },
  unsupported_parameter: { status: 400, portal: 40003, type: 'invalid_request_error', message: 'unsupported parameter', zh: '不支持的参数' },
  context_length_exceeded: {
    status: 400,
    portal: 40004,
    type: 'invalid_request_error',
    message: 'input exceeds the context window of the model',
    zh: '输入超出了模型的上下文窗口',
  },
  invalid_json: { status: 400, portal: 40005, type: 'invalid_request_error', message: 'request body is not valid JSON', zh: '请求体不是有效的 JSON' },
  invalid_file_format: { status: 400, portal: 40006, type: 'invalid_request_error', message: 'invalid file format', zh: '文件格式无效' },
  audio_too_short: { status: 400, portal: 40007, type: 'invalid_request_error', message: 'audio file is too short', zh: '音频文件太短' },
  unsupported_language: { status: 400, portal: 40008, type: 'invalid_request_error', message: 'language not supported by this model', zh: '此模型不支持该语言' },
  invalid_encrypted_content: { status: 400, portal: 40009, type: 'invalid_request_error', message: 'the encrypted content could not be verified', zh: '无法验证加密内容' },
  websocket_connection_limit_reached: {
    status: 400,
    portal: 40010,
    type: 'invalid_request_error',
    message: 'Responses websocket connection limit reached: create a new websocket connection to continue',
    zh: 'Responses WebSocket 连接已达到使用上限：请新建一个 WebSocket 连接后继续',
  },
  conversation_too_large: {
    status: 400,
    portal: 40011,
    type: 'invalid_request_error',
    message: 'the conversation of previous_response_id is larger than a conversation may be',
    zh: 'previous_response_id 所指的对话超出了对话允许的大小',
  },
  /** the request's bytes are not HTTP (Node's parser refused them before any route: compose/http.ts, clientError) */
  /** an entry an operator gave (a model of the admin API) that the model file's checker refuses; the message is the checker's */
  invalid_model_entry: { status: 400, portal: 40013, type: 'invalid_request_error', message: 'the request is not valid', zh: '请求无效' },
  malformed_request: {
    status: 400,
    portal: 40012,
    type: 'invalid_request_error',
    message: 'the request is not valid HTTP and could not be read',
    zh: '请求不是有效的 HTTP，无法读取',
  },
  /** the upstream's content filter (Azure OpenAI's) refused the prompt: the request's content, not its form */
  content_filter: {
    status: 400,
    portal: 40014,
    type: 'invalid_request_error',
    message: "the prompt was refused by the upstream's content filter",
    zh: '提示词被上游的内容过滤器拒绝',
  },
  // 401
  unauthorized: { status: 401, portal: 40100, type: 'authentication_error', message: 'unauthorized', zh: '未授权' },
  invalid_authorization_format: {
    status: 401,
    portal: 40101,
    type: 'authentication_error',
    message: 'unauthorized: invalid authorization format',
    zh: '未授权：Authorization 格式无效',
  },
  invalid_token: { status: 401, portal: 40102, type: 'authentication_error', message: 'unauthorized: invalid token', zh: '未授权：令牌无效' },
  invalid_format: { status: 401, portal: 40103, type: 'authentication_error', message: 'invalid API key format', zh: 'API 密钥格式无效' },
  invalid_api_key: { status: 401, portal: 40104, type: 'authentication_error', message: 'unauthorized: invalid API key', zh: '未授权：API 密钥无效' },
  api_key_revoked: { status: 401, portal: 40105, type: 'authentication_error', message: 'unauthorized: API key has been revoked', zh: '未授权：API 密钥已被吊销' },
  api_key_expired: { status: 401, portal: 40106, type: 'authentication_error', message: 'unauthorized: API key has expired', zh: '未授权：API 密钥已过期' },
  client_secret_expired: {
    status: 401,
    portal: 40111,
    type: 'authentication_error',
    message: 'unauthorized: the client secret has expired; mint a new one',
    zh: '未授权：客户端密钥已过期，请重新生成',
  },
  api_key_disabled: { status: 401, portal: 40107, type: 'authentication_error', message: 'unauthorized: API key is disabled', zh: '未授权：API 密钥已停用' },
  session_expired: {
    status: 401,
    portal: 40108,
    type: 'authentication_error',
    message: 'unauthorized: the session has expired or was signed out; sign in again',
    zh: '未授权：会话已过期或已退出，请重新登录',
  },
  sign_in_link_invalid: {
    status: 401,
    portal: 40109,
    type: 'authentication_error',
    message: 'unauthorized: this sign-in link is invalid or has expired; ask for a new one',
    zh: '未授权：登录链接无效或已过期，请索取新链接',
  },
  sign_in_link_used: {
    status: 401,
    portal: 40110,
    type: 'authentication_error',
    message: 'unauthorized: this sign-in link has already been used; ask for a new one',
    zh: '未授权：登录链接已被使用，请索取新链接',
  },
  // 403
  permission_denied: { status: 403, portal: 40300, type: 'permission_error', message: 'permission denied', zh: '权限不足' },
  insufficient_scope: {
    status: 403,
    portal: 40301,
    type: 'permission_error',
    message: 'permission denied: the API key lacks the scope this operation needs',
    zh: '权限不足：该 API 密钥缺少此操作所需的作用域',
  },
  csrf_failed: {
    status: 403,
    portal: 40302,
    type: 'permission_error',
    message: 'permission denied: missing or wrong CSRF token (x-csrf-token) for a request authenticated by the session cookie',
    zh: '权限不足：通过会话 Cookie 认证的请求缺少 CSRF 令牌（x-csrf-token），或令牌不正确',
  },
  // 404
  not_found: { status: 404, portal: 40400, type: 'invalid_request_error', message: 'not found', zh: '未找到' },
  api_key_not_found: { status: 404, portal: 40401, type: 'invalid_request_error', message: 'API key not found', zh: '未找到 API 密钥' },
  model_not_found: { status: 404, portal: 40402, type: 'invalid_request_error', message: 'model not found', zh: '未找到模型' },
  previous_response_not_found: { status: 404, portal: 40403, type: 'invalid_request_error', message: 'previous response not found', zh: '未找到上一个响应' },
  response_not_found: { status: 404, portal: 40404, type: 'invalid_request_error', message: 'response not found', zh: '未找到响应' },
  user_not_found: { status: 404, portal: 40405, type: 'invalid_request_error', message: 'user not found', zh: '未找到用户' },
  organization_not_found: { status: 404, portal: 40406, type: 'invalid_request_error', message: 'organization not found', zh: '未找到组织' },
  operator_not_found: { status: 404, portal: 40407, type: 'invalid_request_error', message: 'operator not found', zh: '未找到运维人员' },
  // 405 / 408 / 409 / 413 / 415 / 431
  /** the request's headers or whole body did not arrive in time (HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS) */
  request_timeout: {
    status: 408,
    portal: 40800,
    type: 'invalid_request_error',
    message: 'the request did not arrive in time; the connection is closed',
    zh: '请求未在限定时间内送达；连接已关闭',
  },
  /** the request's headers are larger than the server reads (Node's maxHeaderSize, 16 KiB by default) */
  request_header_fields_too_large: {
    status: 431,
    portal: 43100,
    type: 'invalid_request_error',
    message: 'the request headers are too large',
    zh: '请求头过大',
  },
  method_not_allowed: { status: 405, portal: 40500, type: 'invalid_request_error', message: 'method not allowed', zh: '不允许使用此方法' },
  active_key_limit: { status: 409, portal: 40900, type: 'invalid_request_error', message: 'active API key limit reached', zh: '有效密钥数量已达上限' },
  invalid_state: { status: 409, portal: 40901, type: 'invalid_request_error', message: 'operation not allowed in the current state', zh: '当前状态下不允许此操作' },
  /** the name (or a deployment id) is taken by another model */
  conflict: { status: 409, portal: 40903, type: 'invalid_request_error', message: 'the name is already taken', zh: '名称已被占用' },
  /** a model that is not the admin API's own (the model file, a pulled or built-in model) cannot be changed there */
  read_only: {
    status: 409,
    portal: 40904,
    type: 'invalid_request_error',
    message: 'this model is read-only here: it comes from the model file, a pull or Portico itself',
    zh: '此模型在此处为只读：它来自模型文件、拉取的模型或 Portico 内置',
  },
  roles_from_identity_provider: {
    status: 409,
    portal: 40909,
    type: 'invalid_request_error',
    message: "organization roles come from the identity provider here: change the member's role there",
    zh: '此处的组织角色来自身份提供方：请在身份提供方处修改成员的角色',
  },
  uri_too_long: { status: 414, portal: 41400, type: 'invalid_request_error', message: 'a path parameter is too long', zh: '路径参数过长' },
  payload_too_large: { status: 413, portal: 41300, type: 'invalid_request_error', message: 'request body too large', zh: '请求体过大' },
  unsupported_media_type: { status: 415, portal: 41500, type: 'invalid_request_error', message: 'unsupported content type', zh: '不支持的内容类型' },
  upgrade_required: { status: 426, portal: 42600, type: 'invalid_request_error', message: 'this resource needs a WebSocket upgrade', zh: '此资源需要升级为 WebSocket 连接' },
  // 429
  rate_limit_exceeded: { status: 429, portal: 42900, type: 'requests', message: 'rate limit exceeded', zh: '超出速率限制' },
  concurrency_limit_exceeded: {
    status: 429,
    portal: 42902,
    type: 'requests',
    message: 'too many requests and WebSocket connections in progress for this API key',
    zh: '此 API 密钥进行中的请求和 WebSocket 连接过多',
  },
  budget_exceeded: {
    status: 429,
    portal: 42903,
    type: 'insufficient_quota',
    message: 'budget exceeded: the spending limit of this period is reached',
    zh: '超出预算：本周期的消费上限已达到',
  },
  session_limit_reached: {
    status: 429,
    portal: 42904,
    type: 'requests',
    message: 'too many sessions are open for this API key or on this server',
    zh: '此 API 密钥或此服务器上打开的会话过多',
  },
  insufficient_quota: { status: 429, portal: 42901, type: 'insufficient_quota', message: 'insufficient quota: the balance is spent', zh: '额度不足：余额已用完' },
  // 5xx
  internal_error: { status: 500, portal: 50000, type: 'server_error', message: 'internal server error', zh: '服务器内部错误' },
  engine_error: { status: 502, portal: 50200, type: 'server_error', message: 'the model engine failed', zh: '模型引擎出错' },
  upstream_unavailable: { status: 502, portal: 50201, type: 'server_error', message: 'the upstream model server is unavailable', zh: '上游模型服务器不可用' },
  engine_unavailable: { status: 503, portal: 50300, type: 'server_error', message: 'no engine is available for this model', zh: '此模型没有可用的引擎' },
  service_unavailable: { status: 503, portal: 50301, type: 'server_error', message: 'service temporarily unavailable', zh: '服务暂时不可用' },
  engine_overloaded: {
    status: 503,
    portal: 50302,
    type: 'server_error',
    message: 'the engine is busy with other requests; try again later',
    zh: '引擎正忙于处理其他请求，请稍后重试',
  },
  upstream_timeout: { status: 504, portal: 50400, type: 'server_error', message: 'the upstream model server timed out', zh: '上游模型服务器超时' },
} as const satisfies Record<string, { status: number; portal: number; type: string; message: string; zh: string }>;

export type ErrorCode = keyof typeof ERRORS;

/** A message in each of our languages: English (the default) and Simplified Chinese (`Accept-Language: zh`). */
export interface Texts {
  readonly en: string;
  readonly zh: string;
}

/**
 * The specific messages, beyond each code's default (ERRORS): every message the portal, the query APIs, the web
 * page's back end, the {base_url} gate and the HTTP layer under them can answer, in both languages. `{name}` is a parameter, filled by
 * msg(). test/platform/language.test.ts walks this table and ERRORS, and fails on a message given as a bare
 * string where these layers raise an AppError.
 */
export const MESSAGES = {
  // the HTTP layer (platform/http, compose/http.ts): both route groups
  client_gone: { en: 'the client closed the connection', zh: '客户端已关闭连接' },
  storage_unavailable: { en: 'service temporarily unavailable: storage cannot be reached; try again shortly', zh: '服务暂时不可用：无法连接存储，请稍后重试' },
  content_type_unsupported: { en: 'unsupported content type: {type}; send application/json', zh: '不支持的内容类型：{type}；请发送 application/json' },
  content_type_missing: { en: 'unsupported content type: (none); send application/json', zh: '缺少内容类型（Content-Type）；请发送 application/json' },
  body_empty: { en: 'request body is empty', zh: '请求体为空' },
  content_length_mismatch: { en: 'content-length does not match the body', zh: 'content-length 与请求体的长度不符' },
  /** a refusal by the framework or a plugin, in its own words (which have no translation) */
  request_refused: { en: '{reason}', zh: '请求被拒绝：{reason}' },
  body_nul: { en: 'request body must not contain NUL characters (\\u0000)', zh: '请求体不能包含 NUL 字符（\\u0000）' },
  json_too_many_values: {
    en: "The request holds more than {limit} JSON values (objects, arrays, strings, numbers); the part that went over is under '{param}'. Send fewer items or smaller structures.",
    zh: "请求包含的 JSON 值（对象、数组、字符串、数字）超过 {limit} 个；超出的部分位于 '{param}' 之下。请减少条目或缩小结构。",
  },
  json_too_deep: {
    en: "'{param}' is nested too deeply: objects and arrays may nest at most {limit} levels.",
    zh: "'{param}' 嵌套过深：对象和数组最多只能嵌套 {limit} 层。",
  },
  url_nul: { en: 'the URL must not contain NUL characters (%00)', zh: 'URL 不能包含 NUL 字符（%00）' },
  path_param_too_long: { en: 'a path parameter is longer than {max} characters', zh: '路径参数超过 {max} 个字符' },
  malformed_url: { en: 'malformed URL: {reason}', zh: 'URL 格式错误：{reason}' },
  server_starting: { en: 'Portico is starting ({phase}): send the request again in a few seconds', zh: 'Portico 正在启动（{phase}），请几秒后重试' },
  no_route: { en: 'no route {method} {path}', zh: '没有此路由：{method} {path}' },
  invalid_url: { en: 'Invalid URL ({method} {path})', zh: '无效的 URL（{method} {path}）' },
  method_not_allowed_on: { en: 'method {method} is not allowed on {path}; allowed: {allowed}', zh: '{path} 不允许使用 {method} 方法；允许的方法：{allowed}' },
  // tokens (platform/auth/jwt.ts)
  jwks_unavailable: {
    en: "service temporarily unavailable: the identity provider's keys (JWT_JWKS_URL) cannot be fetched; try again shortly",
    zh: '服务暂时不可用：无法获取身份提供方的密钥（JWT_JWKS_URL），请稍后重试',
  },
  token_too_old: {
    en: 'unauthorized: the token has no issue time (iat) or is older than JWT_MAX_AGE_SECONDS ({max} s)',
    zh: '未授权：令牌没有签发时间（iat），或签发已超过 JWT_MAX_AGE_SECONDS（{max} 秒）',
  },
  token_expired: { en: 'unauthorized: token has expired', zh: '未授权：令牌已过期' },
  token_no_expiry: { en: 'unauthorized: the token has no expiry (exp)', zh: '未授权：令牌没有过期时间（exp）' },
  token_bad_subject: { en: 'unauthorized: {problem}', zh: '未授权：{problem}' },
  subject_missing: { en: 'the token has no subject (sub)', zh: '令牌没有主体（sub）' },
  subject_too_long: { en: 'the subject (sub) is longer than {max} characters', zh: '主体（sub）超过 {max} 个字符' },
  subject_control_character: { en: 'the subject (sub) contains a control character', zh: '主体（sub）包含控制字符' },
  subject_lone_surrogate: { en: 'the subject (sub) contains an unpaired UTF-16 surrogate', zh: '主体（sub）包含未配对的 UTF-16 代理项' },
  // operations (platform/ops, platform/cluster)
  metrics_token_needed: { en: 'unauthorized: /metrics needs Authorization: Bearer <METRICS_TOKEN>', zh: '未授权：/metrics 需要 Authorization: Bearer <METRICS_TOKEN>' },
  metrics_local_only: {
    en: 'permission denied: /metrics answers only requests from this machine; set METRICS_TOKEN or METRICS_PORT to scrape it from elsewhere',
    zh: '权限不足：/metrics 只响应来自本机的请求；如需从其他机器抓取，请设置 METRICS_TOKEN 或 METRICS_PORT',
  },
  concurrency_reached: {
    en: 'Concurrency limit reached: this API key already has {max} requests and open WebSocket connections in progress on this server, its limit. Wait for one to finish, or close a WebSocket you do not use.',
    zh: '已达到并发限制：此 API 密钥在本服务器上已有 {max} 个进行中的请求和打开的 WebSocket 连接，达到其上限。请等待其中一个完成，或关闭不再使用的 WebSocket。',
  },
  rpm_reached: { en: 'Rate limit reached: {rpm} requests per minute for this API key.', zh: '已达到速率限制：此 API 密钥每分钟最多 {rpm} 个请求。' },
  tpm_reserve: {
    en: 'Rate limit reached: this request may use up to {tokens} tokens (about {input} input and up to {output} output), and {used} of the {tpm} tokens per minute of this API key are used or held by requests in progress. Lower max_output_tokens (max_tokens), or retry when the minute ends.',
    zh: '已达到速率限制：此请求最多可能使用 {tokens} 个 Token（约 {input} 个输入，最多 {output} 个输出），而此 API 密钥每分钟 {tpm} 个 Token 中已有 {used} 个被使用或被进行中的请求预留。请调低 max_output_tokens（max_tokens），或在本分钟结束后重试。',
  },
  tpm_too_large: {
    en: 'This request may use up to {tokens} tokens (about {input} input and up to {output} output), more than the {tpm} tokens per minute of this API key. Lower max_output_tokens (max_tokens) or shorten the input.',
    zh: '此请求最多可能使用 {tokens} 个 Token（约 {input} 个输入，最多 {output} 个输出），超过了此 API 密钥每分钟 {tpm} 个 Token 的限制。请调低 max_output_tokens（max_tokens）或缩短输入。',
  },
  tpm_reached: {
    en: 'Rate limit reached: {tpm} tokens per minute for this API key (used {used}).',
    zh: '已达到速率限制：此 API 密钥每分钟最多 {tpm} 个 Token（已使用 {used} 个）。',
  },
  // budgets (portal/usage/budget.ts)
  quota_spent_personal: {
    en: 'You exceeded your current quota: the balance of your account is {balance} credits.',
    zh: '您已超出当前额度：您账户的余额为 {balance} 额度。',
  },
  quota_spent_org: {
    en: 'You exceeded your current quota: the balance of organization {org} is {balance} credits.',
    zh: '您已超出当前额度：组织 {org} 的余额为 {balance} 额度。',
  },
  quota_reserve_personal: {
    en: 'This request may cost up to {cost} credits (about {input} input tokens and up to {output} output tokens), and your balance has {left} credits left for it (what other requests in progress hold is set aside). Lower max_output_tokens (max_tokens), or add credits.',
    zh: '此请求最多可能花费 {cost} 额度（约 {input} 个输入 Token，最多 {output} 个输出 Token），而您的余额可供它使用的只剩 {left} 额度（进行中的其他请求预留的部分已扣除）。请调低 max_output_tokens（max_tokens），或充值额度。',
  },
  quota_reserve_org: {
    en: 'This request may cost up to {cost} credits (about {input} input tokens and up to {output} output tokens), and the balance of organization {org} has {left} credits left for it (what other requests in progress hold is set aside). Lower max_output_tokens (max_tokens), or add credits.',
    zh: '此请求最多可能花费 {cost} 额度（约 {input} 个输入 Token，最多 {output} 个输出 Token），而组织 {org} 的余额可供它使用的只剩 {left} 额度（进行中的其他请求预留的部分已扣除）。请调低 max_output_tokens（max_tokens），或充值额度。',
  },
  balance_unavailable: { en: 'service temporarily unavailable: the balance cannot be checked; try again shortly', zh: '服务暂时不可用：无法查询余额，请稍后重试' },
  grant_spend_unreachable: {
    en: 'credits not granted: the running spend (Redis) cannot be reached ({reason}); try again when it answers',
    zh: '未发放额度：无法连接记录实时消费的 Redis（{reason}）；请在它恢复响应后重试',
  },
  grant_not_told: {
    en: 'credits granted and stored, but running budgets were not told ({reason}): do not grant again; {fix} so that they read it',
    zh: '额度已发放并保存，但运行中的预算未收到通知（{reason}）：请不要重复发放；{fix}，以便它们重新读取',
  },
  grant_fix_redis: { en: 'delete the Redis key {key} once Redis answers', zh: '请在 Redis 恢复响应后删除 Redis 键 {key}' },
  grant_fix_restart: { en: 'restart the running instance', zh: '请重启正在运行的实例' },
  // the query APIs (portal/query)
  query_scope_missing: { en: 'permission denied: this key lacks the {scope} scope', zh: '权限不足：此密钥缺少 {scope} 作用域' },
  query_other_org: { en: 'permission denied: this key belongs to another organization', zh: '权限不足：此密钥属于其他组织' },
  query_org_admin_only: { en: 'permission denied: only an administrator of the organization can query it', zh: '权限不足：只有该组织的管理员才能查询' },
  query_time_order: { en: 'start_time must be before end_time', zh: 'start_time 必须早于 end_time' },
  // keys (portal/keys)
  scope_unknown: {
    en: "Invalid value for 'scopes[{index}]': '{value}' is not a scope of {kind}. Allowed values: {allowed}.",
    zh: "'scopes[{index}]' 的值无效：'{value}' 不是{kind}的作用域。允许的值：{allowed}。",
  },
  scope_repeated: {
    en: "Invalid value for 'scopes[{index}]': '{value}' is listed twice. Allowed values: {allowed}.",
    zh: "'scopes[{index}]' 的值无效：'{value}' 重复出现。允许的值：{allowed}。",
  },
  kind_management: { en: 'Management API Keys', zh: '管理 API 密钥' },
  kind_inference: { en: 'inference keys', zh: '推理密钥' },
  key_org_admin_required: {
    en: 'permission denied: creating an organization-level key requires an administrator of that organization',
    zh: '权限不足：只有该组织的管理员才能创建组织级密钥',
  },
  key_limit_create: {
    en: 'active API key limit reached: at most {limit} active keys per user in one organization; revoke or delete one first',
    zh: '有效密钥数量已达上限：同一组织内每个用户最多 {limit} 个有效密钥；请先吊销或删除一个密钥',
  },
  key_limit_restore: {
    en: 'active API key limit reached: at most {limit} active keys per user in one organization',
    zh: '有效密钥数量已达上限：同一组织内每个用户最多 {limit} 个有效密钥',
  },
  key_limit_enable: { en: 'the owner already has {limit} active keys in this organization', zh: '该密钥的所有者在此组织中已有 {limit} 个有效密钥' },
  key_list_admins_only: {
    en: "permission denied: the keys of organization '{org}' are listed to its current administrators only",
    zh: "权限不足：组织 '{org}' 的密钥只向其现任管理员列出",
  },
  key_managed_by_admins: {
    en: "permission denied: keys of organization '{org}' are managed by its current administrators, and this token does not make you one",
    zh: "权限不足：组织 '{org}' 的密钥由其现任管理员管理，而此令牌并未表明您是其中之一",
  },
  key_maker_not_admin: {
    en: "permission denied: this key belongs to organization '{org}' and the user who made it is no longer one of its administrators; an administrator of the organization can make a new key",
    zh: "权限不足：此密钥属于组织 '{org}'，而创建它的用户已不再是该组织的管理员；该组织的管理员可以创建新密钥",
  },
  key_disabled_by_operator: {
    en: 'this key was disabled by the operator; it cannot be revoked or restored (delete it instead)',
    zh: '此密钥已被运维人员停用，不能吊销或恢复（可以删除它）',
  },
  key_operator_scope_operators_only: {
    en: "permission denied: only an operator of this installation can make a Management API Key with the '{scope}' scope",
    zh: "权限不足：只有本安装的运维人员才能创建带有 '{scope}' 作用域的管理 API 密钥",
  },
  key_operator_scope_personal: {
    en: 'a Management API Key with the \'{scope}\' scope is personal: omit org_id (or give "default")',
    zh: '带有 \'{scope}\' 作用域的管理 API 密钥只能是个人密钥：请省略 org_id（或传 "default"）',
  },
  key_restore_only_revoked: { en: 'only revoked keys can be restored', zh: '只能恢复已吊销的密钥' },
  key_enable_only_disabled: { en: 'only a disabled key can be enabled', zh: '只能启用已停用的密钥' },
  key_failed_checks: {
    en: 'Too many failed API key checks from this address: try again in {wait} s.',
    zh: '来自此地址的 API 密钥校验失败次数过多：请在 {wait} 秒后重试。',
  },
  key_management_not_inference: {
    en: 'unauthorized: a Management API Key cannot call this endpoint; use an inference key (sk-...)',
    zh: '未授权：管理 API 密钥不能调用此端点，请使用推理密钥（sk-...）',
  },
  key_inference_not_management: {
    en: 'unauthorized: an inference key cannot call the query APIs; use a Management API Key (mk-...)',
    zh: '未授权：推理密钥不能调用查询 API，请使用管理 API 密钥（mk-...）',
  },
  key_update_fields: { en: 'only name and description can be changed (got: {fields})', zh: '只能修改 name 和 description（收到：{fields}）' },
  key_update_nothing: { en: 'give name and/or description to change', zh: '请提供要修改的 name 和/或 description' },
  key_update_fields_inference: {
    en: 'only name, description and max_concurrency can be changed (got: {fields})',
    zh: '只能修改 name、description 和 max_concurrency（收到：{fields}）',
  },
  key_update_nothing_inference: { en: 'give name, description and/or max_concurrency to change', zh: '请提供要修改的 name、description 和/或 max_concurrency' },
  key_concurrency_inference_only: {
    en: 'max_concurrency applies to inference keys only: a Management API Key does not call the OpenAI-compatible endpoints',
    zh: 'max_concurrency 只适用于推理密钥：管理 API 密钥不调用 OpenAI 兼容端点',
  },
  key_concurrency_over_default: {
    en: "max_concurrency may be at most {max} (this server's KEY_MAX_CONCURRENCY); a key's owner may lower its limit, not raise it, or give null for the default",
    zh: 'max_concurrency 最多为 {max}（本服务器的 KEY_MAX_CONCURRENCY）；密钥的所有者只能调低其限制，不能调高；传 null 表示使用默认值',
  },
  // the operators' API (/v1/admin) and `portico operators`
  admin_operators_only: {
    en: 'permission denied: only an operator of this installation can use the admin API',
    zh: '权限不足：只有本安装的运维人员才能使用管理后台 API',
  },
  admin_key_scope_missing: {
    en: "permission denied: this Management API Key lacks the '{scope}' scope, which the admin API needs",
    zh: "权限不足：此管理 API 密钥缺少管理后台 API 所需的 '{scope}' 作用域",
  },
  admin_key_owner_not_operator: {
    en: 'permission denied: the owner of this Management API Key is not an operator of this installation (any more)',
    zh: '权限不足：此管理 API 密钥的所有者（已）不是本安装的运维人员',
  },
  admin_user_unknown: { en: "no user '{user}': no key, usage, credits or operator role is recorded for it", zh: "没有用户 '{user}'：没有记录它的密钥、用量、额度或运维角色" },
  admin_org_unknown: { en: "no organization '{org}': no key, usage, credits or administrator is recorded for it", zh: "没有组织 '{org}'：没有记录它的密钥、用量、额度或管理员" },
  admin_key_of_other_user: { en: "the key '{key}' is not a key of user '{user}'", zh: "密钥 '{key}' 不是用户 '{user}' 的密钥" },
  admin_key_revoked: {
    en: "the key '{key}' is revoked: its owner may restore it, an operator cannot disable or enable it",
    zh: "密钥 '{key}' 已被吊销：其所有者可以恢复它，运维人员不能停用或启用它",
  },
  budget_reached: {
    en: 'Budget exceeded: the {period} budget of {scope} {target} is {limit} credits and {spent} are spent; it resets at {resets} (UTC).',
    zh: '超出预算：{scope} {target} 的{period}预算为 {limit} 额度，已花费 {spent}；将于 {resets}（UTC）重置。',
  },
  budget_period_daily: { en: 'daily', zh: '每日' },
  budget_period_weekly: { en: 'weekly', zh: '每周' },
  budget_period_monthly: { en: 'monthly', zh: '每月' },
  budget_scope_key: { en: 'key', zh: '密钥' },
  budget_scope_user: { en: 'user', zh: '用户' },
  budget_scope_org: { en: 'organization', zh: '组织' },
  budget_soft_over_limit: { en: 'soft_limit must be below limit', zh: 'soft_limit 必须小于 limit' },
  budget_webhook_url: { en: 'webhook_url must be an http or https URL', zh: 'webhook_url 必须是 http 或 https 的 URL' },
  budget_not_found: { en: "no budget '{id}'", zh: "没有预算 '{id}'" },
  admin_grant_target: { en: 'give user_id (personal credits) or org_id (organization credits), not both', zh: '请提供 user_id（个人额度）或 org_id（组织额度）之一，不能同时提供' },
  admin_grant_default_org: {
    en: "org_id 'default' is the personal scope of each user: give user_id to grant a user's personal credits",
    zh: "org_id 'default' 是每个用户的个人范围：如需发放个人额度，请提供 user_id",
  },
  admin_grant_amount: {
    en: '{field} must be a non-zero number of credits with at most 6 decimals, at most {max} (a negative grant removes credits; a limit is positive); got {amount}',
    zh: '{field} 必须是非零的额度数，最多 6 位小数，绝对值不超过 {max}（发放额度为负数表示扣除；限额必须为正数）；收到 {amount}',
  },
  admin_request_unknown: { en: "no request '{id}' in the request log or the usage ledger", zh: "请求日志和用量账本中没有请求 '{id}'" },
  admin_member_default_org: {
    en: "org_id 'default' is the personal scope of each user: it has no members or roles",
    zh: "org_id 'default' 是每个用户的个人范围：没有成员或角色",
  },
  admin_operator_exists: { en: "user '{user}' is already a recorded operator", zh: "用户 '{user}' 已经是记录在案的运维人员" },
  admin_operator_not_recorded: {
    en: "user '{user}' is not a recorded operator (one named by the identity provider's claim stays one until the claim is taken away)",
    zh: "用户 '{user}' 不是记录在案的运维人员（由身份提供方的声明指定的运维人员，在该声明被撤销前一直保持该身份）",
  },
  admin_operator_self: {
    en: 'you cannot remove your own operator role: another operator (or `portico operators rm` on the server) can',
    zh: '不能移除自己的运维角色：可由其他运维人员（或在服务器上运行 `portico operators rm`）移除',
  },
  // models and deployments at run time (admin API, models/stored.ts)
  model_entry_invalid: { en: '{reason}', zh: '模型条目无效：{reason}' },
  model_name_taken: {
    en: "the name '{name}' is taken by {source}: choose another name",
    zh: "名称 '{name}' 已被{source}占用：请换一个名称",
  },
  model_deployment_taken: {
    en: "the deployment id '{id}' is the name or a deployment of the model '{model}': choose another id",
    zh: "部署 ID '{id}' 是模型 '{model}' 的名称或部署：请换一个 ID",
  },
  model_unknown: { en: "no model is named '{name}'", zh: "没有名为 '{name}' 的模型" },
  model_read_only: {
    en: "the model '{name}' is {source} and is read-only here: {how}",
    zh: "模型 '{name}' 是{source}，在此处为只读：{how}",
  },
  model_key_origin: {
    en: "'{path}': the stored api_key was given for {from}, and the {key} now goes to {to}; a stored key is never sent to another upstream: type the key for the new one in '{path}', or give null to go without one",
    zh: "'{path}'：存储的 api_key 是为 {from} 设置的，而 {key} 现在指向 {to}；存储的密钥绝不会发送给其他上游：请在 '{path}' 中输入新上游的密钥，或设为 null 表示不使用密钥",
  },
  model_rename: {
    en: "entry.name '{given}' differs from the model '{name}' of the path: a model is not renamed; add the new one and remove the old",
    zh: "entry.name '{given}' 与路径中的模型 '{name}' 不同：模型不能改名；请添加新模型并删除旧模型",
  },
  model_deployment_unknown: {
    en: "the model '{name}' has no deployment '{deployment}'; its deployments: {list}",
    zh: "模型 '{name}' 没有部署 '{deployment}'；它的部署：{list}",
  },
  model_secret_unreadable: {
    en: "the model '{name}' cannot be served: its stored api_key cannot be decrypted ({why}); set the PORTICO_SECRETS_KEY it was stored with, or type the key again",
    zh: "模型 '{name}' 无法提供服务：其存储的 api_key 无法解密（{why}）；请设置存储时所用的 PORTICO_SECRETS_KEY，或重新输入密钥",
  },
  // the {base_url} gate's scopes (api/scopes.ts)
  // an inference key in x-api-key (the routes of Anthropic's wire: platform/http/auth.ts)
  x_api_key_malformed: { en: 'unauthorized: the x-api-key header is empty or holds more than one value', zh: '未授权：x-api-key 请求头为空或包含多个值' },
  x_api_key_conflict: {
    en: 'unauthorized: x-api-key and Authorization name different keys; send one',
    zh: '未授权：x-api-key 与 Authorization 指定了不同的密钥；请只发送其中一个',
  },
  // a browser WebSocket's key in its subprotocols (platform/http/auth.ts)
  subprotocol_key_conflict: {
    en: 'unauthorized: send the key once, either in Authorization or as one openai-insecure-api-key.<key> subprotocol',
    zh: '未授权：密钥只能发送一次：放在 Authorization 中，或作为一个 openai-insecure-api-key.<key> 子协议',
  },
  client_secret_elsewhere: {
    en: 'unauthorized: a client secret (ek_...) opens a realtime session only; use an API key here',
    zh: '未授权：客户端密钥（ek_...）只能用于打开实时会话；此处请使用 API 密钥',
  },
  scope_endpoint_missing: { en: 'permission denied: this API key lacks the "{scope}" scope', zh: '权限不足：此 API 密钥缺少“{scope}”作用域' },
  scope_model_forbidden: { en: "permission denied: this API key may not use the model '{model}'", zh: "权限不足：此 API 密钥不能使用模型 '{model}'" },
  // the Responses API's stored conversations (responses/prepare.ts, responses/chain-loads.ts)
  chain_too_large: {
    en: 'The conversation of previous_response_id \'{id}\' with this input comes to at least {bytes} bytes, more than the {max} bytes a conversation may hold (RESPONSES_MAX_CHAIN_BYTES). Set truncation to "auto" to drop its oldest turns, compact it (POST /v1/responses/compact), or start a new conversation.',
    zh: 'previous_response_id \'{id}\' 所指的对话加上本次输入至少有 {bytes} 字节，超过了一个对话允许的 {max} 字节（RESPONSES_MAX_CHAIN_BYTES）。请将 truncation 设为 "auto" 以丢弃最早的轮次，或压缩该对话（POST /v1/responses/compact），或开始新的对话。',
  },
  chain_loads_busy: {
    en: 'Too many continuations of this API key are reading their conversation: at most {max} at once, {queued} waiting. Try again in {wait} s.',
    zh: '此 API 密钥正在读取对话的续写请求过多：同时最多 {max} 个，排队最多 {queued} 个。请在 {wait} 秒后重试。',
  },
  context_exceeded_at_least: {
    en: 'Your input is more than {tokens} tokens (the newest turns of the conversation alone), which exceeds the context window of {window} tokens of the model \'{model}\'. Shorten the input or set truncation to "auto".',
    zh: '您的输入超过 {tokens} 个 Token（仅对话中最新的几轮就已超过），超出了模型 \'{model}\' 的 {window} 个 Token 的上下文窗口。请缩短输入，或将 truncation 设为 "auto"。',
  },
  // the web page's session (web/)
  csrf_other_site: { en: 'permission denied: this request comes from another site', zh: '权限不足：此请求来自其他网站' },
} as const satisfies Record<string, Texts>;

export type MessageKey = keyof typeof MESSAGES;

/** A value put in a message: the same in both languages, or a text of its own in each (a Texts). */
export type MessageValue = string | number | Texts;

/** the `{name}` parameters of a message */
type Placeholders<S extends string> = S extends `${string}{${infer P}}${infer Rest}` ? P | Placeholders<Rest> : never;
type ParamsOf<K extends MessageKey> = Placeholders<(typeof MESSAGES)[K]['en']>;

/** `{name}` filled from `params` (one pass: a value holding braces is not filled again) */
function fill(template: string, lang: keyof Texts, params: Record<string, MessageValue> | undefined): string {
  return template.replace(/\{(\w+)\}/g, (whole, name: string) => {
    const v = params?.[name];
    return v === undefined ? whole : typeof v === 'object' ? v[lang] : String(v);
  });
}

/**
 * A message of the table in both languages with its parameters filled (the compiler checks that every
 * parameter the message names is given). `new AppError(code, msg(...))` answers it in the caller's language.
 */
export function msg<K extends MessageKey>(key: K, ...params: [ParamsOf<K>] extends [never] ? [] : [Record<ParamsOf<K>, MessageValue>]): Texts {
  const m: Texts = MESSAGES[key];
  const p = params[0] as Record<string, MessageValue> | undefined;
  return { en: fill(m.en, 'en', p), zh: fill(m.zh, 'zh', p) };
}

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
  /**
   * `message`: a message of the table in both languages (msg()); none for the code's default. A bare string is
   * English only: the {base_url} features' own messages, not yet in the table.
   */
  constructor(
    readonly code: ErrorCode,
    message?: string | Texts,
    readonly param: string | null = null,
    extra: AppErrorExtra = {},
  ) {
    super(message === undefined ? ERRORS[code].message : typeof message === 'string' ? message : message.en);
    this.name = 'AppError';
    this.status = ERRORS[code].status;
    this.headers = extra.headers;
    this.localized = extra.localized ?? (typeof message === 'object' ? { zh: message.zh } : undefined);
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
export function pickLanguage(acceptLanguage: string | undefined): keyof Texts {
  if (!acceptLanguage) return 'en';
  let best: keyof Texts = 'en';
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

/** The error's message in the caller's language: its own Chinese text, else the code's when the message is the default. */
export function localizedMessage(err: AppError, acceptLanguage: string | undefined): string {
  if (pickLanguage(acceptLanguage) !== 'zh') return err.message;
  if (err.localized?.zh !== undefined) return err.localized.zh;
  return err.isDefaultMessage ? ERRORS[err.code].zh : err.message;
}
