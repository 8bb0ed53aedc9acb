import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { clientGone } from '../../platform/http/client-gone.js';
import { EmbeddingsAnswer, EmbeddingsBody } from '../schemas.js';
import type { EmbeddingsAnswerBody, EmbeddingsService } from '../service.js';
import { jsonUtf8, LARGE_JSON_CHARS } from '../../platform/json-text.js';

/** the numbers of the vectors (or base64 characters / 20) past which an answer is made by jsonUtf8: ~256 KiB of text */
const LARGE_ANSWER = LARGE_JSON_CHARS / 20;

function largeAnswer(body: EmbeddingsAnswerBody): boolean {
  let n = 0;
  for (const d of body.data) if ((n += typeof d.embedding === 'string' ? d.embedding.length / 20 : d.embedding.length) >= LARGE_ANSWER) return true;
  return false;
}

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
        // a large answer of the engine's packed vectors comes as its bytes, made off the event loop; else
        // thousands of numbers: JSON.stringify is faster than a schema serializer on float arrays, and exact; a
        // large answer of arrays (an engine that gives them: 2048 vectors of 1536 floats are ~64 MB of text,
        // ~0.5-1 s of JSON.stringify) is made in slices with turns of the event loop between them: the same bytes
        const json = Buffer.isBuffer(body) ? body : largeAnswer(body) ? (await jsonUtf8(body))!.bytes : JSON.stringify(body);
        return reply.type('application/json; charset=utf-8').send(json as never);
      } finally {
        gone.release();
      }
    },
  );
}
