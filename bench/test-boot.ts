/**
 * What one test file pays before its first test (npm run bench:test-boot). Not a test: it prints figures.
 *
 * Each run is a new Node process that does what a typical test file does: imports node:test and the test app helper
 * (test/helpers/app.ts, and through it the whole application), `buildTestApp({})` on the in-memory PGlite loaded from
 * the suite's template, `inferenceKey('alice')` (the portal's key creation through app.inject), and `close()`. Per
 * phase it reports wall time, the CPU of the whole process (every thread: process.cpuUsage is getrusage(RUSAGE_SELF))
 * and of the main thread alone (/proc/self/task/<pid>/stat, 10 ms ticks); the rest is the other threads (PGlite's
 * worker, V8's compiler and GC helpers). "boot" is Node's own start, up to the script's first line.
 *
 * BENCH_APPS=<n> (default 1): each run then builds n - 1 more apps one after another in the same process (each with
 * inferenceKey and close), as a test file with several tests does; "later app" is the median of those, per run: what
 * each app after a file's first costs once the modules are loaded and the WebAssembly compiled.
 *
 * BENCH_RUNS runs (default 5), one after another; the median of each figure is printed with its range. Compare CPU,
 * not wall, on a shared machine. BENCH_PROF=<dir> adds `--cpu-prof` (the main thread) and writes the profiles there.
 * BENCH_NODE_ARGS: options for the measured processes' node. BENCH_DIST=<dir> runs another compiled tree (a dist/ built
 * from other sources); BENCH_COMPARE=<dir> runs that tree too, the two taking turns run by run (a before/after in the
 * same minutes), each on the template its own test helpers make, and prints the second's CPU as a share of the first's.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

type Sample = { wall: number; cpu: number; main: number };
type Phases = Record<string, Sample>;

const TICK_MS = 10; // USER_HZ on Linux: /proc's utime and stime are in 1/100 s

function mainThreadMs(): number {
  const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
  // fields after the command name (which is in parentheses and may hold spaces): utime is the 14th, stime the 15th
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(rest[11]) + Number(rest[12])) * TICK_MS;
}

function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/** BENCH_PROF_PHASE=<phase>: a CPU profile of the main thread during that phase alone, written to BENCH_PROF_OUT */
async function phaseProfiler(): Promise<{ begin(phase: string): Promise<void>; end(phase: string): Promise<void> }> {
  const wanted = process.env.BENCH_PROF_PHASE;
  if (!wanted) return { begin: async () => {}, end: async () => {} };
  const { Session } = await import('node:inspector/promises');
  const { writeFileSync } = await import('node:fs');
  const s = new Session();
  s.connect();
  await s.post('Profiler.enable');
  await s.post('Profiler.setSamplingInterval', { interval: 200 });
  return {
    async begin(phase) {
      if (phase === wanted) await s.post('Profiler.start');
    },
    async end(phase) {
      if (phase !== wanted) return;
      const { profile } = await s.post('Profiler.stop');
      writeFileSync(process.env.BENCH_PROF_OUT || `test-boot-${phase}-${process.pid}.cpuprofile`, JSON.stringify(profile));
    },
  };
}

async function child(dist: string): Promise<void> {
  const at = () => ({ wall: performance.now(), cpu: cpuMs(), main: mainThreadMs() });
  const marks: [string, Sample][] = [['boot', at()]];
  const prof = await phaseProfiler();
  const mark = async (name: string) => {
    await prof.end(name);
    marks.push([name, at()]);
    await prof.begin(next[name] ?? '');
  };
  const next: Record<string, string> = { boot: 'import', import: 'buildTestApp', buildTestApp: 'inferenceKey', inferenceKey: 'close' };
  await prof.begin('import');
  await import('node:test');
  const { buildTestApp } = (await import(pathToFileURL(join(dist, 'test', 'helpers', 'app.js')).href)) as typeof import('../test/helpers/app.js');
  await mark('import');
  const t = await buildTestApp({});
  await mark('buildTestApp');
  const key = await t.inferenceKey('alice');
  if (!key.startsWith('sk-')) throw new Error(`not a key: ${key}`);
  await mark('inferenceKey');
  await t.close();
  await mark('close');
  const later: Sample[] = [];
  for (let i = 1; i < Number(process.env.BENCH_APPS || 1); i++) {
    const s0 = at();
    const app = await buildTestApp({});
    await app.inferenceKey('alice');
    await app.close();
    const s1 = at();
    later.push({ wall: s1.wall - s0.wall, cpu: s1.cpu - s0.cpu, main: s1.main - s0.main });
  }
  const phases: Phases = {};
  // boot counts from the process's start (performance.now() and cpuUsage both start there)
  let prev: Sample = { wall: 0, cpu: 0, main: 0 };
  for (const [name, s] of marks) {
    phases[name] = { wall: s.wall - prev.wall, cpu: s.cpu - prev.cpu, main: s.main - prev.main };
    prev = s;
  }
  phases.total = { wall: prev.wall, cpu: prev.cpu, main: prev.main };
  if (later.length) phases['later app'] = { wall: median(later.map((s) => s.wall)), cpu: median(later.map((s) => s.cpu)), main: median(later.map((s) => s.main)) };
  process.stdout.write(`${JSON.stringify(phases)}\n`);
}

function once(dist: string, env: Record<string, string>, prof?: string): Promise<Phases> {
  const nodeArgs = (process.env.BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean);
  // this script measures the tree BENCH_CHILD names (an older tree's own copy of it may lack BENCH_APPS)
  const args = [...nodeArgs, ...(prof ? ['--cpu-prof', `--cpu-prof-dir=${prof}`] : []), fileURLToPath(import.meta.url)];
  const p = spawn(process.execPath, args, { env: { ...process.env, ...env, BENCH_CHILD: dist }, stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  p.stdout!.on('data', (b) => (out += b));
  return new Promise((ok, fail) =>
    p.once('exit', (code) => {
      if (code !== 0) return fail(new Error(`test-boot child exited ${code}: ${out}`));
      ok(JSON.parse(out.trim().split('\n').pop()!) as Phases);
    }),
  );
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function main(): Promise<void> {
  const dists = [resolve(process.env.BENCH_DIST || join(import.meta.dirname, '..')), ...(process.env.BENCH_COMPARE ? [resolve(process.env.BENCH_COMPARE)] : [])];
  const runs = Number(process.env.BENCH_RUNS || 5);
  // each tree's template, made once as scripts/run-tests.mjs makes it, so the runs measure loading it, not making it
  const templates = new Map<string, string>();
  for (const d of dists) {
    const { pgliteTemplate } = (await import(pathToFileURL(join(d, 'test', 'helpers', 'db-template.js')).href)) as typeof import('../test/helpers/db-template.js');
    templates.set(d, await pgliteTemplate());
  }
  const results = new Map<string, Phases[]>(dists.map((d) => [d, []]));
  // with BENCH_COMPARE the two trees take turns, so both see the same load
  for (let i = 0; i < runs; i++) {
    for (const d of dists) results.get(d)!.push(await once(d, { PORTICO_TEST_PGLITE_TEMPLATE: templates.get(d)!, PORTICO_TEST_PG: 'off' }, process.env.BENCH_PROF));
  }
  const fmt = (xs: number[]) => `${median(xs).toFixed(0)} (${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)})`;
  for (const [d, rs] of results) {
    console.log(`\n# ${d}, ${runs} runs, median (min-max), ms`);
    console.log('| phase | wall | CPU, all threads | CPU, main thread | CPU, other threads |');
    console.log('| --- | ---: | ---: | ---: | ---: |');
    for (const phase of Object.keys(rs[0]!)) {
      const of = (f: (s: Sample) => number) => rs.map((r) => f(r[phase]!));
      console.log(`| ${phase} | ${fmt(of((s) => s.wall))} | ${fmt(of((s) => s.cpu))} | ${fmt(of((s) => s.main))} | ${fmt(of((s) => s.cpu - s.main))} |`);
    }
  }
  if (dists.length === 2) {
    const [a, b] = dists.map((d) => results.get(d)!);
    console.log(`\n# CPU, all threads, of ${dists[1]} as a share of ${dists[0]}'s (median of the runs' ratios)`);
    for (const phase of ['buildTestApp', 'total', 'later app']) {
      if (!a![0]![phase] || !b![0]![phase]) continue;
      console.log(`${phase}: ${median(a!.map((r, i) => b![i]![phase]!.cpu / r[phase]!.cpu)).toFixed(2)}`);
    }
  }
}

if (process.env.BENCH_CHILD) await child(process.env.BENCH_CHILD);
else await main();
