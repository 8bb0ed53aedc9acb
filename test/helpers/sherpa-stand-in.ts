/**
 * A stand-in for sherpa-onnx's `Vad`, loaded by the Silero worker thread in place of sherpa-onnx-node
 * (VoiceActivitySetup.sherpaModule), for what the real one cannot be made to do on cue: wait in its constructor
 * until the test's main thread lets it go (as a real Vad takes 80-300 ms there), or end the worker thread (a crash).
 *
 * It is driven through a shared block (VoiceActivitySetup.sherpaData = { control }, an Int32Array on a
 * SharedArrayBuffer; the slots below). Its decision: a frame is speech when its first sample is exactly
 * SPEECH_MARK (what the energy detector decides differently: a steady 0.2 frame is speech to energy only).
 */
import { workerData } from 'node:worker_threads';

/** slots of the control block */
export const STAND_IN = {
  /** times this module was loaded (a worker each) */
  LOADS: 0,
  /** Vads made */
  MADE: 1,
  /** 1: a Vad's constructor waits for the main thread (HELD, then RELEASED) */
  HOLD: 2,
  /** 1: the constructor is waiting; the main thread sets 2 to let it go (it sets 0 once gone) */
  HELD: 3,
  /** 1: a Vad's constructor ends the worker thread (exit code 71), as a crash while loading */
  EXIT_ON_MAKE: 4,
  SLOTS: 5,
} as const;
export const RELEASED = 2;
/** a frame that starts with this sample is speech */
export const SPEECH_MARK = 0.5;
/** a frame that starts with this sample ends the worker thread (exit code 70), as a crash while deciding */
export const EXIT_MARK = 0.75;

export function standInControl(): Int32Array {
  return new Int32Array(new SharedArrayBuffer(4 * STAND_IN.SLOTS));
}

/** lets a held constructor go once it is waiting (the test's main thread) */
export function release(control: Int32Array): void {
  Atomics.store(control, STAND_IN.HELD, RELEASED);
  Atomics.notify(control, STAND_IN.HELD);
}

const control = (workerData as { sherpaData?: { control?: Int32Array } } | undefined)?.sherpaData?.control;
if (control) Atomics.add(control, STAND_IN.LOADS, 1);

export class Vad {
  private detected = false;

  constructor(_config: object, _bufferSeconds: number) {
    if (!control) return;
    Atomics.add(control, STAND_IN.MADE, 1);
    if (Atomics.load(control, STAND_IN.EXIT_ON_MAKE) === 1) process.exit(71);
    if (Atomics.load(control, STAND_IN.HOLD) !== 1) return;
    Atomics.store(control, STAND_IN.HELD, 1);
    // no test waits this long; past it the Vad is refused, and the test sees a detector that is not Silero
    const until = Date.now() + 60_000;
    while (Atomics.load(control, STAND_IN.HELD) !== RELEASED) {
      if (Date.now() > until) throw new Error('the stand-in Vad was never released');
      Atomics.wait(control, STAND_IN.HELD, 1, 50);
    }
    Atomics.store(control, STAND_IN.HELD, 0);
  }

  acceptWaveform(samples: Float32Array): void {
    // the 64 samples of context before the first frame are not a frame
    if (samples.length < 512) return;
    if (samples[0] === EXIT_MARK) process.exit(70);
    this.detected = samples[0] === SPEECH_MARK;
  }

  isDetected(): boolean {
    return this.detected;
  }

  isEmpty(): boolean {
    return true;
  }

  pop(): void {}

  flush(): void {}

  reset(): void {
    this.detected = false;
  }
}
