/**
 * PCM for the Realtime API: 16-bit little-endian mono at 24 kHz, carried as base64 in JSON events. Shared by the
 * microphone's worklet (resampling, conversion) and the page (base64, playback).
 */
export const RATE = 24_000;

/**
 * Turns the microphone's float samples, at the audio context's rate, into 24 kHz samples, across calls: it keeps its
 * position between blocks, so the chunks join without a click. Downsampling averages the input samples that fall in
 * each output sample's span (a box filter: enough against aliasing for speech from 44.1 or 48 kHz); upsampling (a
 * context below 24 kHz) interpolates linearly.
 */
export class Resampler {
  /** input samples per output sample */
  private readonly step: number;
  // downsampling: the input samples summed since the last output one, and how far (in input samples) it lies behind
  private sum = 0;
  private n = 0;
  private t = 0;
  // upsampling: where the next output sample falls in the next block, and the previous block's last sample
  private pos = 0;
  private last = 0;

  constructor(inputRate: number) {
    this.step = inputRate / RATE;
  }

  /** the 24 kHz samples this block completes */
  push(input: Float32Array): Float32Array {
    const out: number[] = [];
    if (this.step >= 1) {
      for (let i = 0; i < input.length; i++) {
        this.sum += input[i];
        this.n++;
        if (++this.t >= this.step) {
          out.push(this.sum / this.n);
          this.sum = 0;
          this.n = 0;
          this.t -= this.step;
        }
      }
    } else {
      while (this.pos < input.length) {
        const i = Math.floor(this.pos);
        const f = this.pos - i;
        // between input[i-1] and input[i], the previous block's last sample standing for input[-1]
        const prev = i === 0 ? this.last : input[i - 1];
        out.push(prev + (input[i] - prev) * f);
        this.pos += this.step;
      }
      this.pos -= input.length;
      if (input.length) this.last = input[input.length - 1];
    }
    return Float32Array.from(out);
  }
}

/** float samples in [-1, 1] as 16-bit integers (clipped) */
export function toPcm16(samples: Float32Array): Int16Array {
  const out = new Int16Array(samples.length);
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    out[i] = s < 0 ? s * 0x8000 : s * 0x7fff;
  }
  return out;
}

/** little-endian 16-bit PCM bytes as float samples (the Web Audio API's) */
export function pcm16ToFloat(bytes: Uint8Array): Float32Array<ArrayBuffer> {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(bytes.byteLength >> 1);
  for (let i = 0; i < out.length; i++) out[i] = view.getInt16(i * 2, true) / 0x8000;
  return out;
}

/** 16-bit samples as base64 of their little-endian bytes */
export function pcm16ToBase64(samples: Int16Array): string {
  const bytes = new Uint8Array(samples.length * 2);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < samples.length; i++) view.setInt16(i * 2, samples[i], true);
  let s = '';
  // in slices: String.fromCharCode's arguments are bounded
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

/** base64 to bytes; throws on text that is not base64 */
export function base64ToBytes(b64: string): Uint8Array {
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}
