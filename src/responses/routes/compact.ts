import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { clientGone } from '../../platform/http/client-gone.js';
import { CreateResponseBody } from '../schemas.js';
import type { Compactor } from '../compact.js';

const P = CreateResponseBody.properties;

/** POST /responses/compact. The fields the create body shares have its rules (and caps); unknown ones are refused. */
export const CompactBody = Type.Object(
  {
    model: P.model,
    input: Type.Optional(Type.Union([P.input, Type.Null()], { description: 'a text, or an array of messages and items (compaction items included)' })),
    previous_response_id: P.previous_response_id,
    instructions: P.instructions,
    prompt_cache_key: P.prompt_cache_key,
    /** accepted without effect, as on create */
    prompt_cache_retention: P.prompt_cache_retention,
    service_tier: P.service_tier,
  },
  { additionalProperties: false },
);

const Item = Type.Object({ id: Type.String(), type: Type.String() }, { additionalProperties: true });

export const CompactionObjectSchema = Type.Object(
  {
    id: Type.String(),
    object: Type.Literal('response.compaction'),
    created_at: Type.Integer(),
    output: Type.Array(Item, {
      description: "the compacted window: the user's messages as they were, then one item {type: 'compaction', id, encrypted_content} that stands for the rest",
    }),
    usage: Type.Object(
      {
        input_tokens: Type.Integer(),
        input_tokens_details: Type.Object({ cached_tokens: Type.Integer() }),
        output_tokens: Type.Integer(),
        output_tokens_details: Type.Object({ reasoning_tokens: Type.Integer() }),
        total_tokens: Type.Integer(),
      },
      { description: 'the tokens of the summarizing pass' },
    ),
  },
  { description: 'A compacted input window (not a stored response: it has no id to chain from)' },
);

export default function (app: FastifyInstance, compactor: Compactor) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/responses/compact',
    {
      config: { scope: 'responses', reserves: true },
      bodyLimit: 16 * 1024 * 1024,
      schema: {
        tags: ['Responses'],
        summary: 'Compact a conversation into a window of its user messages and one sealed compaction item',
        description:
          "Give `input`, `previous_response_id`, or both. Start the next response with `input` = this `output` plus the new items, without `previous_response_id`. The compaction item's `encrypted_content` opens only on this server (any instance) and only for the same user.",
        body: CompactBody,
        response: { 200: CompactionObjectSchema },
      },
    },
    async (req, reply) => {
      // a client that leaves stops the summarizing (what it used is charged, as on /responses)
      const gone = clientGone(reply);
      try {
        return await compactor.compact(req.body, req.apiKey!, req.id, gone.signal);
      } finally {
        gone.release();
      }
    },
  );
}
