import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { CountTokensBody, TokensCountAnswer } from '../schemas.js';
import { MESSAGES_SCOPE } from '../scope.js';
import type { MessagesService } from '../service.js';

export default function (app: FastifyInstance, svc: MessagesService) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/messages/count_tokens',
    {
      config: { scope: MESSAGES_SCOPE, wire: 'anthropic-api' },
      bodyLimit: 16 * 1024 * 1024,
      // as POST /messages: a body the schema refuses may still be forwarded (src/messages/forwarding.ts)
      attachValidation: true,
      schema: {
        tags: ['Anthropic Messages'],
        summary: "Count the input tokens of a message's conversation (Anthropic's count_tokens), as the serving engine counts them; nothing is charged",
        body: CountTokensBody,
        response: { 200: TokensCountAnswer },
      },
    },
    async (req, reply) => {
      const answer = await svc.countTokens(req.body, req.apiKey!, req.facts, { invalid: req.validationError, betaHeader: req.headers['anthropic-beta'] });
      // sent as text: a forwarded answer goes as the upstream wrote it, not cut to the schema by its serializer
      // (the schema stays the OpenAPI document's; a string is never serialized)
      return reply.type('application/json; charset=utf-8').send(JSON.stringify(answer) as unknown as { input_tokens: number });
    },
  );
}
