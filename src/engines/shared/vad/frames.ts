import type { VoiceActivityDetector } from '../../types.js';

/** A detector that decides on the calling thread (the energy detector; Silero inside its worker). */
export interface FrameDetector {
  readonly name: string;
  readonly frameSamples: number;
  /** the decision of each frame the samples complete, in order */
  push(samples: Float32Array): boolean[];
  reset(): void;
  close(): void;
}

const clamp = (v: number) => (v > 1 ? 1 : v < -1 ? -1 : v === v ? v : 0);

/**
 * A calling-thread detector as sessions take one: push() answers with a promise, as the Silero detector (whose
 * frames are decided in a worker thread) does; a bad argument is a rejection.
 */
export function asyncDetector(d: FrameDetector): VoiceActivityDetector {
  return {
    get name() {
      return d.name;
    },
    frameSamples: d.frameSamples,
    push: async (samples) => d.push(samples),
    reset: () => d.reset(),
    close: () => d.close(),
  };
}

/** Cuts audio pushed in pieces of any length into frames of a fixed size, kept across pushes. */
export class FrameBuffer {
  private readonly frame: Float32Array;
  private fill = 0;

  constructor(readonly size: number) {
    this.frame = new Float32Array(size);
  }

  /**
   * Adds the samples and calls `decide` on each frame they complete, in order (the frame's array is reused: a
   * decider that keeps it must copy it). Samples are clamped to [-1, 1] and a NaN is taken as 0, so a bad
   * sample cannot reach a model as such.
   */
  push(samples: Float32Array, decide: (frame: Float32Array) => boolean): boolean[] {
    checkSamples(samples);
    const out: boolean[] = [];
    const frame = this.frame;
    const size = this.size;
    let fill = this.fill;
    for (let i = 0; i < samples.length; i++) {
      const v = samples[i]!;
      frame[fill++] = v > 1 ? 1 : v < -1 ? -1 : v === v ? v : 0;
      if (fill === size) {
        fill = 0;
        out.push(decide(frame));
      }
    }
    this.fill = fill;
    return out;
  }

  /**
   * Adds the samples and gives the frames they complete as one array (a whole number of frames, none when they
   * complete no frame), clamped as push() clamps; the samples of a frame not yet complete wait for the next call.
   * The array is new: it can be transferred to another thread.
   */
  take(samples: Float32Array): Float32Array {
    checkSamples(samples);
    const size = this.size;
    const frame = this.frame;
    const n = Math.floor((this.fill + samples.length) / size) * size;
    const out = new Float32Array(n);
    let i = 0;
    if (n > 0) {
      out.set(frame.subarray(0, this.fill));
      for (let o = this.fill; o < n; o++, i++) out[o] = clamp(samples[i]!);
      this.fill = 0;
    }
    let fill = this.fill;
    for (; i < samples.length; i++) frame[fill++] = clamp(samples[i]!);
    this.fill = fill;
    return out;
  }

  /** drops the samples of the frame not yet complete */
  clear(): void {
    this.fill = 0;
  }
}

function checkSamples(samples: unknown): void {
  if (!(samples instanceof Float32Array)) throw new TypeError('push() takes a Float32Array of 16 kHz mono samples');
}

/** The threshold of OpenAI's server_vad (0..1), checked. */
export function checkThreshold(threshold: unknown): number {
  if (typeof threshold !== 'number' || !Number.isFinite(threshold) || threshold < 0 || threshold > 1) {
    throw new RangeError(`the voice activity threshold must be a number from 0 to 1 (given ${String(threshold)})`);
  }
  return threshold;
}
