/**
 * The server under test on a core of its own (npm run bench:pinned). Not a test: it prints figures.
 *
 * bench:responses runs Portico, the fake upstream and the load generator as threads of one process on the same
 * cores: on a 2-core machine the three compete, and where one thread's time goes (a syscall that wakes another,
 * a GC helper) is hard to tell. Here the server under test is a process of its own (bench/lib/pinned-server.ts),
 * pinned with taskset to the last core, and this process (upstream and load threads) to the others: the server's
 * CPU µs per request (user + system, from /proc, every thread of it) and its main thread's share are its own.
 *
 * Each round starts a fresh server of each kind (the bare Fastify proxy of bench/lib/floor-proxy.ts, then
 * Portico: non-streaming, store off), warms it up (BENCH_JIT_WARMUP_MS at 8 connections), then measures one
 * connection and BENCH_CONNECTIONS connections for BENCH_DURATION_MS each. Several rounds (BENCH_ROUNDS, default
 * 3) show how far one build's figures move between processes on the same machine; the table gives each round and
 * the median.
 *
 * BENCH_COMPARE=<another checkout, built> adds its Portico to each round (after this tree's), for a before/after in
 * one run: e.g. main's tree copied aside with its dist/ and a node_modules link.
 *
 * Each row also gives the main thread's wake-ups a request (voluntary context switches, from /proc) and how often
 * it was preempted. A wake-up costs the same few hundred µs of CPU to either server (the kernel's and the cold code
 * and caches after a wait), ~2 of them a request at one connection and ~0.2 at ten: the last lines split each
 * server's CPU a request into that and the work of the request itself, the part that differs between them.
 * BENCH_STREAM=1 measures the streamed request instead.
 *
 * Needs Linux and taskset (util-linux) for the pinning; without them, or on one core, the processes run unpinned
 * and the output says so.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startFastUpstream } from './lib/upstream-fast.js';
import { runLoad, type LoadResult } from './lib/load.js';
import { cpuBetween, threadSwitches, threadsCpuUs } from './lib/threads.js';

const DURATION_MS = Number(process.env.BENCH_DURATION_MS || 3000);
const JIT_WARMUP_MS = Number(process.env.BENCH_JIT_WARMUP_MS ?? 4000);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS || 8);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);
const COMPARE = process.env.BENCH_COMPARE;
/** BENCH_STREAM=1: the same request with stream: true (an SSE answer, bridged from a streamed upstream) */
const STREAM = process.env.BENCH_STREAM === '1';

const cores = os.availableParallelism();
const canPin = process.platform === 'linux' && cores >= 2 && spawnSync('taskset', ['-V']).status === 0;
const serverCore = String(cores - 1);
if (canPin) {
  // this process and every thread it starts from now on (upstream, load generator) keep off the server's core
  spawnSync('taskset', ['-a', '-p', '-c', `0-${cores - 2}`, String(process.pid)], { stdio: 'ignore' });
}

interface Server {
  child: ChildProcess;
  url: string;
  key: string;
}

type What = 'floor' | 'portico' | 'compare';

async function startServer(upstream: string, what: What): Promise<Server> {
  const script = what === 'compare' ? join(COMPARE!, 'dist/bench/lib/pinned-server.js') : fileURLToPath(new URL('./lib/pinned-server.js', import.meta.url));
  const argv = [process.execPath, script, upstream, what === 'compare' ? 'portico' : what];
  const child = canPin
    ? spawn('taskset', ['-c', serverCore, ...argv], { stdio: ['ignore', 'pipe', 'inherit'] })
    : spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
  const info = await new Promise<{ url: string; key: string }>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const line = /^\{"url".*$/m.exec(out);
      if (line) resolve(JSON.parse(line[0]) as { url: string; key: string });
    });
    child.once('exit', (code) => reject(new Error(`the ${what} server exited (${code}) before it listened`)));
  });
  return { child, ...info };
}

async function stopServer(s: Server) {
  const gone = new Promise((r) => s.child.once('exit', r));
  s.child.kill('SIGTERM');
  await gone;
}

interface Row {
  what: What;
  round: number;
  connections: number;
  r: LoadResult;
  /** server CPU µs per request: every thread, and the main thread alone */
  cpu: number;
  main: number;
  /** the main thread's wake-ups (voluntary context switches) and preemptions per request */
  wakeups: number;
  preempted: number;
}

async function measure(s: Server, what: Row['what'], round: number): Promise<Row[]> {
  // the server's pid: taskset execs node in place, so the child's pid is node's
  const pid = s.child.pid!;
  const body = JSON.stringify({ model: 'fast', input: 'Say hello in five words.', stream: STREAM, store: false });
  const base = { url: s.url + '/v1/responses', headers: { 'content-type': 'application/json', authorization: `Bearer ${s.key}` }, body, stream: STREAM, warmupMs: 0 };
  await runLoad({ ...base, connections: CONNECTIONS, durationMs: JIT_WARMUP_MS });
  const rows: Row[] = [];
  for (const connections of [1, CONNECTIONS]) {
    const before = threadsCpuUs(new Set(), pid);
    const sw0 = threadSwitches(pid, pid);
    const r = await runLoad({ ...base, connections, durationMs: DURATION_MS });
    const after = threadsCpuUs(new Set(), pid);
    const sw1 = threadSwitches(pid, pid);
    if (r.failures) throw new Error(`${what}: ${r.failures} failed requests`);
    const all = cpuBetween(before, after);
    // the main thread is the one whose id is the pid
    const main = (after.get(pid) ?? 0) - (before.get(pid) ?? 0);
    rows.push({
      what,
      round,
      connections,
      r,
      cpu: all / r.requests,
      main: main / r.requests,
      wakeups: (sw1.voluntary - sw0.voluntary) / r.requests,
      preempted: (sw1.involuntary - sw0.involuntary) / r.requests,
    });
  }
  return rows;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

const kinds: What[] = COMPARE ? ['floor', 'portico', 'compare'] : ['floor', 'portico'];

async function main() {
  const up = await startFastUpstream();
  const rows: Row[] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    for (const what of kinds) {
      const s = await startServer(up.url, what);
      try {
        const got = await measure(s, what, round);
        rows.push(...got);
        for (const x of got)
          console.error(
            `round ${round} ${what} ${x.connections} conn: p50 ${x.r.p50.toFixed(3)} ms, ${x.r.rps.toFixed(0)} req/s, CPU ${x.cpu.toFixed(0)} µs/req (main thread ${x.main.toFixed(0)}, ${x.wakeups.toFixed(2)} wake-ups/req)`,
          );
      } finally {
        await stopServer(s);
      }
    }
  }
  await up.stop();

  const kind = STREAM ? 'streaming' : 'non-streaming';
  const name = { floor: 'bare Fastify proxy', portico: `Portico, ${kind}, store off`, compare: `Portico of ${COMPARE}, ${kind}, store off` };
  console.log(`Machine: ${cores} cores (${os.cpus()[0]?.model ?? '?'}), Node ${process.version}, ${os.platform()} ${os.release()}.`);
  console.log(
    canPin
      ? `Server under test pinned to core ${serverCore}; upstream and load generator on cores 0-${cores - 2}.`
      : 'Not pinned (taskset missing, not Linux, or one core): the figures mix the server with the load generator.',
  );
  console.log(`Each round: a fresh server, ${JIT_WARMUP_MS / 1000} s warm-up at ${CONNECTIONS} connections, then ${DURATION_MS / 1000} s per row.\n`);
  console.log('| Server | connections | round | p50 ms | p99 ms | req/s | CPU µs/req (all threads) | main thread µs/req | main thread wake-ups/req | preempted/req |');
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const what of kinds) {
    for (const connections of [1, CONNECTIONS]) {
      const sel = rows.filter((x) => x.what === what && x.connections === connections);
      for (const x of sel) {
        console.log(
          `| ${name[what]} | ${connections} | ${x.round} | ${x.r.p50.toFixed(3)} | ${x.r.p99.toFixed(3)} | ${x.r.rps.toFixed(0)} | ${x.cpu.toFixed(0)} | ${x.main.toFixed(0)} | ${x.wakeups.toFixed(2)} | ${x.preempted.toFixed(2)} |`,
        );
      }
      console.log(
        `| ${name[what]} | ${connections} | median | ${median(sel.map((x) => x.r.p50)).toFixed(3)} | ${median(sel.map((x) => x.r.p99)).toFixed(3)} | ${median(sel.map((x) => x.r.rps)).toFixed(0)} | ${median(sel.map((x) => x.cpu)).toFixed(0)} | ${median(sel.map((x) => x.main)).toFixed(0)} | ${median(sel.map((x) => x.wakeups)).toFixed(2)} | ${median(sel.map((x) => x.preempted)).toFixed(2)} |`,
      );
    }
  }
  const m = (what: Row['what'], c: number, f: (x: Row) => number) => median(rows.filter((x) => x.what === what && x.connections === c).map(f));
  const spread = (what: Row['what'], c: number) => {
    const xs = rows.filter((x) => x.what === what && x.connections === c).map((x) => x.cpu);
    return `${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)}`;
  };
  console.log(
    `\nPortico's CPU per request over the bare Fastify proxy's (medians): ${(m('portico', 1, (x) => x.cpu) / m('floor', 1, (x) => x.cpu)).toFixed(1)}x at one connection, ` +
      `${(m('portico', CONNECTIONS, (x) => x.cpu) / m('floor', CONNECTIONS, (x) => x.cpu)).toFixed(1)}x at ${CONNECTIONS}; ` +
      `Portico's rounds ranged ${spread('portico', 1)} µs/req at one connection (the proxy's ${spread('floor', 1)}).`,
  );
  // CPU a request = its own work + (wake-ups of the main thread a request) x (CPU a wake-up costs). One connection
  // wakes the server ~2 times a request, 10 connections ~0.2: the two rows of a round give both unknowns.
  const split = (what: What) => {
    const ks: number[] = [];
    const ws: number[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      const one = rows.find((x) => x.what === what && x.round === round && x.connections === 1);
      const many = rows.find((x) => x.what === what && x.round === round && x.connections === CONNECTIONS);
      if (!one || !many || !(one.wakeups - many.wakeups > 0.2)) continue;
      const k = (one.cpu - many.cpu) / (one.wakeups - many.wakeups);
      ks.push(k);
      ws.push(many.cpu - k * many.wakeups);
    }
    return ks.length ? { k: median(ks), w: median(ws) } : undefined;
  };
  const floorSplit = split('floor');
  for (const what of kinds.filter((k) => k !== 'floor')) {
    const x = split(what);
    if (x && floorSplit)
      console.log(
        `${name[what]}: a main-thread wake-up costs ~${x.k.toFixed(0)} µs (the proxy's ~${floorSplit.k.toFixed(0)}); the work of a request without its wake-ups ` +
          `~${x.w.toFixed(0)} µs against the proxy's ~${floorSplit.w.toFixed(0)}: ${(x.w / floorSplit.w).toFixed(1)}x (medians of the rounds).`,
      );
  }
  if (COMPARE)
    console.log(
      `The compared tree's (${COMPARE}) over the bare proxy's: ${(m('compare', 1, (x) => x.cpu) / m('floor', 1, (x) => x.cpu)).toFixed(1)}x at one connection, ` +
        `${(m('compare', CONNECTIONS, (x) => x.cpu) / m('floor', CONNECTIONS, (x) => x.cpu)).toFixed(1)}x at ${CONNECTIONS}; this tree's req/s over it at ${CONNECTIONS}: ` +
        `${(m('portico', CONNECTIONS, (x) => x.r.rps) / m('compare', CONNECTIONS, (x) => x.r.rps)).toFixed(2)}x.`,
    );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
