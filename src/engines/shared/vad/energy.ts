/**
 * The energy detector: the fallback where the Silero model or sherpa-onnx is not installed. Pure TypeScript.
 *
 * Each frame of 512 samples (32 ms, the Silero frame, so the session's timing does not depend on the detector)
 * is speech when its RMS level (dBFS) is above both
 * - an absolute level, -60 dBFS at threshold 0, -40 at 0.5, -20 at 1 (`ENERGY_LEVELS`), and
 * - the noise floor plus a margin, 6 dB at threshold 0, 12 at 0.5, 18 at 1. The noise floor is the quietest
 *   frame of the last 3 s (minimum statistics: speech has pauses between words, steady noise has none), with
 *   the window primed at -70 dBFS, so for the first 3 s the absolute level decides.
 * Once speech, a frame stays speech down to 6 dB under that (hysteresis, as Silero's 0.15 under its threshold),
 * so the quieter ends of words do not flicker.
 *
 * It hears level, not voice: a door, music or loud steady noise that rose within the last 3 s is speech to it.
 * The session says which detector it has.
 */
import type { VoiceActivityDetector } from '../../types.js';
import { FrameBuffer, asyncDetector, checkThreshold, type FrameDetector } from './frames.js';

export const ENERGY_FRAME_SAMPLES = 512;
/** frames in the noise-floor window (3 s) */
const FLOOR_FRAMES = 94;
const PRIMED_FLOOR_DBFS = -70;
const HYSTERESIS_DB = 6;

/** The levels a threshold maps to: the absolute level a frame must pass (dBFS), and its margin over the noise floor (dB). */
export function energyLevels(threshold: number): { absoluteDbfs: number; marginDb: number } {
  return { absoluteDbfs: -60 + 40 * threshold, marginDb: 6 + 12 * threshold };
}

/** RMS level of a frame, dBFS (-120 for digital silence). */
export function frameLevelDbfs(frame: Float32Array): number {
  let sum = 0;
  for (let i = 0; i < frame.length; i++) sum += frame[i]! * frame[i]!;
  return 10 * Math.log10(sum / frame.length + 1e-12);
}

class EnergyDetector implements FrameDetector {
  readonly name = 'energy';
  readonly frameSamples = ENERGY_FRAME_SAMPLES;
  private readonly frames = new FrameBuffer(ENERGY_FRAME_SAMPLES);
  private readonly floorWindow = new Float64Array(FLOOR_FRAMES);
  private floorAt = 0;
  private speaking = false;
  private closed = false;
  private readonly absoluteDbfs: number;
  private readonly marginDb: number;
  private readonly decide = (frame: Float32Array): boolean => this.decideFrame(frame);

  constructor(threshold: number) {
    ({ absoluteDbfs: this.absoluteDbfs, marginDb: this.marginDb } = energyLevels(threshold));
    this.reset();
  }

  push(samples: Float32Array): boolean[] {
    if (this.closed) throw new Error('the voice activity detector is closed');
    return this.frames.push(samples, this.decide);
  }

  private decideFrame(frame: Float32Array): boolean {
    const db = frameLevelDbfs(frame);
    this.floorWindow[this.floorAt] = db;
    this.floorAt = (this.floorAt + 1) % FLOOR_FRAMES;
    let floor = Infinity;
    for (let i = 0; i < FLOOR_FRAMES; i++) if (this.floorWindow[i]! < floor) floor = this.floorWindow[i]!;
    const on = Math.max(this.absoluteDbfs, floor + this.marginDb);
    this.speaking = db > (this.speaking ? on - HYSTERESIS_DB : on);
    return this.speaking;
  }

  reset(): void {
    this.frames.clear();
    this.floorWindow.fill(PRIMED_FLOOR_DBFS);
    this.floorAt = 0;
    this.speaking = false;
  }

  close(): void {
    this.closed = true;
  }
}

/** The energy detector on the calling thread, deciding at once (what a Silero detector falls back on). */
export function createEnergyFrames(threshold: number): FrameDetector {
  return new EnergyDetector(checkThreshold(threshold));
}

export function createEnergyDetector(threshold: number): VoiceActivityDetector {
  return asyncDetector(createEnergyFrames(threshold));
}
