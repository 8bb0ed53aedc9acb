import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import type { RealtimeSecrets } from '../secrets.js';

const Body = Type.Object(
  {
    expires_after: Type.Optional(
      Type.Object(
        {
          anchor: Type.Optional(Type.Literal('created_at')),
          seconds: Type.Optional(Type.Integer({ minimum: 10, maximum: 7200, description: 'how long the secret opens sessions (default 600)' })),
        },
        { additionalProperties: false },
      ),
    ),
    session: Type.Optional(Type.Record(Type.String(), Type.Unknown(), { description: 'the session configuration (type realtime or transcription), as session.update takes it' })),
  },
  { additionalProperties: false },
);

/** POST /realtime/client_secrets: a short-lived secret a browser opens a realtime session with. */
export default function (app: FastifyInstance, secrets: RealtimeSecrets) {
  app.post(
    '/realtime/client_secrets',
    {
      config: { scope: 'realtime' },
      schema: {
        tags: ['Realtime'],
        summary: 'Create a client secret for a browser to open a realtime session with',
        description:
          "As OpenAI's: the secret (`ek_...`) opens one or more sessions until it expires, configured as `session` says, on behalf of the key that made it; a browser gives it as the `openai-insecure-api-key.<secret>` subprotocol. It stops working when it expires or when its key is revoked, disabled or deleted. A client secret cannot mint another.",
        body: Body,
        response: {
          200: Type.Object({
            value: Type.String(),
            expires_at: Type.Integer(),
            session: Type.Record(Type.String(), Type.Unknown()),
          }),
        },
      },
    },
    async (req) => secrets.create(req, req.body as { expires_after?: { seconds?: number }; session?: Record<string, unknown> }),
  );
}
