import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { SseWriter } from '../../platform/http/sse.js';
import { openAIErrorBody, toAppError } from '../../platform/http/errors.js';
import { clientGone } from '../../platform/http/client-gone.js';
import { ChatCompletionAnswer, ChatCompletionBody } from '../schemas.js';
import type { ChatService } from '../service.js';

export default function (app: FastifyInstance, svc: ChatService) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/chat/completions',
    {
      config: { scope: 'chat', reserves: true },
      bodyLimit: 16 * 1024 * 1024,
      schema: {
        tags: ['Chat'],
        summary: 'Create a chat completion (JSON, or Server-Sent Events of chat.completion.chunk objects with stream: true)',
        body: ChatCompletionBody,
        response: {
          200: {
            description: 'the chat.completion object; with stream: true, text/event-stream of `data: <chat.completion.chunk>` lines ending in `data: [DONE]`',
            content: { 'application/json': { schema: ChatCompletionAnswer }, 'text/event-stream': { schema: { type: 'string' } } },
          },
        },
      },
    },
    async (req, reply) => {
      const p = await svc.prepare(req.body, req.apiKey!, req.id, req.facts);
      if (!p.stream) {
        const gone = clientGone(reply);
        try {
          const body = await svc.json(p, gone.signal);
          // sent as text: the answer (an upstream's, forwarded) goes out exactly as built, not through a serializer
          return reply.type('application/json; charset=utf-8').send(JSON.stringify(body));
        } finally {
          gone.release();
        }
      }
      const sse = new SseWriter(req, reply);
      const it = svc.stream(p, sse.closed)[Symbol.asyncIterator]();
      // a refusal before the first chunk is a plain HTTP error (nothing was sent yet)
      let r = await it.next();
      try {
        while (!r.done) {
          sse.data(r.value);
          r = await it.next();
        }
        sse.end();
      } catch (e) {
        if (sse.clientLeft) return reply;
        // after the first chunk: an error object in the stream (the SDKs raise it), and no [DONE]; a shutdown
        // past its grace period says so
        sse.data(openAIErrorBody(sse.stoppedWith ?? toAppError(e, req), req.headers['accept-language']));
        sse.end(false);
      }
      return reply;
    },
  );
}
