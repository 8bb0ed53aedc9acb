import { Type } from 'typebox';

/** GET /query/balance: credits granted minus cost used (the web page types it from here). */
export const BalanceSchema = Type.Object({
  granted: Type.Number(),
  used: Type.Number(),
  balance: Type.Number(),
  currency: Type.String(),
  billing_enabled: Type.Boolean({ description: 'false: requests are priced and recorded but never refused for the balance (BILLING_ENABLED), which may then be below zero' }),
});

/** What a usage figure counts, for a group of records or for all of them. */
const UsageCounts = {
  requests: Type.Integer(),
  input_tokens: Type.Integer(),
  output_tokens: Type.Integer(),
  cached_tokens: Type.Integer(),
  cache_write_tokens: Type.Integer({ description: 'input tokens written to a prompt cache (part of input_tokens)' }),
  characters: Type.Integer({ description: 'characters spoken (speech)' }),
  audio_seconds: Type.Number({ description: 'seconds of audio taken in (transcribed, heard)' }),
  output_audio_seconds: Type.Number({ description: 'seconds of audio produced, where they are charged by the second (speech is counted in characters)' }),
  cost: Type.Number({ description: 'credits' }),
};

/** One group of usage records: the columns named in `group_by`, then the sums. */
export const UsageRowSchema = Type.Object({
  date: Type.Optional(Type.String({ description: 'group_by day: the UTC day, YYYY-MM-DD' })),
  model: Type.Optional(Type.String({ description: 'group_by model' })),
  key_id: Type.Optional(Type.String({ description: 'group_by key: the inference key that made the requests' })),
  key_name: Type.Optional(Type.Union([Type.String(), Type.Null()], { description: "group_by key: the key's name now (null: no key has this id)" })),
  key_deleted: Type.Optional(Type.Boolean({ description: 'group_by key: the key has been deleted since' })),
  operation: Type.Optional(Type.String({ description: 'group_by operation' })),
  ...UsageCounts,
});

/** GET /query/usage: the caller's usage over a time range, grouped (the web page types it from here). */
export const UsageReportSchema = Type.Object({
  start_time: Type.Integer({ description: 'Unix seconds, inclusive' }),
  end_time: Type.Integer({ description: 'Unix seconds, exclusive' }),
  group_by: Type.Array(Type.Union([Type.Literal('day'), Type.Literal('model'), Type.Literal('key'), Type.Literal('operation')])),
  list: Type.Array(UsageRowSchema, { description: 'one row per group, ordered by the group_by columns' }),
  total: Type.Object(UsageCounts),
});

/** GET /query/usage's parameters (the web page builds its query from this type). */
export const UsageQuerySchema = Type.Object(
  {
    start_time: Type.Optional(Type.Integer({ minimum: 0, maximum: 253402300799, description: 'Unix seconds, inclusive; default 30 days ago' })),
    end_time: Type.Optional(Type.Integer({ minimum: 0, maximum: 253402300799, description: 'Unix seconds, exclusive; default now' })),
    group_by: Type.Optional(
      Type.String({
        pattern: '^(day|model|key|operation)(,(day|model|key|operation))*$',
        description: 'comma list of day, model, key, operation; default day,model. With key, each row also names the key (key_name, key_deleted)',
        'x-expected': "a comma-separated list of 'day', 'model', 'key', 'operation' (for example day,model)",
        'x-expected-zh': "以逗号分隔的 'day'、'model'、'key'、'operation' 列表（例如 day,model）",
      }),
    ),
    key_id: Type.Optional(Type.String({ maxLength: 100 })),
    org_id: Type.Optional(Type.String({ maxLength: 100 })),
  },
  { additionalProperties: false },
);
