import type { FastifyInstance } from 'fastify';
import { clientGone } from '../../platform/http/client-gone.js';
import type { AudioService } from '../service.js';
import { readUpload } from '../upload.js';

/**
 * The 200 answer of /audio/transcriptions and /audio/translations, for the OpenAPI document only: the body is sent
 * as built (the transcript already rendered as text), never serialized from this.
 */
const TRANSCRIPT_ANSWER = {
  description: 'json: {text, usage}; verbose_json: {task, language, duration, text, segments[], words[] (when asked), usage}; text, srt and vtt: the transcript as text',
  content: {
    'application/json': {
      schema: {
        type: 'object',
        required: ['text'],
        additionalProperties: true,
        properties: {
          text: { type: 'string' },
          task: { type: 'string' },
          language: { type: 'string' },
          duration: { type: 'number' },
          segments: { type: 'array', items: { type: 'object', additionalProperties: true } },
          words: { type: 'array', items: { type: 'object', properties: { word: { type: 'string' }, start: { type: 'number' }, end: { type: 'number' } } } },
          usage: { type: 'object', properties: { type: { type: 'string' }, seconds: { type: 'number' } } },
        },
      },
    },
    'text/plain': { schema: { type: 'string' } },
    'text/vtt': { schema: { type: 'string' } },
  },
};

/** POST /audio/transcriptions or /audio/translations (multipart/form-data, parsed as a stream: ../upload.ts). */
export function transcriptRoute(app: FastifyInstance, svc: AudioService, task: 'transcribe' | 'translate', path: string, summary: string) {
  app.post(
    path,
    {
      config: { scope: 'audio' },
      schema: {
        tags: ['Audio'],
        summary,
        consumes: ['multipart/form-data'],
        response: { 200: TRANSCRIPT_ANSWER },
      },
    },
    async (req, reply) => {
      const { fields, file } = await readUpload(req);
      const p = svc.prepareTranscription(task, fields, file, req.apiKey!);
      const gone = clientGone(reply);
      try {
        const out = await svc.transcribe(p, req.apiKey!, req.id, gone.signal, req.facts);
        reply.header('content-type', out.contentType);
        return reply.send(typeof out.body === 'string' ? out.body : JSON.stringify(out.body));
      } finally {
        gone.release();
      }
    },
  );
}
