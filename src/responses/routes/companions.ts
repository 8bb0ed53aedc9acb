import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { SseWriter } from '../../platform/http/sse.js';
import { toAppError } from '../../platform/http/errors.js';
import { CreateResponseBody, notImplementedParameter, ResponseIdParams } from '../schemas.js';
import type { ResponsesService } from '../service.js';
import { DeletedResponseSchema, documentedOnly, InputItemListSchema, InputTokensSchema, ResponseObjectSchema } from '../response-schemas.js';

/** GET/DELETE /responses/{id}, POST /responses/{id}/cancel, GET /responses/{id}/input_items, POST /responses/input_tokens */
export default function (app: FastifyInstance, svc: ResponsesService) {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();
  const cfg = { scope: 'responses' };

  r.get(
    '/responses/:id',
    {
      config: cfg,
      serializerCompiler: documentedOnly,
      schema: {
        tags: ['Responses'],
        summary: "Retrieve a stored response; stream=true replays a background response's events (starting_after=N resumes)",
        params: ResponseIdParams,
        response: { 200: ResponseObjectSchema },
        querystring: Type.Object(
          {
            stream: Type.Optional(Type.Boolean()),
            starting_after: Type.Optional(Type.Integer({ minimum: -1 })),
            include: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())])),
            include_obfuscation: Type.Optional(Type.Boolean()),
          },
          { additionalProperties: false },
        ),
      },
    },
    async (req, reply) => {
      if (!req.query.stream) return svc.get(req.params.id, req.apiKey!);
      const sse = new SseWriter(req, reply);
      // the replay's first step checks ownership and kind before any byte is sent (a plain 404/400 then)
      await sse.pipe(svc.replay(req.params.id, req.apiKey!, req.query.starting_after ?? -1, sse.closed), (e) => toAppError(e, req));
      return reply;
    },
  );

  r.delete(
    '/responses/:id',
    {
      config: cfg,
      serializerCompiler: documentedOnly,
      schema: { tags: ['Responses'], summary: 'Delete a stored response', params: ResponseIdParams, response: { 200: DeletedResponseSchema } },
    },
    async (req) => svc.delete(req.params.id, req.apiKey!),
  );

  r.post(
    '/responses/:id/cancel',
    {
      config: cfg,
      serializerCompiler: documentedOnly,
      schema: { tags: ['Responses'], summary: 'Cancel a background response', params: ResponseIdParams, response: { 200: ResponseObjectSchema } },
    },
    async (req) => svc.cancel(req.params.id, req.apiKey!),
  );

  r.get(
    '/responses/:id/input_items',
    {
      config: cfg,
      serializerCompiler: documentedOnly,
      schema: {
        tags: ['Responses'],
        summary: 'The input items of a stored response (cursor paging)',
        params: ResponseIdParams,
        response: { 200: InputItemListSchema },
        querystring: Type.Object(
          {
            after: Type.Optional(Type.String({ maxLength: 200 })),
            limit: Type.Integer({ minimum: 1, maximum: 100, default: 20 }),
            order: Type.Union([Type.Literal('asc'), Type.Literal('desc')], { default: 'desc' }),
            include: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())])),
          },
          { additionalProperties: false },
        ),
      },
    },
    async (req) => svc.inputItems(req.params.id, req.apiKey!, req.query),
  );

  r.post(
    '/responses/input_tokens',
    {
      config: cfg,
      bodyLimit: 16 * 1024 * 1024,
      serializerCompiler: documentedOnly,
      schema: { tags: ['Responses'], summary: 'Count the input tokens a request would use', body: CreateResponseBody, response: { 200: InputTokensSchema } },
      // what create refuses as not implemented, this refuses the same way (before the schema calls it unknown)
      preValidation: async (req) => {
        const b = req.body;
        const unsupported = b && typeof b === 'object' ? notImplementedParameter(b) : undefined;
        if (unsupported) throw unsupported;
      },
    },
    async (req) => svc.inputTokens(req.body, req.apiKey!),
  );
}
