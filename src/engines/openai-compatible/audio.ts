/**
 * Audio engines that forward to an OpenAI-compatible upstream (speaches, whisper.cpp server, LocalAI, OpenAI):
 * - transcription / translation: the original upload, multipart/form-data, POST {baseUrl}/audio/transcriptions
 *   or /audio/translations with response_format verbose_json, mapped to a Transcript;
 * - speech: POST {baseUrl}/audio/speech with response_format pcm (raw 24 kHz s16le mono), yielded as it arrives.
 *
 * Uses global fetch / FormData / Blob (Node 20): multipart bodies are built by undici, and the few requests per
 * audio call do not need the keep-alive tuning of the text client (./http.ts).
 *
 * Upstream errors become EngineError with the upstream's message:
 * - 400, 413, 415, 422: a problem with what the client sent (undecodable file, audio too short, bad language,
 *   too large). The client can fix it, so the status passes through (422 -> 400), with the upstream's code when
 *   it is one Portico knows (audio_too_short, invalid_file_format, unsupported_language).
 * - 429: passes through as rate_limit_exceeded, so the client backs off and retries.
 * - 401, 403 (upstream_auth_failed), 404 and everything else (upstream_error): a problem between Portico and its
 *   upstream (wrong key, wrong model name, upstream down) that the client cannot fix: 502. Codes as in ./http.ts. Unreachable: 502 upstream_unavailable.
 *   No answer in time: 504 upstream_timeout. Aborted by the caller: code aborted (499).
 */
import {
  EngineError,
  type PcmChunk,
  type SpeechEngine,
  type SpeechRequest,
  type TranscribeRequest,
  type Transcript,
  type TranscriptionEngine,
  type TranscriptSegment,
  type TranscriptWord,
} from '../types.js';
import { languageCode } from '../shared/languages.js';
import { upstreamSpan } from '../../platform/ops/tracing.js';
import { redactSecrets, upstreamSecrets } from '../shared/redact.js';

// ---------------------------------------------------------------- shared HTTP bits

export interface OpenAICompatibleAudioOptions {
  /** e.g. http://localhost:8000/v1 (the part before /audio/...) */
  baseUrl: string;
  apiKey?: string;
  /** model name sent upstream; default: the request's model */
  upstreamModel?: string;
  /** transcription: the whole request; speech: until the headers, and the longest gap between chunks. Default 300 s */
  timeoutMs?: number;
}

export const DEFAULT_AUDIO_TIMEOUT_MS = 300_000;

const PASS_THROUGH_CODES = new Set(['audio_too_short', 'invalid_file_format', 'unsupported_language']);

/** The attributes of the client span of each call to this upstream (./http.ts has the same): no credentials, no path. */
function spanAttributes(baseUrl: string): Record<string, string | number> {
  const u = new URL(baseUrl);
  return { 'http.request.method': 'POST', 'server.address': u.hostname.replace(/^\[|\]$/g, ''), 'server.port': u.port ? Number(u.port) : u.protocol === 'https:' ? 443 : 80 };
}

/** The URL without its userinfo (fetch refuses URLs with credentials: they go in the Basic header instead). */
function endpoint(baseUrl: string, path: string): string {
  const u = new URL(baseUrl.replace(/\/+$/, '') + path);
  u.username = '';
  u.password = '';
  return u.toString();
}

/** Bearer with the api key; else Basic from a base_url's userinfo (as the text engine sends them); else nothing. */
function authHeaders(apiKey: string | undefined, baseUrl: string): Record<string, string> {
  if (apiKey) return { authorization: `Bearer ${apiKey}` };
  const u = new URL(baseUrl);
  if (!u.username && !u.password) return {};
  const dec = (x: string) => {
    try {
      return decodeURIComponent(x);
    } catch {
      return x;
    }
  };
  return { authorization: 'Basic ' + Buffer.from(`${dec(u.username)}:${dec(u.password)}`).toString('base64') };
}

/** The upstream's error message: OpenAI `{error:{message}}`, FastAPI `{detail}`, `{message}`, or the text. */
async function upstreamMessage(res: Response): Promise<{ message: string; code?: string }> {
  let text = '';
  try {
    text = await res.text();
  } catch {
    /* body lost */
  }
  try {
    const j = JSON.parse(text) as Record<string, unknown>;
    const err = j.error;
    if (err && typeof err === 'object') {
      const e = err as Record<string, unknown>;
      if (typeof e.message === 'string') return { message: e.message, code: typeof e.code === 'string' ? e.code : undefined };
    }
    if (typeof err === 'string') return { message: err };
    if (typeof j.detail === 'string') return { message: j.detail };
    if (j.detail !== undefined) return { message: JSON.stringify(j.detail).slice(0, 500) };
    if (typeof j.message === 'string') return { message: j.message };
  } catch {
    /* not JSON */
  }
  return { message: text.trim().slice(0, 500) || res.statusText || 'no message' };
}

/**
 * Maps an upstream HTTP error to an EngineError (see the policy at the top of this file). The message may reach
 * a client, so Portico's upstream key is cut out of it (OpenAI echoes part of a refused key), and a refusal of
 * Portico's credentials says nothing of the upstream's text.
 */
export async function upstreamError(res: Response, apiKey?: string): Promise<EngineError> {
  const raw = await upstreamMessage(res);
  const code = raw.code;
  const message = redactKey(raw.message, apiKey);
  const s = res.status;
  if (s === 400 || s === 413 || s === 415 || s === 422) {
    const c = code && PASS_THROUGH_CODES.has(code) ? code : s === 413 ? 'payload_too_large' : s === 415 ? 'unsupported_media_type' : 'invalid_request';
    return new EngineError(message, c, s === 422 ? 400 : s, { upstreamStatus: s });
  }
  if (s === 429) return new EngineError(`upstream rate limit: ${message}`, 'rate_limit_exceeded', 429, { retryable: true, upstreamStatus: s });
  if (s === 401 || s === 403) {
    return new EngineError(`the upstream audio server refused Portico's credentials (HTTP ${s}); check the model's api_key_env`, 'upstream_auth_failed', 502, {
      upstreamStatus: s,
    });
  }
  return new EngineError(`upstream audio server answered ${s}: ${message}`, 'upstream_error', 502, { retryable: s >= 500, upstreamStatus: s });
}

/** The key and any long-enough piece of it (OpenAI shows its first and last characters) replaced. */
function redactKey(text: string, key?: string): string {
  if (!key) return text;
  let out = text.split(key).join('***');
  for (const part of [key.slice(0, 12), key.slice(-8)]) if (part.length >= 6) out = out.split(part).join('***');
  return out;
}

/** the redaction of a client span's failure messages: every form of the upstream's credentials cut out */
function spanRedactor(baseUrl: string, apiKey?: string): ((text: string) => string) | undefined {
  const secrets = upstreamSecrets(baseUrl, apiKey);
  return secrets.length === 0 ? undefined : (t) => redactSecrets(t, secrets);
}

function abortedError(): EngineError {
  return new EngineError('request aborted', 'aborted', 499);
}

function timeoutError(ms: number): EngineError {
  return new EngineError(`the upstream audio server did not answer within ${Math.round(ms / 1000)} s`, 'upstream_timeout', 504, { retryable: true });
}

function networkError(url: string, e: unknown): EngineError {
  const cause = (e as { cause?: { code?: string; message?: string } }).cause;
  const detail = cause?.code ?? cause?.message ?? (e as Error).message;
  return new EngineError(`the upstream audio server at ${new URL(url).origin} is unreachable (${detail})`, 'upstream_unavailable', 502, { retryable: true });
}

// ---------------------------------------------------------------- transcription

interface VerboseSegment {
  start?: unknown;
  end?: unknown;
  text?: unknown;
  tokens?: unknown;
  avg_logprob?: unknown;
  no_speech_prob?: unknown;
  compression_ratio?: unknown;
  temperature?: unknown;
}

function num(x: unknown): number | undefined {
  const n = typeof x === 'string' ? Number(x) : x;
  return typeof n === 'number' && Number.isFinite(n) ? n : undefined;
}

/** Maps an OpenAI verbose_json (or plain json `{text}`) transcription to a Transcript. */
export function verboseJsonToTranscript(body: unknown, fallbackLanguage?: string): Transcript {
  if (!body || typeof body !== 'object') throw new EngineError('the upstream audio server answered something that is not a transcription', 'upstream_error', 502);
  const b = body as Record<string, unknown>;
  if (typeof b.text !== 'string') throw new EngineError('the upstream audio server answered JSON without text', 'upstream_error', 502);
  const segments: TranscriptSegment[] = [];
  if (Array.isArray(b.segments)) {
    for (const s of b.segments as VerboseSegment[]) {
      const start = num(s?.start);
      const end = num(s?.end);
      if (start === undefined || end === undefined || typeof s.text !== 'string') continue;
      const seg: TranscriptSegment = { start, end, text: s.text.trim() };
      if (Array.isArray(s.tokens) && s.tokens.every((t) => typeof t === 'number')) seg.tokens = s.tokens as number[];
      const avg = num(s.avg_logprob);
      if (avg !== undefined) seg.avgLogprob = avg;
      const nsp = num(s.no_speech_prob);
      if (nsp !== undefined) seg.noSpeechProb = nsp;
      const cr = num(s.compression_ratio);
      if (cr !== undefined) seg.compressionRatio = cr;
      const t = num(s.temperature);
      if (t !== undefined) seg.temperature = t;
      segments.push(seg);
    }
  }
  let words: TranscriptWord[] | undefined;
  if (Array.isArray(b.words)) {
    words = [];
    for (const w of b.words as Array<Record<string, unknown>>) {
      const start = num(w?.start);
      const end = num(w?.end);
      if (start === undefined || end === undefined || typeof w.word !== 'string') continue;
      words.push({ word: w.word.trim(), start, end });
    }
  }
  const t: Transcript = {
    text: b.text.trim(),
    language: languageCode(typeof b.language === 'string' ? b.language : undefined) ?? languageCode(fallbackLanguage),
    segments,
  };
  const d = num(b.duration);
  if (d !== undefined) t.duration = d;
  if (words) t.words = words;
  return t;
}

export function createOpenAICompatibleTranscriptionEngine(opts: OpenAICompatibleAudioOptions): TranscriptionEngine {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_AUDIO_TIMEOUT_MS;
  const attributes = spanAttributes(opts.baseUrl);
  const redact = spanRedactor(opts.baseUrl, opts.apiKey);
  return {
    kind: 'openai-compatible',
    needsPcm: false,
    canTranslate: true,
    languages: undefined,
    async transcribe(req: TranscribeRequest): Promise<Transcript> {
      if (req.signal?.aborted) throw abortedError();
      const translate = req.task === 'translate';
      const url = endpoint(opts.baseUrl, translate ? '/audio/translations' : '/audio/transcriptions');
      const form = new FormData();
      const blob = new Blob([new Uint8Array(req.file.bytes.buffer, req.file.bytes.byteOffset, req.file.bytes.byteLength) as Uint8Array<ArrayBuffer>], {
        type: req.file.mimeType || 'application/octet-stream',
      });
      form.append('file', blob, req.file.filename || 'audio');
      form.append('model', opts.upstreamModel ?? req.model);
      form.append('response_format', 'verbose_json');
      if (req.prompt) form.append('prompt', req.prompt);
      if (req.temperature !== undefined) form.append('temperature', String(req.temperature));
      if (!translate) {
        if (req.language) form.append('language', req.language);
        // the SDK's array form; segments stay in the answer only when asked for alongside words
        if (req.wordTimestamps) {
          form.append('timestamp_granularities[]', 'word');
          form.append('timestamp_granularities[]', 'segment');
        }
      }
      const timeout = AbortSignal.timeout(timeoutMs);
      const signal = req.signal ? AbortSignal.any([req.signal, timeout]) : timeout;
      let res: Response;
      let body: unknown;
      const headers: Record<string, string> = { ...authHeaders(opts.apiKey, opts.baseUrl), accept: 'application/json' };
      // a client span for the call when the request is traced; its traceparent goes upstream
      const span = upstreamSpan(translate ? 'POST /audio/translations' : 'POST /audio/transcriptions', attributes, headers, redact);
      try {
        res = await fetch(url, { method: 'POST', headers, body: form, signal });
        span?.status(res.status);
        if (!res.ok) throw await upstreamError(res, opts.apiKey);
        const ct = res.headers.get('content-type') ?? '';
        const raw = await res.text();
        if (ct.includes('json') || raw.trimStart().startsWith('{')) {
          try {
            body = JSON.parse(raw);
          } catch {
            throw new EngineError('the upstream audio server answered invalid JSON', 'upstream_error', 502);
          }
        } else {
          // a server that ignores response_format and answers text/plain
          body = { text: raw };
        }
      } catch (e) {
        const err = e instanceof EngineError ? e : req.signal?.aborted ? abortedError() : timeout.aborted ? timeoutError(timeoutMs) : networkError(url, e);
        span?.fail(err);
        throw err;
      } finally {
        span?.end();
      }
      const t = verboseJsonToTranscript(body, translate ? 'en' : req.language);
      if (translate) t.language = t.language ?? 'en';
      if (!req.wordTimestamps) delete t.words;
      return t;
    },
    async close(): Promise<void> {},
  };
}

// ---------------------------------------------------------------- speech

export interface OpenAICompatibleSpeechOptions extends OpenAICompatibleAudioOptions {
  /** voice ids the upstream knows; default the thirteen OpenAI voices */
  voices?: readonly string[];
  /** sample rate of the upstream's pcm format (OpenAI: 24000) */
  sampleRate?: number;
}

export const OPENAI_VOICES = ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'onyx', 'nova', 'sage', 'shimmer', 'verse', 'marin', 'cedar'] as const;

/**
 * Turns a stream of byte chunks of s16le PCM into Int16Array chunks, carrying an odd trailing byte over to the
 * next chunk so no sample is split or lost.
 */
export class Pcm16Assembler {
  private carry: number | undefined;
  push(bytes: Uint8Array): Int16Array | undefined {
    let offset = 0;
    const total = bytes.length + (this.carry === undefined ? 0 : 1);
    const n = total >> 1;
    if (n === 0) {
      if (bytes.length === 1) this.carry = bytes[0];
      return undefined;
    }
    const out = new Int16Array(n);
    let i = 0;
    if (this.carry !== undefined) {
      out[0] = (((bytes[0]! << 8) | this.carry) << 16) >> 16; // n >= 1: bytes has a first byte
      offset = 1;
      i = 1;
      this.carry = undefined;
    }
    // n counts whole samples in bytes: both bytes of each are there
    for (; i < n; i++, offset += 2) out[i] = (((bytes[offset + 1]! << 8) | bytes[offset]!) << 16) >> 16;
    if (offset < bytes.length) this.carry = bytes[offset];
    return out;
  }
  /** whether a lone byte is left over (a truncated stream) */
  get pending(): boolean {
    return this.carry !== undefined;
  }
}

export function createOpenAICompatibleSpeechEngine(opts: OpenAICompatibleSpeechOptions): SpeechEngine {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_AUDIO_TIMEOUT_MS;
  const attributes = spanAttributes(opts.baseUrl);
  const redact = spanRedactor(opts.baseUrl, opts.apiKey);
  const sampleRate = opts.sampleRate ?? 24000;
  return {
    kind: 'openai-compatible',
    voices: opts.voices ?? OPENAI_VOICES,
    async *synthesize(req: SpeechRequest): AsyncIterable<PcmChunk> {
      if (req.signal?.aborted) throw abortedError();
      const url = endpoint(opts.baseUrl, '/audio/speech');
      // one controller for the caller's abort, the idle timer and an early stop of the consumer
      const ctl = new AbortController();
      let timedOut = false;
      let timer: NodeJS.Timeout | undefined;
      const arm = () => {
        clearTimeout(timer);
        timer = setTimeout(() => {
          timedOut = true;
          ctl.abort();
        }, timeoutMs);
      };
      const onAbort = () => ctl.abort();
      req.signal?.addEventListener('abort', onAbort, { once: true });
      const headers: Record<string, string> = { ...authHeaders(opts.apiKey, opts.baseUrl), 'content-type': 'application/json', accept: 'audio/pcm, application/octet-stream' };
      // a client span for the call when the request is traced (ended with the stream); its traceparent goes upstream
      const span = upstreamSpan('POST /audio/speech', attributes, headers, redact);
      const fail = (e: unknown): EngineError => {
        const err = e instanceof EngineError ? e : req.signal?.aborted ? abortedError() : timedOut ? timeoutError(timeoutMs) : networkError(url, e);
        span?.fail(err);
        return err;
      };
      let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
      try {
        arm();
        let res: Response;
        try {
          res = await fetch(url, {
            method: 'POST',
            headers,
            body: JSON.stringify({
              model: opts.upstreamModel ?? 'tts-1',
              input: req.text,
              voice: req.voice,
              response_format: 'pcm',
              speed: req.speed,
            }),
            signal: ctl.signal,
          });
          span?.status(res.status);
          if (!res.ok) throw await upstreamError(res, opts.apiKey);
          if ((res.headers.get('content-type') ?? '').includes('application/json')) {
            throw new EngineError(`the upstream audio server answered JSON instead of audio: ${(await upstreamMessage(res)).message}`, 'upstream_error', 502);
          }
        } catch (e) {
          throw fail(e);
        }
        if (!res.body) return;
        reader = res.body.getReader();
        const asm = new Pcm16Assembler();
        for (;;) {
          let r: ReadableStreamReadResult<Uint8Array>;
          try {
            arm();
            r = await reader.read();
          } catch (e) {
            throw fail(e);
          }
          if (r.done) break;
          const samples = asm.push(r.value);
          if (samples && samples.length > 0) yield { samples, sampleRate };
          if (req.signal?.aborted) throw abortedError();
        }
      } finally {
        clearTimeout(timer);
        req.signal?.removeEventListener('abort', onAbort);
        // the consumer stopped early (or an error): stop the upstream request
        if (reader) reader.cancel().catch(() => {});
        ctl.abort();
        span?.end();
      }
    },
    async close(): Promise<void> {},
  };
}
