/**
 * Anthropic's Messages API as its request and answer shapes are (its API reference, and the official SDK's types:
 * @anthropic-ai/sdk resources/messages): what POST /v1/messages and /v1/messages/count_tokens take, and the
 * message object for the OpenAPI document. Every object refuses unknown fields, and no type is coerced (400
 * invalid_request_error). A content block is one object whose fields are checked per `type` in ./prepare.ts, so
 * a block type Portico does not map (document, search_result, a server tool's blocks) is refused naming it.
 */
import { Type, type Static } from 'typebox';
import { MAX_INPUT_ITEMS } from '../platform/http/json-shape.js';

/** a prompt-caching hint: accepted on the blocks, system, tools and the request, with no effect (docs/api.md) */
const CacheControl = Type.Object({ type: Type.Literal('ephemeral'), ttl: Type.Optional(Type.Union([Type.Literal('5m'), Type.Literal('1h')])) }, { additionalProperties: false });
const nullableCache = Type.Optional(Type.Union([CacheControl, Type.Null()]));

const TextBlock = Type.Object(
  {
    type: Type.Literal('text'),
    text: Type.String(),
    cache_control: nullableCache,
    citations: Type.Optional(Type.Union([Type.Array(Type.Unknown()), Type.Null()])),
  },
  { additionalProperties: false },
);

/** the source of an image (or of a document block, which is refused by its type) */
const Source = Type.Object(
  {
    // any type and media type: an image's are checked in ./prepare.ts, so a document's source is refused as a document
    type: Type.String({ minLength: 1, maxLength: 64 }),
    media_type: Type.Optional(Type.String({ maxLength: 128 })),
    data: Type.Optional(Type.String()),
    url: Type.Optional(Type.String({ minLength: 1 })),
    file_id: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
);

/** A content block of a message: text, image, tool_use, tool_result, thinking, redacted_thinking (what each type needs: ./prepare.ts). */
const ContentBlock = Type.Object(
  {
    type: Type.String({ minLength: 1, maxLength: 64 }),
    text: Type.Optional(Type.String()),
    source: Type.Optional(Source),
    id: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    input: Type.Optional(Type.Unknown()),
    tool_use_id: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
    content: Type.Optional(Type.Union([Type.String(), Type.Array(Type.Object({}, { additionalProperties: true }), { maxItems: MAX_INPUT_ITEMS })])),
    is_error: Type.Optional(Type.Boolean()),
    thinking: Type.Optional(Type.String()),
    signature: Type.Optional(Type.String()),
    data: Type.Optional(Type.String()),
    cache_control: nullableCache,
    citations: Type.Optional(Type.Union([Type.Array(Type.Unknown()), Type.Null()])),
    caller: Type.Optional(Type.Object({ type: Type.Literal('direct') }, { additionalProperties: false })),
  },
  { additionalProperties: false },
);

const Message = Type.Object(
  {
    role: Type.Union([Type.Literal('user'), Type.Literal('assistant'), Type.Literal('system')]),
    content: Type.Union([Type.String(), Type.Array(ContentBlock, { maxItems: MAX_INPUT_ITEMS })]),
  },
  { additionalProperties: false },
);

/** A tool: a client tool (`type` absent or `custom`); a server tool's type is refused naming it (./prepare.ts). */
const Tool = Type.Object(
  {
    type: Type.Optional(Type.Union([Type.String({ minLength: 1, maxLength: 64 }), Type.Null()])),
    name: Type.String({ minLength: 1, maxLength: 128 }),
    description: Type.Optional(Type.String()),
    input_schema: Type.Optional(Type.Object({ type: Type.Literal('object') }, { additionalProperties: true })),
    cache_control: nullableCache,
    strict: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

const ToolChoice = Type.Object(
  {
    type: Type.Union([Type.Literal('auto'), Type.Literal('any'), Type.Literal('tool'), Type.Literal('none')]),
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    disable_parallel_tool_use: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

const Thinking = Type.Object(
  {
    type: Type.Union([Type.Literal('enabled'), Type.Literal('disabled'), Type.Literal('adaptive')]),
    budget_tokens: Type.Optional(Type.Integer({ minimum: 1024 })),
  },
  { additionalProperties: false },
);

const OutputConfig = Type.Object(
  {
    effort: Type.Optional(Type.Union([Type.Literal('low'), Type.Literal('medium'), Type.Literal('high'), Type.Literal('xhigh'), Type.Literal('max'), Type.Null()])),
    format: Type.Optional(
      Type.Union([Type.Object({ type: Type.Literal('json_schema'), schema: Type.Object({}, { additionalProperties: true }) }, { additionalProperties: false }), Type.Null()]),
    ),
  },
  { additionalProperties: false },
);

/** What both endpoints take: the conversation, the tools, thinking and the output's format. */
const conversation = {
  model: Type.String({ minLength: 1, maxLength: 200 }),
  messages: Type.Array(Message, { maxItems: MAX_INPUT_ITEMS, description: `the conversation: user and assistant turns (at most ${MAX_INPUT_ITEMS})` }),
  system: Type.Optional(Type.Union([Type.String(), Type.Array(TextBlock, { maxItems: MAX_INPUT_ITEMS })], { description: 'the system prompt: a string or text blocks' })),
  tools: Type.Optional(Type.Array(Tool, { maxItems: 128 })),
  tool_choice: Type.Optional(ToolChoice),
  thinking: Type.Optional(Thinking),
  output_config: Type.Optional(OutputConfig),
  cache_control: nullableCache,
  /** refused unless it is 'standard' (Portico has one speed) */
  speed: Type.Optional(Type.Union([Type.Literal('standard'), Type.Literal('fast'), Type.Null()])),
};

export const MessagesBody = Type.Object(
  {
    ...conversation,
    max_tokens: Type.Integer({ minimum: 1, description: 'the most tokens the answer may have (required, as Anthropic requires it)' }),
    metadata: Type.Optional(Type.Object({ user_id: Type.Optional(Type.Union([Type.String({ maxLength: 256 }), Type.Null()])) }, { additionalProperties: false })),
    stop_sequences: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { maxItems: 16 })),
    stream: Type.Optional(Type.Boolean()),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
    top_p: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
    top_k: Type.Optional(Type.Integer({ minimum: 0 })),
    service_tier: Type.Optional(Type.Union([Type.Literal('auto'), Type.Literal('standard_only')])),
  },
  { additionalProperties: false },
);
export type MessagesRequest = Static<typeof MessagesBody>;

export const CountTokensBody = Type.Object(conversation, { additionalProperties: false });
export type CountTokensRequest = Static<typeof CountTokensBody>;

export type ContentBlockParam = Static<typeof ContentBlock>;
export type MessageParam = Static<typeof Message>;
export type ToolParam = Static<typeof Tool>;

// ---------------------------------------------------------------- answers (for the OpenAPI document)

const Usage = Type.Object({
  input_tokens: Type.Integer({ description: 'input tokens neither read from a cache nor written to one' }),
  output_tokens: Type.Integer(),
  cache_read_input_tokens: Type.Union([Type.Integer(), Type.Null()], { description: "input tokens the engine read from its cache (the engine's cached tokens)" }),
  cache_creation_input_tokens: Type.Union([Type.Integer(), Type.Null()], { description: 'input tokens the engine wrote to its prompt cache' }),
  cache_creation: Type.Optional(
    Type.Union([Type.Object({ ephemeral_5m_input_tokens: Type.Integer(), ephemeral_1h_input_tokens: Type.Integer() }), Type.Null()], {
      description: 'the cache writes by the lifetime of the cache written to, when the engine counted them',
    }),
  ),
  output_tokens_details: Type.Optional(Type.Union([Type.Object({ thinking_tokens: Type.Integer() }), Type.Null()])),
  service_tier: Type.Optional(Type.Union([Type.String(), Type.Null()])),
});

export const MessageAnswer = Type.Object(
  {
    id: Type.String({ description: 'msg_...' }),
    type: Type.Literal('message'),
    role: Type.Literal('assistant'),
    model: Type.String({ description: 'the model as the client named it' }),
    content: Type.Array(Type.Object({ type: Type.String() }, { additionalProperties: true }), { description: 'text, tool_use (input parsed) and thinking blocks' }),
    stop_reason: Type.Union([Type.String(), Type.Null()], { description: 'end_turn, max_tokens, stop_sequence, tool_use, refusal' }),
    stop_sequence: Type.Union([Type.String(), Type.Null()]),
    usage: Usage,
  },
  { additionalProperties: true, description: "Anthropic's message object" },
);

export const TokensCountAnswer = Type.Object({ input_tokens: Type.Integer() }, { description: 'the input tokens of the conversation, as the serving engine counts them' });
