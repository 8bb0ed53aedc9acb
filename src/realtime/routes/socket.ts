import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { AppError } from '../../platform/errors.js';
import type { RealtimeHub } from '../hub.js';
import type { WsSocket } from '../socket.js';

const DESCRIPTION = [
  "OpenAI's Realtime API (GA events): open a WebSocket on this address with `?model=` a realtime model (`gpt-realtime`",
  "and the other built-in ones are pipelines of Portico's own transcription, text and speech models; a model of the",
  'model file may be another pipeline or an upstream realtime server). Authenticate with `Authorization: Bearer <inference key>`',
  'or, from a browser, the subprotocols `realtime` and `openai-insecure-api-key.<client secret>` (a client secret from',
  '`POST /v1/realtime/client_secrets`); `?intent=transcription` opens a transcription session. The key needs the',
  '`realtime` scope. Past the sessions a key or the server may hold, the upgrade is refused with 429',
  '`session_limit_reached`. Events, limits and what is not supported: docs/api.md, "Realtime".',
].join(' ');

/** GET /realtime: the Realtime API's WebSocket (a plain GET is 426 Upgrade Required). */
export default function (app: FastifyInstance, hub: RealtimeHub) {
  app.route({
    method: 'GET',
    url: '/realtime',
    config: { scope: 'realtime', browserSocket: true },
    schema: {
      tags: ['Realtime'],
      summary: 'Realtime API: upgrade to a WebSocket and exchange realtime events',
      description: DESCRIPTION,
      querystring: Type.Object(
        {
          model: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: "the realtime model (default: the client secret's, else gpt-realtime)" })),
          intent: Type.Optional(Type.Literal('transcription', { description: 'a transcription session (live captions, no responses)' })),
        },
        { additionalProperties: false },
      ),
      response: {
        101: Type.Null({ description: 'Switching Protocols: the WebSocket is open; the first server event is session.created.' }),
      },
    },
    // a place among the key's and the server's sessions, before the upgrade: past the cap, a plain 429
    preHandler: async (req) => {
      (req as unknown as { realtimeRelease?: () => void }).realtimeRelease = hub.take(req.apiKey!);
    },
    handler: async (req, reply) => {
      (req as unknown as { realtimeRelease?: () => void }).realtimeRelease?.();
      reply.header('upgrade', 'websocket');
      throw new AppError('upgrade_required', 'GET /v1/realtime is the Realtime API: open it with a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket).');
    },
    wsHandler: (socket, req) => {
      const release = (req as unknown as { realtimeRelease?: () => void }).realtimeRelease ?? (() => {});
      void hub.accept(socket as unknown as WsSocket, req, release);
    },
  });
}
