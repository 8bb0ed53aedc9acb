/**
 * The audio API under {base_url}: POST /audio/speech (JSON in, audio streamed out with chunked transfer
 * encoding), POST /audio/transcriptions and /audio/translations (multipart/form-data, parsed as a stream,
 * 25 MiB file limit -> 413). The multipart parser is registered in this plugin's scope only. Inference-key
 * authentication, the `audio` route scope and the OpenAI error shape come from the /v1 scope (src/app.ts).
 */
import { Readable } from 'node:stream';
import { once } from 'node:events';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import multipart from '@fastify/multipart';
import { Type } from 'typebox';
import type { FeatureModule } from '../platform/module.js';
import type { AudioUpload } from '../engines/types.js';
import { AppError } from '../platform/errors.js';
import { clientGone } from '../platform/http/client-gone.js';
import { AUDIO_OPERATIONS, AUDIO_UNITS, AudioService, MAX_UPLOAD_BYTES, type AudioServiceDeps, type FieldMap } from './service.js';
import { SPEECH_FORMATS } from '../codec/index.js';
import { OPENAI_VOICES } from './voices.js';

/** multipart overhead allowed on top of the file before a request is refused from its Content-Length alone */
const MULTIPART_SLACK = 1024 * 1024;
const MAX_FIELDS = 64;
const MAX_FIELD_BYTES = 64 * 1024;

/** the whole body, whatever its framing (Content-Length or chunked) and however many parts it has */
const MAX_BODY_BYTES = MAX_UPLOAD_BYTES + MULTIPART_SLACK;

function tooLarge(read?: number): AppError {
  return new AppError(
    'payload_too_large',
    `Maximum content size limit (${MAX_UPLOAD_BYTES}) exceeded${read ? ` (${read} bytes read)` : ''}: the audio file must be at most 25 MiB.`,
    'file',
  );
}

/** Reads the multipart body as a stream: text fields into a map, the `file` part into memory (bounded). */
async function readUpload(req: FastifyRequest): Promise<{ fields: FieldMap; file?: AudioUpload }> {
  if (!req.isMultipart()) {
    throw new AppError('validation_error', `Send the audio as multipart/form-data with a 'file' part (got Content-Type ${req.headers['content-type'] ?? 'none'}).`, 'file');
  }
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > MAX_UPLOAD_BYTES + MULTIPART_SLACK) throw tooLarge(declared);
  const fields: FieldMap = {};
  let file: AudioUpload | undefined;
  let nFields = 0;
  // the body is counted as it arrives: a chunked body (no Content-Length) or one of many parts meets the same
  // limit while it streams, and what is over is never read (issue 9, §2)
  let received = 0;
  let over!: (e: AppError) => void;
  const overLimit = new Promise<never>((_, reject) => (over = reject));
  overLimit.catch(() => {});
  const count = (c: Buffer) => {
    received += c.length;
    if (received > MAX_BODY_BYTES) {
      req.raw.off('data', count);
      // nothing more is parsed or kept: the rest is read and dropped while the 413 goes out (closing a socket
      // with data unread would reset it, and the client would never see the answer), then the connection is
      // cut 2 s later, whatever the client still sends
      req.raw.unpipe();
      req.raw.resume();
      const socket = req.raw.socket;
      setTimeout(() => socket.destroy(), 2000).unref();
      over(tooLarge(received));
    }
  };
  req.raw.on('data', count);
  const read = async () => {
    for await (const part of req.parts({ limits: { fileSize: MAX_UPLOAD_BYTES, files: 4, fields: MAX_FIELDS, fieldSize: MAX_FIELD_BYTES, parts: MAX_FIELDS + 4 } })) {
      if (part.type === 'file') {
        if (part.fieldname === 'file' && !file) {
          const bytes = await part.toBuffer();
          file = { bytes, filename: part.filename || 'audio', mimeType: part.mimetype };
        } else {
          // another file part is not kept: read past it without holding it
          part.file.resume();
          await new Promise<void>((r, j) => (part.file.once('end', r), part.file.once('error', j)));
        }
        continue;
      }
      if (part.fieldnameTruncated || part.valueTruncated)
        throw new AppError('validation_error', `The field '${part.fieldname}' is too large (at most ${MAX_FIELD_BYTES} bytes).`, part.fieldname);
      if (++nFields > MAX_FIELDS) throw new AppError('validation_error', `Too many fields (at most ${MAX_FIELDS}).`);
      (fields[part.fieldname] ??= []).push(typeof part.value === 'string' ? part.value : String(part.value));
    }
  };
  try {
    const reading = read();
    reading.catch(() => {});
    await Promise.race([reading, overLimit]);
  } catch (e) {
    if (e instanceof AppError) throw e;
    const code = (e as { code?: string }).code;
    if (code === 'FST_REQ_FILE_TOO_LARGE') throw tooLarge();
    if (code === 'FST_FILES_LIMIT') throw new AppError('validation_error', "Too many files: send one audio file in the 'file' field.", 'file');
    if (code === 'FST_FIELDS_LIMIT' || code === 'FST_PARTS_LIMIT') throw new AppError('validation_error', `Too many fields (at most ${MAX_FIELDS}).`);
    if (code === 'FST_PROTO_VIOLATION') throw new AppError('validation_error', 'A field name is not allowed.');
    throw new AppError('validation_error', `The multipart/form-data body could not be read: ${(e as Error).message}`);
  } finally {
    req.raw.off('data', count);
  }
  return { fields, file };
}

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
    stream_format: Type.Optional(Type.Union([Type.Literal('audio'), Type.Literal('sse'), Type.Null()], { description: 'audio (the audio itself streams); sse is refused' })),
  },
  { additionalProperties: false },
);

/** The audio API under {base_url}: speech, transcriptions, translations. */
/**
 * The 200 answers of the audio routes, for the OpenAPI document only: the bodies are sent as built (audio bytes,
 * or the transcript already rendered as text), never serialized from these.
 */
const SPEECH_ANSWER = {
  description: 'The audio, streamed as it is synthesized, in the response_format asked for (mp3 by default)',
  content: Object.fromEntries(['audio/mpeg', 'audio/ogg', 'audio/aac', 'audio/flac', 'audio/wav', 'audio/pcm'].map((t) => [t, { schema: { type: 'string', format: 'binary' } }])),
};
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

export function createAudioModule(deps: AudioServiceDeps): FeatureModule {
  const svc = new AudioService(deps);
  return {
    name: 'audio',
    scope: 'audio',
    operations: Object.values(AUDIO_OPERATIONS),
    units: AUDIO_UNITS,
    routes: { api: (app) => registerAudioRoutes(app, svc) },
  };
}

async function registerAudioRoutes(app: FastifyInstance, svc: AudioService) {
  await app.register(async (scope) => {
    await scope.register(multipart, { limits: { fileSize: MAX_UPLOAD_BYTES }, throwFileSizeLimit: true });

    scope.post(
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

    for (const [path, task] of [
      ['/audio/transcriptions', 'transcribe'],
      ['/audio/translations', 'translate'],
    ] as const) {
      scope.post(
        path,
        {
          config: { scope: 'audio' },
          schema: {
            tags: ['Audio'],
            summary:
              task === 'transcribe'
                ? 'Speech to text (multipart/form-data: file, model, language, prompt, response_format, temperature, timestamp_granularities[])'
                : 'Speech in any language to English text (multipart/form-data: file, model, prompt, response_format, temperature)',
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
  });
}
