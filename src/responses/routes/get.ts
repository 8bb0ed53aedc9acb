import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { SseWriter } from '../../platform/http/sse.js';
import { toAppError } from '../../platform/http/errors.js';
import { ResponseIdParams } from '../schemas.js';
import type { ResponsesService } from '../service.js';
import { documentedOnly, ResponseObjectSchema } from '../response-schemas.js';

/** GET /responses/{id}: a stored response, or (stream=true) a background response's events replayed. */
export default function (app: FastifyInstance, svc: ResponsesService) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/responses/:id',
    {
      config: { scope: 'responses' },
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
}
