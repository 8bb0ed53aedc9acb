/**
 * The WebSocket mode of /v1/responses against HTTP (npm run bench:ws). Not a test: it prints figures.
 *
 * The fast local upstream (bench/lib/upstream-fast.ts) answers chat.completions streams at once; Portico runs in
 * this process (main thread); the load generators run in worker threads. Everything is measured in one run:
 *   - the baseline: a stream straight from the upstream;
 *   - Portico over HTTP (SSE), store off: a new conversation (one message), and a continuation that resends its
 *     history (with store off there is nothing to continue from: four earlier turns, eight messages, plus one);
 *   - Portico over one WebSocket, store off: a new conversation per turn, and continuation turns (previous_response_id
 *     from the connection's memory plus one new message; chains of 8 turns, so the history averages 3.5 turns);
 *   - turns per second on one socket: one after another, and with 8 turns kept waiting on the socket.
 * Latency is to the end of the answer (the terminal event), one request or turn at a time; "added" is the p50 over
 * the baseline's. Portico CPU µs/turn: this process's main thread, per turn. Every path runs once unmeasured first.
 *
 * Env: BENCH_DB (pglite | postgres, default pglite), BENCH_DURATION_MS (3000), BENCH_WARMUP_MS (1000), BENCH_ROUNDS
 * (3: every path is measured that many times, the rounds interleaved, and the medians reported).
 */
import os from 'node:os';
import { readFileSync } from 'node:fs';
import type { ModelSpec } from '../src/models/config.js';
import { startFastUpstream } from './lib/upstream-fast.js';
import { runLoad, type LoadResult } from './lib/load.js';
import { runWsLoad } from './lib/ws-load.js';
import { startPortico } from './lib/portico.js';

const DURATION_MS = Number(process.env.BENCH_DURATION_MS || 3000);
const WARMUP_MS = Number(process.env.BENCH_WARMUP_MS || 1000);
const DB = (process.env.BENCH_DB || 'pglite') as 'pglite' | 'postgres';
const PIPELINE = 8;
const CHAIN = 8;
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);

const f = (ms: number) => (ms < 10 ? ms.toFixed(3) : ms.toFixed(1));

/** CPU time of the main thread (µs), where Portico runs (the load generators and the upstream are worker threads) */
function mainThreadCpuUs(): number {
  try {
    const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
    const x = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(x[11]) + Number(x[12])) * 10_000;
  } catch {
    return NaN;
  }
}

async function main() {
  const up = await startFastUpstream();
  const models: ModelSpec[] = [{ name: 'fast', provider: 'openai-compatible', base_url: up.url, type: 'text' } as ModelSpec];
  const p = await startPortico({ db: DB, pglite: 'files', models });
  const key = await p.createKey('bench-ws');
  const wsUrl = p.url.replace(/^http/, 'ws') + '/v1/responses';
  const input = 'Say hello in five words.';
  const history = Array.from({ length: 4 }, (_, i) => [
    { role: 'user', content: `Turn ${i}: say hello in five words.` },
    { role: 'assistant', content: 'Hello from the fast upstream.' },
  ]).flat();
  const http = (body: unknown) => ({
    url: p.url + '/v1/responses',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    stream: true,
  });
  const ws = (mode: 'fresh' | 'chain', pipeline = 1) => ({ url: wsUrl, key, model: 'fast', mode, chainLength: CHAIN, pipeline });
  const common = { durationMs: DURATION_MS, warmupMs: WARMUP_MS };

  const scenarios: Array<{ name: string; portico: boolean; run: () => Promise<LoadResult> }> = [
    {
      name: 'upstream direct, streaming',
      portico: false,
      run: () =>
        runLoad({
          url: up.url + '/chat/completions',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'fast', messages: [{ role: 'user', content: input }], stream: true, stream_options: { include_usage: true } }),
          stream: true,
          connections: 1,
          ...common,
        }),
    },
    { name: 'HTTP, new conversation, store off', portico: true, run: () => runLoad({ ...http({ model: 'fast', input, stream: true, store: false }), connections: 1, ...common }) },
    {
      name: 'HTTP, continuation resending 4 turns, store off',
      portico: true,
      run: () => runLoad({ ...http({ model: 'fast', input: [...history, { role: 'user', content: input }], stream: true, store: false }), connections: 1, ...common }),
    },
    { name: 'WebSocket, new conversation, store off', portico: true, run: () => runWsLoad({ ...ws('fresh'), ...common }) },
    { name: `WebSocket, continuation turn (chains of ${CHAIN}), store off`, portico: true, run: () => runWsLoad({ ...ws('chain'), ...common }) },
    { name: `WebSocket, ${PIPELINE} turns waiting on the socket, store off`, portico: true, run: () => runWsLoad({ ...ws('fresh', PIPELINE), ...common }) },
  ];

  // one turn each way first: a broken set-up fails here with its answer
  const check = await fetch(p.url + '/v1/responses', { method: 'POST', headers: http(null).headers, body: JSON.stringify({ model: 'fast', input, store: false }) });
  if (check.status !== 200) throw new Error(`Portico answered ${check.status}: ${await check.text()}`);

  // a first pass over every path, unmeasured: the order of the rows must not decide which one pays for warming up;
  // then ROUNDS rounds over all paths in turn (a load that drifts touches every path alike), medians reported
  for (const s of scenarios) await s.run();
  const runs = scenarios.map(() => [] as Array<{ r: LoadResult; cpuUs: number }>);
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, s] of scenarios.entries()) {
      const cpu0 = mainThreadCpuUs();
      const r = await s.run();
      // CPU spans warm-up and measured time, the count only the measured time: scale the count to the whole run
      const cpuUs = s.portico ? (mainThreadCpuUs() - cpu0) / (r.rps * ((DURATION_MS + WARMUP_MS) / 1000)) : NaN;
      if (r.failures) throw new Error(`${s.name}: ${r.failures} failed turns`);
      runs[i]!.push({ r, cpuUs });
      console.error(`round ${round + 1}, ${s.name}: p50 ${f(r.p50)} ms p99 ${f(r.p99)} ms, TTFE p50 ${f(r.ttfe50)} ms; ${r.rps.toFixed(0)} turns/s`);
    }
  }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const rows = scenarios.map((s, i) => {
    const rs = runs[i]!;
    const pick = (k: keyof LoadResult) => med(rs.map((x) => x.r[k] as number));
    const r: LoadResult = { ...rs[0]!.r, p50: pick('p50'), p99: pick('p99'), ttfe50: pick('ttfe50'), ttfe99: pick('ttfe99'), rps: pick('rps') };
    return { name: s.name, r, cpuUs: med(rs.map((x) => x.cpuUs)) };
  });
  await p.close();
  await up.stop();

  const base = rows[0]!.r;
  const cpus = os.cpus();
  const lines: string[] = [];
  lines.push(`Machine: ${cpus.length} cores (${cpus[0]?.model.trim()}), Node ${process.version}, ${os.platform()} ${os.release()}; database ${DB}.`);
  lines.push(
    `One connection, one request or turn at a time (except the pipelined row), ${DURATION_MS / 1000} s after ${WARMUP_MS / 1000} s warm-up; medians of ${ROUNDS} interleaved rounds; load average at the end ${os.loadavg()[0]!.toFixed(1)}.`,
  );
  lines.push('');
  lines.push('| Path | p50 ms | p99 ms | TTFE p50 ms | added p50 ms | added TTFE p50 ms | turns/s | Portico CPU µs/turn |');
  lines.push('|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const { name, r, cpuUs } of rows) {
    const pipelined = name.includes('waiting');
    lines.push(
      `| ${name} | ${pipelined ? '-' : f(r.p50)} | ${pipelined ? '-' : f(r.p99)} | ${pipelined ? '-' : f(r.ttfe50)} | ${pipelined || r === base ? '-' : f(r.p50 - base.p50)} | ${pipelined || r === base ? '-' : f(r.ttfe50 - base.ttfe50)} | ${r.rps.toFixed(0)} | ${Number.isNaN(cpuUs) ? '-' : cpuUs.toFixed(0)} |`,
    );
  }
  const get = (n: string) => rows.find((x) => x.name.startsWith(n))!;
  const httpOff = get('HTTP, new conversation');
  const httpCont = get('HTTP, continuation');
  const wsFresh = get('WebSocket, new conversation');
  const wsCont = get('WebSocket, continuation');
  const ratio = (a: number, b: number) => (a / b).toFixed(2);
  lines.push('');
  lines.push(
    `WebSocket continuation turn vs HTTP store off: added p50 ${f(wsCont.r.p50 - base.p50)} ms vs ${f(httpOff.r.p50 - base.p50)} ms (new conversation) and ${f(httpCont.r.p50 - base.p50)} ms (resending the history); Portico CPU per turn ${ratio(wsCont.cpuUs, httpOff.cpuUs)}x and ${ratio(wsCont.cpuUs, httpCont.cpuUs)}x of theirs.`,
  );
  lines.push(`WebSocket new conversation vs HTTP: added p50 ${f(wsFresh.r.p50 - base.p50)} ms vs ${f(httpOff.r.p50 - base.p50)} ms; CPU ${ratio(wsFresh.cpuUs, httpOff.cpuUs)}x.`);
  console.log(lines.join('\n'));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
