/**
 * What the two rows of a request cost the embedded database's thread (npm run bench:db-rows; issue 23 §2). Not a
 * test: it prints figures.
 *
 * Every request of the most common kind (POST /v1/responses, store off, routed) leaves two rows: its usage record
 * (src/portal/usage/store.ts, shipped in batches about every 250 ms) and its request-log row
 * (src/platform/ops/request-log.ts, also in paced batches). This inserts batches of both through the real code
 * (UsageStore.insert, RequestLog add + flush) into a PGlite database on disk (a fresh DATA_DIR, migrated, on its
 * own thread as served) and reads the CPU time of PGlite's thread (and of the main thread, which builds the
 * parameters) from /proc, per row.
 *
 * BENCH_ROWS (250: a batch at 1,000 req/s and four shipments a second) rows a batch, BENCH_BATCHES (40) batches of
 * each kind a round, BENCH_ROUNDS (5) rounds. /proc counts in 10 ms ticks: a round of 40 x 250 rows reads to
 * ~1 µs a row. BENCH_COMPARE=<another checkout, built> opens a database with that tree's code too (its own
 * PGlite thread) and runs it in every round after this tree's, for a before/after in one run: e.g. main's tree
 * copied aside with its dist/ and a node_modules link.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { osThreadId, threadCpuUs } from './lib/threads.js';
import type { UsageInsert } from '../src/portal/usage/store.js';
import type { RequestLogRow } from '../src/platform/ops/request-log.js';

const ROWS = Number(process.env.BENCH_ROWS || 250);
const BATCHES = Number(process.env.BENCH_BATCHES || 40);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 5);
const COMPARE = process.env.BENCH_COMPARE;

interface Tree {
  name: string;
  dir: string;
  dbTid: number;
  close(): Promise<void>;
  insertUsage(rows: UsageInsert[]): Promise<void>;
  /** the rows added, then written (one INSERT for up to 500) */
  writeLog(rows: RequestLogRow[]): Promise<void>;
}

const tids = () => new Set(readdirSync('/proc/self/task').map(Number));

/** a tree's database and writers: its own compiled modules, its own PGlite thread (the one new thread of the open) */
async function openTree(name: string, root: string): Promise<Tree> {
  const mod = (p: string) => import(pathToFileURL(join(root, p)).href);
  const { openDb } = await mod('src/platform/db/index.js');
  const { UsageStore } = await mod('src/portal/usage/store.js');
  const { RequestLog } = await mod('src/platform/ops/request-log.js');
  const dir = mkdtempSync(join(tmpdir(), 'portico-bench-db-rows-'));
  const before = tids();
  const opened = await openDb({ dataDir: dir });
  await opened.migrate();
  const fresh = [...tids()].filter((t) => !before.has(t));
  if (fresh.length !== 1) throw new Error(`expected one new thread (PGlite's), found ${fresh.length}`);
  const store = new UsageStore(opened.db);
  const log = new RequestLog(opened.db, { log: { warn: (o: object, m: string) => console.error(m, o) } });
  return {
    name,
    dir,
    dbTid: fresh[0]!,
    close: async () => {
      await log.close();
      await opened.close();
      rmSync(dir, { recursive: true, force: true });
    },
    insertUsage: (rows) => store.insert(rows),
    writeLog: async (rows) => {
      for (const r of rows) log.add(r);
      await log.flush();
      if (log.dropped) throw new Error(`request log rows dropped: ${log.dropped}`);
    },
  };
}

const now = Math.floor(Date.now() / 1000);
/** a usage record as UsageService.record makes it for a routed /v1/responses request */
const usageRow = (i: number): UsageInsert => ({
  record_id: randomUUID(),
  request_id: `req_${randomUUID().replace(/-/g, '').slice(0, 24)}`,
  key_id: `key_${(i % 7).toString().padStart(12, '0')}`,
  user_id: `user-${i % 5}`,
  org_id: 'default',
  model: 'gpt-4o-mini',
  operation: 'responses',
  input_tokens: 180 + (i % 300),
  output_tokens: 20 + (i % 90),
  cached_tokens: i % 3 === 0 ? 128 : 0,
  cache_write_tokens: 0,
  characters: 0,
  audio_seconds: 0,
  output_audio_seconds: 0,
  cost_micros: 1_350 + i,
  created_at: now,
  spend_epoch: 'ep_3f2a9c',
  deployment: 'openai-east',
});
/** its request-log row (src/compose/http.ts requestLogRow) */
const logRow = (i: number): RequestLogRow => ({
  request_id: `req_${randomUUID().replace(/-/g, '').slice(0, 24)}`,
  created_at: now,
  received_at_ms: Date.now(),
  key_id: `key_${(i % 7).toString().padStart(12, '0')}`,
  user_id: `user-${i % 5}`,
  org_id: 'default',
  method: 'POST',
  route: '/v1/responses',
  operation: 'responses',
  model: 'gpt-4o-mini',
  deployment: 'openai-east',
  status: 200,
  error_code: null,
  error_message: null,
  latency_ms: 1.37 + (i % 10) / 100,
  ttft_ms: null,
  engine_ms: 0.84,
  input_tokens: 180 + (i % 300),
  output_tokens: 20 + (i % 90),
  characters: 0,
  audio_seconds: 0,
  output_audio_seconds: 0,
  cost_micros: 1_350 + i,
  response_id: null,
});
const batches = <R>(make: (i: number) => R) => Array.from({ length: BATCHES }, () => Array.from({ length: ROWS }, (_, i) => make(i)));

interface Sample {
  db: number;
  main: number;
  ms: number;
}
const mainTid = osThreadId()!;

/** CPU µs a row of the database's thread and of this one, and the wall time a batch */
async function measure<R>(t: Tree, all: R[][], write: (rows: R[]) => Promise<void>): Promise<Sample> {
  const d0 = threadCpuUs(t.dbTid);
  const m0 = threadCpuUs(mainTid);
  const t0 = performance.now();
  for (const b of all) await write(b);
  const ms = (performance.now() - t0) / all.length;
  return { db: (threadCpuUs(t.dbTid) - d0) / (all.length * ROWS), main: (threadCpuUs(mainTid) - m0) / (all.length * ROWS), ms };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function main() {
  if (process.platform !== 'linux') throw new Error('bench:db-rows reads per-thread CPU from /proc (Linux)');
  const trees = [await openTree('this tree', join(import.meta.dirname, '..'))];
  if (COMPARE) trees.push(await openTree(COMPARE, join(COMPARE, 'dist')));
  const results = new Map(trees.map((t) => [t, { usage: [] as Sample[], log: [] as Sample[] }]));
  // warm-up: the statements' first runs, the tables' first pages
  for (const t of trees) {
    await t.insertUsage(batches(usageRow)[0]!);
    await t.writeLog(batches(logRow)[0]!);
  }
  for (let round = 1; round <= ROUNDS; round++) {
    for (const t of trees) {
      const r = results.get(t)!;
      r.usage.push(await measure(t, batches(usageRow), t.insertUsage));
      r.log.push(await measure(t, batches(logRow), t.writeLog));
      const [u, l] = [r.usage.at(-1)!, r.log.at(-1)!];
      console.error(`round ${round}, ${t.name}: usage ${u.db.toFixed(1)} µs/row, request log ${l.db.toFixed(1)} µs/row (PGlite's thread)`);
    }
  }
  console.log(`\n${ROWS} rows a batch, ${BATCHES} batches of each kind a round, ${ROUNDS} rounds; medians (each round's figure in brackets)\n`);
  console.log('| code | usage record: PGlite thread µs/row | request-log row: PGlite thread µs/row | a request (both rows) | main thread µs/request | ms a batch (usage / log) |');
  console.log('| --- | ---: | ---: | ---: | ---: | ---: |');
  for (const t of trees) {
    const r = results.get(t)!;
    const each = (xs: Sample[]) => xs.map((x) => x.db.toFixed(0)).join(' ');
    const u = median(r.usage.map((x) => x.db));
    const l = median(r.log.map((x) => x.db));
    const both = median(r.usage.map((x, i) => x.db + r.log[i]!.db));
    const main = median(r.usage.map((x, i) => x.main + r.log[i]!.main));
    console.log(
      `| ${t.name} | ${u.toFixed(1)} [${each(r.usage)}] | ${l.toFixed(1)} [${each(r.log)}] | ${both.toFixed(1)} | ${main.toFixed(1)} | ${median(r.usage.map((x) => x.ms)).toFixed(1)} / ${median(r.log.map((x) => x.ms)).toFixed(1)} |`,
    );
  }
  for (const t of trees) await t.close();
}

await main();
