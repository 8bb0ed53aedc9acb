/**
 * POST /v1/chat/completions: the request as OpenAI's API takes it (every parameter of the official SDK 6.x), a
 * type not coerced, and the answer's shape for the OpenAPI document. Every parameter listed here is checked, and
 * messages, tools and the other nested objects refuse unknown fields like every Portico route. Unknown top-level
 * fields pass the schema: they are the upstream's when the request is forwarded, and refused as unsupported when
 * Portico generates the answer (./forwarding.ts). Rules across fields, and what each engine can do, are checked in
 * ./prepare.ts.
 */
import { Type, type Static } from 'typebox';
import { MAX_INPUT_ITEMS } from '../platform/http/json-shape.js';

const nullable = <T extends Parameters<typeof Type.Optional>[0]>(t: T) => Type.Optional(Type.Union([t, Type.Null()]));

const CacheBreakpoint = Type.Object({ mode: Type.Literal('explicit') }, { additionalProperties: false });

/** One content part of a message (which part a role may have is checked in ./messages.ts). */
const ContentPart = Type.Object(
  {
    type: Type.Union([Type.Literal('text'), Type.Literal('image_url'), Type.Literal('input_audio'), Type.Literal('file'), Type.Literal('refusal')]),
    text: Type.Optional(Type.String()),
    image_url: Type.Optional(
      Type.Object(
        { url: Type.String({ minLength: 1 }), detail: Type.Optional(Type.Union([Type.Literal('auto'), Type.Literal('low'), Type.Literal('high')])) },
        { additionalProperties: false },
      ),
    ),
    input_audio: Type.Optional(Type.Object({ data: Type.String(), format: Type.Union([Type.Literal('wav'), Type.Literal('mp3')]) }, { additionalProperties: false })),
    file: Type.Optional(
      Type.Object({ file_data: Type.Optional(Type.String()), file_id: Type.Optional(Type.String()), filename: Type.Optional(Type.String()) }, { additionalProperties: false }),
    ),
    refusal: Type.Optional(Type.String()),
    prompt_cache_breakpoint: Type.Optional(CacheBreakpoint),
  },
  { additionalProperties: false },
);

const ToolCall = Type.Object(
  {
    id: Type.String({ minLength: 1, maxLength: 256 }),
    type: Type.Union([Type.Literal('function'), Type.Literal('custom')]),
    function: Type.Optional(
      Type.Object(
        {
          name: Type.String({ minLength: 1 }),
          arguments: Type.String(),
          /** the SDK's .parse() adds it to the calls it returns; a client that sends the message back sends it too */
          parsed_arguments: Type.Optional(Type.Unknown()),
        },
        { additionalProperties: false },
      ),
    ),
    custom: Type.Optional(Type.Object({ name: Type.String({ minLength: 1 }), input: Type.String() }, { additionalProperties: false })),
  },
  { additionalProperties: false },
);

/**
 * A message of any role. The fields a role may have (content, name, tool_calls, tool_call_id, refusal, audio,
 * function_call) are checked per role by ./messages.ts, so an error names the message and the field.
 */
const Message = Type.Object(
  {
    role: Type.Union([Type.Literal('system'), Type.Literal('developer'), Type.Literal('user'), Type.Literal('assistant'), Type.Literal('tool'), Type.Literal('function')]),
    content: Type.Optional(Type.Union([Type.String(), Type.Array(ContentPart), Type.Null()])),
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
    tool_calls: Type.Optional(Type.Array(ToolCall)),
    tool_call_id: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
    refusal: nullable(Type.String()),
    audio: nullable(Type.Object({ id: Type.String() }, { additionalProperties: false })),
    function_call: nullable(Type.Object({ name: Type.String(), arguments: Type.String() }, { additionalProperties: false })),
    /** reasoning an assistant message carried (DeepSeek, vLLM, llama.cpp server); kept as its reasoning */
    reasoning_content: nullable(Type.String()),
    /**
     * What an answer's message has besides the above (`annotations`, and `parsed` from the SDK's .parse()):
     * accepted on assistant messages, so a client can send back the message it got, as the SDK's examples do.
     */
    annotations: nullable(Type.Array(Type.Object({}, { additionalProperties: true }))),
    parsed: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: false },
);

const FunctionDef = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$' }),
    description: Type.Optional(Type.String()),
    parameters: Type.Optional(Type.Object({}, { additionalProperties: true })),
    strict: nullable(Type.Boolean()),
  },
  { additionalProperties: false },
);

const Tool = Type.Object(
  {
    type: Type.Union([Type.Literal('function'), Type.Literal('custom')]),
    function: Type.Optional(FunctionDef),
    custom: Type.Optional(Type.Object({}, { additionalProperties: true })),
  },
  { additionalProperties: false },
);

const NamedTool = Type.Object(
  {
    type: Type.Union([Type.Literal('function'), Type.Literal('custom')]),
    function: Type.Optional(Type.Object({ name: Type.String({ minLength: 1 }) }, { additionalProperties: false })),
    custom: Type.Optional(Type.Object({ name: Type.String({ minLength: 1 }) }, { additionalProperties: false })),
  },
  { additionalProperties: false },
);

const ToolChoice = Type.Union([
  Type.Literal('none'),
  Type.Literal('auto'),
  Type.Literal('required'),
  Type.Object(
    {
      type: Type.Union([Type.Literal('function'), Type.Literal('custom'), Type.Literal('allowed_tools')]),
      function: Type.Optional(Type.Object({ name: Type.String({ minLength: 1 }) }, { additionalProperties: false })),
      custom: Type.Optional(Type.Object({ name: Type.String({ minLength: 1 }) }, { additionalProperties: false })),
      allowed_tools: Type.Optional(
        Type.Object({ mode: Type.Union([Type.Literal('auto'), Type.Literal('required')]), tools: Type.Array(NamedTool, { minItems: 1 }) }, { additionalProperties: false }),
      ),
    },
    { additionalProperties: false },
  ),
]);

const ResponseFormat = Type.Object(
  {
    type: Type.Union([Type.Literal('text'), Type.Literal('json_object'), Type.Literal('json_schema')]),
    json_schema: Type.Optional(
      Type.Object(
        {
          name: Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$' }),
          description: Type.Optional(Type.String()),
          schema: Type.Optional(Type.Object({}, { additionalProperties: true })),
          strict: nullable(Type.Boolean()),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

/** The deprecated `functions` entries (forwarded to upstreams; the embedded engine asks for `tools`). */
const LegacyFunction = Type.Object(
  { name: Type.String({ minLength: 1, maxLength: 64 }), description: Type.Optional(Type.String()), parameters: Type.Optional(Type.Object({}, { additionalProperties: true })) },
  { additionalProperties: false },
);

export const ChatCompletionBody = Type.Object(
  {
    model: Type.String({ minLength: 1, maxLength: 200 }),
    messages: Type.Array(Message, {
      minItems: 1,
      maxItems: MAX_INPUT_ITEMS,
      description: `the conversation: system, developer, user, assistant and tool messages (at most ${MAX_INPUT_ITEMS})`,
    }),
    stream: nullable(Type.Boolean()),
    stream_options: nullable(Type.Object({ include_usage: Type.Optional(Type.Boolean()), include_obfuscation: Type.Optional(Type.Boolean()) }, { additionalProperties: false })),
    temperature: nullable(Type.Number({ minimum: 0, maximum: 2 })),
    top_p: nullable(Type.Number({ minimum: 0, maximum: 1 })),
    max_tokens: nullable(Type.Integer({ minimum: 1, description: 'deprecated by OpenAI in favour of max_completion_tokens; the same here' })),
    max_completion_tokens: nullable(Type.Integer({ minimum: 1 })),
    n: nullable(Type.Integer({ minimum: 1, maximum: 128 })),
    stop: nullable(Type.Union([Type.String(), Type.Array(Type.String(), { maxItems: 4 })], { description: 'up to 4 stop sequences' })),
    seed: nullable(Type.Integer()),
    presence_penalty: nullable(Type.Number({ minimum: -2, maximum: 2 })),
    frequency_penalty: nullable(Type.Number({ minimum: -2, maximum: 2 })),
    logit_bias: nullable(
      Type.Record(Type.String({ pattern: '^[0-9]+$' }), Type.Number({ minimum: -100, maximum: 100 }), {
        additionalProperties: false,
        description: 'token id -> bias (-100 to 100)',
      }),
    ),
    logprobs: nullable(Type.Boolean()),
    top_logprobs: nullable(Type.Integer({ minimum: 0, maximum: 20 })),
    tools: Type.Optional(Type.Array(Tool, { maxItems: 128 })),
    tool_choice: Type.Optional(ToolChoice),
    parallel_tool_calls: Type.Optional(Type.Boolean()),
    functions: Type.Optional(Type.Array(LegacyFunction, { minItems: 1, maxItems: 128 })),
    function_call: Type.Optional(Type.Union([Type.Literal('none'), Type.Literal('auto'), Type.Object({ name: Type.String({ minLength: 1 }) }, { additionalProperties: false })])),
    response_format: Type.Optional(ResponseFormat),
    reasoning_effort: nullable(
      Type.Union([Type.Literal('none'), Type.Literal('minimal'), Type.Literal('low'), Type.Literal('medium'), Type.Literal('high'), Type.Literal('xhigh')]),
    ),
    verbosity: nullable(Type.Union([Type.Literal('low'), Type.Literal('medium'), Type.Literal('high')])),
    modalities: nullable(Type.Array(Type.Union([Type.Literal('text'), Type.Literal('audio')]), { maxItems: 2 })),
    audio: nullable(Type.Object({ voice: Type.Union([Type.String(), Type.Object({ id: Type.String() })]), format: Type.String() }, { additionalProperties: false })),
    prediction: nullable(Type.Object({ type: Type.Literal('content'), content: Type.Union([Type.String(), Type.Array(ContentPart)]) }, { additionalProperties: false })),
    web_search_options: Type.Optional(Type.Object({}, { additionalProperties: true })),
    moderation: nullable(Type.Object({ model: Type.String(), policy: Type.Optional(Type.Unknown()) }, { additionalProperties: false })),
    metadata: nullable(Type.Record(Type.String({ maxLength: 64 }), Type.String({ maxLength: 512 }), { maxProperties: 16 })),
    store: nullable(Type.Boolean()),
    user: Type.Optional(Type.String({ maxLength: 256 })),
    safety_identifier: nullable(Type.String({ maxLength: 256 })),
    prompt_cache_key: nullable(Type.String({ maxLength: 256 })),
    prompt_cache_retention: nullable(Type.Union([Type.Literal('in_memory'), Type.Literal('in-memory'), Type.Literal('24h')])),
    prompt_cache_options: Type.Optional(
      Type.Object(
        { mode: Type.Optional(Type.Union([Type.Literal('implicit'), Type.Literal('explicit')])), ttl: Type.Optional(Type.Literal('30m')) },
        { additionalProperties: false },
      ),
    ),
    service_tier: nullable(Type.Union([Type.Literal('auto'), Type.Literal('default'), Type.Literal('flex'), Type.Literal('scale'), Type.Literal('priority')])),
  },
  {
    additionalProperties: true,
    description:
      "Other top-level fields (an upstream's own parameters, e.g. vLLM's top_k, min_p, repetition_penalty, chat_template_kwargs) are forwarded as sent when every deployment of the model forwards Chat Completions to an upstream; otherwise they are refused with 400 unsupported_parameter.",
  },
);

export type ChatCompletionRequest = Static<typeof ChatCompletionBody>;
export type ChatMessageParam = Static<typeof Message>;
export type ContentPartParam = Static<typeof ContentPart>;

// ---------------------------------------------------------------- answers (for the OpenAPI document)

const Usage = Type.Object({
  prompt_tokens: Type.Integer(),
  completion_tokens: Type.Integer(),
  total_tokens: Type.Integer(),
  prompt_tokens_details: Type.Optional(Type.Object({}, { additionalProperties: true })),
  completion_tokens_details: Type.Optional(Type.Object({}, { additionalProperties: true })),
});

/** The JSON answer (stream false). With `stream: true` the answer is an event stream of chat.completion.chunk objects ending in `data: [DONE]`. */
export const ChatCompletionAnswer = Type.Object(
  {
    id: Type.String(),
    object: Type.Literal('chat.completion'),
    created: Type.Integer(),
    model: Type.String(),
    choices: Type.Array(
      Type.Object(
        {
          index: Type.Integer(),
          message: Type.Object({}, { additionalProperties: true, description: 'role assistant, content, refusal, tool_calls, annotations' }),
          logprobs: Type.Union([Type.Object({}, { additionalProperties: true }), Type.Null()]),
          finish_reason: Type.Union([Type.String(), Type.Null()]),
        },
        { additionalProperties: true },
      ),
    ),
    usage: Type.Optional(Usage),
  },
  { additionalProperties: true },
);
