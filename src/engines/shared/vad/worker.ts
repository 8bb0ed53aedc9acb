/**
 * The Silero worker thread (started by ./thread.ts at a process's first Realtime session): loads sherpa-onnx and the
 * model, makes the sessions' detectors and decides their frames, so that none of it holds the main thread's event
 * loop (the load ~0.26 s, a new detector 80-300 ms: ONNX Runtime sessions, made synchronously by sherpa-onnx).
 *
 * Protocol (ids are the main thread's):
 *   workerData  { modelPath?, sherpaModule?, sherpaData? }  a module to use instead of sherpa-onnx-node (tests), and
 *               what it reads from workerData
 *   worker -> main  { type: 'ready', model, modelPath, loadMs } | { type: 'fatal', message } (then the thread ends)
 *   main -> worker  { type: 'create', id, threshold }   -> { type: 'created', id } | { type: 'failed', id, message }
 *                   { type: 'push', id, seq, frames }  (a whole number of 512-sample frames, transferred)
 *                                                      -> { type: 'decided', id, seq, speech } (a byte per frame, transferred)
 *                                                       | { type: 'failed', id, seq, message }
 *                   { type: 'reset', id } | { type: 'close', id }   (no answer)
 * Messages are handled one at a time, in order: a push after a reset is decided after it.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { loadSherpa } from '../sherpa.js';
import type { FrameDetector } from './frames.js';
import { loadSileroRuntime, type SherpaVadModule, type SileroRuntime } from './silero.js';

export interface SileroWorkerData {
  modelPath?: string;
  sherpaModule?: string;
  sherpaData?: unknown;
}

export type ToSileroWorker =
  | { type: 'create'; id: number; threshold: number }
  | { type: 'push'; id: number; seq: number; frames: Float32Array }
  | { type: 'reset'; id: number }
  | { type: 'close'; id: number };

export type FromSileroWorker =
  | { type: 'ready'; model: string; modelPath: string; loadMs: number }
  | { type: 'fatal'; message: string }
  | { type: 'created'; id: number }
  | { type: 'decided'; id: number; seq: number; speech: Uint8Array }
  | { type: 'failed'; id: number; seq?: number; message: string };

const port = parentPort!;
const data = (workerData ?? {}) as SileroWorkerData;
const detectors = new Map<number, FrameDetector>();

const post = (m: FromSileroWorker, transfer?: ArrayBuffer[]) => port.postMessage(m, transfer);

function handle(runtime: SileroRuntime, m: ToSileroWorker): void {
  switch (m.type) {
    case 'create':
      try {
        detectors.set(m.id, runtime.create(m.threshold));
        post({ type: 'created', id: m.id });
      } catch (e) {
        post({ type: 'failed', id: m.id, message: (e as Error).message });
      }
      return;
    case 'push': {
      const d = detectors.get(m.id);
      try {
        if (!d) throw new Error('no such detector');
        const ds = d.push(m.frames);
        const speech = new Uint8Array(ds.length);
        for (let i = 0; i < ds.length; i++) speech[i] = ds[i] ? 1 : 0;
        post({ type: 'decided', id: m.id, seq: m.seq, speech }, [speech.buffer]);
      } catch (e) {
        detectors.delete(m.id);
        post({ type: 'failed', id: m.id, seq: m.seq, message: (e as Error).message });
      }
      return;
    }
    case 'reset':
      detectors.get(m.id)?.reset();
      return;
    case 'close':
      detectors.get(m.id)?.close();
      detectors.delete(m.id);
      return;
  }
}

async function main(): Promise<void> {
  const t0 = performance.now();
  // a stand-in module (tests) is imported only once the model is checked, as sherpa-onnx is
  const stand = data.sherpaModule;
  const loader = stand
    ? async () => {
        const m = (await import(stand)) as { default?: SherpaVadModule } & SherpaVadModule;
        return m.default ?? m;
      }
    : () => loadSherpa<SherpaVadModule>();
  let runtime: SileroRuntime;
  try {
    runtime = await loadSileroRuntime(loader, data.modelPath);
  } catch (e) {
    // nothing listens: the thread ends once the message is out
    post({ type: 'fatal', message: (e as Error).message });
    return;
  }
  port.on('message', (m: ToSileroWorker) => handle(runtime, m));
  post({ type: 'ready', model: runtime.modelName, modelPath: runtime.modelPath, loadMs: performance.now() - t0 });
}

void main();
