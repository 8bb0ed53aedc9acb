import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { AppError } from '../../platform/errors.js';
import type { WsHub } from '../ws/hub.js';
import type { WsSocket } from '../ws/protocol.js';

const DESCRIPTION = [
  "WebSocket mode (Open Responses 2026-04-24; the official `openai` SDK's `ResponsesWS`). Open a WebSocket on this",
  'address (`ws://` or `wss://`) with `Authorization: Bearer <inference key>`: a bad key is refused at the upgrade',
  'with a plain HTTP 401. Then send text frames `{"type": "response.create", ...the create body...}` (without',
  '`stream`, `stream_options`, `background`); each is answered with the same events as the SSE stream, one JSON',
  'object per frame, one response at a time in the order sent, or with an error frame',
  '`{"type": "error", "status", "error": {"type", "code", "message", "param"}}`. The last response of the',
  'connection is kept in memory: continue it with `previous_response_id` and only the new items, `store: false`',
  'included. A connection lasts at most 60 minutes (`websocket_connection_limit_reached`). A GET without the',
  'upgrade is answered 426. Limits and rules: docs/api.md, "WebSocket mode".',
].join(' ');

/** GET /responses: the WebSocket mode's upgrade (a plain GET is 426 Upgrade Required). */
export default function (app: FastifyInstance, hub: WsHub) {
  app.route({
    method: 'GET',
    url: '/responses',
    config: { scope: 'responses' },
    schema: {
      tags: ['Responses'],
      summary: 'WebSocket mode: upgrade to a WebSocket and send response.create messages',
      description: DESCRIPTION,
      querystring: Type.Object({}, { additionalProperties: false }),
      response: {
        101: Type.Null({
          description:
            'Switching Protocols: the WebSocket is open. Client frames: `response.create` messages; server frames: the response events of the SSE stream, and error frames.',
        }),
      },
    },
    handler: async (_req, reply) => {
      reply.header('upgrade', 'websocket');
      throw new AppError('upgrade_required', 'GET /v1/responses is the WebSocket mode: open it with a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket).');
    },
    wsHandler: (socket, req) => hub.accept(socket as unknown as WsSocket, req),
  });
}
