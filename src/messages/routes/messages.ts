import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { SseWriter } from '../../platform/http/sse.js';
import { anthropicErrorBody, toAppError } from '../../platform/http/errors.js';
import { clientGone } from '../../platform/http/client-gone.js';
import { MessageAnswer, MessagesBody } from '../schemas.js';
import { MESSAGES_SCOPE } from '../scope.js';
import type { MessagesService } from '../service.js';

export default function (app: FastifyInstance, svc: MessagesService) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/messages',
    {
      // Anthropic's wire: its error shape, and the key in x-api-key too (src/platform/http/auth.ts)
      config: { scope: MESSAGES_SCOPE, reserves: true, wire: 'anthropic-api' },
      bodyLimit: 16 * 1024 * 1024,
      // the schema's verdict goes to the service: a body it refuses may still be forwarded as it is to a model that
      // speaks Anthropic's API itself, which validates it (src/messages/forwarding.ts); otherwise it is refused
      attachValidation: true,
      schema: {
        tags: ['Anthropic Messages'],
        summary: "Create a message with Anthropic's Messages API, served by any text model (JSON, or Anthropic's Server-Sent Events with stream: true)",
        body: MessagesBody,
        response: {
          200: {
            description:
              "Anthropic's message object; with stream: true, text/event-stream of `event: <type>` and `data: <json>` lines (message_start, ping, content_block_start, content_block_delta, content_block_stop, message_delta, message_stop; `error` mid-stream)",
            content: { 'application/json': { schema: MessageAnswer }, 'text/event-stream': { schema: { type: 'string' } } },
          },
        },
      },
    },
    async (req, reply) => {
      // Anthropic's SDK reads the request id from `request-id` (message._request_id, an error's requestID); set on
      // the raw response so that the event stream's head carries it too
      reply.raw.setHeader('request-id', req.id);
      const p = await svc.prepare(req.body, req.apiKey!, req.id, req.facts, { invalid: req.validationError, betaHeader: req.headers['anthropic-beta'] });
      if (!p.stream) {
        const gone = clientGone(reply);
        try {
          return reply.type('application/json; charset=utf-8').send(JSON.stringify(await svc.json(p, gone.signal)));
        } finally {
          gone.release();
        }
      }
      const sse = new SseWriter(req, reply);
      const it = svc.stream(p, sse.closed)[Symbol.asyncIterator]();
      // a refusal before the first event is a plain HTTP error (nothing was sent yet)
      let r = await it.next();
      try {
        while (!r.done) {
          sse.event(r.value as { type: string });
          r = await it.next();
        }
        sse.end(false);
      } catch (e) {
        if (sse.clientLeft) return reply;
        // after the first event: Anthropic's `error` event (its SDK raises it), and the stream ends
        sse.event(anthropicErrorBody(sse.stoppedWith ?? toAppError(e, req), req.id, req.headers['accept-language']));
        sse.end(false);
      }
      return reply;
    },
  );
}
