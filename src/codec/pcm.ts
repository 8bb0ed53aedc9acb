/** Mono 16-bit signed PCM at `sampleRate`: what speech engines produce and the encoders take. */
export interface PcmChunk {
  samples: Int16Array;
  sampleRate: number;
}

/**
 * PCM helpers: a streaming band-limited resampler (windowed sinc, continuous across chunk
 * boundaries), Int16 <-> Float32 conversion and mono down-mixing.
 */

const PHASES = 256;

/** Kernel tables are shared by every resampler with the same (taps, cutoff). */
const kernelCache = new Map<string, Float32Array>();

function kernel(halfTaps: number, cutoff: number): Float32Array {
  const key = `${halfTaps}:${cutoff.toFixed(6)}`;
  let k = kernelCache.get(key);
  if (k) return k;
  const taps = 2 * halfTaps;
  // table[(phase) * taps + j] = h(j - halfTaps + 1 - phase/PHASES), phases 0..PHASES (inclusive) for interpolation
  k = new Float32Array((PHASES + 1) * taps);
  for (let p = 0; p <= PHASES; p++) {
    const frac = p / PHASES;
    let sum = 0;
    for (let j = 0; j < taps; j++) {
      const x = j - halfTaps + 1 - frac; // distance from the output instant, in input samples
      const arg = x * cutoff;
      const sinc = arg === 0 ? 1 : Math.sin(Math.PI * arg) / (Math.PI * arg);
      // Blackman window over [-halfTaps, halfTaps]
      const w = 0.42 + 0.5 * Math.cos((Math.PI * x) / halfTaps) + 0.08 * Math.cos((2 * Math.PI * x) / halfTaps);
      const v = Math.abs(x) >= halfTaps ? 0 : cutoff * sinc * w;
      k[p * taps + j] = v;
      sum += v;
    }
    // normalize DC gain to exactly 1 for each phase
    if (sum !== 0) for (let j = 0; j < taps; j++) k[p * taps + j]! /= sum;
  }
  kernelCache.set(key, k);
  return k;
}

/**
 * Streaming resampler for mono Float32 samples. Feed chunks with `push`, then call `flush` once at the
 * end: the total output is exactly round(totalInput * outRate / inRate) samples, aligned in time with
 * the input (no delay), whatever the chunking.
 */
export class FloatResampler {
  private readonly step: number;
  private readonly halfTaps: number;
  private readonly table: Float32Array;
  /** input history: buf[0] is input sample number `bufStart` */
  private buf: Float32Array;
  private bufLen = 0;
  private bufStart: number;
  private totalIn = 0;
  private totalOut = 0;
  private flushed = false;

  constructor(
    readonly inRate: number,
    readonly outRate: number,
    quality: 'fast' | 'good' = 'good',
  ) {
    if (!(inRate > 0 && outRate > 0)) throw new RangeError('sample rates must be positive');
    this.step = inRate / outRate;
    this.halfTaps = quality === 'fast' ? 8 : 16;
    // anti-aliasing when reducing the rate; a little margin below Nyquist either way
    const cutoff = Math.min(1, outRate / inRate) * 0.95;
    this.table = kernel(this.halfTaps, cutoff);
    this.buf = new Float32Array(4096);
    // history before the first sample is silence
    this.bufStart = -this.halfTaps;
    this.bufLen = this.halfTaps;
  }

  get identity(): boolean {
    return this.inRate === this.outRate;
  }

  push(input: Float32Array): Float32Array {
    if (this.flushed) throw new Error('resampler already flushed');
    if (this.identity) {
      this.totalIn += input.length;
      this.totalOut += input.length;
      return input.slice();
    }
    this.append(input);
    this.totalIn += input.length;
    return this.produce(false);
  }

  flush(): Float32Array {
    if (this.flushed) return new Float32Array(0);
    this.flushed = true;
    if (this.identity) return new Float32Array(0);
    this.append(new Float32Array(this.halfTaps + 2));
    return this.produce(true);
  }

  private append(input: Float32Array): void {
    if (this.bufLen + input.length > this.buf.length) {
      const next = new Float32Array(Math.max(this.buf.length * 2, this.bufLen + input.length));
      next.set(this.buf.subarray(0, this.bufLen));
      this.buf = next;
    }
    this.buf.set(input, this.bufLen);
    this.bufLen += input.length;
  }

  private produce(final: boolean): Float32Array {
    const taps = 2 * this.halfTaps;
    const limit = final ? Math.round((this.totalIn * this.outRate) / this.inRate) : Infinity;
    const bufEnd = this.bufStart + this.bufLen; // one past the last input sample held
    const out: number[] = [];
    for (;;) {
      if (this.totalOut >= limit) break;
      const t = this.totalOut * this.step; // output instant, in input samples
      const i0 = Math.floor(t);
      const first = i0 - this.halfTaps + 1;
      if (i0 + this.halfTaps >= bufEnd) break; // needs samples not received yet
      const pos = (t - i0) * PHASES;
      const p = Math.floor(pos);
      const f = pos - p;
      const ka = p * taps;
      const kb = ka + taps;
      const base = first - this.bufStart;
      let acc = 0;
      // in range by construction: p < PHASES so kb + j < (PHASES + 1) * taps, the table's length, and
      // base + j <= i0 + halfTaps - bufStart < bufLen (the break above)
      const table = this.table;
      const buf = this.buf;
      for (let j = 0; j < taps; j++) {
        const a = table[ka + j]!;
        const h = a + (table[kb + j]! - a) * f;
        acc += buf[base + j]! * h;
      }
      out.push(acc);
      this.totalOut++;
    }
    // drop history no longer needed by the next output
    const nextFirst = Math.floor(this.totalOut * this.step) - this.halfTaps + 1;
    const drop = Math.max(0, Math.min(this.bufLen, nextFirst - this.bufStart));
    if (drop > 0) {
      this.buf.copyWithin(0, drop, this.bufLen);
      this.bufLen -= drop;
      this.bufStart += drop;
    }
    return Float32Array.from(out);
  }
}

/** Streaming resampler for mono Int16 PCM (the engines' output). */
export class Int16Resampler {
  private readonly inner: FloatResampler;
  constructor(inRate: number, outRate: number, quality: 'fast' | 'good' = 'good') {
    this.inner = new FloatResampler(inRate, outRate, quality);
  }
  get inRate(): number {
    return this.inner.inRate;
  }
  get outRate(): number {
    return this.inner.outRate;
  }
  push(input: Int16Array): Int16Array {
    if (this.inner.identity) {
      this.inner.push(new Float32Array(0));
      return input;
    }
    return floatToInt16(this.inner.push(int16ToFloat(input)), 1);
  }
  flush(): Int16Array {
    return floatToInt16(this.inner.flush(), 1);
  }
}

/** Resamples a whole signal at once. */
export function resampleFloat(input: Float32Array, inRate: number, outRate: number): Float32Array {
  if (inRate === outRate) return input;
  const r = new FloatResampler(inRate, outRate);
  const a = r.push(input);
  const b = r.flush();
  const out = new Float32Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** Int16 to Float32; `scale` 1/32768 gives -1..1, 1 keeps the integer range. */
export function int16ToFloat(input: Int16Array, scale = 1): Float32Array {
  const out = new Float32Array(input.length);
  for (let i = 0; i < input.length; i++) out[i] = input[i]! * scale;
  return out;
}

/** Float32 to Int16 with rounding and clipping; `scale` 32768 for -1..1 input, 1 for integer-range input. */
export function floatToInt16(input: Float32Array, scale = 32768): Int16Array {
  const out = new Int16Array(input.length);
  for (let i = 0; i < input.length; i++) {
    const v = Math.round(input[i]! * scale);
    out[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
  }
  return out;
}

/** Interleaved Int16 frames to mono Float32 in -1..1 (channel average). */
export function downmixInt16(interleaved: Int16Array, channels: number): Float32Array {
  const frames = Math.floor(interleaved.length / channels);
  const out = new Float32Array(frames);
  const scale = 1 / (32768 * channels);
  for (let f = 0; f < frames; f++) {
    let s = 0;
    for (let c = 0; c < channels; c++) s += interleaved[f * channels + c]!;
    out[f] = s * scale;
  }
  return out;
}
