import type { FastifyReply, FastifyRequest } from 'fastify';
import type { SseWriter } from '../../platform/http/sse.js';
import { openAIErrorBody, toAppError } from '../../platform/http/errors.js';

/** The header every audio answer carries: the engine that served it (the words of /v1/models' `engine`). */
export const ENGINE_HEADER = 'x-portico-engine';

/** The header in the OpenAPI document (a 200 answer's `headers`). */
export const ENGINE_HEADER_DOC = {
  [ENGINE_HEADER]: {
    type: 'string',
    description:
      'The engine that served the answer, as /v1/models names engines: whisper, pocketsphinx, flite, espeak-ng (a list when several spoke), or the provider of a forwarded model (openai-compatible).',
  },
};

/**
 * Writes the events of a streamed audio answer (transcript.text.*, speech.audio.*) as OpenAI does: `data: <json>`
 * lines, no event lines, no `[DONE]` (the `*.done` event is the last). An error before the first event is thrown
 * (the route answers it as an ordinary error, status and OpenAI error body); after it, the stream ends with an
 * event `{"type": "error", "error": {message, type, param, code}}`, which the official SDK's stream parser raises
 * as an APIError. A shutdown past its grace period stops the stream the same way (src/platform/http/sse.ts).
 *
 * `sse` is made by the route before the events, whose work stops on `sse.closed`; `engine()` names the engine
 * once the first event is there (the service has chosen it by then).
 */
export async function sendAudioEvents(
  req: FastifyRequest,
  reply: FastifyReply,
  sse: SseWriter,
  events: AsyncIterable<{ type: string }>,
  engine: () => string | undefined,
): Promise<void> {
  try {
    for await (const e of events) {
      if (!sse.isStarted) {
        const name = engine();
        // the SSE writer writes its head itself (the reply is hijacked): the header goes on the raw response
        if (name) reply.raw.setHeader(ENGINE_HEADER, name);
      }
      sse.data(e);
    }
    sse.end(false);
  } catch (err) {
    if (sse.clientLeft) return;
    const stopped = sse.stoppedWith;
    if (!sse.isStarted) {
      const name = engine();
      if (name) reply.header(ENGINE_HEADER, name);
      throw stopped ?? err;
    }
    const e = stopped ?? toAppError(err, req);
    sse.data({ type: 'error', ...openAIErrorBody(e, req.headers['accept-language']) });
    sse.end(false);
  }
}
