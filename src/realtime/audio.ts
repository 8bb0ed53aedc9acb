/**
 * The audio of a realtime session on the wire: `audio/pcm` (16-bit little-endian mono at 24 kHz), `audio/pcmu`
 * (G.711 µ-law) and `audio/pcma` (G.711 A-law), both 8 kHz. What comes in is kept as 24 kHz PCM (the user items'
 * audio) and given to the voice activity detector and the recognizer at 16 kHz; what goes out is made at 24 kHz
 * and encoded in the session's output format.
 */
import { FloatResampler, Int16Resampler, floatToInt16, int16ToFloat } from '../codec/pcm.js';

export type AudioFormatType = 'audio/pcm' | 'audio/pcmu' | 'audio/pcma';
export const AUDIO_FORMAT_TYPES: readonly AudioFormatType[] = ['audio/pcm', 'audio/pcmu', 'audio/pcma'];
/** the session's format object, as OpenAI writes it */
export type AudioFormat = { type: 'audio/pcm'; rate: 24000 } | { type: 'audio/pcmu' } | { type: 'audio/pcma' };
export const PCM_RATE = 24000;
const G711_RATE = 8000;
export const RECOGNIZER_RATE = 16000;

export const formatOf = (type: AudioFormatType): AudioFormat => (type === 'audio/pcm' ? { type, rate: PCM_RATE } : { type });
/** bytes per second of the wire format */
export const bytesPerSecond = (type: AudioFormatType) => (type === 'audio/pcm' ? PCM_RATE * 2 : G711_RATE);

// ---------------------------------------------------------------- G.711 (ITU-T G.711, the classic bit recipes)

const BIAS = 0x84;
const CLIP = 32635;

export function linearToUlaw(sample: number): number {
  let s = Math.max(-CLIP, Math.min(CLIP, sample));
  const sign = s < 0 ? 0x80 : 0;
  if (sign) s = -s;
  s += BIAS;
  let exponent = 7;
  for (let mask = 0x4000; (s & mask) === 0 && exponent > 0; mask >>= 1) exponent--;
  const mantissa = (s >> (exponent + 3)) & 0x0f;
  return ~(sign | (exponent << 4) | mantissa) & 0xff;
}

export function ulawToLinear(byte: number): number {
  const u = ~byte & 0xff;
  const sign = u & 0x80;
  const exponent = (u >> 4) & 0x07;
  const mantissa = u & 0x0f;
  const magnitude = (((mantissa << 3) + BIAS) << exponent) - BIAS;
  return sign ? -magnitude : magnitude;
}

export function linearToAlaw(sample: number): number {
  let s = Math.max(-32768, Math.min(32767, sample)) >> 3;
  let mask: number;
  if (s >= 0) mask = 0xd5;
  else {
    mask = 0x55;
    s = -s - 1;
  }
  let seg = 0;
  for (let end = 0x1f; seg < 8 && s > end; end = (end << 1) | 1) seg++;
  if (seg >= 8) return 0x7f ^ mask;
  const aval = seg << 4;
  return (seg < 2 ? aval | ((s >> 1) & 0x0f) : aval | ((s >> seg) & 0x0f)) ^ mask;
}

export function alawToLinear(byte: number): number {
  const a = byte ^ 0x55;
  let t = (a & 0x0f) << 4;
  const seg = (a & 0x70) >> 4;
  if (seg === 0) t += 8;
  else if (seg === 1) t += 0x108;
  else t = (t + 0x108) << (seg - 1);
  return a & 0x80 ? t : -t;
}

// ---------------------------------------------------------------- in

/**
 * Decodes the client's audio, chunk by chunk, into 24 kHz PCM (kept) and 16 kHz float (for the detector and the
 * recognizer), with streaming resamplers so that chunk boundaries leave no trace.
 */
export class InputDecoder {
  private readonly up?: Int16Resampler;
  private readonly down = new FloatResampler(PCM_RATE, RECOGNIZER_RATE, 'fast');

  constructor(readonly type: AudioFormatType) {
    if (type !== 'audio/pcm') this.up = new Int16Resampler(G711_RATE, PCM_RATE, 'fast');
  }

  /** the bytes of one append: 24 kHz PCM and the same at 16 kHz (-1..1) */
  decode(bytes: Buffer): { pcm24: Int16Array; pcm16: Float32Array } {
    let pcm24: Int16Array;
    if (this.type === 'audio/pcm') {
      const n = bytes.length >> 1;
      pcm24 = new Int16Array(n);
      for (let i = 0; i < n; i++) pcm24[i] = bytes.readInt16LE(i * 2);
    } else {
      const narrow = new Int16Array(bytes.length);
      const dec = this.type === 'audio/pcmu' ? ulawToLinear : alawToLinear;
      for (let i = 0; i < bytes.length; i++) narrow[i] = dec(bytes[i]!);
      pcm24 = this.up!.push(narrow);
    }
    return { pcm24, pcm16: this.down.push(int16ToFloat(pcm24, 1 / 32768)) };
  }
}

// ---------------------------------------------------------------- out

/** Encodes 24 kHz PCM made by the speech engine in the session's output format. */
export class OutputEncoder {
  private readonly down?: Int16Resampler;
  /** a PCM byte left over (the engine's chunks are bytes, samples are two) */
  private odd: Buffer | undefined;

  constructor(readonly type: AudioFormatType) {
    if (type !== 'audio/pcm') this.down = new Int16Resampler(PCM_RATE, G711_RATE, 'fast');
  }

  /** bytes of 24 kHz 16-bit PCM in, bytes of the wire format out (with the samples they hold, at 24 kHz) */
  encode(pcmBytes: Buffer): { bytes: Buffer; samples24: number } {
    let b = this.odd ? Buffer.concat([this.odd, pcmBytes]) : pcmBytes;
    this.odd = undefined;
    if (b.length % 2 === 1) {
      this.odd = b.subarray(b.length - 1);
      b = b.subarray(0, b.length - 1);
    }
    const samples24 = b.length >> 1;
    if (this.type === 'audio/pcm') return { bytes: b, samples24 };
    const pcm = new Int16Array(samples24);
    for (let i = 0; i < samples24; i++) pcm[i] = b.readInt16LE(i * 2);
    const narrow = this.down!.push(pcm);
    const enc = this.type === 'audio/pcmu' ? linearToUlaw : linearToAlaw;
    const out = Buffer.alloc(narrow.length);
    for (let i = 0; i < narrow.length; i++) out[i] = enc(narrow[i]!);
    return { bytes: out, samples24 };
  }
}

/** 24 kHz PCM as the bytes of a WAV-less `audio/pcm` payload (little-endian) */
export function pcmBytes(pcm: Int16Array): Buffer {
  const b = Buffer.alloc(pcm.length * 2);
  for (let i = 0; i < pcm.length; i++) b.writeInt16LE(pcm[i]!, i * 2);
  return b;
}

export { floatToInt16 };
