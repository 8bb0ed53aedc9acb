/**
 * A fake of whisper.cpp's Node binding (the wrapper's API: initWhisper -> a context with transcribeData and
 * release) whose jobs do what the request's prompt says, for the tests of the bound on a whisper job
 * (src/engines/whisper): loaded by the engine through PORTICO_WHISPER_BINDING or `packageName`, and by the test
 * through import() of the same URL, which gives the same module and so the same `state`.
 *
 * - prompt `hang`: the job never settles, and its stop() never settles either;
 * - prompt `hang-after-text`: the same, after one segment (" Hello") through onNewSegments;
 * - prompt `wait`: the job settles when the test calls its resolve (or reject);
 * - anything else: " Fresh text." at once.
 * `state.hangRelease = true` makes release() never settle. Every context, job, stop and release is recorded.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { ModelSpec } from '../../src/models/config.js';

export interface FakeJob {
  /** the context it was handed to (1 for the first context made, 2 for the next...) */
  ctx: number;
  prompt: string;
  /** seconds of the audio it was given (16-bit samples at 16 kHz) */
  seconds: number;
  settled: boolean;
  resolve(r: object): void;
  reject(e: Error): void;
  onNewSegments?: (r: { segments: Array<{ text: string; t0: number; t1: number }> }) => void;
}

export interface FakeWhisperState {
  /** contexts made */
  inits: number;
  jobs: FakeJob[];
  /** the context of each stop() called */
  stops: number[];
  /** the context of each release() called */
  releases: number[];
  /** jobs handed to the binding and not settled, and the most there ever were at once */
  running: number;
  maxRunning: number;
  hangRelease: boolean;
}

const SOURCE = `
export const state = { inits: 0, jobs: [], stops: [], releases: [], running: 0, maxRunning: 0, hangRelease: false };
export const FRESH = { isAborted: false, language: 'en', result: ' Fresh text.', segments: [{ text: ' Fresh text.', t0: 0, t1: 900 }] };
export async function initWhisper() {
  const id = ++state.inits;
  return {
    transcribeData(audio, options) {
      const prompt = options.prompt ?? '';
      let settle;
      const promise = new Promise((resolve, reject) => (settle = { resolve, reject }));
      const job = { ctx: id, prompt, seconds: audio.byteLength / 32000, settled: false, onNewSegments: options.onNewSegments };
      const finish = (f) => {
        if (job.settled) return;
        job.settled = true;
        state.running--;
        f();
      };
      job.resolve = (r) => finish(() => settle.resolve(r));
      job.reject = (e) => finish(() => settle.reject(e));
      state.jobs.push(job);
      state.running++;
      state.maxRunning = Math.max(state.maxRunning, state.running);
      const hang = prompt.startsWith('hang');
      if (prompt === 'hang-after-text') setImmediate(() => options.onNewSegments?.({ segments: [{ text: ' Hello', t0: 0, t1: 500 }] }));
      else if (!hang && prompt !== 'wait') setImmediate(() => job.resolve(FRESH));
      return {
        stop: () => {
          state.stops.push(id);
          return hang ? new Promise(() => {}) : Promise.resolve();
        },
        promise,
      };
    },
    release() {
      state.releases.push(id);
      return state.hangRelease ? new Promise(() => {}) : Promise.resolve();
    },
  };
}
`;

/** Writes the fake into `dir` as `name` and gives its file: URL (a new name is a new module, with its own state). */
export function writeHangingWhisper(dir: string, name = 'hanging-whisper.mjs'): string {
  const file = join(dir, name);
  writeFileSync(file, SOURCE);
  return pathToFileURL(file).href;
}

/** The fake's state, as the engine that loaded `url` sees it. */
export async function hangingWhisperState(url: string): Promise<FakeWhisperState> {
  return ((await import(url)) as { state: FakeWhisperState }).state;
}

/**
 * The fake installed for an app in this process: written into `dir`, named by PORTICO_WHISPER_BINDING (the caller
 * deletes it after), with a model file for it to load; gives its state and the model's spec (named `w`).
 */
export async function useHangingWhisper(dir: string): Promise<{ state: FakeWhisperState; model: ModelSpec }> {
  const url = writeHangingWhisper(dir);
  const state = await hangingWhisperState(url);
  writeFileSync(join(dir, 'model.bin'), 'ggml');
  process.env.PORTICO_WHISPER_BINDING = url;
  return { state, model: { name: 'w', provider: 'whisper', type: 'transcription', path: join(dir, 'model.bin') } as ModelSpec };
}
