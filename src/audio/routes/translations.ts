import type { FastifyInstance } from 'fastify';
import type { AudioService } from '../service.js';
import { transcriptRoute } from './transcript.js';

/** POST /audio/translations: speech in any language to English text. */
export default function (app: FastifyInstance, svc: AudioService) {
  transcriptRoute(app, svc, 'translate', '/audio/translations', 'Speech in any language to English text (multipart/form-data: file, model, prompt, response_format, temperature)');
}
