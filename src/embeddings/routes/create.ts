import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { clientGone } from '../../platform/http/client-gone.js';
import { EmbeddingsAnswer, EmbeddingsBody } from '../schemas.js';
import type { EmbeddingsService } from '../service.js';

export default function (app: FastifyInstance, svc: EmbeddingsService) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/embeddings',
    {
      config: { scope: 'embeddings', reserves: true },
      // 2048 inputs of a few thousand characters each
      bodyLimit: 16 * 1024 * 1024,
      schema: {
        tags: ['Embeddings'],
        summary: 'Create embedding vectors of texts (or token arrays)',
        body: EmbeddingsBody,
        response: { 200: EmbeddingsAnswer },
      },
    },
    async (req, reply) => {
      const gone = clientGone(reply);
      try {
        const body = await svc.create(req.body, req.apiKey!, req.id, gone.signal, req.facts);
        // thousands of numbers: JSON.stringify is faster than a schema serializer on float arrays, and exact
        return reply.type('application/json; charset=utf-8').send(JSON.stringify(body) as never);
      } finally {
        gone.release();
      }
    },
  );
}
