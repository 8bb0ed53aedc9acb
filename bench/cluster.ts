/**
 * Several instances benchmark (npm run bench:cluster). Not a test: it prints figures.
 *
 * Two `portico serve` processes on PostgreSQL (PORTICO_TEST_DATABASE_URL, a schema of their own) and Redis
 * (PORTICO_TEST_REDIS_URL, keys under a prefix of their own, removed after), a fast scripted upstream in this process, and a steady-rate
 * load (BENCH_RATE requests per second, BENCH_DURATION_MS measured after BENCH_WARMUP_MS) of
 * POST /v1/responses alternating between the two instances (round robin, as a load balancer would), once
 * with store false and once with store true. Reports requests per second, p50/p99, errors, and the resident
 * memory (VmRSS) of each process at start and at the end of each run.
 */
import os from 'node:os';
import { writeFileSync } from 'node:fs';
import { startCluster } from '../test/helpers/cluster.js';
import { startScriptedUpstream } from '../test/helpers/scripted-upstream.js';
import { runRateLoad, type RateLoadResult } from './lib/cluster-load.js';
import { fmt } from './lib/stats.js';

const RATE = Number(process.env.BENCH_RATE ?? 200);
const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 60_000);
const WARMUP_MS = Number(process.env.BENCH_WARMUP_MS ?? 3_000);

async function main() {
  const up = await startScriptedUpstream({ record: false, defaultReply: { text: 'Hello from the scripted upstream.', chunks: 4 } });
  const c = await startCluster({ upstreamUrl: up.url, instances: 2, env: { LOG_LEVEL: 'info' } });
  const rows: Array<{ store: boolean; r: RateLoadResult; rssStart: number[]; rssEnd: number[] }> = [];
  try {
    const [a, b] = c.instances;
    const { key } = await c.createKey(a, 'bench');
    const rss0 = c.instances.map((i) => i.rssKb());
    console.log(`instances ${a.name} pid ${a.pid}, ${b.name} pid ${b.pid}; RSS at start ${rss0.map((k) => `${Math.round(k / 1024)} MiB`).join(', ')}`);
    for (const store of [false, true]) {
      const rssStart = c.instances.map((i) => i.rssKb());
      const r = await runRateLoad({
        targets: c.instances.map((i) => i.url),
        path: '/v1/responses',
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm1', input: 'Say hello', store }),
        rate: RATE,
        durationMs: DURATION_MS,
        warmupMs: WARMUP_MS,
      });
      const rssEnd = c.instances.map((i) => i.rssKb());
      rows.push({ store, r, rssStart, rssEnd });
      console.log(
        `store ${store}: sent ${r.sent} (${r.perTarget.join(' + ')}), ok ${r.ok}, non-2xx ${r.non2xx}, errors ${r.errors}, dropped ${r.dropped}; ` +
          `${r.rps.toFixed(1)} req/s, p50 ${fmt(r.latency.p50)} ms, p99 ${fmt(r.latency.p99)} ms; statuses ${JSON.stringify(r.statuses)}; ` +
          `RSS ${rssStart.map((k) => Math.round(k / 1024)).join('/')} -> ${rssEnd.map((k) => Math.round(k / 1024)).join('/')} MiB`,
      );
    }
    const stored = await c.query<{ n: number }>('select count(*)::int as n from responses');
    const usage = await c.query<{ n: number }>('select count(*)::int as n from usage_records');
    console.log(`stored responses ${stored[0].n}, usage records ${usage[0].n}`);
  } finally {
    await c.close();
    await up.close();
  }
  const cpu = os.cpus();
  console.log(`\nmachine: ${cpu.length} cores (${cpu[0]?.model}), Node ${process.version}, ${os.platform()} ${os.arch()}`);
  console.log(`rate ${RATE} req/s for ${DURATION_MS / 1000} s per run (after ${WARMUP_MS / 1000} s warm-up), alternating between 2 instances\n`);
  console.log('| store | requests/s | p50 (ms) | p99 (ms) | errors (non-2xx + failed) | RSS A start -> end (MiB) | RSS B start -> end (MiB) |');
  console.log('| --- | ---: | ---: | ---: | ---: | --- | --- |');
  for (const { store, r, rssStart, rssEnd } of rows) {
    const mib = (k: number) => (k / 1024).toFixed(0);
    console.log(
      `| ${store ? 'on' : 'off'} | ${r.rps.toFixed(1)} | ${fmt(r.latency.p50)} | ${fmt(r.latency.p99)} | ${r.non2xx + r.errors + r.dropped} of ${r.sent} | ${mib(rssStart[0])} -> ${mib(rssEnd[0])} | ${mib(rssStart[1])} -> ${mib(rssEnd[1])} |`,
    );
  }
  if (process.env.BENCH_JSON) writeFileSync(process.env.BENCH_JSON, JSON.stringify(rows, null, 2));
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
