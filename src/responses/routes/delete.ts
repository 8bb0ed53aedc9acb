import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { ResponseIdParams } from '../schemas.js';
import type { ResponsesService } from '../service.js';
import { DeletedResponseSchema, documentedOnly } from '../response-schemas.js';

/** DELETE /responses/{id}: deletes a stored response. */
export default function (app: FastifyInstance, svc: ResponsesService) {
  app.withTypeProvider<TypeBoxTypeProvider>().delete(
    '/responses/:id',
    {
      config: { scope: 'responses' },
      serializerCompiler: documentedOnly,
      schema: { tags: ['Responses'], summary: 'Delete a stored response', params: ResponseIdParams, response: { 200: DeletedResponseSchema } },
    },
    async (req) => svc.delete(req.params.id, req.apiKey!),
  );
}
