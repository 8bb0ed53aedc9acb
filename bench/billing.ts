/**
 * Budget benchmark (npm run bench:billing). Not a test: it prints figures.
 *
 * What BILLING_ENABLED=true costs a request. Two Porticos run in this process on the same kind of database (and
 * the same Redis when BENCH_REDIS is set), identical but for BILLING_ENABLED; a priced model makes every request
 * cost something in both. The load generator (bench/lib/load.ts, a worker thread) posts non-streaming
 * `/v1/responses` (store off) to a fast local upstream through each in turn, BENCH_ROUNDS times, alternating
 * off/on so that drift of the machine hits both alike. The billing-on instance counts its ledger reads (the
 * balance queries its budget makes).
 *
 * Env: BENCH_DB (pglite | postgres, default pglite; PostgreSQL is PORTICO_TEST_DATABASE_URL's), BENCH_REDIS (1: the
 * running spend in the Redis of PORTICO_TEST_REDIS_URL, under a key prefix of each Portico's own, removed after),
 * BENCH_DURATION_MS (3000), BENCH_WARMUP_MS (1000),
 * BENCH_ROUNDS (3), BENCH_CONNECTIONS (8, for the throughput column).
 */
import os from 'node:os';
import { Redis } from 'ioredis';
import type { ModelSpec } from '../src/models/config.js';
import { startFastUpstream } from './lib/upstream-fast.js';
import { runLoad, type LoadResult } from './lib/load.js';
import { startPortico, type BenchPortico } from './lib/portico.js';
import { testRedisPrefix, testRedisUrl } from '../test/helpers/services.js';

const DURATION_MS = Number(process.env.BENCH_DURATION_MS || 3000);
const WARMUP_MS = Number(process.env.BENCH_WARMUP_MS || 1000);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS || 8);
const DB = (process.env.BENCH_DB || 'pglite') as 'pglite' | 'postgres';
const REDIS = process.env.BENCH_REDIS === '1' ? testRedisUrl() : '';

const f = (ms: number) => ms.toFixed(3);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** counts the ledger reads (balance queries) a Portico makes */
function countLedgerReads(p: BenchPortico): () => number {
  const store = (p.runtime.core.usage as unknown as { store: { balance: (...a: unknown[]) => Promise<unknown> } }).store;
  const balance = store.balance.bind(store);
  let n = 0;
  store.balance = (...a: unknown[]) => {
    n++;
    return balance(...a);
  };
  return () => n;
}

async function main() {
  const up = await startFastUpstream();
  // 10 + 10 tokens a request at 1000 credits per million: 0.02 credits a request
  const models: ModelSpec[] = [
    { name: 'fast', provider: 'openai-compatible', base_url: up.url, type: 'text', pricing: { input_per_million: 1000, output_per_million: 1000 } } as ModelSpec,
  ];
  const env = (billing: boolean) => ({ BILLING_ENABLED: String(billing), ...(REDIS ? { REDIS_URL: REDIS } : {}) });
  const off = await startPortico({ db: DB, pglite: 'files', models, env: env(false) });
  const on = await startPortico({ db: DB, pglite: 'files', models, env: env(true) });
  const reads = countLedgerReads(on);
  const keys = { off: await off.createKey('bench'), on: await on.createKey('bench') };
  await on.runtime.core.usage.grant('bench-user', 'default', 1e9);
  const body = JSON.stringify({ model: 'fast', input: 'Say hello in five words.', store: false });
  const target = (p: BenchPortico, key: string) => ({
    url: p.url + '/v1/responses',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body,
    stream: false,
  });
  for (const [p, key] of [
    [off, keys.off],
    [on, keys.on],
  ] as const) {
    const res = await fetch(p.url + '/v1/responses', { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body });
    if (res.status !== 200) throw new Error(`Portico answered ${res.status}: ${await res.text()}`);
  }

  const results: Record<'off' | 'on', { lat: LoadResult[]; thr: LoadResult[] }> = { off: { lat: [], thr: [] }, on: { lat: [], thr: [] } };
  let onRequests = 0;
  const readsBefore = reads();
  for (let round = 0; round < ROUNDS; round++) {
    for (const which of ['off', 'on'] as const) {
      const p = which === 'on' ? on : off;
      const t = target(p, keys[which]);
      const lat = await runLoad({ ...t, connections: 1, durationMs: DURATION_MS, warmupMs: WARMUP_MS });
      const thr = await runLoad({ ...t, connections: CONNECTIONS, durationMs: DURATION_MS, warmupMs: WARMUP_MS });
      if (lat.failures || thr.failures) throw new Error(`billing ${which}: ${lat.failures + thr.failures} failed requests`);
      results[which].lat.push(lat);
      results[which].thr.push(thr);
      if (which === 'on') onRequests += lat.requests + thr.requests;
      console.error(
        `round ${round + 1}, billing ${which}: p50 ${f(lat.p50)} ms, p99 ${f(lat.p99)} ms, ${lat.rps.toFixed(0)} req/s (1 conn), ${thr.rps.toFixed(0)} req/s (${CONNECTIONS} conns)`,
      );
    }
  }
  // every request of the measured runs, warm-ups included, went through the budget: the reads it made
  const ledgerReads = reads() - readsBefore;
  const exact = await (async () => {
    await on.runtime.core.usage.flush();
    const scope = { orgId: 'default', userId: 'bench-user' };
    const ledger = await on.runtime.core.usage.balance(scope);
    const running = await on.runtime.budget.balance(scope);
    return `${running === Math.round(ledger.balance * 1e6) ? 'equal' : 'DIFFERENT'} (running ${running} µcredits, ledger ${ledger.balance} credits)`;
  })();
  await on.close();
  await off.close();
  await up.stop();
  // what one awaited Redis round trip costs on this machine now (the budget adds one per request with Redis)
  let rtt = '';
  if (REDIS) {
    const r = new Redis(REDIS);
    // a key nobody has (read only, never written)
    const rttKey = `${testRedisPrefix('bench')}:rtt`;
    await r.ping();
    const xs: number[] = [];
    for (let i = 0; i < 3000; i++) {
      const t0 = process.hrtime.bigint();
      await r.hmget(rttKey, 'e', 'u', 'v');
      xs.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    r.disconnect();
    xs.sort((x, y) => x - y);
    rtt = ` One Redis round trip (HMGET, awaited, 3000 times) right after: p50 ${f(xs[1500]!)} ms, p90 ${f(xs[2700]!)} ms, p99 ${f(xs[2970]!)} ms.`;
  }

  const cpus = os.cpus();
  const row = (which: 'off' | 'on') => {
    const r = results[which];
    return {
      p50: median(r.lat.map((x) => x.p50)),
      p99: median(r.lat.map((x) => x.p99)),
      rps1: median(r.lat.map((x) => x.rps)),
      rpsN: median(r.thr.map((x) => x.rps)),
      p50N: median(r.thr.map((x) => x.p50)),
    };
  };
  const a = row('off');
  const b = row('on');
  const lines: string[] = [];
  lines.push(
    `Machine: ${cpus.length} cores (${cpus[0]?.model.trim()}), Node ${process.version}, ${os.platform()} ${os.release()}, load average ${os
      .loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}.`,
  );
  lines.push(
    `Database ${DB}${REDIS ? ', running spend in Redis' : ', running spend in memory'}; ${ROUNDS} rounds of ${DURATION_MS / 1000} s after ${WARMUP_MS / 1000} s warm-up each, off and on alternating; medians of the rounds.`,
  );
  lines.push('');
  lines.push(`| BILLING_ENABLED | p50 ms | p99 ms | req/s (1 conn) | req/s (${CONNECTIONS} conns) | p50 at ${CONNECTIONS} conns ms |`);
  lines.push('|---|---:|---:|---:|---:|---:|');
  lines.push(`| false | ${f(a.p50)} | ${f(a.p99)} | ${a.rps1.toFixed(0)} | ${a.rpsN.toFixed(0)} | ${f(a.p50N)} |`);
  lines.push(`| true | ${f(b.p50)} | ${f(b.p99)} | ${b.rps1.toFixed(0)} | ${b.rpsN.toFixed(0)} | ${f(b.p50N)} |`);
  lines.push('');
  lines.push(
    `Billing on vs off: p50 ${(b.p50 - a.p50 >= 0 ? '+' : '') + f(b.p50 - a.p50)} ms (${((b.p50 / a.p50 - 1) * 100).toFixed(1)} %), throughput at ${CONNECTIONS} connections ${((b.rpsN / a.rpsN - 1) * 100).toFixed(1)} %.`,
  );
  lines.push(`Ledger reads by the budget: ${ledgerReads} for ${onRequests} measured requests (plus warm-ups). Running balance vs ledger after the run: ${exact}.${rtt}`);
  console.log(lines.join('\n'));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
