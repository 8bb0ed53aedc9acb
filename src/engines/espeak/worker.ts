/**
 * espeak-ng synthesis worker thread. Loads the emscripten build once (its 24 MB data file included)
 * and reuses the same synthesizer for every job. Audio is posted while espeak produces it (in pieces
 * of at least ~0.3 s), and a job stops mid-sentence when the main thread raises the abort flag.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { ABORT_SLOT } from '../flite/pool.js';
import { timeStretch } from '../../audio/codec/stretch.js';
import { espeakRate } from './rate.js';

const port = parentPort!;
const control: Int32Array = workerData.control;
const MIN_POST_SAMPLES = 6144;

interface EspeakWorker {
  set_voice(name: string): number;
  set_rate(wpm: number): void;
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

  // warm up both voices of the voice map: the first synthesis of a variant is several times slower
  // (this build is wasm2js: plain JavaScript that the JIT optimizes only after some use)
  const warm = 'Hello, this warms up the synthesizer: numbers 1, 22 and 333 are read, and so is this question?';
  for (const v of ['en-us+f5', 'en-us+f3', 'en-us+f5', 'en-us+f3', 'en-us+f5', 'en-us+f3']) {
    espeak.set_voice(v);
    espeak.synthesize(warm, () => 0);
  }
  currentVoice = 'en-us+f3';
  port.postMessage({ type: 'ready', sampleRate });

  port.on('message', (m: { type: string; id: number; text: string; voice: string; speed: number }) => {
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
        if (Atomics.load(control, ABORT_SLOT) === id) return;
        port.postMessage({ type: 'pcm', id, samples: out, sampleRate }, [out.buffer]);
      };
      espeak.synthesize(m.text, (samples) => {
        if (Atomics.load(control, ABORT_SLOT) === id) return 1;
        if (samples && samples.length > 0) {
          pending.push(samples);
          pendingLen += samples.length;
          // a stretched sentence is stretched whole; otherwise stream as it comes
          if (residual === 1 && pendingLen >= MIN_POST_SAMPLES) flush();
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
