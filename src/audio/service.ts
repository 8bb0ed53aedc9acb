/**
 * The audio service: validates requests, runs the engines, shapes answers and writes the usage ledger.
 * HTTP lives in ./module.ts; engines in src/engines (factories in ./engines.ts); codecs in ./codec.
 *
 * Speech: `prepareSpeech` validates (every error before any audio), `speech` yields the encoded bytes of one
 * response (one encoder per response). The usage record (characters) is written when synthesis ends: before
 * the last byte is released when it completes; when the client goes away after audio started, right after
 * (the engine did that work).
 *
 * Transcription / translation: `prepareTranscription` validates the fields, `transcribe` decodes the upload
 * to 16 kHz (engines that need PCM), runs the engine and formats the answer; one usage record (audio seconds).
 */
import { setMaxListeners } from 'node:events';
import type { FastifyBaseLogger } from 'fastify';
import {
  EngineError,
  type AudioUpload,
  type SpeechEngine,
  type SpeechQuality,
  type TranscribeRequest,
  type Transcript,
  type TranscriptionEngine,
  type Voice,
} from '../engines/types.js';
import type { AudioEngines } from './engines.js';
import { deploymentName, upstreamName, type ModelSpec } from '../models/spec.js';
import type { ModelRegistry } from '../models/registry.js';
import { fromEngineError } from '../api/engine-errors.js';
import { AppError, type ErrorCode } from '../platform/errors.js';
import { codePoints } from '../platform/code-points.js';
import { resolveEngine, resolveModel, type Metering } from '../api/metering.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { RequestFacts } from '../platform/ops/facts.js';
import type { MeteredUnit } from '../platform/module.js';
import { AudioDecodeError, SPEECH_FORMATS, contentTypeFor, decodeAudio, encodeSpeech, isSpeechFormat, type SpeechFormat } from '../codec/index.js';
import { OPENAI_VOICES, planSpeech, type VoiceRun } from './voices.js';
import { LANGUAGE_NAMES } from '../engines/shared/languages.js';
import { ALL_RESPONSE_FORMATS, formatsFor, isEmbeddedSpeech, speechQualityOf, translates } from './models.js';
import { speechSentWhole } from './models.js';
import type { Ticket } from './scheduler.js';
import { joinTranscripts, pieces, PIECE_RATE } from './pieces.js';
import { formatTranscript, usageSeconds, type FormattedBody, type Granularity, type ResponseFormat } from './transcript-format.js';
import { OrderedText, type SpeechEvent, type TranscriptEvent } from './stream.js';
import { AsyncChannel } from '../platform/async-channel.js';
import { PROVIDERS } from '../engines/providers.js';

export const MAX_SPEECH_INPUT = 4096;
/** a transcription's or translation's prompt: at most this many characters */
export const MAX_PROMPT = 4096;
export const MIN_SPEED = 0.25;
export const MAX_SPEED = 4;
/** 25 MiB, as OpenAI */
export const MAX_UPLOAD_BYTES = 25 * 1024 * 1024;
/** shortest audio transcribed (OpenAI: 0.1 s) */
export const MIN_AUDIO_SECONDS = 0.1;
/** longest audio decoded (25 MiB of compressed audio stays well under this) */
/**
 * Longest audio accepted. Decoded audio is held in memory (16 kHz float: ~230 MB per hour) and a very low
 * bitrate file packs hours into the 25 MiB upload limit, so the cap is on duration, not size.
 */
export const MAX_AUDIO_SECONDS = 3600;
export const UPLOAD_FORMATS = ['flac', 'm4a', 'mp3', 'mp4', 'mpeg', 'mpga', 'oga', 'ogg', 'wav', 'webm'];
export const INVALID_FILE_MESSAGE = `Invalid file format. Supported formats: ${JSON.stringify(UPLOAD_FORMATS).replace(/"/g, "'").replace(/,/g, ', ')}`;

const bad = (message: string, param: string | null = null, code: ErrorCode = 'validation_error') => new AppError(code, message, param);

/** the usage operations of the audio API (declared by the module) */
export const AUDIO_OPERATIONS = { speech: 'speech', transcription: 'transcription', translation: 'translation' } as const;

/**
 * What the audio API charges besides tokens: speech per character of its input, transcriptions and translations
 * per second of audio (the model file's `pricing.per_character`, `pricing.per_audio_second`).
 */
export const AUDIO_UNITS: readonly MeteredUnit[] = [
  { unit: 'characters', price: 'per_character', on: ['speech'] },
  { unit: 'audio_seconds', price: 'per_audio_second', on: ['transcription'] },
];

/** An engine failure -> the error a client sees (codes of the one table in src/platform/errors.ts). */
export function toClientError(e: unknown): AppError {
  if (e instanceof AudioDecodeError) return new AppError('invalid_file_format', INVALID_FILE_MESSAGE, 'file');
  if (e instanceof EngineError && e.code === 'invalid_voice') return new AppError('validation_error', e.message, 'voice');
  if (e instanceof EngineError && e.code === 'unsupported_language') return new AppError('unsupported_language', e.message, 'language');
  return fromEngineError(e, 'the audio engine');
}

export interface AudioServiceDeps {
  models: ModelRegistry;
  engines: AudioEngines;
  /** prices and records usage (src/api/metering.ts) */
  metering: Metering;
  log?: FastifyBaseLogger;
}

export interface PreparedSpeech {
  spec: ModelSpec;
  input: string;
  characters: number;
  voice: string;
  format: SpeechFormat;
  speed: number;
  quality: SpeechQuality;
  /** `sse`: the audio as speech.audio.delta events (./stream.ts); `audio`: the bytes themselves */
  streamFormat: 'audio' | 'sse';
  /** the engine that speaks it, as /v1/models names engines (the x-portico-engine header) */
  engine: string;
}

export interface PreparedTranscription {
  task: 'transcribe' | 'translate';
  spec: ModelSpec;
  file: AudioUpload;
  format: ResponseFormat;
  granularities: Granularity[];
  language?: string;
  prompt?: string;
  temperature: number;
  /** stream=true on a model that streams: transcript.text.delta / .done events (./stream.ts) */
  stream: boolean;
  /** the engine that served it (the x-portico-engine header), set by the service once it is chosen */
  engine?: string;
}

/** The multipart fields of /audio/transcriptions and /audio/translations (the file part is apart). */
const TRANSCRIPTION_FIELDS = new Set(['file', 'model', 'language', 'prompt', 'response_format', 'temperature', 'timestamp_granularities[]', 'timestamp_granularities', 'stream']);
/** OpenAI's fields that this server does not implement. */
const UNSUPPORTED_TRANSCRIPTION_FIELDS = new Set(['include[]', 'include', 'chunking_strategy', 'known_speaker_names[]', 'known_speaker_references[]']);

/** Multipart fields as received: every value of each name, in order. */
export type FieldMap = Record<string, string[]>;

function one(fields: FieldMap, name: string): string | undefined {
  const v = fields[name];
  if (!v || v.length === 0) return undefined;
  if (v.length > 1) throw bad(`'${name}' was given ${v.length} times; give it once.`, name);
  return v[0];
}

/** A transcription under way: the audio's length once known, and whether its usage is recorded. */
interface RecognitionRun {
  duration?: number;
  charged: boolean;
}

/**
 * The engines that speak a text on the embedded voices, as /v1/models names them (`flite`, `espeak-ng`), in the
 * order they speak; several (a voice of one and a sentence in another script) are a list: `flite, espeak-ng`.
 */
export function speechEngineNames(runs: readonly VoiceRun[], voiceModel?: string): string {
  const names: string[] = [];
  for (const r of runs) {
    // a neural voice model speaks the runs in the voice's own language (`language` unset); other scripts stay embedded
    const name = voiceModel && r.language === undefined ? voiceModel : (PROVIDERS.get(r.engine)?.builtin?.voices?.engine ?? r.engine);
    if (!names.includes(name)) names.push(name);
  }
  return names.join(', ');
}

export function voicesOf(spec: ModelSpec): readonly string[] {
  // `voices` is a model-file key of the providers that forward speech (checked against the provider's options)
  return spec.voices ? [...OPENAI_VOICES, ...spec.voices] : OPENAI_VOICES;
}

export class AudioService {
  constructor(private readonly d: AudioServiceDeps) {}

  // ------------------------------------------------------------------ speech

  prepareSpeech(body: unknown, key: KeyPrincipal): PreparedSpeech {
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw bad('The request body must be a JSON object with model, input and voice.');
    const b = body as Record<string, unknown>;
    if (b.model === undefined || b.model === null || b.model === '') throw bad("Missing required parameter: 'model'.", 'model');
    if (typeof b.model !== 'string') throw bad("'model' must be a string.", 'model');
    const spec = resolveModel(this.d.models, b.model, 'speech', key);
    if (b.input === undefined || b.input === null) throw bad("Missing required parameter: 'input'.", 'input');
    if (typeof b.input !== 'string') throw bad("'input' must be a string.", 'input');
    const characters = codePoints(b.input);
    if (characters === 0 || b.input.trim() === '') throw bad("'input' must not be empty.", 'input');
    if (characters > MAX_SPEECH_INPUT) throw bad(`'input' is too long: ${characters} characters; the maximum is ${MAX_SPEECH_INPUT}.`, 'input');
    const voices = voicesOf(spec);
    if (b.voice === undefined || b.voice === null || b.voice === '') throw bad(`Missing required parameter: 'voice'. Supported voices: ${voices.join(', ')}.`, 'voice');
    if (typeof b.voice !== 'string' || !voices.includes(b.voice)) {
      throw bad(`Invalid voice ${JSON.stringify(b.voice)}. Supported voices: ${voices.join(', ')}.`, 'voice');
    }
    let format: SpeechFormat = 'mp3';
    if (b.response_format !== undefined && b.response_format !== null) {
      if (!isSpeechFormat(b.response_format)) {
        throw bad(`Invalid response_format ${JSON.stringify(b.response_format)}. Supported formats: ${SPEECH_FORMATS.join(', ')}.`, 'response_format');
      }
      format = b.response_format;
    }
    let speed = 1;
    if (b.speed !== undefined && b.speed !== null) {
      if (typeof b.speed !== 'number' || !Number.isFinite(b.speed)) throw bad(`'speed' must be a number between ${MIN_SPEED} and ${MAX_SPEED}.`, 'speed');
      if (b.speed < MIN_SPEED || b.speed > MAX_SPEED) throw bad(`'speed' must be between ${MIN_SPEED} and ${MAX_SPEED} (got ${b.speed}).`, 'speed');
      speed = b.speed;
    }
    if (b.instructions !== undefined && b.instructions !== null) {
      // accepted (gpt-4o-mini-tts takes them); the embedded engines cannot act them out
      if (typeof b.instructions !== 'string') throw bad("'instructions' must be a string.", 'instructions');
      // characters as every limit counts them (code points: an emoji is one), and the count reported is that one
      const n = codePoints(b.instructions);
      if (n > MAX_SPEECH_INPUT) throw bad(`'instructions' is too long: ${n} characters; the maximum is ${MAX_SPEECH_INPUT}.`, 'instructions');
    }
    let streamFormat: 'audio' | 'sse' = 'audio';
    if (b.stream_format !== undefined && b.stream_format !== null && b.stream_format !== 'audio') {
      if (b.stream_format !== 'sse') throw bad(`Invalid stream_format ${JSON.stringify(b.stream_format)}. Supported: audio, sse.`, 'stream_format');
      // as OpenAI: "sse is not supported for tts-1 or tts-1-hd"
      if (spec.name === 'tts-1' || spec.name === 'tts-1-hd')
        throw bad(`stream_format 'sse' is not supported for ${spec.name} (as on OpenAI); use gpt-4o-mini-tts, or stream_format 'audio'.`, 'stream_format', 'unsupported_parameter');
      streamFormat = 'sse';
    }
    const quality = speechQualityOf(spec);
    let engine: string = spec.provider;
    if (isEmbeddedSpeech(spec)) {
      // text in a script no embedded engine reads is refused now, not after part of the audio was sent
      try {
        engine = speechEngineNames(planSpeech(b.input, b.voice as Voice, quality), this.d.engines.voiceModelFor(spec)?.provider);
      } catch (e) {
        if (e instanceof EngineError && e.code === 'unsupported_language') throw new AppError('unsupported_language', e.message, 'input');
        throw e;
      }
    }
    return { spec, input: b.input, characters, voice: b.voice, format, speed, quality, streamFormat, engine };
  }

  contentType(p: PreparedSpeech): string {
    return contentTypeFor(p.format);
  }

  /** The bytes of the response, as they are encoded. Throws before the first byte for every engine error. */
  async *speech(p: PreparedSpeech, key: KeyPrincipal, requestId: string, signal: AbortSignal, facts?: RequestFacts): AsyncGenerator<Buffer> {
    if (facts) {
      facts.model = p.spec.name;
      facts.deployment = deploymentName(p.spec);
    }
    // the embedded voices are shared by every key: the request waits for its turns (a sentence each) in its key's
    // queue, and is refused now (429, 503), before any byte, when its key has too much waiting or the wait is too long
    const turns = isEmbeddedSpeech(p.spec) ? this.d.engines.speechQueue.admit(key.keyId, p.characters) : undefined;
    try {
      yield* this.speak(p, key, requestId, signal, turns, facts);
    } finally {
      turns?.close();
    }
  }

  /**
   * Speech as events (stream_format "sse"): each encoded chunk of the one audio file as a `speech.audio.delta`
   * (base64), then `speech.audio.done` with the usage. The chunks are those of `speech` (the first one after the
   * first sentence is synthesized; every failure before it thrown before any event), so the decoded deltas, put
   * together, are one valid file of the response_format.
   */
  async *speechEvents(p: PreparedSpeech, key: KeyPrincipal, requestId: string, signal: AbortSignal, facts?: RequestFacts): AsyncGenerator<SpeechEvent> {
    for await (const bytes of this.speech(p, key, requestId, signal, facts)) yield { type: 'speech.audio.delta', audio: bytes.toString('base64') };
    if (signal.aborted) return;
    yield { type: 'speech.audio.done', usage: { input_tokens: 0, output_tokens: 0, total_tokens: 0, characters: p.characters } };
  }

  private async *speak(p: PreparedSpeech, key: KeyPrincipal, requestId: string, signal: AbortSignal, turns: Ticket | undefined, facts?: RequestFacts): AsyncGenerator<Buffer> {
    const engine: SpeechEngine = await resolveEngine(() => this.d.engines.speech(p.spec), facts, toClientError);
    facts?.engineStarted();
    const pcm = engine.synthesize({ text: p.input, voice: p.voice, speed: p.speed, quality: p.quality, turns, signal });
    let started = false;
    let recorded = false;
    const record = async () => {
      recorded = true;
      await this.d.metering.charge({ requestId, key, spec: p.spec, operation: AUDIO_OPERATIONS.speech, used: { units: { characters: p.characters } }, facts });
    };
    // nothing is sent (so the answer can still be an error) until the engine has produced real samples:
    // container headers (wav, ogg, flac) wait for the first audio, and input with nothing speakable is a 400
    let samples = 0;
    const counted = (async function* () {
      for await (const c of pcm) {
        if (samples === 0 && c.samples.length > 0) facts?.firstOutput();
        samples += c.samples.length;
        yield c;
      }
      facts?.engineEnded();
    })();
    const held: Buffer[] = [];
    try {
      for await (const bytes of encodeSpeech(counted, p.format, signal, { whole: speechSentWhole(p.format, p.input, p.quality) })) {
        if (samples === 0) {
          held.push(bytes);
          continue;
        }
        started = true;
        yield held.length ? Buffer.concat([...held.splice(0), bytes]) : bytes;
      }
      if (signal.aborted) return;
      if (samples === 0) throw bad('The input contains nothing the voice can speak (no letters or digits it can read).', 'input');
      if (held.length) {
        started = true;
        yield Buffer.concat(held.splice(0));
      }
      await record();
    } catch (e) {
      if (signal.aborted) return;
      facts?.failed(e);
      throw toClientError(e);
    } finally {
      if (started && !recorded) {
        record().catch((e) => this.d.log?.error({ err: e }, 'speech usage record failed'));
      }
    }
  }

  // ------------------------------------------------------------------ transcription / translation

  prepareTranscription(task: 'transcribe' | 'translate', fields: FieldMap, file: AudioUpload | undefined, key: KeyPrincipal): PreparedTranscription {
    // the one validation policy (docs/api.md): an unknown field is refused, naming it; OpenAI's own fields this
    // server does not implement are refused as unsupported
    for (const name of Object.keys(fields)) {
      if (TRANSCRIPTION_FIELDS.has(name)) continue;
      if (UNSUPPORTED_TRANSCRIPTION_FIELDS.has(name))
        throw bad(`'${name.replace(/\[\]$/, '')}' is not supported by this server.`, name.replace(/\[\]$/, ''), 'unsupported_parameter');
      throw new AppError('validation_error', `Unknown parameter: '${name}'.`, name, { localized: { zh: `未知参数：'${name}'。` }, detail: 'unknown_parameter' });
    }
    const model = one(fields, 'model');
    if (!file) {
      if (fields.file) throw bad("'file' must be an uploaded file (a multipart part with a filename), not a text field.", 'file');
      throw bad("Missing required parameter: 'file'.", 'file');
    }
    if (model === undefined || model === '') throw bad("Missing required parameter: 'model'.", 'model');
    const spec = resolveModel(this.d.models, model, 'transcription', key);
    if (task === 'translate' && !translates(spec.name)) {
      throw bad(`The model '${spec.name}' does not support translations. Use whisper-1 or gpt-4o-transcribe.`, 'model');
    }
    const allowed = formatsFor(spec.name);
    const rf = one(fields, 'response_format') ?? 'json';
    if (!(ALL_RESPONSE_FORMATS as readonly string[]).includes(rf)) {
      throw bad(`Invalid response_format '${rf}'. Supported formats: ${allowed.join(', ')}.`, 'response_format');
    }
    if (!(allowed as readonly string[]).includes(rf)) {
      throw bad(`response_format '${rf}' is not compatible with model '${spec.name}'. Use ${allowed.join(' or ')}.`, 'response_format');
    }
    const format = rf as ResponseFormat;
    let temperature = 0;
    const temp = one(fields, 'temperature');
    if (temp !== undefined && temp.trim() !== '') {
      const n = Number(temp);
      if (!Number.isFinite(n) || n < 0 || n > 1) throw bad(`'temperature' must be a number between 0 and 1 (got '${temp}').`, 'temperature');
      temperature = n;
    }
    let language: string | undefined;
    const lang = one(fields, 'language');
    if (lang !== undefined && lang.trim() !== '') {
      const code = lang.trim().toLowerCase();
      if (!Object.prototype.hasOwnProperty.call(LANGUAGE_NAMES, code)) {
        throw bad(`Invalid language '${lang}'. Language parameter must be specified in ISO-639-1 format (e.g. en, de, fr).`, 'language');
      }
      language = code;
    }
    const prompt = one(fields, 'prompt');
    const promptLength = prompt === undefined ? 0 : codePoints(prompt);
    if (promptLength > MAX_PROMPT) throw bad(`'prompt' is too long: ${promptLength} characters; the maximum is ${MAX_PROMPT}.`, 'prompt');
    const rawStream = one(fields, 'stream')?.trim().toLowerCase();
    if (rawStream !== undefined && rawStream !== '' && rawStream !== 'true' && rawStream !== 'false')
      throw bad(`'stream' must be true or false (got '${one(fields, 'stream')}').`, 'stream');
    // as OpenAI: translations have no stream (only false is let through), and whisper-1 ignores it
    if (rawStream === 'true' && task === 'translate')
      throw bad("Translations are not streamed (OpenAI's translations take no stream parameter); leave it out, or stream a transcription.", 'stream', 'unsupported_parameter');
    const stream = rawStream === 'true' && spec.name !== 'whisper-1';
    if (stream && format !== 'json' && format !== 'text') {
      throw bad(`A streamed transcription answers transcript.text events: response_format must be json or text (got '${format}').`, 'response_format');
    }
    // the SDK sends arrays as repeated `key[]`; plain repeated `key` and comma-separated values are accepted too
    const rawGran = [...(fields['timestamp_granularities[]'] ?? []), ...(fields['timestamp_granularities'] ?? [])]
      .flatMap((v) => v.split(','))
      .map((v) => v.trim())
      .filter((v) => v !== '');
    const granularities: Granularity[] = [];
    for (const g of rawGran) {
      if (g !== 'word' && g !== 'segment') throw bad(`Invalid timestamp_granularities value '${g}'. Supported: word, segment.`, 'timestamp_granularities');
      if (!granularities.includes(g)) granularities.push(g);
    }
    if (granularities.length > 0 && format !== 'verbose_json') {
      throw bad(`timestamp_granularities is only supported with response_format verbose_json (got '${format}').`, 'timestamp_granularities');
    }
    if (task === 'translate' && granularities.includes('word')) {
      throw bad('Word timestamps are not available for translations: verbose_json translations have segments only.', 'timestamp_granularities');
    }
    if (granularities.length === 0) granularities.push('segment');
    return { task, spec, file, format, granularities, language, prompt, temperature, stream };
  }

  async transcribe(p: PreparedTranscription, key: KeyPrincipal, requestId: string, signal: AbortSignal, facts?: RequestFacts): Promise<FormattedBody> {
    const run: RecognitionRun = { charged: false };
    const t = await this.recognize(p, key, requestId, signal, run, facts);
    return formatTranscript(t, {
      task: p.task,
      format: p.format,
      granularities: p.granularities,
      duration: run.duration!,
      temperature: p.temperature,
      language: p.task === 'translate' ? (p.language ?? t.language) : (t.language ?? p.language),
    });
  }

  /**
   * A streamed transcription (stream=true): `transcript.text.delta` events as the text is recognized (each piece
   * of long audio when it is done, in order, and finer when the engine tells its text as it goes: onText), then
   * `transcript.text.done` with the whole text and the usage. Every failure before the first delta is thrown before
   * it (an ordinary error answer). Charged once: when recognition ends, or, when the client goes away after text
   * was sent, right after (the whole audio, as a speech client that leaves is charged its whole input).
   */
  async *transcribeEvents(p: PreparedTranscription, key: KeyPrincipal, requestId: string, signal: AbortSignal, facts?: RequestFacts): AsyncGenerator<TranscriptEvent> {
    const run: RecognitionRun = { charged: false };
    const deltas = new AsyncChannel<string>();
    const recognized = this.recognize(p, key, requestId, signal, run, facts, (d) => deltas.push(d));
    recognized.then(
      () => deltas.end(),
      (e) => deltas.fail(e),
    );
    let sent = false;
    try {
      for await (const delta of deltas) {
        if (!sent) facts?.firstOutput();
        sent = true;
        yield { type: 'transcript.text.delta', delta };
      }
      const t = await recognized;
      yield { type: 'transcript.text.done', text: t.text.trim(), usage: { type: 'duration', seconds: usageSeconds(run.duration!) } };
    } finally {
      if (sent && !run.charged && run.duration !== undefined) {
        run.charged = true;
        // awaited: the route (and the request's log line) ends after it
        await this.chargeTranscription(p, key, requestId, run.duration, facts).catch((e) => this.d.log?.error({ err: e }, 'transcription usage record failed'));
      }
    }
  }

  private async chargeTranscription(p: PreparedTranscription, key: KeyPrincipal, requestId: string, duration: number, facts?: RequestFacts): Promise<void> {
    const seconds = Math.round(duration * 1000) / 1000;
    await this.d.metering.charge({
      requestId,
      key,
      spec: p.spec,
      operation: p.task === 'translate' ? AUDIO_OPERATIONS.translation : AUDIO_OPERATIONS.transcription,
      used: { units: { audio_seconds: seconds } },
      facts,
    });
  }

  /**
   * Decodes, recognizes (in turns and pieces on the embedded recognizers) and charges. `run` says the audio's
   * length as soon as it is known and whether the charge is made; `onText` gets the text in order as it is
   * recognized (./stream.ts, OrderedText).
   */
  private async recognize(
    p: PreparedTranscription,
    key: KeyPrincipal,
    requestId: string,
    signal: AbortSignal,
    run: RecognitionRun,
    facts?: RequestFacts,
    onText?: (delta: string) => void,
  ): Promise<Transcript> {
    if (facts) {
      facts.model = p.spec.name;
      facts.deployment = deploymentName(p.spec);
    }
    if (p.file.bytes.length === 0) throw new AppError('invalid_file_format', `The file is empty. ${INVALID_FILE_MESSAGE}`, 'file');
    const engine: TranscriptionEngine = await resolveEngine(() => this.d.engines.transcription(p.spec), facts, toClientError);
    p.engine = engine.kind;
    if (p.task === 'translate' && !engine.canTranslate && p.language && p.language !== 'en') {
      throw new AppError(
        'unsupported_language',
        `The model '${p.spec.name}' runs on ${engine.kind}, which is English-only and cannot translate ${LANGUAGE_NAMES[p.language]} speech. Configure a whisper model or an openai-compatible upstream for translations.`,
        'language',
      );
    }
    if (p.language && engine.languages && !engine.languages.includes(p.language)) {
      throw new AppError(
        'unsupported_language',
        `The model '${p.spec.name}' runs on ${engine.kind}, which recognizes ${engine.languages.map((c) => `${LANGUAGE_NAMES[c] ?? c} (${c})`).join(', ')} only; language '${p.language}' is not supported.`,
        'language',
      );
    }
    let duration: number | undefined;
    let pcm16k: Float32Array | undefined;
    // an embedded recognizer runs here, shared by every key: the request takes its turns (pieces of its audio) in
    // its key's queue; refused before its upload is even decoded when that queue is full or the wait too long
    const queue = engine.needsPcm ? this.d.engines.transcriptionQueue : undefined;
    const lane = this.d.engines.laneOf(engine);
    if (engine.needsPcm) {
      queue?.check(key.keyId, 0, lane);
      try {
        const d = await decodeAudio(p.file.bytes, { signal, maxSeconds: MAX_AUDIO_SECONDS });
        pcm16k = d.pcm;
        duration = d.duration;
      } catch (e) {
        if (signal.aborted) throw e;
        if (e instanceof AudioDecodeError && /too long/.test(e.message)) throw bad(`The audio is too long (over ${MAX_AUDIO_SECONDS / 60} minutes).`, 'file');
        throw toClientError(e);
      }
      if (duration < MIN_AUDIO_SECONDS) {
        throw new AppError('audio_too_short', `Audio file is too short. Minimum audio length is ${MIN_AUDIO_SECONDS} seconds.`, 'file');
      }
      run.duration = duration;
    }
    const request: TranscribeRequest = {
      model: upstreamName(p.spec),
      file: p.file,
      pcm16k,
      task: p.task,
      // pocketsphinx and whisper take the language; a translation's source language is detected
      language: p.task === 'translate' && engine.canTranslate ? undefined : p.language,
      prompt: p.prompt,
      temperature: p.temperature,
      wordTimestamps: p.task === 'transcribe' && p.format === 'verbose_json' && p.granularities.includes('word'),
      signal,
    };
    const turns = queue && pcm16k && duration !== undefined ? queue.admit(key.keyId, duration, { lane }) : undefined;
    let t: Transcript;
    facts?.engineStarted();
    try {
      if (turns && pcm16k) t = await this.recognizeInTurns(engine, request, pcm16k, turns, onText);
      else if (onText) {
        // one piece (a forwarded model: its text comes when the upstream answers)
        const text = new OrderedText(1, onText);
        t = await engine.transcribe({ ...request, onText: (d) => text.delta(0, d) });
        text.done(0, t.text);
      } else t = await engine.transcribe(request);
      if (facts) {
        facts.firstOutput();
        facts.engineEnded();
      }
    } catch (e) {
      if (!signal.aborted) facts?.failed(e);
      throw toClientError(e);
    } finally {
      turns?.close();
    }
    if (duration === undefined) {
      duration = t.duration;
      if (duration === undefined) {
        // an upstream that does not report the length: measure it (for usage), best effort
        duration = await decodeAudio(p.file.bytes, { signal, maxSeconds: MAX_AUDIO_SECONDS }).then(
          (d) => d.duration,
          () => 0,
        );
      }
    }
    run.duration = duration;
    if (run.charged) return t;
    run.charged = true;
    await this.chargeTranscription(p, key, requestId, duration, facts);
    return t;
  }

  /**
   * The audio in pieces (./pieces.ts), each a turn of its own: the pieces of one request run side by side when
   * slots are free, and otherwise wait their turn with every other key's. One piece failing stops the others.
   */
  private async recognizeInTurns(engine: TranscriptionEngine, request: TranscribeRequest, pcm: Float32Array, turns: Ticket, onText?: (delta: string) => void): Promise<Transcript> {
    const stop = new AbortController();
    const signal = request.signal ? AbortSignal.any([request.signal, stop.signal]) : stop.signal;
    // a piece shorter than the engine's window would cost as much as a whole window
    const cuts = pieces(pcm, Math.max(this.d.engines.pieceSeconds, engine.window ?? 0));
    // a streamed transcription: each piece's text goes out in the order of the audio, as soon as the pieces
    // before it are done (and as the engine tells it, for the piece at the head)
    const text = onText ? new OrderedText(cuts.length, onText) : undefined;
    // every piece waits on this signal (an hour in 30-s pieces: 120 listeners, none of them a leak)
    setMaxListeners(cuts.length + 10, signal);
    const parts = cuts.map(async (c, i) => {
      try {
        const turn = await turns.step((c.end - c.start) / PIECE_RATE, signal);
        let completed = false;
        try {
          const transcript = await engine.transcribe({
            ...request,
            pcm16k: pcm.subarray(c.start, c.end),
            signal,
            ...(text ? { onText: (d: string) => text.delta(i, d) } : {}),
          });
          completed = true;
          text?.done(i, transcript.text);
          return { offset: c.start / PIECE_RATE, transcript };
        } finally {
          turn.done(completed);
        }
      } catch (e) {
        stop.abort(e);
        throw e;
      }
    });
    return joinTranscripts(await Promise.all(parts), pcm.length / PIECE_RATE);
  }
}
