/**
 * What the Responses routes answer, for the OpenAPI document (issue 8: response schemas for the Responses and
 * audio routes). The shapes follow OpenAI's Response object; items and content parts keep
 * `additionalProperties: true` because Portico passes through what an upstream's items carry.
 *
 * These schemas document; they do not serialize. The routes that carry them use `documentedOnly` as their
 * serializer compiler, so the answer is exactly the object the service built (JSON.stringify), and a field the
 * schema does not list is never dropped. Fastify's precompiled serializer (fast-json-stringify) would drop it:
 * the cost of being wrong is a missing field in an SDK, and the gain measured for the whole object is small next
 * to the socket writes that dominate the profile (docs/performance.md).
 */
import { Type, type TSchema } from 'typebox';

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);
const open = { additionalProperties: true };

const OutputItem = Type.Object(
  {
    type: Type.String({ description: 'message, function_call, reasoning, compaction, ...' }),
    id: Type.Optional(Type.String()),
    status: Type.Optional(Type.String({ description: 'in_progress, completed or incomplete' })),
  },
  { ...open, description: 'An output item: a message (role assistant, content parts), a function_call (call_id, name, arguments), reasoning' },
);

const Usage = Type.Object(
  {
    input_tokens: Type.Integer(),
    input_tokens_details: Type.Object({ cached_tokens: Type.Integer() }, open),
    output_tokens: Type.Integer(),
    output_tokens_details: Type.Object({ reasoning_tokens: Type.Integer() }, open),
    total_tokens: Type.Integer(),
  },
  open,
);

export const ResponseObjectSchema = Type.Object(
  {
    id: Type.String({ description: 'resp_...' }),
    object: Type.Literal('response'),
    created_at: Type.Integer(),
    status: Type.String({ description: 'in_progress (a background response waiting or running), completed, failed, incomplete or cancelled' }),
    background: Type.Boolean(),
    completed_at: Nullable(Type.Integer()),
    error: Nullable(Type.Object({ code: Type.String(), message: Type.String() }, open)),
    incomplete_details: Nullable(Type.Object({ reason: Type.String() }, open)),
    instructions: Nullable(Type.String()),
    max_output_tokens: Nullable(Type.Integer()),
    max_tool_calls: Nullable(Type.Integer()),
    model: Type.String(),
    output: Type.Array(OutputItem),
    output_text: Type.Optional(Type.String({ description: "the answer's text, as the SDKs compute output_text" })),
    parallel_tool_calls: Type.Boolean(),
    previous_response_id: Nullable(Type.String()),
    prompt_cache_key: Nullable(Type.String()),
    reasoning: Type.Object({}, open),
    store: Type.Boolean(),
    temperature: Type.Number(),
    text: Type.Object({ format: Type.Object({}, { ...open, description: 'type: text, json_object or json_schema (name, schema, strict)' }) }, open),
    tool_choice: Type.Unknown(),
    tools: Type.Array(Type.Object({}, open)),
    top_p: Type.Number(),
    truncation: Type.String(),
    user: Nullable(Type.String()),
    metadata: Type.Record(Type.String(), Type.String()),
    usage: Nullable(Usage),
  },
  { ...open, description: 'A model response (OpenAI Response object)' },
);

export const DeletedResponseSchema = Type.Object({ id: Type.String(), object: Type.Literal('response'), deleted: Type.Literal(true) }, open);

export const InputItemListSchema = Type.Object(
  {
    object: Type.Literal('list'),
    data: Type.Array(Type.Object({ type: Type.String(), id: Type.Optional(Type.String()) }, open)),
    first_id: Nullable(Type.String()),
    last_id: Nullable(Type.String()),
    has_more: Type.Boolean(),
  },
  open,
);

export const InputTokensSchema = Type.Object({ object: Type.Literal('response.input_tokens'), input_tokens: Type.Integer() }, open);

/** The serializer compiler of a route whose response schemas only document: the answer as built, never trimmed. */
export const documentedOnly = () => (data: unknown) => JSON.stringify(data);
