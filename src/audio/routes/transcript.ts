import type { FastifyInstance } from 'fastify';
import { clientGone } from '../../platform/http/client-gone.js';
import type { AudioService } from '../service.js';
import { readUpload } from '../upload.js';
import { SseWriter } from '../../platform/http/sse.js';
import { ENGINE_HEADER, ENGINE_HEADER_DOC, sendAudioEvents } from './sse.js';
import { UPLOAD_FORMATS, MAX_PROMPT } from '../service.js';

/**
 * The multipart/form-data fields, for the OpenAPI document only: the body is read as a stream (../upload.ts) and
 * every field checked by the service (prepareTranscription), which names the values a model allows.
 */
function fieldsOf(task: 'transcribe' | 'translate') {
  const properties: Record<string, unknown> = {
    file: {
      type: 'string',
      format: 'binary',
      description: `The audio file (at most 25 MiB, else 413), with a file name: ${UPLOAD_FORMATS.join(', ')}.`,
    },
    model: { type: 'string', description: 'whisper-1, gpt-4o-transcribe, gpt-4o-mini-transcribe (transcriptions only), or a configured transcription model' },
  };
  if (task === 'transcribe') properties.language = { type: 'string', description: 'The language of the audio, ISO-639-1 (e.g. en, de, fr); detected when left out.' };
  properties.prompt = { type: 'string', maxLength: MAX_PROMPT, description: `Text to guide the recognizer (at most ${MAX_PROMPT} characters).` };
  properties.response_format = {
    type: 'string',
    enum: ['json', 'text', 'srt', 'verbose_json', 'vtt'],
    default: 'json',
    description: 'json (default), text, srt, verbose_json or vtt; gpt-4o-transcribe and gpt-4o-mini-transcribe: json or text only.',
  };
  properties.temperature = { type: 'number', minimum: 0, maximum: 1, default: 0, description: 'Sampling temperature, 0 to 1 (sent as a string in the form).' };
  if (task === 'transcribe') {
    properties['timestamp_granularities[]'] = {
      type: 'array',
      items: { type: 'string', enum: ['word', 'segment'] },
      description: 'word and/or segment (default segment), only with response_format verbose_json; sent as repeated timestamp_granularities[] fields.',
    };
    properties.stream = {
      type: 'boolean',
      default: false,
      description:
        'true: the answer is Server-Sent Events (transcript.text.delta, then transcript.text.done with usage) as the audio is recognized; ' +
        'response_format json or text. Ignored on whisper-1, as on OpenAI.',
    };
  }
  return { type: 'object', required: ['file', 'model'], properties };
}

/** One event of a streamed transcription, for the OpenAPI document. */
const TRANSCRIPT_EVENT = {
  oneOf: [
    {
      type: 'object',
      title: 'TranscriptionTextDeltaEvent',
      required: ['type', 'delta'],
      properties: { type: { type: 'string', enum: ['transcript.text.delta'] }, delta: { type: 'string', description: 'the next text recognized' } },
    },
    {
      type: 'object',
      title: 'TranscriptionTextDoneEvent',
      required: ['type', 'text', 'usage'],
      properties: {
        type: { type: 'string', enum: ['transcript.text.done'] },
        text: { type: 'string', description: 'the whole text: the concatenation of the deltas' },
        usage: { type: 'object', properties: { type: { type: 'string', enum: ['duration'] }, seconds: { type: 'number' } } },
      },
    },
  ],
};

/**
 * The 200 answer of /audio/transcriptions and /audio/translations, for the OpenAPI document only: the body is sent
 * as built (the transcript already rendered as text), never serialized from this.
 */
const TRANSCRIPT_ANSWER = {
  description:
    'json: {text, usage}; verbose_json: {task, language, duration, text, segments[], words[] (when asked), usage}; text, srt and vtt: the transcript as text. ' +
    'The x-portico-engine header names the engine that recognized it (whisper, pocketsphinx, or the upstream provider).',
  headers: ENGINE_HEADER_DOC,
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

/** POST /audio/transcriptions or /audio/translations (multipart/form-data, parsed as a stream: ../upload.ts). */
export function transcriptRoute(app: FastifyInstance, svc: AudioService, task: 'transcribe' | 'translate', path: string, summary: string) {
  app.post(
    path,
    {
      config: { scope: 'audio' },
      schema: {
        tags: ['Audio'],
        summary,
        consumes: ['multipart/form-data'],
        body: fieldsOf(task),
        response: {
          200:
            task === 'transcribe'
              ? {
                  ...TRANSCRIPT_ANSWER,
                  description: `${TRANSCRIPT_ANSWER.description} With stream=true (not whisper-1): Server-Sent Events (\`data: <json>\` lines), transcript.text.delta then transcript.text.done.`,
                  content: { ...TRANSCRIPT_ANSWER.content, 'text/event-stream': { schema: TRANSCRIPT_EVENT } },
                }
              : TRANSCRIPT_ANSWER,
        },
      },
      // the body schema documents the form; the form is read as a stream and checked field by field (../upload.ts,
      // the service), never validated as a parsed body
      validatorCompiler: () => () => true,
    },
    async (req, reply) => {
      const { fields, file } = await readUpload(req);
      const p = svc.prepareTranscription(task, fields, file, req.apiKey!);
      if (p.stream) {
        const sse = new SseWriter(req, reply);
        await sendAudioEvents(req, reply, sse, svc.transcribeEvents(p, req.apiKey!, req.id, sse.closed, req.facts), () => p.engine);
        return reply;
      }
      const gone = clientGone(reply);
      // the engine that served it (or that refused it, once one was chosen)
      const named = () => p.engine && reply.header(ENGINE_HEADER, p.engine);
      try {
        const out = await svc.transcribe(p, req.apiKey!, req.id, gone.signal, req.facts);
        named();
        reply.header('content-type', out.contentType);
        return reply.send(typeof out.body === 'string' ? out.body : JSON.stringify(out.body));
      } catch (e) {
        named();
        throw e;
      } finally {
        gone.release();
      }
    },
  );
}
