/**
 * The flite engine's own cost, without HTTP (npm run bench:flite): one worker (pool size 1), single-sentence
 * requests on four voices in turn, measured in this process. Not a test: it prints a Markdown table.
 *
 * - back to back: BENCH_N requests, each started as soon as the previous one ended (a busy worker: whatever the
 *   worker does between two sentences is on the next one's path);
 * - 150 ms apart: BENCH_N / 2 requests with an idle gap before each (work done while idle is off the path).
 *
 * CPU is process.cpuUsage() (every thread of the process: the worker and this thread's small share) over the
 * phase, divided by its requests; first audio is synthesize() to its first PCM chunk. Last, the process's resident
 * set size (the worker's instance, its memory and whatever the garbage collector has not yet freed).
 */
import os from 'node:os';
import { createFliteEngine } from '../src/engines/flite/index.js';
import type { EmbeddedSpeechEngine } from '../src/engines/flite/index.js';
import { latency, fmt } from './lib/stats.js';

const N = Number(process.env.BENCH_N || 40);
const SENTENCES = [
  'The quick brown fox jumps over the lazy dog.',
  'The birch canoe slid on the smooth planks.',
  'Glue the sheet to the dark blue background.',
  'It is easy to tell the depth of a well.',
];
const VOICES = ['slt', 'rms', 'awb', 'kal16'];

async function once(engine: EmbeddedSpeechEngine, i: number): Promise<{ firstMs: number; totalMs: number }> {
  const t0 = performance.now();
  let firstMs = -1;
  for await (const _ of engine.synthesize({ text: SENTENCES[i % SENTENCES.length], voice: VOICES[i % VOICES.length], speed: 1 })) {
    if (firstMs < 0) firstMs = performance.now() - t0;
  }
  return { firstMs, totalMs: performance.now() - t0 };
}

async function phase(engine: EmbeddedSpeechEngine, n: number, gapMs: number) {
  const first: number[] = [];
  const total: number[] = [];
  const c0 = process.cpuUsage();
  const w0 = performance.now();
  for (let i = 0; i < n; i++) {
    if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
    const r = await once(engine, i);
    first.push(r.firstMs);
    total.push(r.totalMs);
  }
  const c = process.cpuUsage(c0);
  return { cpuMs: (c.user + c.system) / 1000 / n, wallMs: (performance.now() - w0) / n, first: latency(first), total: latency(total) };
}

async function main() {
  const engine = createFliteEngine({ poolSize: 1 });
  await engine.ready();
  for (let i = 0; i < 4; i++) await once(engine, i);
  const load = os
    .loadavg()
    .map((x) => x.toFixed(1))
    .join(', ');
  console.log(`flite, one worker, ${os.cpus().length} cores, Node ${process.version}, load average at the start: ${load}`);
  console.log();
  console.log('| requests | n | CPU ms per sentence | first audio p50 (p99) ms | whole p50 (p99) ms |');
  console.log('| --- | ---: | ---: | ---: | ---: |');
  for (const [label, n, gap] of [
    ['back to back', N, 0],
    ['150 ms apart', Math.max(1, Math.round(N / 2)), 150],
  ] as const) {
    const r = await phase(engine, n, gap);
    console.log(`| ${label} | ${n} | ${fmt(r.cpuMs)} | ${fmt(r.first.p50)} (${fmt(r.first.p99)}) | ${fmt(r.total.p50)} (${fmt(r.total.p99)}) |`);
  }
  // the worker's memory is part of this process's: resident set size after both phases
  console.log();
  console.log(`RSS after the phases: ${(process.memoryUsage().rss / 2 ** 20).toFixed(0)} MiB`);
  await engine.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
