/**
 * Loudness of the embedded voices. The engines' own levels differ by 14 dB (flite kal16 about -28 dBFS RMS,
 * flite slt about -14), so every voice is brought to one target level:
 *
 * - the level of a piece of speech is its RMS from the first to the last 10 ms frame that is within 40 dB of
 *   its loudest frame (and above -70 dBFS): leading and trailing silence do not count, pauses inside do. The
 *   span does not depend on the scale, so a gain of x dB changes the level by exactly x dB;
 * - standard quality: a fixed gain per voice, measured once over a set of sentences (`npm run voices:levels`,
 *   bench/voice-levels.ts) and written in the voice table (`builtin.voices` of the flite and espeak providers). It needs no look at the rest
 *   of the sentence, so audio still streams as it is produced;
 * - hd quality: each sentence is measured whole and set to the target exactly;
 * - either way a soft limiter keeps peaks under -1 dBFS instead of clipping them.
 *
 * Runs in the synthesis worker threads, on each sentence or chunk before it is posted.
 */

/** The level every voice is brought to (dBFS RMS, as measured by `speechLevelDb`). */
export const TARGET_LEVEL_DBFS = -20;

/** Frames this much quieter than the loudest one, at the start and end of a piece, are silence, not speech. */
const SILENCE_BELOW_PEAK_DB = 40;
/** ... and so is anything under this (dither, rounding noise). */
const SILENCE_FLOOR_DBFS = -70;
const FULL_SCALE = 32768;

/** The limiter starts bending at -1 dBFS and never exceeds full scale. */
const KNEE = 0.891 * FULL_SCALE;
const HEADROOM = 32767 - KNEE;

export function dbToGain(db: number): number {
  return Math.pow(10, db / 20);
}

/** Energy (sum of squares) of each 10 ms frame; the last frame may be shorter. */
function frameEnergies(samples: ArrayLike<number>, frame: number): Float64Array {
  const out = new Float64Array(Math.ceil(samples.length / frame));
  for (let f = 0, i = 0; f < out.length; f++) {
    const end = Math.min(samples.length, i + frame);
    let e = 0;
    for (; i < end; i++) {
      const v = samples[i]!;
      e += v * v;
    }
    out[f] = e;
  }
  return out;
}

/** The frames [first, last] of speech (see above), or undefined for silence. */
function speechFrames(energies: Float64Array, frame: number): [number, number] | undefined {
  let loudest = 0;
  for (let f = 0; f < energies.length; f++) {
    const e = energies[f]!;
    if (e > loudest) loudest = e;
  }
  // compared as energies of a full frame: (rms threshold)^2 x frame
  const floor = FULL_SCALE * dbToGain(SILENCE_FLOOR_DBFS);
  const threshold = Math.max(loudest * dbToGain(-2 * SILENCE_BELOW_PEAK_DB), floor * floor * frame);
  let first = 0;
  while (first < energies.length && !(energies[first]! > threshold)) first++;
  if (first >= energies.length) return undefined;
  let last = energies.length - 1;
  while (last > first && !(energies[last]! > threshold)) last--;
  return [first, last];
}

/** [start, end) of the samples between the first and last 10 ms frame of speech (see above); [0, 0) for silence. */
export function speechSpan(samples: ArrayLike<number>, sampleRate: number): [number, number] {
  const frame = Math.max(1, Math.round(sampleRate / 100));
  const span = speechFrames(frameEnergies(samples, frame), frame);
  return span ? [span[0] * frame, Math.min(samples.length, (span[1] + 1) * frame)] : [0, 0];
}

/** The level of a piece of speech in dBFS (RMS over its speech span); -Infinity for silence. */
export function speechLevelDb(samples: ArrayLike<number>, sampleRate: number): number {
  const frame = Math.max(1, Math.round(sampleRate / 100));
  const energies = frameEnergies(samples, frame);
  const span = speechFrames(energies, frame);
  if (!span) return -Infinity;
  let e = 0;
  for (let f = span[0]; f <= span[1]; f++) e += energies[f]!;
  const n = Math.min(samples.length, (span[1] + 1) * frame) - span[0] * frame;
  return 20 * Math.log10(Math.sqrt(e / n) / FULL_SCALE);
}

/**
 * Multiplies `samples` by `gain` in place; peaks above -1 dBFS are bent smoothly (tanh) towards full scale,
 * so the result never clips. Sample by sample: no look-ahead, so it can run on streamed chunks.
 */
export function applyGain(samples: Int16Array, gain: number): Int16Array {
  if (gain === 1) {
    // nothing to scale; the engines' own output never exceeds the range
    return samples;
  }
  // storing into the Int16Array truncates towards zero: +-0.5 first rounds to the nearest
  for (let i = 0; i < samples.length; i++) {
    const v = samples[i]! * gain;
    if (v <= KNEE && v >= -KNEE) {
      samples[i] = v < 0 ? v - 0.5 : v + 0.5;
    } else {
      const bent = KNEE + HEADROOM * Math.tanh(((v < 0 ? -v : v) - KNEE) / HEADROOM);
      samples[i] = v < 0 ? -bent - 0.5 : bent + 0.5;
    }
  }
  return samples;
}

/**
 * Sets a whole sentence to `targetDb` (hd quality), in place. A piece with no speech above the silence
 * threshold is left as it is. The gain is capped at +30 dB so near-silent noise is not blown up.
 */
export function normalizeSentence(samples: Int16Array, sampleRate: number, targetDb = TARGET_LEVEL_DBFS): Int16Array {
  const level = speechLevelDb(samples, sampleRate);
  if (!Number.isFinite(level)) return samples;
  return applyGain(samples, dbToGain(Math.min(30, targetDb - level)));
}

/** What a synthesis worker does to each piece it posts: hd sentences are normalised whole, others get the fixed gain. */
export function levelPiece(samples: Int16Array, sampleRate: number, opts: { gainDb?: number; hd?: boolean }): Int16Array {
  if (opts.hd) return normalizeSentence(samples, sampleRate);
  return applyGain(samples, dbToGain(opts.gainDb ?? 0));
}
