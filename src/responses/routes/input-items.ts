import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { ResponseIdParams } from '../schemas.js';
import type { ResponsesService } from '../service.js';
import { documentedOnly, InputItemListSchema } from '../response-schemas.js';

/** GET /responses/{id}/input_items: the input items of a stored response, a page at a time. */
export default function (app: FastifyInstance, svc: ResponsesService) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/responses/:id/input_items',
    {
      config: { scope: 'responses' },
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
}
