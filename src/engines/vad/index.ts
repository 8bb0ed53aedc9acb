// TEMPORARY (branch rt): replaced by the vad branch's detectors at merge
import type { VoiceActivityDetector, VoiceActivityOptions } from '../types.js';

export async function voiceActivityEngine(): Promise<'silero' | 'energy'> {
  return 'energy';
}

export async function createVoiceActivityDetector(opts: VoiceActivityOptions): Promise<VoiceActivityDetector> {
  const frameSamples = 512;
  let rest = new Float32Array(0);
  const dbfs = -55 + opts.threshold * 30;
  return {
    name: 'energy',
    frameSamples,
    push(samples) {
      const all = new Float32Array(rest.length + samples.length);
      all.set(rest);
      all.set(samples, rest.length);
      const out: boolean[] = [];
      let i = 0;
      for (; i + frameSamples <= all.length; i += frameSamples) {
        let e = 0;
        for (let j = i; j < i + frameSamples; j++) e += all[j]! * all[j]!;
        out.push(10 * Math.log10(e / frameSamples + 1e-12) > dbfs);
      }
      rest = all.slice(i);
      return out;
    },
    reset() {
      rest = new Float32Array(0);
    },
    close() {},
  };
}
