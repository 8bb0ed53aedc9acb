/**
 * Stall benchmark (npm run bench:stall). Not a test: it prints figures.
 *
 * Sends the largest requests Portico accepts (and the attack of issue 9: ~320,000 tiny messages, now refused)
 * while a worker thread probes GET /healthz every 20 ms (test/helpers/stall-probe.ts); the longest /healthz
 * answer during each request is its stall, beside the longest while idle in the same run (the baseline). On
 * PGlite (files in DATA_DIR, the embedded default) and PostgreSQL. A fast local upstream answers (worker thread).
 * Beside the probe's figures, the longest turn of the server's event loop during the request (./lib/turn-watch.ts):
 * in wall time, and in the main thread's own CPU time, which other processes on a shared machine do not inflate.
 *
 * Env: BENCH_DB (pglite, postgres, or both: the default), BENCH_ONLY (a substring of the scenario names),
 * BENCH_RUNS (each scenario this many times, the worst kept; default 2), BENCH_TURN_AT=1 (print when each longest
 * turn ended, on the clock of a CPU profile: `node --cpu-prof`, then scripts/cpuprofile.mjs --window).
 */
import os from 'node:os';
import type { ModelSpec } from '../src/models/config.js';
import { MAX_INPUT_CHARS, MAX_INPUT_ITEMS } from '../src/platform/http/json-shape.js';
import { FAST_EMBEDDING_DIMENSIONS, startFastUpstream } from './lib/upstream-fast.js';
import { startPortico } from './lib/portico.js';
import { measureStall, type StallOptions, type StallResult } from '../test/helpers/stall-probe.js';
import { MAX_INPUTS } from '../src/embeddings/schemas.js';
import { watchTurns } from './lib/turn-watch.js';

const RUNS = Number(process.env.BENCH_RUNS || 2);
const DBS = (process.env.BENCH_DB ? [process.env.BENCH_DB] : ['pglite', 'postgres']) as Array<'pglite' | 'postgres'>;
const LIMIT = 16 * 1024 * 1024;
/** the text of each of MAX_INPUT_ITEMS items so the body is just under the 16 MiB limit */
const ITEM_CHARS = Math.floor((LIMIT - 64 * 1024) / MAX_INPUT_ITEMS) - 48;

async function main() {
  const up = await startFastUpstream();
  const models: ModelSpec[] = [
    { name: 'fast', provider: 'openai-compatible', base_url: up.url, type: 'text' } as ModelSpec,
    // a context window smaller than the largest input: input_tokens truncates (auto), responses refuses it
    { name: 'fast-embed', provider: 'openai-compatible', base_url: up.url, type: 'embeddings' } as ModelSpec,
    { name: 'fast-window', provider: 'openai-compatible', base_url: up.url, type: 'text', context_window: 200_000 } as ModelSpec,
  ];
  const all: Array<{
    name: string;
    path: string;
    body: StallOptions['body'];
    expect: number;
    /** done first, not measured: body fields the request needs (a stored response to continue) */
    setup?: (url: string, key: string) => Promise<Record<string, unknown>>;
  }> = [
    {
      name: `responses: ${MAX_INPUT_ITEMS} items, ~16 MiB, stored`,
      path: '/v1/responses',
      body: { kind: 'items', items: MAX_INPUT_ITEMS, textChars: ITEM_CHARS, model: 'fast' },
      expect: 200,
    },
    {
      name: `responses: ${MAX_INPUT_ITEMS} items, ~16 MiB, streamed`,
      path: '/v1/responses',
      body: { kind: 'items', items: MAX_INPUT_ITEMS, textChars: ITEM_CHARS, model: 'fast', extra: { stream: true } },
      expect: 200,
    },
    { name: `responses: a text of ${MAX_INPUT_CHARS} characters`, path: '/v1/responses', body: { kind: 'text', chars: MAX_INPUT_CHARS, model: 'fast' }, expect: 200 },
    {
      name: `responses: ${MAX_INPUT_ITEMS} items, over the context window (400)`,
      path: '/v1/responses',
      body: { kind: 'items', items: MAX_INPUT_ITEMS, textChars: ITEM_CHARS, model: 'fast-window' },
      expect: 400,
    },
    {
      name: `input_tokens: ${MAX_INPUT_ITEMS} items, truncated to the window`,
      path: '/v1/responses/input_tokens',
      body: { kind: 'items', items: MAX_INPUT_ITEMS, textChars: ITEM_CHARS, model: 'fast-window' },
      expect: 200,
    },
    {
      name: `chat completions: ${MAX_INPUT_ITEMS} messages, ~16 MiB`,
      path: '/v1/chat/completions',
      body: { kind: 'items', items: MAX_INPUT_ITEMS, textChars: ITEM_CHARS, model: 'fast', field: 'messages' },
      expect: 200,
    },
    {
      // one fewer: the last message is the user's (a final assistant message is a prefill, refused in front of this engine)
      name: `messages: ${MAX_INPUT_ITEMS - 1} messages, ~16 MiB`,
      path: '/v1/messages',
      body: { kind: 'items', items: MAX_INPUT_ITEMS - 1, textChars: ITEM_CHARS, model: 'fast', field: 'messages', extra: { max_tokens: 16 } },
      expect: 200,
    },
    {
      name: `messages, streamed: ${MAX_INPUT_ITEMS - 1} messages, ~16 MiB`,
      path: '/v1/messages',
      body: { kind: 'items', items: MAX_INPUT_ITEMS - 1, textChars: ITEM_CHARS, model: 'fast', field: 'messages', extra: { max_tokens: 16, stream: true } },
      expect: 200,
    },
    {
      name: `embeddings: ${MAX_INPUTS} texts, ~16 MiB, ${FAST_EMBEDDING_DIMENSIONS} floats each back`,
      path: '/v1/embeddings',
      body: { kind: 'texts', count: MAX_INPUTS, textChars: Math.floor((LIMIT - 64 * 1024) / MAX_INPUTS) - 4, model: 'fast-embed' },
      expect: 200,
    },
    {
      name: `responses: continuing a stored response of ${MAX_INPUT_ITEMS} items (previous_response_id)`,
      path: '/v1/responses',
      body: { kind: 'text', chars: 20, model: 'fast' },
      expect: 200,
      setup: async (url, key) => {
        const text = 'x'.repeat(ITEM_CHARS);
        const input = Array.from({ length: MAX_INPUT_ITEMS - 2 }, (_, i) => ({ type: 'message', role: i % 2 ? 'assistant' : 'user', content: text }));
        const r = await fetch(`${url}/v1/responses`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'fast', input }),
        });
        if (r.status !== 200) throw new Error(`storing the response to continue: ${r.status} ${await r.text()}`);
        const id = ((await r.json()) as { id: string }).id;
        // what storing it left behind settles before the measure
        await new Promise((res) => setTimeout(res, 1000));
        return { previous_response_id: id };
      },
    },
    { name: 'issue 9 attack: 320,000 tiny messages (refused 400)', path: '/v1/responses', body: { kind: 'items', items: 320_000, textChars: 2, model: 'fast' }, expect: 400 },
  ];
  const scenarios = all.filter((s) => !process.env.BENCH_ONLY || s.name.includes(process.env.BENCH_ONLY));

  console.log(`# stall benchmark, ${new Date().toISOString().slice(0, 10)}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? '?'}), node ${process.version}`);
  console.log(
    '| database | request | body | status | answer ms | longest /healthz while idle | longest /healthz during the request | sent at ms | longest turn: wall / main thread CPU ms |',
  );
  console.log('|---|---|---|---|---|---|---|---|---|');
  const turns = watchTurns();
  for (const db of DBS) {
    const p = await startPortico({ db, pglite: 'files', models });
    const key = await p.createKey('stall');
    for (const s of scenarios) {
      let worst: StallResult | undefined;
      let wallMax = 0;
      let cpuMax = 0;
      for (let i = 0; i < RUNS; i++) {
        const extra = s.setup ? await s.setup(p.url, key) : undefined;
        const body = extra ? ({ ...s.body, extra: { ...(s.body as { extra?: object }).extra, ...extra } } as StallOptions['body']) : s.body;
        // the probe idles 300 ms before the request and after its answer: what the turns measure is the request's
        turns.reset();
        const r = await measureStall({ url: p.url, path: s.path, headers: { authorization: `Bearer ${key}` }, body });
        const t = turns.read();
        wallMax = Math.max(wallMax, t.wallMs);
        if (t.cpuMs > cpuMax && process.env.BENCH_TURN_AT) console.log(`# ${s.name}: the turn of most CPU (${t.cpuMs.toFixed(1)} ms) ended at ${t.cpuEndUs} us`);
        cpuMax = Math.max(cpuMax, t.cpuMs);
        if (r.status !== s.expect) throw new Error(`${s.name}: expected ${s.expect}, got ${r.status}: ${r.answer}`);
        if (!worst || r.maxStallMs > worst.maxStallMs) worst = r;
      }
      const w = worst!;
      console.log(
        `| ${db} | ${s.name} | ${(w.bodyBytes / 1024 / 1024).toFixed(1)} MiB | ${w.status} | ${w.requestMs.toFixed(0)} | ${w.idleMaxMs.toFixed(1)} ms | ${w.maxStallMs.toFixed(1)} ms | ${w.maxStallAtMs.toFixed(0)} | ${wallMax.toFixed(1)} / ${cpuMax.toFixed(1)} |`,
      );
    }
    await p.close();
  }
  turns.stop();
  await up.stop();
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
