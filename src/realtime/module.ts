/**
 * OpenAI's Realtime API under {base_url}: GET /realtime (the WebSocket) and POST /realtime/client_secrets, one file
 * each under ./routes. A realtime model is served by a pipeline of Portico's own models (./session.ts) or forwarded
 * to an upstream realtime server (./forward.ts). The key's `realtime` scope, the OpenAI error shape and the key in
 * a browser's subprotocol come from the {base_url} group (src/compose/http.ts) and the route's config.
 */
import type { FeatureModule, MeteredUnit } from '../platform/module.js';
import { RealtimeHub } from './hub.js';
import { RealtimeSecrets } from './secrets.js';
import { REALTIME_OPERATION, RealtimeService, type RealtimeDeps } from './service.js';
import socket from './routes/socket.js';
import clientSecrets from './routes/client-secrets.js';

/**
 * What a realtime turn is priced in besides tokens (a model's `pricing`; a pipeline's model without one is priced by
 * its parts: tokens by the text model, audio in by the transcription model, characters spoken by the speech model)
 */
export const REALTIME_UNITS: readonly MeteredUnit[] = [
  { unit: 'audio_seconds', price: 'per_audio_second', on: ['realtime'] },
  { unit: 'output_audio_seconds', price: 'per_output_audio_second', on: ['realtime'] },
  { unit: 'characters', price: 'per_character', on: ['realtime'] },
];

export interface RealtimeModule extends FeatureModule {
  readonly hub: RealtimeHub;
  readonly service: RealtimeService;
}

export function createRealtimeModule(deps: RealtimeDeps): RealtimeModule {
  const service = new RealtimeService(deps);
  const hub = new RealtimeHub(service);
  const secrets = new RealtimeSecrets(service);
  return {
    name: 'realtime',
    scope: 'realtime',
    operations: [REALTIME_OPERATION],
    units: REALTIME_UNITS,
    hub,
    service,
    routes: {
      api: (app) => {
        socket(app, hub);
        clientSecrets(app, secrets);
      },
    },
    close: () => hub.close(),
  };
}
