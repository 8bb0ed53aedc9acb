/**
 * The audio API under {base_url}: POST /audio/speech (JSON in, audio streamed out with chunked transfer
 * encoding), POST /audio/transcriptions and /audio/translations (multipart/form-data, parsed as a stream,
 * 25 MiB file limit -> 413: ./upload.ts), one file each under ./routes. The multipart parser is registered in this
 * module's scope only. Inference-key authentication, the `audio` route scope and the OpenAI error shape come from
 * the {base_url} group (src/compose/http.ts).
 */
import multipart from '@fastify/multipart';
import type { FeatureModule } from '../platform/module.js';
import { AUDIO_OPERATIONS, AUDIO_UNITS, AudioService, MAX_UPLOAD_BYTES, type AudioServiceDeps } from './service.js';
import speech from './routes/speech.js';
import transcriptions from './routes/transcriptions.js';
import translations from './routes/translations.js';

/** The audio API under {base_url}: speech, transcriptions, translations. */
export function createAudioModule(deps: AudioServiceDeps): FeatureModule {
  const svc = new AudioService(deps);
  return {
    name: 'audio',
    scope: 'audio',
    operations: Object.values(AUDIO_OPERATIONS),
    units: AUDIO_UNITS,
    routes: {
      api: async (app) => {
        await app.register(async (scope) => {
          await scope.register(multipart, { limits: { fileSize: MAX_UPLOAD_BYTES }, throwFileSizeLimit: true });
          speech(scope, svc);
          transcriptions(scope, svc);
          translations(scope, svc);
        });
      },
    },
  };
}
