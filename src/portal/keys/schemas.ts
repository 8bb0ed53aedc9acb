import { Type } from 'typebox';

export const KeyRecordSchema = Type.Object({
  id: Type.String(),
  org_id: Type.String(),
  name: Type.String(),
  description: Type.String(),
  status: Type.Union([Type.Literal('active'), Type.Literal('disabled'), Type.Literal('revoked')]),
  display: Type.String({ description: 'masked key: prefix...last 4' }),
  last_used_at: Type.Integer(),
  expires_at: Type.Integer({ description: 'Unix seconds; 0 = never' }),
  created_at: Type.Integer(),
  scopes: Type.Array(Type.String()),
  max_concurrency: Type.Optional(
    Type.Union([Type.Integer(), Type.Null()], {
      description: 'inference keys: requests in progress plus open WebSockets this key may have at once on each instance; null = the server default (KEY_MAX_CONCURRENCY)',
    }),
  ),
});

/** GET api-keys (and management/api-keys): one page of the caller's keys */
export const KeyListSchema = Type.Object({
  list: Type.Array(KeyRecordSchema),
  total: Type.Integer(),
  page: Type.Integer(),
  per_page: Type.Integer(),
});

export const CreatedKeyRecordSchema = Type.Object({
  api_key: Type.String({ description: 'the full key; shown only in this answer' }),
  ...KeyRecordSchema.properties,
});

/** What a name must be, said to a caller whose name is refused (instead of the pattern). */
const NAME_EXPECTED = { 'x-expected': 'a name with at least one visible character (not only spaces)', 'x-expected-zh': '至少包含一个可见字符的名称（不能只有空格）' };

/** Latest Unix second we accept (9999-12-31); larger values are almost always milliseconds by mistake. */
const MAX_UNIX = 253402300799;

export const CreateKeyBody = Type.Object(
  {
    org_id: Type.Optional(Type.String({ maxLength: 100, description: 'omit or "default" for the personal scope' })),
    name: Type.String({ minLength: 1, maxLength: 100, pattern: '\\S', ...NAME_EXPECTED }),
    description: Type.Optional(Type.String({ maxLength: 500 })),
    expires_at: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_UNIX, description: 'Unix seconds; 0 = never' })),
    scopes: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 50 }), { maxItems: 10 })),
  },
  { additionalProperties: false },
);

export const UpdateKeyBody = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 100, pattern: '\\S', ...NAME_EXPECTED })),
    description: Type.Optional(Type.String({ maxLength: 500 })),
    max_concurrency: Type.Optional(
      Type.Union([Type.Integer({ minimum: 1, maximum: 1_000_000 }), Type.Null()], {
        description: 'inference keys: at most this many requests and open WebSockets at once per instance; at most the server default (KEY_MAX_CONCURRENCY); null = that default',
      }),
    ),
  },
  { additionalProperties: false },
);

export const KeyIdBody = Type.Object({ api_key_id: Type.String({ minLength: 1, maxLength: 100 }) }, { additionalProperties: false });

export const KeyIdParams = Type.Object({ api_key_id: Type.String({ minLength: 1, maxLength: 100 }) }, { additionalProperties: false });

export const ListKeysQuery = Type.Object(
  {
    status: Type.Optional(Type.Union([Type.Literal('active'), Type.Literal('disabled'), Type.Literal('revoked')])),
    page: Type.Integer({ minimum: 1, maximum: 1_000_000, default: 1 }),
    per_page: Type.Integer({ minimum: 1, maximum: 100, default: 20 }),
    org_id: Type.Optional(Type.String({ maxLength: 100 })),
    search: Type.Optional(Type.String({ maxLength: 100, description: 'keys whose name, description, id or display form contains this text (case-insensitive)' })),
  },
  { additionalProperties: false },
);
