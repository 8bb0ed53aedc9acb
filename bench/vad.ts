/**
 * npm run bench:vad: what voice activity detection (src/engines/shared/vad) costs a Realtime session. The audio:
 * sentences spoken by the embedded espeak-ng engine, resampled to 16 kHz, with 0.8 s of silence between them and
 * white noise at -60 dBFS, pushed in 20 ms chunks as a client sends them. Printed for docs/performance.md:
 * - CPU time per second of audio of each detector (medians of RUNS passes; process CPU: Silero's worker thread and
 *   the main thread), and the main thread's own CPU time per frame (Linux's schedstat: framing and messages);
 * - for Silero: the first load (sherpa-onnx, the model checked, a Vad made and proven) in the worker thread and, as
 *   before the worker, on the main thread, with the main thread's longest event-loop stall during each; a new
 *   session's detector (a Vad made: an ONNX Runtime session) the same two ways, a reused one (a closed session's Vad,
 *   reset), and the memory of a Vad;
 * - for Silero: CPU per second of audio over 120 s of speech without a pause (sherpa's segment buffer, flushed
 *   every frame, must not grow with the speech).
 */
import { createEspeakEngine } from '../src/engines/espeak/index.js';
import { resampleFloat } from '../src/codec/pcm.js';
import { readFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { loadSherpa } from '../src/engines/shared/sherpa.js';
import { VoiceActivity, type VoiceActivityEngine } from '../src/engines/shared/vad/index.js';
import { loadSileroRuntime, type SherpaVadModule } from '../src/engines/shared/vad/silero.js';
import type { VoiceActivityDetector } from '../src/engines/types.js';

const RUNS = Number(process.env.RUNS ?? 9);
const RATE = 16000;
const CHUNK = RATE / 50;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const cpuMs = (c: NodeJS.CpuUsage) => (c.user + c.system) / 1000;
/** the main thread's own CPU time (ms), from Linux's schedstat (NaN elsewhere): process.cpuUsage() counts every thread */
const mainThreadCpuMs = (): number => {
  try {
    return Number(readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'utf8').split(' ')[0]) / 1e6;
  } catch {
    return NaN;
  }
};

async function speech(): Promise<{ gapped: Float32Array; continuous: Float32Array }> {
  const espeak = createEspeakEngine({ poolSize: 1, warmVoices: ['en-us+m3'] });
  await espeak.ready();
  const texts = [
    'The quick brown fox jumps over the lazy dog.',
    'We will meet at the station tomorrow morning.',
    'Please call me when you get home tonight.',
    'The weather is nice today and the sun is shining.',
  ];
  const parts: Float32Array[] = [];
  for (const text of texts) {
    const ints: Int16Array[] = [];
    let rate = 0;
    for await (const c of espeak.synthesize({ text, voice: 'en-us+m3', speed: 1, quality: 'hd' })) {
      ints.push(c.samples);
      rate = c.sampleRate;
    }
    const f = new Float32Array(ints.reduce((a, p) => a + p.length, 0));
    let o = 0;
    for (const p of ints) for (let i = 0; i < p.length; i++) f[o++] = p[i]! / 32768;
    parts.push(resampleFloat(f, rate, RATE));
  }
  await espeak.close();
  const join = (gap: number, seconds: number) => {
    const out = new Float32Array(seconds * RATE);
    for (let at = 0, k = 0; at < out.length; k++) {
      const p = parts[k % parts.length]!;
      out.set(p.subarray(0, Math.min(p.length, out.length - at)), at);
      at += p.length + gap;
    }
    let s = 7;
    for (let i = 0; i < out.length; i++) {
      s = (s * 1103515245 + 12345) & 0x7fffffff;
      out[i]! += ((s / 0x7fffffff) * 2 - 1) * 0.0017;
    }
    return out;
  };
  return { gapped: join(0.8 * RATE, 30), continuous: join(0, 120) };
}

/** pushes the audio in 20 ms chunks, each awaited before the next (as a session handles its appends) */
async function pushAll(d: VoiceActivityDetector, audio: Float32Array): Promise<number> {
  let speechFrames = 0;
  for (let at = 0; at < audio.length; at += CHUNK) for (const x of await d.push(audio.subarray(at, at + CHUNK))) if (x) speechFrames++;
  return speechFrames;
}

/** runs `f`, giving its time and the main thread's longest event-loop stall meanwhile (ms) */
async function stalled<T>(f: () => Promise<T> | T): Promise<{ value: T; ms: number; stallMs: number }> {
  const h = monitorEventLoopDelay({ resolution: 2 });
  h.enable();
  // its first tick records nothing: a stall that began at once would be missed
  await new Promise((r) => setTimeout(r, 5));
  const t = performance.now();
  const value = await f();
  const ms = performance.now() - t;
  // the delay of a stall is recorded when the loop comes back: one more turn
  await new Promise((r) => setTimeout(r, 5));
  h.disable();
  return { value, ms, stallMs: h.max / 1e6 };
}

const { gapped, continuous } = await speech();
const vad = new VoiceActivity();
const load = await stalled(() => vad.status());
const status = load.value;

const lines = [`bench:vad ${new Date().toISOString()} (${RUNS} passes over ${gapped.length / RATE} s of espeak speech with pauses, 20 ms chunks; medians)`, ''];
lines.push(`active: ${status.engine}${status.model ? ` (${status.model})` : ''}${status.reason ? ` - ${status.reason}` : ''}`, '');
lines.push('| detector | CPU ms per s of audio (process) | per 32 ms frame | of it on the main thread | speech frames |', '|---|---:|---:|---:|---:|');
for (const engine of ['silero', 'energy'] as VoiceActivityEngine[]) {
  if (engine === 'silero' && status.engine !== 'silero') continue;
  const cpu: number[] = [];
  const busy: number[] = [];
  let frames = 0;
  for (let r = 0; r < RUNS; r++) {
    const d = await vad.create({ threshold: 0.5 }, engine);
    const c = process.cpuUsage();
    const m = mainThreadCpuMs();
    frames = await pushAll(d, gapped);
    busy.push(mainThreadCpuMs() - m);
    cpu.push(cpuMs(process.cpuUsage(c)));
    d.close();
  }
  const perSecond = median(cpu) / (gapped.length / RATE);
  const nFrames = Math.floor(gapped.length / 512);
  lines.push(
    `| ${engine} | ${perSecond.toFixed(2)} | ${(((perSecond * 512) / RATE) * 1000).toFixed(1)} µs | ${((median(busy) / nFrames) * 1000).toFixed(1)} µs | ${frames} of ${nFrames} |`,
  );
}

if (status.engine === 'silero') {
  lines.push('');
  lines.push(
    `Silero, first load in the worker thread (sherpa-onnx, model checked, a Vad made and proven): ${status.loadMs?.toFixed(0)} ms in the worker, ${load.ms.toFixed(0)} ms to the caller; main thread's longest event-loop stall meanwhile ${load.stallMs.toFixed(1)} ms`,
  );
  // the same load on the main thread, as before the worker: what it stalled
  const onMain = await stalled(() => loadSileroRuntime(() => loadSherpa<SherpaVadModule>()));
  lines.push(`the same load on the main thread (before the worker): ${onMain.ms.toFixed(0)} ms, longest event-loop stall ${onMain.stallMs.toFixed(1)} ms`);
  const mainNew: number[] = [];
  for (let r = 0; r < 5; r++) mainNew.push((await stalled(() => onMain.value.create(0.6 + r / 100).close())).stallMs);
  // a new session's Vad: a threshold no closed detector had
  const fresh: number[] = [];
  const freshStall: number[] = [];
  const reused: number[] = [];
  const rss0 = process.memoryUsage().rss;
  const held = [];
  for (let r = 0; r < 5; r++) {
    const m = await stalled(() => vad.create({ threshold: 0.3 + r / 100 }));
    held.push(m.value);
    fresh.push(m.ms);
    freshStall.push(m.stallMs);
  }
  const perVadMb = (process.memoryUsage().rss - rss0) / 5 / 1048576;
  for (const d of held) d.close();
  for (let r = 0; r < 5; r++) {
    const t = performance.now();
    const d = await vad.create({ threshold: 0.5 });
    reused.push(performance.now() - t);
    d.close();
  }
  lines.push(
    `a new session's detector (an ONNX Runtime session, made in the worker): ${median(fresh).toFixed(0)} ms to the caller, main-thread stall ${median(freshStall).toFixed(1)} ms (made on the main thread: stall ${median(mainNew).toFixed(0)} ms), ~${perVadMb.toFixed(1)} MB; a reused one: ${median(reused).toFixed(2)} ms`,
  );
  const d = await vad.create({ threshold: 0.5 });
  const perTen: number[] = [];
  for (let at = 0; at < continuous.length; at += 10 * RATE) {
    const c = process.cpuUsage();
    await pushAll(d, continuous.subarray(at, at + 10 * RATE));
    perTen.push(cpuMs(process.cpuUsage(c)) / 10);
  }
  d.close();
  lines.push(`120 s of speech without a pause, CPU ms per s of audio by 10 s: ${perTen.map((x) => x.toFixed(1)).join(', ')}`);
}
await vad.close();
console.log(lines.join('\n'));
