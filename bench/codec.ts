/**
 * npm run bench:codec: Portico's own resampler and time-stretcher (src/codec/pcm.ts, stretch.ts) against ffmpeg's
 * aresample and atempo, on the work the speech path gives them: one sentence of speech-like audio at a time.
 * Issue 8 asks to use ffmpeg unless a figure or a stated reason says otherwise; this prints the figures
 * (median of the runs, both measured in the same run) for docs/architecture.md.
 */
import { FloatResampler, int16ToFloat, runFfmpeg, timeStretch } from '../src/codec/index.js';

const RUNS = Number(process.env.RUNS ?? 30);

/** `seconds` of a voiced, speech-like signal (harmonics of a gliding 120-220 Hz pitch, syllable envelope, some noise). */
function speechLike(seconds: number, rate: number): Int16Array {
  const n = Math.round(seconds * rate);
  const out = new Int16Array(n);
  let phase = 0;
  let seed = 1;
  for (let i = 0; i < n; i++) {
    const t = i / rate;
    const f0 = 170 + 50 * Math.sin(2 * Math.PI * 0.7 * t);
    phase += (2 * Math.PI * f0) / rate;
    let v = 0;
    for (let h = 1; h <= 12; h++) v += Math.sin(h * phase) / h;
    const env = 0.5 + 0.5 * Math.sin(2 * Math.PI * 4 * t);
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    out[i] = Math.round((v * env * 0.25 + ((seed / 0x7fffffff) * 2 - 1) * 0.01) * 32767);
  }
  return out;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function time(fn: () => unknown | Promise<unknown>): Promise<number> {
  const t = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t) / 1e6;
}

async function row(name: string, ours: () => unknown, ffmpeg: () => Promise<unknown>): Promise<string> {
  await ours();
  await ffmpeg();
  const a: number[] = [];
  const b: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    a.push(await time(ours));
    b.push(await time(ffmpeg));
  }
  const ma = median(a);
  const mb = median(b);
  return `| ${name} | ${ma.toFixed(2)} ms | ${mb.toFixed(2)} ms | ${(mb / ma).toFixed(1)}x |`;
}

const sentence16k = speechLike(3, 16000);
const sentence22k = speechLike(3, 22050);
const f16 = int16ToFloat(sentence16k);
const s16le = (x: Int16Array) => new Uint8Array(x.buffer, x.byteOffset, x.byteLength);

const lines = [
  `bench:codec ${new Date().toISOString()} (${RUNS} runs each, medians; one 3 s sentence)`,
  '',
  '| work | Portico (JS, in the worker or the main thread) | ffmpeg process | ffmpeg / Portico |',
  '| --- | --- | --- | --- |',
  await row(
    'resample 16 kHz -> 24 kHz (flite sentence to the output rate)',
    () => {
      const r = new FloatResampler(16000, 24000);
      r.push(f16);
      r.flush();
    },
    () =>
      runFfmpeg(
        ['-hide_banner', '-loglevel', 'error', '-f', 's16le', '-ar', '16000', '-ac', '1', '-i', 'pipe:0', '-af', 'aresample=24000', '-f', 's16le', 'pipe:1'],
        s16le(sentence16k),
      ),
  ),
  await row(
    'time-stretch x1.6 at 22.05 kHz (espeak-ng beyond its 450 wpm)',
    () => timeStretch(sentence22k, 1.6, 22050),
    () =>
      runFfmpeg(
        ['-hide_banner', '-loglevel', 'error', '-f', 's16le', '-ar', '22050', '-ac', '1', '-i', 'pipe:0', '-af', 'atempo=1.6', '-f', 's16le', 'pipe:1'],
        s16le(sentence22k),
      ),
  ),
  await row(
    "time-stretch x0.5 at 22.05 kHz (slower than espeak-ng's 80 wpm)",
    () => timeStretch(sentence22k, 0.5, 22050),
    () =>
      runFfmpeg(
        ['-hide_banner', '-loglevel', 'error', '-f', 's16le', '-ar', '22050', '-ac', '1', '-i', 'pipe:0', '-af', 'atempo=0.5', '-f', 's16le', 'pipe:1'],
        s16le(sentence22k),
      ),
  ),
];
console.log(lines.join('\n'));
