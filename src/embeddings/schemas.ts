/** POST /v1/embeddings: the request as OpenAI's API takes it, strict like every Portico route, and the answer's shape. */
import { Type, type Static } from 'typebox';

/** OpenAI's own limit: at most 2048 inputs per request (checked by the service, so the message says it plainly) */
export const MAX_INPUTS = 2048;

export const EmbeddingsBody = Type.Object(
  {
    model: Type.String({ minLength: 1, maxLength: 200 }),
    input: Type.Union([Type.String(), Type.Array(Type.String()), Type.Array(Type.Integer({ minimum: 0 })), Type.Array(Type.Array(Type.Integer({ minimum: 0 })))], {
      description: 'a text, an array of texts, an array of token ids, or an array of token arrays (at most 2048 inputs; none empty)',
    }),
    encoding_format: Type.Optional(
      Type.Union([Type.Literal('float'), Type.Literal('base64')], { description: 'float (default): arrays of numbers; base64: little-endian float32 bytes' }),
    ),
    dimensions: Type.Optional(Type.Integer({ minimum: 1, maximum: 65536, description: 'fewer dimensions, for models that allow it (at most 65536: no model has more)' })),
    user: Type.Optional(Type.String({ maxLength: 256 })),
  },
  { additionalProperties: false },
);

export type EmbeddingsRequest = Static<typeof EmbeddingsBody>;

export const EmbeddingsAnswer = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(
    Type.Object({
      object: Type.Literal('embedding'),
      index: Type.Integer(),
      embedding: Type.Union([Type.Array(Type.Number()), Type.String()], { description: 'numbers, or a base64 string of float32 values' }),
    }),
  ),
  model: Type.String(),
  usage: Type.Object({ prompt_tokens: Type.Integer(), total_tokens: Type.Integer() }),
});
