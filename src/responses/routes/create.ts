import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { documentedOnly, ResponseObjectSchema } from '../response-schemas.js';
import { AppError } from '../../platform/errors.js';
import { SseWriter } from '../../platform/http/sse.js';
import { toAppError } from '../../platform/http/errors.js';
import { clientGone } from '../../platform/http/client-gone.js';
import { CreateResponseBody, notImplementedParameter } from '../schemas.js';
import type { ResponsesService } from '../service.js';

export default function (app: FastifyInstance, svc: ResponsesService) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/responses',
    {
      config: { scope: 'responses', reserves: true },
      bodyLimit: 16 * 1024 * 1024,
      serializerCompiler: documentedOnly,
      schema: {
        tags: ['Responses'],
        summary: 'Create a model response (JSON, or Server-Sent Events with stream: true)',
        body: CreateResponseBody,
        response: {
          200: {
            description: 'The Response object (JSON), or its events (text/event-stream) when stream is true',
            content: { 'application/json': { schema: ResponseObjectSchema }, 'text/event-stream': { schema: { type: 'string' } } },
          },
        },
      },
      preValidation: async (req) => {
        const b = req.body as Record<string, unknown> | undefined;
        const unsupported = b && typeof b === 'object' ? notImplementedParameter(b) : undefined;
        if (unsupported) throw unsupported;
        if (b && typeof b === 'object' && b.input === undefined) throw new AppError('validation_error', "Missing required parameter: 'input'.", 'input');
        if (b && typeof b === 'object' && b.input === null) throw new AppError('validation_error', "'input' must be a string or an array, not null.", 'input');
      },
    },
    async (req, reply) => {
      const p = await svc.prepare(req.body, req.apiKey!, req.id, req.facts);
      if (req.body.background) {
        const response = await svc.createBackground(p);
        if (!req.body.stream) return response;
        const sse = new SseWriter(req, reply);
        try {
          await sse.pipe(svc.replay(p.id, req.apiKey!, -1, sse.closed), (e) => toAppError(e, req));
        } catch (e) {
          // the response is stored and queued: a retry would start a second one
          throw Object.assign(toAppError(e, req), { headers: { 'x-should-retry': 'false' } });
        }
        return reply;
      }
      if (!req.body.stream) {
        const gone = clientGone(reply);
        try {
          return await svc.json(p, gone.signal);
        } finally {
          gone.release();
        }
      }
      // an engine refusal before the first event is a plain HTTP error; after it, an error event
      const sse = new SseWriter(req, reply);
      await sse.pipe(svc.stream(p, sse.closed), (e) => toAppError(e, req));
      return reply;
    },
  );
}
