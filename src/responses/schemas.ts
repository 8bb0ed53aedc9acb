import { Type, type Static } from 'typebox';
import { ANSWER_AUDIO_FORMATS } from './speech.js';
import { AppError } from '../platform/errors.js';
import { MAX_INPUT_CHARS, MAX_INPUT_ITEMS } from '../platform/http/json-shape.js';

/** The values `include` may name: OpenAI's ResponseIncludable (accepted, without effect here; any other is a 400). */
export const INCLUDABLE = [
  'file_search_call.results',
  'web_search_call.results',
  'web_search_call.action.sources',
  'message.input_image.image_url',
  'computer_call_output.output.image_url',
  'code_interpreter_call.outputs',
  'reasoning.encrypted_content',
  'message.output_text.logprobs',
] as const;

/**
 * Parameters of OpenAI's create body that this server does not implement, each with what to do instead. They are
 * refused as `unsupported_parameter` (a limit of this server, not a typo: docs/api.md, "Validation"), whatever
 * their value, before the schema (which would call them unknown) on every transport: HTTP create, input_tokens and
 * the WebSocket mode.
 */
const NOT_IMPLEMENTED: Record<string, string> = {
  messages: "The 'messages' parameter is not used by /v1/responses: send the conversation as 'input'.",
  conversation: "Conversations ('conversation') are not supported by this server: continue a conversation with 'previous_response_id', or send it whole as 'input'.",
  prompt: "Prompt templates ('prompt') are not supported by this server: send the prompt as 'instructions' and 'input'.",
  context_management:
    "Server-side compaction ('context_management') is not supported by this server: compact with POST /v1/responses/compact and start the next response from its window.",
  moderation: "Moderation ('moderation') is not supported by this server.",
  prompt_cache_options: "'prompt_cache_options' is not supported by this server ('prompt_cache_key' and 'prompt_cache_retention' are accepted).",
};

/** The first parameter of a create body that this server does not implement, as its 400; none: undefined. */
export function notImplementedParameter(body: object): AppError | undefined {
  for (const [field, message] of Object.entries(NOT_IMPLEMENTED)) if (Object.hasOwn(body, field)) return new AppError('unsupported_parameter', message, field);
  return undefined;
}

const FunctionToolSchema = Type.Object(
  {
    type: Type.String({ description: 'only "function" is supported' }),
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    description: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    parameters: Type.Optional(Type.Union([Type.Object({}, { additionalProperties: true }), Type.Null()])),
    strict: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
    /** the Chat Completions nesting, accepted and flattened */
    function: Type.Optional(Type.Object({}, { additionalProperties: true })),
  },
  { additionalProperties: true },
);

const TextFormatSchema = Type.Object(
  {
    type: Type.Union([Type.Literal('text'), Type.Literal('json_object'), Type.Literal('json_schema')]),
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$' })),
    schema: Type.Optional(Type.Object({}, { additionalProperties: true })),
    strict: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
    description: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
);

/**
 * Caps on the input (docs/api.md, "Limits"): OpenAI's 10,485,760 characters for a text input; at most 4096
 * items in an input array (OpenAI documents no count; this one bounds the work of one request, with the JSON
 * shape limits of src/platform/http/json-shape.ts). Tools (128) and metadata (16 pairs, keys of 64 and values of
 * 512 characters) are OpenAI's limits.
 */

/** POST /v1/responses. Unknown top-level parameters are refused (as OpenAI does). */
export const CreateResponseBody = Type.Object(
  {
    model: Type.String({ minLength: 1, maxLength: 200 }),
    input: Type.Union([Type.String({ maxLength: MAX_INPUT_CHARS }), Type.Array(Type.Any(), { maxItems: MAX_INPUT_ITEMS })], {
      description: `a text (at most ${MAX_INPUT_CHARS} characters), or an array of at most ${MAX_INPUT_ITEMS} messages and items`,
    }),
    instructions: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    temperature: Type.Optional(Type.Union([Type.Number({ minimum: 0, maximum: 2 }), Type.Null()])),
    top_p: Type.Optional(Type.Union([Type.Number({ minimum: 0, maximum: 1 }), Type.Null()])),
    max_output_tokens: Type.Optional(Type.Union([Type.Integer({ minimum: 1 }), Type.Null()])),
    max_tool_calls: Type.Optional(Type.Union([Type.Integer({ minimum: 1 }), Type.Null()])),
    stream: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
    stream_options: Type.Optional(Type.Union([Type.Object({ include_obfuscation: Type.Optional(Type.Boolean()) }), Type.Null()])),
    modalities: Type.Optional(
      Type.Array(Type.Union([Type.Literal('text'), Type.Literal('audio')]), {
        maxItems: 2,
        description: 'with "audio" (["audio"] alone counts as ["text", "audio"]) each message also gets a spoken output_audio part',
      }),
    ),
    audio: Type.Optional(
      Type.Union([
        Type.Object(
          {
            voice: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'one of the voices of /v1/audio/speech (default alloy)' })),
            format: Type.Optional(
              Type.Union(
                ANSWER_AUDIO_FORMATS.map((f) => Type.Literal(f)),
                { description: 'default mp3; pcm16 is raw 24 kHz 16-bit little-endian mono' },
              ),
            ),
          },
          { additionalProperties: false, description: 'the spoken answer (with modalities ["text", "audio"])' },
        ),
        Type.Null(),
      ]),
    ),
    tools: Type.Optional(Type.Array(FunctionToolSchema, { maxItems: 128 })),
    tool_choice: Type.Optional(
      Type.Union([
        Type.Literal('none'),
        Type.Literal('auto'),
        Type.Literal('required'),
        Type.Object(
          {
            type: Type.String(),
            name: Type.Optional(Type.String()),
            function: Type.Optional(Type.Object({ name: Type.String() }, { additionalProperties: true })),
          },
          { additionalProperties: true },
        ),
      ]),
    ),
    parallel_tool_calls: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
    text: Type.Optional(
      Type.Union([
        Type.Object(
          {
            format: Type.Optional(TextFormatSchema),
            verbosity: Type.Optional(Type.Union([Type.Literal('low'), Type.Literal('medium'), Type.Literal('high'), Type.Null()])),
          },
          { additionalProperties: false },
        ),
        Type.Null(),
      ]),
    ),
    previous_response_id: Type.Optional(Type.Union([Type.String({ minLength: 1, maxLength: 200 }), Type.Null()])),
    store: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
    background: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
    reasoning: Type.Optional(
      Type.Union([
        Type.Object(
          {
            effort: Type.Optional(
              Type.Union([Type.Literal('none'), Type.Literal('minimal'), Type.Literal('low'), Type.Literal('medium'), Type.Literal('high'), Type.Literal('xhigh'), Type.Null()]),
            ),
            summary: Type.Optional(Type.Union([Type.Literal('auto'), Type.Literal('concise'), Type.Literal('detailed'), Type.Null()])),
            generate_summary: Type.Optional(Type.Union([Type.Literal('auto'), Type.Literal('concise'), Type.Literal('detailed'), Type.Null()])),
          },
          { additionalProperties: false },
        ),
        Type.Null(),
      ]),
    ),
    truncation: Type.Optional(Type.Union([Type.Literal('auto'), Type.Literal('disabled'), Type.Null()])),
    stop: Type.Optional(
      Type.Union([Type.String({ minLength: 1 }), Type.Array(Type.String({ minLength: 1 }), { maxItems: 4 }), Type.Null()], {
        description: 'up to 4 stop sequences',
      }),
    ),
    metadata: Type.Optional(Type.Union([Type.Record(Type.String({ maxLength: 64 }), Type.String({ maxLength: 512 }), { maxProperties: 16 }), Type.Null()])),
    user: Type.Optional(Type.Union([Type.String({ maxLength: 256 }), Type.Null()])),
    safety_identifier: Type.Optional(Type.Union([Type.String({ maxLength: 256 }), Type.Null()])),
    prompt_cache_key: Type.Optional(Type.Union([Type.String({ maxLength: 256 }), Type.Null()])),
    prompt_cache_retention: Type.Optional(Type.Union([Type.Literal('in_memory'), Type.Literal('in-memory'), Type.Literal('24h'), Type.Null()])),
    service_tier: Type.Optional(Type.Union([Type.Literal('auto'), Type.Literal('default'), Type.Literal('flex'), Type.Literal('priority'), Type.Null()])),
    top_logprobs: Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: 20 }), Type.Null()])),
    include: Type.Optional(
      Type.Union([Type.Array(Type.Union(INCLUDABLE.map((v) => Type.Literal(v)))), Type.Null()], {
        description: "accepted without effect: values of OpenAI's ResponseIncludable",
      }),
    ),
    presence_penalty: Type.Optional(Type.Union([Type.Number({ minimum: -2, maximum: 2 }), Type.Null()])),
    frequency_penalty: Type.Optional(Type.Union([Type.Number({ minimum: -2, maximum: 2 }), Type.Null()])),
  },
  { additionalProperties: false },
);

export type CreateResponseRequest = Static<typeof CreateResponseBody>;

export const ResponseIdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: false });
