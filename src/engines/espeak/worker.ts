/**
 * espeak-ng synthesis worker thread. Loads the emscripten build once (its 24 MB data file included)
 * and reuses the same synthesizer for every job. Audio is posted while espeak produces it (in pieces
 * of at least ~0.3 s; hd and time-stretched sentences whole), and a job stops mid-sentence when the main
 * thread raises the abort flag.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { ABORT_SLOT } from '../shared/synth-pool.js';
import { timeStretch } from '../../codec/stretch.js';
import { espeakPitch, espeakRate } from './rate.js';
import { levelPiece } from '../shared/loudness.js';
import type { SynthJob } from '../shared/synth-pool.js';

const port = parentPort!;
const control: Int32Array = workerData.control;
const warmVoices: string[] = Array.isArray(workerData.warmVoices) ? workerData.warmVoices : ['en-us+f5', 'en-us+f3'];
const MIN_POST_SAMPLES = 6144;

interface EspeakWorker {
  set_voice(name: string): number;
  set_rate(wpm: number): void;
  set_pitch(pitch: number): void;
  readonly samplerate: number;
  synthesize(text: string, cb: (samples: Int16Array | null, events: unknown[]) => number | boolean): void;
}

async function main(): Promise<void> {
  const spec = '@echogarden/espeak-ng-emscripten';
  const { default: init } = (await import(spec)) as { default: () => Promise<{ eSpeakNGWorker: new () => EspeakWorker }> };
  const m = await init();
  const espeak = new m.eSpeakNGWorker();
  const sampleRate = espeak.samplerate || 22050;
  let currentVoice = '';

  // warm up the voices it will serve: the first syntheses are several times slower (this build is wasm2js:
  // plain JavaScript that the JIT optimizes only after some use), and so is the first use of each variant.
  // The JIT with a few sentences in the first two voices, then each other voice once.
  const warm = 'Hello, this warms up the synthesizer: numbers 1, 22 and 333 are read, and so is this question?';
  const first = warmVoices.slice(0, 2);
  for (const v of [...first, ...first, ...first, ...warmVoices.slice(2)]) {
    if (espeak.set_voice(v) !== 0) continue;
    currentVoice = v;
    espeak.synthesize(warm, () => 0);
  }
  port.postMessage({ type: 'ready', sampleRate });

  port.on('message', (m: SynthJob & { type: string; id: number }) => {
    if (m.type !== 'synth') return;
    const id = m.id;
    try {
      if (m.voice !== currentVoice) {
        const rc = espeak.set_voice(m.voice);
        if (rc !== 0) {
          currentVoice = '';
          port.postMessage({ type: 'error', id, message: `Unknown espeak voice '${m.voice}'`, code: 'invalid_voice', status: 400 });
          return;
        }
        currentVoice = m.voice;
      }
      const { wpm, residual } = espeakRate(m.speed);
      espeak.set_rate(wpm);
      espeak.set_pitch(espeakPitch(m.pitch));
      // hd and stretched sentences are processed whole; otherwise audio streams as espeak produces it
      const whole = residual !== 1 || m.hd;

      let pending: Int16Array[] = [];
      let pendingLen = 0;
      const flush = () => {
        if (pendingLen === 0) return;
        let out = new Int16Array(pendingLen);
        let o = 0;
        for (const p of pending) {
          out.set(p, o);
          o += p.length;
        }
        pending = [];
        pendingLen = 0;
        if (residual !== 1) out = timeStretch(out, residual, sampleRate) as Int16Array<ArrayBuffer>;
        levelPiece(out, sampleRate, m);
        if (Atomics.load(control, ABORT_SLOT) === id) return;
        port.postMessage({ type: 'pcm', id, samples: out, sampleRate }, [out.buffer]);
      };
      espeak.synthesize(m.text, (samples) => {
        if (Atomics.load(control, ABORT_SLOT) === id) return 1;
        if (samples && samples.length > 0) {
          pending.push(samples);
          pendingLen += samples.length;
          if (!whole && pendingLen >= MIN_POST_SAMPLES) flush();
        }
        return 0;
      });
      if (Atomics.load(control, ABORT_SLOT) !== id) flush();
      port.postMessage({ type: 'done', id });
    } catch (e) {
      port.postMessage({ type: 'error', id, message: `espeak: ${e instanceof Error ? e.message : String(e)}` });
    }
  });
}

main().catch((e) => {
  port.postMessage({ type: 'fatal', message: e instanceof Error ? e.message : String(e) });
});
