import { Readable } from 'node:stream';
import { once } from 'node:events';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { clientGone } from '../../platform/http/client-gone.js';
import { SPEECH_FORMATS } from '../../codec/index.js';
import type { AudioService } from '../service.js';
import { OPENAI_VOICES } from '../voices.js';
import { SseWriter } from '../../platform/http/sse.js';
import { ENGINE_HEADER, ENGINE_HEADER_DOC, sendAudioEvents } from './sse.js';

/** One event of a speech stream (stream_format sse), for the OpenAPI document. */
const SPEECH_EVENT = {
  oneOf: [
    {
      type: 'object',
      title: 'SpeechAudioDeltaEvent',
      required: ['type', 'audio'],
      properties: { type: { type: 'string', enum: ['speech.audio.delta'] }, audio: { type: 'string', format: 'byte', description: 'base64 of the next bytes of the audio file' } },
    },
    {
      type: 'object',
      title: 'SpeechAudioDoneEvent',
      required: ['type', 'usage'],
      properties: {
        type: { type: 'string', enum: ['speech.audio.done'] },
        usage: {
          type: 'object',
          description: 'input_tokens, output_tokens, total_tokens are 0 (speech is billed per character); characters: the characters billed',
          properties: { input_tokens: { type: 'integer' }, output_tokens: { type: 'integer' }, total_tokens: { type: 'integer' }, characters: { type: 'integer' } },
        },
      },
    },
  ],
};

/**
 * The speech body. Types, ranges and unknown fields are checked here; what depends on the model (its voices,
 * whether it exists) by the service, which names the allowed values.
 */
const SpeechBody = Type.Object(
  {
    model: Type.String({ minLength: 1, description: 'tts-1, tts-1-hd, gpt-4o-mini-tts or a configured speech model' }),
    input: Type.String({ description: 'at most 4096 characters' }),
    voice: Type.String({ minLength: 1, description: `${OPENAI_VOICES.join(', ')} (and a forwarding model's own voices)` }),
    response_format: Type.Optional(Type.Union([...SPEECH_FORMATS.map((f) => Type.Literal(f)), Type.Null()], { description: 'default mp3' })),
    speed: Type.Optional(Type.Union([Type.Number({ minimum: 0.25, maximum: 4 }), Type.Null()], { description: '0.25 to 4, default 1' })),
    instructions: Type.Optional(Type.Union([Type.String({ maxLength: 4096 }), Type.Null()])),
    stream_format: Type.Optional(
      Type.Union([Type.Literal('audio'), Type.Literal('sse'), Type.Null()], {
        description:
          'audio (default: the audio itself streams) or sse (speech.audio.delta events with base64 audio, then speech.audio.done; not for tts-1 and tts-1-hd, as on OpenAI)',
      }),
    ),
  },
  { additionalProperties: false },
);

/** The 200 answer, for the OpenAPI document only: the body is the audio as it is encoded, never serialized from this. */
const SPEECH_ANSWER = {
  description:
    'The audio, streamed as it is synthesized, in the response_format asked for (mp3 by default); with stream_format sse, ' +
    'Server-Sent Events (`data: <json>` lines): speech.audio.delta {audio: base64 of the next bytes of the file}, then speech.audio.done {usage}. ' +
    'The x-portico-engine header names the engine that speaks (flite, espeak-ng, or the upstream provider).',
  headers: ENGINE_HEADER_DOC,
  content: {
    ...Object.fromEntries(['audio/mpeg', 'audio/ogg', 'audio/aac', 'audio/flac', 'audio/wav', 'audio/pcm'].map((t) => [t, { schema: { type: 'string', format: 'binary' } }])),
    'text/event-stream': { schema: SPEECH_EVENT },
  },
};

/** POST /audio/speech: JSON in, the audio streamed out (chunked transfer encoding) as it is synthesized. */
export default function (app: FastifyInstance, svc: AudioService) {
  app.post(
    '/audio/speech',
    {
      config: { scope: 'audio' },
      schema: {
        tags: ['Audio'],
        summary: 'Text to speech: the audio streams as it is synthesized',
        body: SpeechBody,
        response: { 200: SPEECH_ANSWER },
      },
    },
    async (req, reply) => {
      const p = svc.prepareSpeech(req.body, req.apiKey!);
      if (p.streamFormat === 'sse') {
        const sse = new SseWriter(req, reply);
        const events = svc.speechEvents(p, req.apiKey!, req.id, sse.closed, req.facts);
        await sendAudioEvents(req, reply, sse, events, () => p.engine);
        return reply;
      }
      // set now: an error answer before the first byte names the engine too
      reply.header(ENGINE_HEADER, p.engine);
      const gone = clientGone(reply);
      const it = svc.speech(p, req.apiKey!, req.id, gone.signal, req.facts);
      let first: IteratorResult<Buffer>;
      try {
        // nothing is sent before the first audio: every failure until then is an ordinary error answer
        first = await it.next();
      } catch (e) {
        gone.release();
        throw e;
      }
      async function* body(): AsyncGenerator<Buffer> {
        try {
          if (!first.done) yield first.value;
          yield* it;
        } finally {
          gone.release();
        }
      }
      reply.header('content-type', svc.contentType(p));
      reply.header('cache-control', 'no-store');
      const stream = Readable.from(body(), { objectMode: false, highWaterMark: 64 * 1024 });
      // the body's generator charges a client that left in its end (src/audio/service.ts); the stream closes
      // after it, and a request whose client left is written then (its facts wait for it)
      req.facts.keep(once(stream, 'close'));
      return reply.send(stream);
    },
  );
}
