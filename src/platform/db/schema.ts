import type { Generated } from 'kysely';

/** Table types. Timestamps are Unix seconds (bigint columns, parsed to number). */
export interface ApiKeyTable {
  id: string;
  kind: 'management' | 'inference';
  user_id: string;
  org_id: string;
  name: string;
  description: string;
  status: 'active' | 'disabled' | 'revoked';
  /** HMAC-SHA256(pepper, full key), hex */
  digest: string;
  /** display parts: the prefix and the last 4 characters */
  display_prefix: string;
  display_suffix: string;
  scopes: string[];
  expires_at: number;
  last_used_at: number;
  created_at: number;
  updated_at: number;
  deleted_at: number | null;
  /** per-key limits (null = the configured default) */
  rpm_limit: number | null;
  tpm_limit: number | null;
  /** requests and open WebSockets at once per instance (null = KEY_MAX_CONCURRENCY, 0 = unlimited) */
  max_concurrency: number | null;
}

export interface UsageTable {
  id: Generated<string>;
  /** unique per record (journal replays are idempotent) */
  record_id: string | null;
  request_id: string;
  key_id: string;
  user_id: string;
  org_id: string;
  model: string;
  /** responses, speech, transcription, translation */
  operation: string;
  input_tokens: number;
  output_tokens: number;
  cached_tokens: number;
  /** the part of input_tokens written to a prompt cache (0 for records before 0017) */
  cache_write_tokens: number;
  characters: number;
  /** seconds of audio taken in */
  audio_seconds: number;
  /** seconds of audio produced (0 for records before 0016) */
  output_audio_seconds: number;
  /** cost in micro-credits */
  cost_micros: number;
  created_at: number;
  /** the running-spend epoch this record was charged under (null: not counted there; see BudgetGuard) */
  spend_epoch: string | null;
  /** the deployment that served the request (its id in the model file; null: not routed, or before 0006) */
  deployment: string | null;
}

export interface CreditGrantTable {
  id: Generated<string>;
  user_id: string;
  org_id: string;
  amount_micros: number;
  note: string;
  created_at: number;
}

export interface SettingTable {
  key: string;
  value: string;
}

export interface ResponseTable {
  id: string;
  user_id: string;
  org_id: string;
  key_id: string;
  model: string;
  status: string;
  background: boolean;
  previous_response_id: string | null;
  object: unknown;
  input_items: unknown;
  request: unknown;
  /** the UTF-8 bytes of input_items' and object's JSON text as written (null: stored before migration 0009) */
  input_bytes: number | null;
  object_bytes: number | null;
  runner_id: string | null;
  heartbeat_at: number | null;
  created_at: number;
  updated_at: number;
  deleted_at: number | null;
}

export interface ResponseEventTable {
  response_id: string;
  seq: number;
  event: unknown;
}

/** A signed-in browser session of the web page (src/web); `id` is the SHA-256 of the cookie's value. */
export interface WebSessionTable {
  id: string;
  user_id: string;
  /** org id -> role, as at sign-in */
  org_roles: unknown;
  csrf_token: string;
  /** link | oidc */
  method: string;
  /** the ID token's claim made the user an operator (PORTICO_OPERATOR_CLAIM), as at sign-in */
  operator: boolean;
  created_at: number;
  expires_at: number;
}

/** Sign-in links already used (their jti), kept until they expire: a link works once. */
export interface WebSignInLinkTable {
  jti: string;
  user_id: string;
  used_at: number;
  expires_at: number;
}

/** Whether the maker of organization keys is an administrator of the organization now (the newest token seen). */
export interface OrgAdminTable {
  org_id: string;
  user_id: string;
  is_admin: boolean;
  /** iat of the token that said so (Unix seconds); an older token does not change it back */
  updated_at: number;
}

/** Operators of the installation recorded in the database (besides those a token's claim names). */
export interface OperatorTable {
  user_id: string;
  /** cli (`portico operators add`), api (another operator), first_user (a fresh embedded install), claim (seen with PORTICO_OPERATOR_CLAIM) */
  source: 'cli' | 'api' | 'first_user' | 'claim';
  /** who added them (a user id, or `cli`) */
  added_by: string;
  created_at: number;
}

/** One change made by an operator: who, what, when, the record before and after (never a secret). */
export interface AuditLogTable {
  id: Generated<string>;
  at: number;
  /** the operator's user id (`cli` for an operator command) */
  actor: string;
  /** the Management API Key the change was made with (null: a token, a session or the CLI) */
  actor_key_id: string | null;
  action: string;
  /** what was changed: a user id, an organization id, a key id */
  target: string;
  before: unknown;
  after: unknown;
  request_id: string | null;
}

/** A spending limit per key, user or organization for a period that resets (UTC days, ISO weeks, months). */
export interface BudgetTable {
  id: string;
  scope: 'key' | 'user' | 'org';
  /** a key id, a user id or an organization id */
  target: string;
  period: 'daily' | 'weekly' | 'monthly';
  /** past it, requests are refused until the period resets */
  limit_micros: number;
  /** past it, a warning: a log line and the webhook (null: none) */
  soft_micros: number | null;
  webhook_url: string | null;
  created_by: string;
  created_at: number;
  updated_at: number;
}

/** A model (and its deployments) an operator added at run time (models/stored.ts). */
export interface StoredModelTable {
  name: string;
  /** the model-file entry as JSON, without its api_key values */
  entry: string;
  /** JSON: the place of each secret in the entry (`api_key`, `deployments.0.api_key`) -> its sealed value */
  secrets: string;
  enabled: boolean;
  created_at: number;
  updated_at: number;
  /** the operator who made the last change */
  updated_by: string;
}

/** One {base_url} request whose key was known (src/platform/ops/request-log.ts); times in ms where named so. */
export interface RequestLogTable {
  seq: Generated<string>;
  request_id: string;
  /** Unix seconds the request was received */
  created_at: number;
  received_at_ms: number;
  key_id: string | null;
  user_id: string | null;
  org_id: string | null;
  method: string;
  /** the route's pattern (/v1/responses/:id) */
  route: string;
  /** the ledger's operation when it was charged, else the route's scope */
  operation: string;
  model: string | null;
  deployment: string | null;
  status: number;
  error_code: string | null;
  /** the message the client got (never a secret) */
  error_message: string | null;
  latency_ms: number;
  ttft_ms: number | null;
  engine_ms: number | null;
  input_tokens: number;
  output_tokens: number;
  characters: number;
  audio_seconds: number;
  /** seconds of audio produced (0 for rows before 0016) */
  output_audio_seconds: number;
  cost_micros: number;
  /** the stored response (the `responses` table), when there is one */
  response_id: string | null;
}

/** A member's organization role set by an operator (roles Portico's own: no identity provider). */
export interface OrgMemberTable {
  org_id: string;
  user_id: string;
  role: 'admin' | 'member';
  updated_by: string;
  updated_at: number;
}

export interface Database {
  request_log: RequestLogTable;
  org_members: OrgMemberTable;
  stored_models: StoredModelTable;
  budgets: BudgetTable;
  operators: OperatorTable;
  audit_log: AuditLogTable;
  org_admins: OrgAdminTable;
  web_sessions: WebSessionTable;
  web_sign_in_links: WebSignInLinkTable;
  responses: ResponseTable;
  response_events: ResponseEventTable;
  api_keys: ApiKeyTable;
  usage_records: UsageTable;
  credit_grants: CreditGrantTable;
  settings: SettingTable;
}
