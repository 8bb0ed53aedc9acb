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
    if (!(samples instanceof Float32Array)) throw new TypeError('push() takes a Float32Array of 16 kHz mono samples');
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

  /** drops the samples of the frame not yet complete */
  clear(): void {
    this.fill = 0;
  }
}

/** The threshold of OpenAI's server_vad (0..1), checked. */
export function checkThreshold(threshold: unknown): number {
  if (typeof threshold !== 'number' || !Number.isFinite(threshold) || threshold < 0 || threshold > 1) {
    throw new RangeError(`the voice activity threshold must be a number from 0 to 1 (given ${String(threshold)})`);
  }
  return threshold;
}
