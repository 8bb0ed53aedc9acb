import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { CreateResponseBody, notImplementedParameter } from '../schemas.js';
import type { ResponsesService } from '../service.js';
import { documentedOnly, InputTokensSchema } from '../response-schemas.js';

/** POST /responses/input_tokens: the input tokens a create request would use. */
export default function (app: FastifyInstance, svc: ResponsesService) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/responses/input_tokens',
    {
      config: { scope: 'responses' },
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
