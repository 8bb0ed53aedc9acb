import type { FastifyInstance } from 'fastify';
import type { AudioService } from '../service.js';
import { transcriptRoute } from './transcript.js';

/** POST /audio/transcriptions: speech to text in its own language. */
export default function (app: FastifyInstance, svc: AudioService) {
  transcriptRoute(
    app,
    svc,
    'transcribe',
    '/audio/transcriptions',
    'Speech to text (multipart/form-data: file, model, language, prompt, response_format, temperature, timestamp_granularities[])',
  );
}
