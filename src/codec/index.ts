/**
 * The audio codec layer used by the audio service: speech PCM -> response bytes in one of the six
 * OpenAI formats (streamed, one container per response), and uploads -> 16 kHz mono Float32.
 */
import type { PcmChunk } from './pcm.js';
import { AudioDecodeError, ffmpegDecode, startEncoder, type EncodedFormat } from './ffmpeg.js';
import { downmixInt16, Int16Resampler, resampleFloat } from './pcm.js';
import { int16ToBuffer, isWav, tryParseWav, wavHeader } from './wav.js';
import { withFlacLength } from './flac.js';

export * from './ffmpeg.js';
export * from './pcm.js';
export * from './wav.js';
export * from './flac.js';
export { timeStretch } from './stretch.js';

export const SPEECH_FORMATS = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] as const;
export type SpeechFormat = (typeof SPEECH_FORMATS)[number];

export function isSpeechFormat(x: unknown): x is SpeechFormat {
  return typeof x === 'string' && (SPEECH_FORMATS as readonly string[]).includes(x);
}

const CONTENT_TYPES: Record<SpeechFormat, string> = {
  mp3: 'audio/mpeg',
  opus: 'audio/ogg',
  aac: 'audio/aac',
  flac: 'audio/flac',
  wav: 'audio/wav',
  pcm: 'audio/pcm',
};

export function contentTypeFor(format: SpeechFormat): string {
  return CONTENT_TYPES[format];
}

/** Sample rate of `pcm` and `wav` output (OpenAI: raw 24 kHz 16-bit mono). */
export const PCM_OUTPUT_RATE = 24000;

/**
 * Sample rate of the PCM fed to ffmpeg. Everything is brought to 24 kHz first, so a response has one
 * rate whatever sentence produced it and the output matches OpenAI's (mp3/aac/flac at 24 kHz; opus is
 * resampled by ffmpeg to 48 kHz, the Opus rate).
 */
export const ENCODER_INPUT_RATE = 24000;

/** Whether the format needs ffmpeg (wav and pcm do not). */
export function needsFfmpeg(format: SpeechFormat): boolean {
  return format !== 'wav' && format !== 'pcm';
}

export interface EncodeOptions {
  /**
   * The audio is sent whole, not streamed: nothing is yielded before the last sample, and a WAV or FLAC then
   * carries its real length in its header (WAV: RIFF and data sizes; FLAC: STREAMINFO's total samples and MD5),
   * where a streamed one says "unknown" (WAV 0xFFFFFFFF, FLAC 0), as OpenAI's streamed audio does. The other
   * formats carry no length a player needs (their frames say it), and are encoded the same either way.
   */
  whole?: boolean;
}

/**
 * Turns a stream of engine PCM (any rate, may change between chunks) into the bytes of one response
 * in `format`, yielded as soon as they exist (or all at the end: `whole`). For ffmpeg formats one encoder
 * process is started at once (before the first PCM, so its start-up overlaps synthesis) and fed as chunks arrive.
 * Aborting `signal` or breaking out of the loop kills the encoder and stops pulling `chunks`.
 */
export async function* encodeSpeech(chunks: AsyncIterable<PcmChunk>, format: SpeechFormat, signal?: AbortSignal, opts: EncodeOptions = {}): AsyncGenerator<Buffer> {
  if (!isSpeechFormat(format)) throw new RangeError(`unknown speech format ${String(format)}`);
  if (!needsFfmpeg(format)) {
    if (format === 'wav' && opts.whole) {
      const data: Buffer[] = [];
      let bytes = 0;
      for await (const pcm of resampleStream(chunks, PCM_OUTPUT_RATE, signal)) {
        // a copy: the resampler's buffers are not ours to keep
        data.push(Buffer.from(int16ToBuffer(pcm)));
        bytes += pcm.byteLength;
      }
      yield Buffer.concat([wavHeader(PCM_OUTPUT_RATE, 1, bytes), ...data]);
      return;
    }
    if (format === 'wav') yield wavHeader(PCM_OUTPUT_RATE);
    for await (const pcm of resampleStream(chunks, PCM_OUTPUT_RATE, signal)) {
      if (pcm.length > 0) yield Buffer.from(int16ToBuffer(pcm));
    }
    return;
  }
  if (format === 'flac' && opts.whole) {
    // what was fed is what FLAC (lossless, no priming) holds: its count and MD5 complete the header
    const fed: Buffer[] = [];
    const out: Buffer[] = [];
    for await (const b of encodeWithFfmpeg(chunks, format, signal, (pcm) => fed.push(Buffer.from(pcm)))) out.push(b);
    yield withFlacLength(Buffer.concat(out), Buffer.concat(fed));
    return;
  }
  yield* encodeWithFfmpeg(chunks, format as EncodedFormat, signal);
}

/** One ffmpeg encoder fed the PCM as it comes (`fed` sees every buffer written to it), its bytes yielded as they come. */
async function* encodeWithFfmpeg(chunks: AsyncIterable<PcmChunk>, format: EncodedFormat, signal?: AbortSignal, fed?: (pcm: Buffer) => void): AsyncGenerator<Buffer> {
  const encoder = startEncoder(format, { sampleRate: ENCODER_INPUT_RATE, signal });
  const feeder = new AbortController();
  let written = 0;
  let ended = false;
  const feed = (async () => {
    try {
      for await (const pcm of resampleStream(chunks, ENCODER_INPUT_RATE, signal)) {
        if (feeder.signal.aborted) return;
        const bytes = int16ToBuffer(pcm);
        fed?.(bytes);
        written += bytes.length;
        await encoder.write(bytes);
      }
      ended = true;
      encoder.end();
    } catch (e) {
      encoder.kill();
      throw e;
    }
  })();
  let feedError: unknown;
  feed.catch((e) => {
    feedError = e;
  });
  try {
    try {
      for await (const bytes of encoder) {
        yield bytes;
      }
    } catch (e) {
      // no audio at all (nothing speakable): ffmpeg, which analyses no input (-nofind_stream_info), fails on an empty
      // one rather than write an empty container; either way there is no audio, which the caller tells apart
      if (!(ended && written === 0)) throw e;
    }
    await feed;
  } finally {
    // the feeder stops at its next chunk (it may be waiting for the engine; no need to wait for it)
    feeder.abort();
    encoder.kill();
  }
  if (feedError !== undefined) throw feedError;
  if (signal?.aborted) throw signal.reason;
}

/**
 * Resamples engine chunks to `rate` as one continuous signal: a resampler per input rate, flushed when
 * the rate changes or the stream ends.
 */
export async function* resampleStream(chunks: AsyncIterable<PcmChunk>, rate: number, signal?: AbortSignal): AsyncGenerator<Int16Array> {
  let r: Int16Resampler | undefined;
  for await (const c of chunks) {
    if (signal?.aborted) throw signal.reason;
    if (!r || r.inRate !== c.sampleRate) {
      if (r) {
        const tail = r.flush();
        if (tail.length) yield tail;
      }
      r = new Int16Resampler(c.sampleRate, rate);
    }
    const out = r.push(c.samples);
    if (out.length) yield out;
  }
  if (r) {
    const tail = r.flush();
    if (tail.length) yield tail;
  }
}

// ---------------------------------------------------------------- decoding uploads

export interface DecodedAudio {
  /** mono, -1..1 */
  pcm: Float32Array;
  sampleRate: number;
  /** seconds */
  duration: number;
}

export const TRANSCRIPTION_SAMPLE_RATE = 16000;

/**
 * Decodes an uploaded audio file to 16 kHz mono Float32 (the rate speech recognizers use). 16-bit
 * PCM WAV is decoded in-process; everything else through ffmpeg. Throws AudioDecodeError (code
 * 'invalid_audio', status 400) when the bytes are not decodable audio or hold no samples.
 */
export async function decodeAudio(bytes: Uint8Array, opts: { sampleRate?: number; signal?: AbortSignal; maxSeconds?: number } = {}): Promise<DecodedAudio> {
  const sampleRate = opts.sampleRate ?? TRANSCRIPTION_SAMPLE_RATE;
  if (!bytes || bytes.length === 0) throw new AudioDecodeError('The file is empty');
  if (isWav(bytes)) {
    let parsed: ReturnType<typeof tryParseWav>;
    try {
      parsed = tryParseWav(bytes);
    } catch (e) {
      throw new AudioDecodeError(`Invalid WAV file: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (parsed) {
      if (parsed.samples.length === 0) throw new AudioDecodeError('The file contains no audio');
      const mono = downmixInt16(parsed.samples, parsed.channels);
      if (opts.maxSeconds && mono.length / parsed.sampleRate > opts.maxSeconds) throw new AudioDecodeError('The audio is too long');
      const pcm = resampleFloat(mono, parsed.sampleRate, sampleRate);
      return { pcm, sampleRate, duration: pcm.length / sampleRate };
    }
    // other WAV flavours (float, 24-bit, ADPCM...) go to ffmpeg
  }
  const pcm = await ffmpegDecode(bytes, sampleRate, opts);
  return { pcm, sampleRate, duration: pcm.length / sampleRate };
}
