import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { ResponseIdParams } from '../schemas.js';
import type { ResponsesService } from '../service.js';
import { documentedOnly, ResponseObjectSchema } from '../response-schemas.js';

/** POST /responses/{id}/cancel: cancels a background response. */
export default function (app: FastifyInstance, svc: ResponsesService) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/responses/:id/cancel',
    {
      config: { scope: 'responses' },
      serializerCompiler: documentedOnly,
      schema: { tags: ['Responses'], summary: 'Cancel a background response', params: ResponseIdParams, response: { 200: ResponseObjectSchema } },
    },
    async (req) => svc.cancel(req.params.id, req.apiKey!),
  );
}
