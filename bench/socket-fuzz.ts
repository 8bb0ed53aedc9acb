/**
 * Raw-socket fuzz run (npm run bench:socket-fuzz). Not a test: it prints figures for docs/security.md.
 *
 * A Portico in this process (PGlite, a fast local upstream as `gpt-test`) with REQUEST_TIMEOUT_MS 3000 and
 * HEADERS_TIMEOUT_MS 2000 takes BENCH_CASES (default 10,000) raw-socket cases of test/helpers/socket-fuzz.ts,
 * 50 connections at once, half of them with a valid key. Reported: answers by class, 5xx (must be 0), sockets
 * neither answered nor closed within the request timeout + 3 s (must be 0), and RSS before and after (after a
 * warm-up of 500 cases; the end measured after a GC and 3 s of rest).
 */
import v8 from 'node:v8';
import vm from 'node:vm';
import type { ModelSpec } from '../src/models/config.js';
import { startFastUpstream } from './lib/upstream-fast.js';
import { startPortico } from './lib/portico.js';
import { socketFuzz } from '../test/helpers/socket-fuzz.js';

const CASES = Number(process.env.BENCH_CASES || 10_000);
const REQUEST_TIMEOUT_MS = 3000;

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;
const rssMiB = () => {
  gc();
  return process.memoryUsage().rss / 1024 / 1024;
};

async function main() {
  const up = await startFastUpstream();
  const models: ModelSpec[] = [{ name: 'gpt-test', provider: 'openai-compatible', base_url: up.url, type: 'text' } as ModelSpec];
  const p = await startPortico({ db: 'pglite', models, env: { REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS), HEADERS_TIMEOUT_MS: '2000' } });
  const key = await p.createKey('fuzz');
  const hangMs = REQUEST_TIMEOUT_MS + 3000;
  await socketFuzz({ url: p.url, key, cases: 500, concurrency: 50, hangMs, seed: 1 });
  await new Promise((r) => setTimeout(r, 1000));
  const start = rssMiB();
  const r = await socketFuzz({ url: p.url, key, cases: CASES, concurrency: 50, hangMs, seed: 9, onProgress: (n) => process.stderr.write(`${n} `) });
  process.stderr.write('\n');
  await new Promise((r) => setTimeout(r, 3000));
  const end = rssMiB();
  console.log(`# socket fuzz, ${new Date().toISOString().slice(0, 10)}, ${r.cases} cases in ${(r.ms / 1000).toFixed(1)} s, 50 connections at once`);
  console.log(`answers: ${JSON.stringify(r.statuses)}`);
  console.log(`5xx: ${r.fiveXX.length}${r.fiveXX.length ? ' ' + JSON.stringify(r.fiveXX.slice(0, 10)) : ''}`);
  console.log(`hung past ${hangMs} ms: ${r.hung.length}${r.hung.length ? ' ' + JSON.stringify(r.hung.slice(0, 10)) : ''}`);
  console.log(`RSS: ${start.toFixed(0)} MiB after warm-up, ${end.toFixed(0)} MiB after the run (${(((end - start) / start) * 100).toFixed(1)} %)`);
  await p.close();
  await up.stop();
  if (r.fiveXX.length || r.hung.length || end > start * 1.1) process.exitCode = 1;
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
