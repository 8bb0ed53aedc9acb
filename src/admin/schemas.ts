import { Type, type TSchema } from 'typebox';
import { KeyRecordSchema } from '../portal/keys/schemas.js';

const MAX_UNIX = 253402300799;
/** a user or organization id as tokens carry it (src/platform/auth/jwt.ts, MAX_SUBJECT) */
export const Id = (description: string) => Type.String({ minLength: 1, maxLength: 255, description });

export const PageQuery = {
  page: Type.Integer({ minimum: 1, maximum: 1_000_000, default: 1 }),
  per_page: Type.Integer({ minimum: 1, maximum: 100, default: 20 }),
};

export const SearchQuery = Type.Object(
  { ...PageQuery, search: Type.Optional(Type.String({ maxLength: 255, description: 'ids that contain this text (case-insensitive)' })) },
  { additionalProperties: false },
);

const Keys = Type.Object(
  { total: Type.Integer(), active: Type.Integer(), disabled: Type.Integer() },
  { description: 'keys not deleted (both kinds), and how many are active and disabled' },
);
const Balance = Type.Object(
  { granted: Type.Number(), used: Type.Number(), balance: Type.Number() },
  { description: 'credits: a user their personal ones (the default organization), an organization its shared ones' },
);
const Period = Type.Object(
  { start_time: Type.Integer({ description: 'the first second of this calendar month (UTC)' }), requests: Type.Integer(), tokens: Type.Integer(), cost: Type.Number() },
  { description: 'usage since start_time: a user every record they made (personal and organization keys), an organization every record of its keys' },
);

export const UserSummary = Type.Object({
  user_id: Type.String(),
  operator: Type.Boolean({ description: 'recorded as an operator (a claim of the identity provider may make others operators too)' }),
  keys: Keys,
  balance: Balance,
  period: Period,
  last_activity: Type.Integer({ description: 'Unix seconds of the latest usage record or key use; 0 = none' }),
});

export const AdminKeySchema = Type.Object({
  ...KeyRecordSchema.properties,
  kind: Type.Union([Type.Literal('management'), Type.Literal('inference')]),
  user_id: Type.String(),
});

export const OperatorSchema = Type.Object({
  user_id: Type.String(),
  source: Type.Union([Type.Literal('cli'), Type.Literal('api'), Type.Literal('first_user'), Type.Literal('claim')]),
  added_by: Type.String(),
  created_at: Type.Integer(),
});

export const UserDetail = Type.Object({
  ...UserSummary.properties,
  operator_record: Type.Union([OperatorSchema, Type.Null()]),
  admin_orgs: Type.Array(Type.String(), { description: 'organizations whose keys the user made as a recorded administrator' }),
  api_keys: Type.Array(AdminKeySchema),
});

export const OrgSummary = Type.Object({
  org_id: Type.String(),
  members: Type.Integer({ description: 'users who made keys in it, used it or administer it' }),
  admins: Type.Integer(),
  keys: Keys,
  balance: Balance,
  period: Period,
  last_activity: Type.Integer(),
});

export const OrgMemberSchema = Type.Object({
  user_id: Type.String(),
  role: Type.Union([Type.Literal('admin'), Type.Literal('member')], { description: "the role Portico last saw in the member's token (member: no role recorded)" }),
});

export const OrgDetail = Type.Object({
  ...OrgSummary.properties,
  member_list: Type.Array(OrgMemberSchema, { description: 'the members (as counted in `members`), by user id' }),
  api_keys: Type.Array(AdminKeySchema),
});

export const WhoamiSchema = Type.Object({ user_id: Type.String(), key_id: Type.Union([Type.String(), Type.Null()]) });

export const Paged = <T extends object>(item: T) => Type.Object({ list: Type.Array(item as never), total: Type.Integer(), page: Type.Integer(), per_page: Type.Integer() });

export const KeyChangeBody = Type.Object(
  { api_key_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'one key of the user; omitted: every key of the user' })) },
  { additionalProperties: false },
);

export const KeyChangeAnswer = Type.Object({
  user_id: Type.String(),
  api_keys: Type.Array(AdminKeySchema, { description: 'the keys now in the state asked' }),
  failed: Type.Array(Type.Object({ id: Type.String(), error: Type.String(), message: Type.String() }), { description: 'keys that could not be changed, and why' }),
});

export const GrantBody = Type.Object(
  {
    user_id: Type.Optional(Id("a user's personal credits")),
    org_id: Type.Optional(Id("an organization's credits (shared by its members' organization keys)")),
    amount: Type.Number({ description: 'credits: positive grants, negative removes; at most 6 decimals' }),
    note: Type.Optional(Type.String({ maxLength: 500 })),
  },
  { additionalProperties: false },
);

const BalanceAnswer = Type.Object({ granted: Type.Number(), used: Type.Number(), balance: Type.Number(), currency: Type.String() });
export const GrantAnswer = Type.Object({
  user_id: Type.Optional(Type.String()),
  org_id: Type.Optional(Type.String()),
  amount: Type.Number(),
  note: Type.String(),
  balance: BalanceAnswer,
});

export const AuditQuery = Type.Object(
  {
    ...PageQuery,
    actor: Type.Optional(Id('the operator who made the change (`cli` for an operator command)')),
    action: Type.Optional(Type.String({ maxLength: 100, description: 'credits.grant, credits.remove, key.disable, key.enable, operator.add, operator.remove' })),
    target: Type.Optional(Type.String({ maxLength: 300 })),
    start_time: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_UNIX })),
    end_time: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_UNIX })),
  },
  { additionalProperties: false },
);

export const AuditSchema = Type.Object({
  id: Type.String(),
  at: Type.Integer(),
  actor: Type.String(),
  actor_key_id: Type.Union([Type.String(), Type.Null()]),
  action: Type.String(),
  target: Type.String(),
  before: Type.Unknown({ description: 'the record before the change (null: there was none)' }),
  after: Type.Unknown({ description: 'the record after the change (null: it is gone)' }),
  request_id: Type.Union([Type.String(), Type.Null()]),
});

/** the filters of the ledger's reads (usage, requests, CSV) */
export const LedgerQuery = {
  start_time: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_UNIX, description: 'Unix seconds, inclusive; default 30 days before end_time' })),
  end_time: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_UNIX, description: 'Unix seconds, exclusive; default now' })),
  user_id: Type.Optional(Id('only this user')),
  org_id: Type.Optional(Id('only this organization (`default`: personal keys)')),
  key_id: Type.Optional(Type.String({ maxLength: 100, description: 'only this key' })),
  model: Type.Optional(Type.String({ maxLength: 200 })),
  deployment: Type.Optional(Type.String({ maxLength: 200 })),
  operation: Type.Optional(Type.String({ maxLength: 100 })),
  request_id: Type.Optional(Type.String({ maxLength: 200 })),
};

export const GROUPS = ['day', 'model', 'key', 'operation', 'user', 'org', 'deployment'] as const;
const groupList = GROUPS.join('|');

export const UsageQuery = Type.Object(
  {
    ...LedgerQuery,
    group_by: Type.Optional(
      Type.String({
        pattern: `^(${groupList})(,(${groupList}))*$`,
        description: `comma list of ${GROUPS.join(', ')}; default key`,
        'x-expected': `a comma-separated list of ${GROUPS.map((g) => `'${g}'`).join(', ')} (for example key,day)`,
        'x-expected-zh': `以逗号分隔的 ${GROUPS.map((g) => `'${g}'`).join('、')} 列表（例如 key,day）`,
      }),
    ),
  },
  { additionalProperties: false },
);

const UsageCounts = {
  requests: Type.Integer(),
  input_tokens: Type.Integer(),
  output_tokens: Type.Integer(),
  cached_tokens: Type.Integer(),
  cache_write_tokens: Type.Integer({ description: 'input tokens written to a prompt cache (part of input_tokens)' }),
  characters: Type.Integer(),
  audio_seconds: Type.Number({ description: 'seconds of audio taken in' }),
  output_audio_seconds: Type.Number({ description: 'seconds of audio produced' }),
  cost: Type.Number({ description: 'credits' }),
};

/** GET /usage: one row per group, the columns named in `group_by` first */
export const AdminUsageReportSchema = Type.Object({
  start_time: Type.Integer(),
  end_time: Type.Integer(),
  group_by: Type.Array(Type.Union(GROUPS.map((g) => Type.Literal(g)))),
  list: Type.Array(
    Type.Object({
      date: Type.Optional(Type.String({ description: 'group_by day: the UTC day, YYYY-MM-DD' })),
      model: Type.Optional(Type.String()),
      key_id: Type.Optional(Type.String()),
      operation: Type.Optional(Type.String()),
      user_id: Type.Optional(Type.String()),
      org_id: Type.Optional(Type.String()),
      deployment: Type.Optional(Type.Union([Type.String(), Type.Null()])),
      key: Type.Optional(
        Type.Union([Type.Object({ name: Type.String(), kind: Type.String(), user_id: Type.String(), org_id: Type.String(), status: Type.String() }), Type.Null()], {
          description: 'group_by key: the key now (status `deleted` for a deleted one; null: no key ever had the id)',
        }),
      ),
      ...UsageCounts,
    }),
  ),
  total: Type.Object(UsageCounts),
});

/** the requests' own filters, besides the ledger's */
const RequestFilters = {
  status: Type.Optional(
    Type.String({
      pattern: '^(ok|error|[1-5][0-9][0-9])$',
      description: "'ok' (answered without an error), 'error' (an HTTP error, or an answer that ended in one), or an HTTP status",
      'x-expected': "'ok', 'error' or an HTTP status (100-599)",
      'x-expected-zh': "'ok'、'error' 或 HTTP 状态码（100-599）",
    }),
  ),
  q: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'request ids that start with this' })),
};

export const RequestsQuery = Type.Object({ ...LedgerQuery, ...RequestFilters, ...PageQuery }, { additionalProperties: false });
export const RequestsCsvQuery = Type.Object(
  { ...LedgerQuery, ...RequestFilters, limit: Type.Integer({ minimum: 1, maximum: 100_000, default: 10_000, description: 'the most rows, newest first' }) },
  { additionalProperties: false },
);

const nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);

export const RequestSchema = Type.Object({
  id: Type.String({ description: "the row's id (a request id may repeat: a client may send its own X-Request-Id)" }),
  request_id: Type.String(),
  created_at: Type.Integer({ description: 'Unix seconds the request was received' }),
  user_id: nullable(Type.String()),
  org_id: nullable(Type.String()),
  key_id: nullable(Type.String()),
  model: nullable(Type.String({ description: 'the model as configured (null: the request named none Portico serves)' })),
  deployment: nullable(Type.String()),
  operation: Type.String({ description: "the ledger's operation when it was charged (responses, chat, embeddings, speech, ...), else the route's scope" }),
  route: nullable(Type.String({ description: "the route's pattern (/v1/chat/completions); null for a request known from the ledger alone" })),
  status: Type.Integer({ description: 'the HTTP status (499: the client left first; 200 for a request known from the ledger alone)' }),
  error: nullable(Type.Object({ code: Type.String(), message: Type.String() }, { description: 'the error the client got (also one a stream ended in), in English' })),
  latency_ms: nullable(Type.Number({ description: 'from the request to the end of its answer (null: known from the ledger alone)' })),
  ttft_ms: nullable(Type.Number({ description: "from the request to the engine's first output" })),
  input_tokens: Type.Integer(),
  output_tokens: Type.Integer(),
  cached_tokens: Type.Integer(),
  cache_write_tokens: Type.Integer({ description: 'input tokens written to a prompt cache (part of input_tokens)' }),
  characters: Type.Integer(),
  audio_seconds: Type.Number({ description: 'seconds of audio taken in' }),
  output_audio_seconds: Type.Number({ description: 'seconds of audio produced' }),
  cost: Type.Number({ description: 'credits charged (the ledger)' }),
  response_id: nullable(Type.String({ description: 'the stored response (Responses API with store)' })),
});

export const RequestParams = Type.Object({ request_id: Type.String({ minLength: 1, maxLength: 200, description: 'the request id' }) }, { additionalProperties: false });

export const RequestDetail = Type.Object({
  request: RequestSchema,
  timings: Type.Object({
    received_at_ms: Type.Integer({ description: 'Unix milliseconds the request was received' }),
    first_output_ms: nullable(Type.Number({ description: "ms from the request to the engine's first output" })),
    engine_ms: nullable(Type.Number({ description: 'ms the engine or upstream took' })),
    total_ms: nullable(Type.Number({ description: 'ms from the request to the end of its answer' })),
  }),
  response: nullable(
    Type.Object(
      { id: Type.String(), input: Type.Unknown({ description: 'the input items as stored' }), output: Type.Unknown({ description: "the response's output items" }) },
      { description: 'the stored response (null: none was stored, or it was deleted)' },
    ),
  ),
});

export const MemberParams = Type.Object({ org_id: Id('the organization'), user_id: Id('the member') }, { additionalProperties: false });
export const MemberRoleBody = Type.Object({ role: Type.Union([Type.Literal('admin'), Type.Literal('member')]) }, { additionalProperties: false });
export const MemberRoleAnswer = Type.Object({ org_id: Type.String(), user_id: Type.String(), role: Type.String() });

export const UserParams = Type.Object({ user_id: Id('the user') }, { additionalProperties: false });
export const OrgParams = Type.Object({ org_id: Id('the organization') }, { additionalProperties: false });

export const BudgetBody = Type.Object(
  {
    scope: Type.Union([Type.Literal('key'), Type.Literal('user'), Type.Literal('org')]),
    target: Id('the key id, user id or organization id'),
    period: Type.Union([Type.Literal('daily'), Type.Literal('weekly'), Type.Literal('monthly')], {
      description: 'resets at 00:00 UTC: each day, each Monday, the first of each month',
    }),
    limit: Type.Number({ description: 'credits spent in the period past which requests are refused' }),
    soft_limit: Type.Optional(Type.Union([Type.Number(), Type.Null()], { description: 'credits past which a warning is logged and the webhook told (once per period)' })),
    webhook_url: Type.Optional(Type.Union([Type.String({ maxLength: 2000 }), Type.Null()])),
  },
  { additionalProperties: false },
);

export const BudgetSchema = Type.Object({
  id: Type.String(),
  scope: Type.String(),
  target: Type.String(),
  period: Type.String(),
  limit: Type.Number(),
  soft_limit: Type.Union([Type.Number(), Type.Null()]),
  webhook_url: Type.Union([Type.String(), Type.Null()]),
  created_by: Type.String(),
  created_at: Type.Integer(),
  updated_at: Type.Integer(),
});

export const BudgetListSchema = Type.Object({
  list: Type.Array(Type.Object({ ...BudgetSchema.properties, period_start: Type.Integer(), resets_at: Type.Integer(), spent: Type.Number() })),
});

/** a model's name as clients send it (the model file's rule) */
export const ModelParams = Type.Object({ name: Type.String({ minLength: 1, maxLength: 200, description: 'the model' }) }, { additionalProperties: false });

const Entry = Type.Record(Type.String(), Type.Unknown(), {
  description:
    "a model-file entry (docs/models.md: name, provider, the provider's keys, deployments...), checked as the model file is; plus `api_key` (write-only, stored encrypted) on an openai-compatible entry or deployment (one of a list needs its own id): null removes the stored one, left out keeps the one of the same deployment id (or of an entry without deployments), but never for a base_url moved to another origin (400)",
});

export const ModelBody = Type.Object({ entry: Entry }, { additionalProperties: false });

export const ModelItemSchema = Type.Object({
  name: Type.String(),
  type: Type.String({ description: 'text, speech, transcription or embeddings' }),
  source: Type.Union([Type.Literal('file'), Type.Literal('stored'), Type.Literal('pulled'), Type.Literal('builtin')]),
  read_only: Type.Boolean({ description: 'true for everything but stored models: change those where they come from' }),
  enabled: Type.Boolean({ description: 'false: a stored model that is not served (404 to clients)' }),
  entry: Type.Record(Type.String(), Type.Unknown(), { description: 'the model-file entry as stored or read, without its secrets' }),
  secrets: Type.Record(Type.String(), Type.Boolean(), {
    description: 'the places that hold a secret: {"api_key": true} (an entry without deployments), {"deployments.<id>.api_key": true} (by deployment id); never the secret',
  }),
  updated_at: Type.Union([Type.Integer(), Type.Null()], { description: 'Unix seconds of the last change (stored models)' }),
  updated_by: Type.Union([Type.String(), Type.Null()], { description: 'the operator who made it' }),
  error: Type.Union([Type.String(), Type.Null()], { description: 'why it is not served as it stands (null: nothing wrong)' }),
});

export const ModelListSchema = Type.Object({ list: Type.Array(ModelItemSchema) });

export const ModelTestBody = Type.Object(
  { deployment: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'a deployment id of the model (default: its first)' })) },
  { additionalProperties: false },
);

export const ModelTestSchema = Type.Object({
  ok: Type.Boolean(),
  model: Type.String(),
  deployment: Type.String(),
  latency_ms: Type.Integer(),
  output: Type.Optional(Type.String({ description: 'the answer (text), or what came back (embeddings)' })),
  error: Type.Optional(Type.Object({ code: Type.String(), message: Type.String() })),
});

export const ModelDeletedSchema = Type.Object({ name: Type.String(), deleted: Type.Boolean() });

export const HealthQuery = Type.Object(
  { model: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: "only this model's deployments" })) },
  { additionalProperties: false },
);

const BreakerStateSchema = Type.Union([Type.Literal('closed'), Type.Literal('open'), Type.Literal('half-open')], {
  description: 'the circuit breaker: closed (serving), open (taken out until its cooldown ends), half-open (one probe may go)',
});
const Ms = (description: string) => Type.Union([Type.Number(), Type.Null()], { description: `${description} (ms; null: no sample in the window)` });
const HealthFigures = {
  requests: Type.Integer({ description: 'tries of this deployment that ended in the window (retries count each)' }),
  failures: Type.Integer({ description: "of which the deployment failed (refused, reset, timed out, 5xx, a broken stream, an upstream's 429)" }),
  error_rate: Type.Number({ minimum: 0, maximum: 1, description: 'failures / requests (0 with no request)' }),
  p50_ms: Ms('median time to the whole answer, of the answers that ended whole'),
  p95_ms: Ms('95th percentile of that'),
  ttft_p50_ms: Ms('median time to the first output of streamed answers'),
  ttft_p95_ms: Ms('95th percentile of that'),
  in_flight: Type.Integer({ description: 'tries under way now' }),
};
const Limit = Type.Object({
  used: Type.Number({ description: 'in the last minute' }),
  limit: Type.Union([Type.Number(), Type.Null()], { description: "the deployment's limit times the instances that report it (each keeps its own); null: no limit" }),
});

export const HealthAnswer = Type.Object({
  generated_at: Type.Integer({ description: 'Unix seconds' }),
  window_seconds: Type.Integer({ description: 'the window of requests, failures and the percentiles' }),
  instances: Type.Array(
    Type.Object({
      id: Type.String({ description: "the instance's id (the runner_id of the background jobs it runs)" }),
      host: Type.String(),
      pid: Type.Integer(),
      started_at: Type.Integer({ description: 'Unix seconds' }),
      seen_at: Type.Integer({ description: 'Unix seconds: when its figures arrived (this instance: now)' }),
      self: Type.Boolean({ description: 'the instance that answered' }),
    }),
    { description: 'the instances that answered lately (an instance silent for 10 s is left out)' },
  ),
  deployments: Type.Array(
    Type.Object({
      model: Type.String(),
      deployment: Type.String(),
      provider: Type.String(),
      state: BreakerStateSchema,
      reason: Type.Union([Type.String(), Type.Null()], { description: 'why the breaker opened (open or half-open)' }),
      ...HealthFigures,
      rpm: Limit,
      tpm: Limit,
      instances: Type.Array(
        Type.Object({
          instance: Type.String(),
          state: BreakerStateSchema,
          ...HealthFigures,
          rpm_used: Type.Number(),
          tpm_used: Type.Number(),
        }),
      ),
    }),
    { description: 'every deployment of the text and embeddings models served, summed over the instances (percentiles of the merged samples, the worst state)' },
  ),
});
