#!/usr/bin/env node
// Summarises a V8 .cpuprofile (node --cpu-prof): self time by function, and by file, over the whole profile or
// only its last seconds (the measured window of a benchmark, without start-up).
//
//   node scripts/cpuprofile.mjs <file.cpuprofile> [--last <seconds>] [--drop-end <seconds>] [--top <n>]
//     [--window <end us> <ms>] [--stretches <ms>] [--callers <function>]
// (--drop-end leaves out the shutdown at the end; --last then counts back from there)
import { readFileSync } from 'node:fs';

const args = process.argv.slice(2);
const file = args.find((a) => !a.startsWith('--') && !/^\d+(\.\d+)?$/.test(a));
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i === -1 ? dflt : Number(args[i + 1]);
};
if (!file) {
  console.error('usage: node scripts/cpuprofile.mjs <file.cpuprofile> [--last <seconds>] [--drop-end <seconds>] [--top <n>]');
  process.exit(2);
}
const last = opt('--last', 0);
const dropEnd = opt('--drop-end', 0);
const top = opt('--top', 40);
const prof = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(prof.nodes.map((n) => [n.id, n]));

// sample times (µs since the profile's start)
const times = [];
let t = prof.startTime;
for (const d of prof.timeDeltas) times.push((t += d));
// --window <end us> <ms>: only the <ms> before <end us> (a profile's own clock: bench/stall.ts BENCH_TURN_AT=1)
const win = args.includes('--window') ? [Number(args[args.indexOf('--window') + 1]), Number(args[args.indexOf('--window') + 2])] : undefined;
const to = win ? win[0] : prof.endTime - dropEnd * 1e6;
const from = win ? to - win[1] * 1000 : last > 0 ? to - last * 1e6 : -Infinity;

const self = new Map();
const files = new Map();
let total = 0;
let idle = 0;
for (let i = 0; i < prof.samples.length; i++) {
  if (times[i] < from || times[i] > to) continue;
  const dt = (prof.timeDeltas[i + 1] ?? 0) / 1000; // the time until the next sample is this sample's
  const n = byId.get(prof.samples[i]);
  const f = n.callFrame;
  total += dt;
  if (f.functionName === '(idle)') {
    idle += dt;
    continue;
  }
  const where = f.url
    ? f.url
        .replace(/^file:\/\//, '')
        .replace(/.*\/node_modules\//, 'nm:')
        .replace(/.*\/dist\//, '')
    : '';
  const key = `${f.functionName || '(anonymous)'} ${where}${f.url ? ':' + (f.lineNumber + 1) : ''}`;
  self.set(key, (self.get(key) ?? 0) + dt);
  const fk = where ? where.replace(/^nm:((@[^/]+\/)?[^/]+).*/, '$1') : f.functionName;
  files.set(fk, (files.get(fk) ?? 0) + dt);
}
const busy = total - idle;
const pct = (ms) => ((100 * ms) / busy).toFixed(1).padStart(5) + '%';
console.log(`window ${(total / 1000).toFixed(2)} s, busy ${(busy / 1000).toFixed(2)} s (${((100 * busy) / total).toFixed(0)}%), idle ${(idle / 1000).toFixed(2)} s`);
console.log('\nself time by function (share of busy time):');
for (const [k, ms] of [...self].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${pct(ms)} ${ms.toFixed(0).padStart(6)} ms  ${k}`);
console.log('\nself time by file / package:');
for (const [k, ms] of [...files].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log(`${pct(ms)} ${ms.toFixed(0).padStart(6)} ms  ${k}`);

// --callers <name>: the call paths (5 frames up) under which <name> spends its self time
const callersOf = args.includes('--callers') ? args[args.indexOf('--callers') + 1] : undefined;
if (callersOf) {
  const parent = new Map();
  for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const paths = new Map();
  for (let i = 0; i < prof.samples.length; i++) {
    if (times[i] < from || times[i] > to) continue;
    const n = byId.get(prof.samples[i]);
    if (n.callFrame.functionName !== callersOf) continue;
    const chain = [];
    for (let p = parent.get(n.id); p !== undefined && chain.length < (Number(process.env.DEPTH) || 6); p = parent.get(p)) {
      const f = byId.get(p).callFrame;
      chain.push(`${f.functionName || '(anon)'}@${(f.url || '').split('/').pop()}:${f.lineNumber + 1}`);
    }
    const k = chain.join(' < ');
    paths.set(k, (paths.get(k) ?? 0) + (prof.timeDeltas[i + 1] ?? 0) / 1000);
  }
  console.log(`\ncallers of ${callersOf}:`);
  for (const [k, ms] of [...paths].sort((a, b) => b[1] - a[1]).slice(0, 12)) console.log(`${ms.toFixed(0).padStart(6)} ms  ${k}`);
}

// --stretches <ms>: the runs of the thread's busy samples (no (idle) between them) longer than <ms>: what held the
// event loop in one piece. Each with its start (s from the profile's start), its length, the functions with the
// most self time in it, and the Portico frames (dist/src) nearest to those samples (who called into the work).
const stretchMs = args.includes('--stretches') ? Number(args[args.indexOf('--stretches') + 1]) : undefined;
if (stretchMs !== undefined) {
  const parent = new Map();
  for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const own = (id) => {
    for (let p = id; p !== undefined; p = parent.get(p)) {
      const f = byId.get(p).callFrame;
      if (/\/dist\/src\//.test(f.url)) return `${f.functionName || '(anon)'} ${f.url.replace(/.*\/dist\//, '')}:${f.lineNumber + 1}`;
    }
    return '(no Portico frame)';
  };
  const runs = [];
  let cur;
  for (let i = 0; i < prof.samples.length; i++) {
    if (times[i] < from || times[i] > to) continue;
    const n = byId.get(prof.samples[i]);
    const dt = (prof.timeDeltas[i + 1] ?? 0) / 1000;
    if (n.callFrame.functionName === '(idle)') {
      if (cur) runs.push(cur);
      cur = undefined;
      continue;
    }
    cur ??= { at: times[i], ms: 0, self: new Map(), own: new Map() };
    cur.ms += dt;
    const f = n.callFrame;
    const k = `${f.functionName || '(anon)'} ${(f.url || '').replace(/.*\/node_modules\//, 'nm:').replace(/.*\/dist\//, '')}`;
    cur.self.set(k, (cur.self.get(k) ?? 0) + dt);
    const o = own(n.id);
    cur.own.set(o, (cur.own.get(o) ?? 0) + dt);
  }
  if (cur) runs.push(cur);
  const topOf = (m, k) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, k)
      .map(([name, ms]) => `${ms.toFixed(1).padStart(6)} ms  ${name}`);
  console.log(`\nstretches of the thread busy over ${stretchMs} ms:`);
  for (const r of runs.filter((r) => r.ms > stretchMs)) {
    console.log(`\n${((r.at - prof.startTime) / 1e6).toFixed(3)} s: ${r.ms.toFixed(1)} ms`);
    for (const l of topOf(r.self, 6)) console.log('  self ' + l);
    for (const l of topOf(r.own, 5)) console.log('  from ' + l);
  }
}
