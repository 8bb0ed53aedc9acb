import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { AppError } from '../../platform/errors.js';
import { SseWriter } from '../../platform/http/sse.js';
import { openAIErrorBody, toAppError } from '../../platform/http/errors.js';
import { CreateResponseBody } from '../schemas.js';
import type { ResponsesService } from '../service.js';

export default function (app: FastifyInstance, svc: ResponsesService) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/responses',
    {
      config: { scope: 'responses' },
      bodyLimit: 16 * 1024 * 1024,
      schema: { tags: ['Responses'], summary: 'Create a model response (JSON, or Server-Sent Events with stream: true)', body: CreateResponseBody },
      preValidation: async (req) => {
        const b = req.body as Record<string, unknown> | undefined;
        if (b && typeof b === 'object' && 'messages' in b) {
          throw new AppError('unsupported_parameter', "The 'messages' parameter is not used by /v1/responses: send the conversation as 'input'.", 'messages');
        }
        if (b && typeof b === 'object' && b.input === undefined) throw new AppError('validation_error', "Missing required parameter: 'input'.", 'input');
        if (b && typeof b === 'object' && b.input === null) throw new AppError('validation_error', "'input' must be a string or an array, not null.", 'input');
      },
    },
    async (req, reply) => {
      const p = await svc.prepare(req.body, req.apiKey!, req.id);
      if (req.body.background) {
        const { response } = await svc.createBackground(p);
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
        const ac = new AbortController();
        const onClose = () => {
          if (!reply.raw.writableEnded) ac.abort(new Error('client disconnected'));
        };
        reply.raw.on('close', onClose);
        try {
          return await svc.createSync(p, ac.signal);
        } catch (e) {
          // stored nothing: a retry is safe
          throw e;
        } finally {
          reply.raw.off('close', onClose);
        }
      }
      const sse = new SseWriter(req, reply);
      let seq = -1;
      try {
        await svc.createStream(p, sse.closed, () => sse.start(), (e) => {
          seq = e.sequence_number;
          sse.event(e);
        });
        sse.end();
      } catch (e) {
        if (sse.closed.aborted) return reply;
        if (!sse.isStarted) throw e;
        // after the stream started: an error event (the response could not be finished)
        const { code, message, param } = openAIErrorBody(toAppError(e, req)).error;
        sse.event({ type: 'error', code, message, param, sequence_number: seq + 1 } as { type: string });
        sse.end(false);
      }
      return reply;
    },
  );
}
