/**
 * First audio byte of POST /v1/audio/speech on each speech engine (npm run bench:audio runs it after bench/audio.ts;
 * alone: node dist/bench/speech-engines.js). Not a test: it prints a Markdown section.
 *
 * Engines: flite (alloy on tts-1), espeak-ng (nova on tts-1), and a piper neural voice on sherpa-onnx (alloy on a
 * model of provider piper). The piper voice is BENCH_PIPER_MODEL (a piper .onnx with its .onnx.json beside it,
 * e.g. a file pulled with `portico models pull piper:en_US-libritts_r-medium`); without one, the voice the tests
 * build (test/helpers/onnx-piper.ts: a real piper graph whose "speech" is a tone), which measures Portico and
 * sherpa-onnx (phonemes by espeak-ng, the ONNX run, levelling, encoding) but not a real network's inference.
 *
 * For each engine and format (mp3, pcm): BENCH_N requests (default 10) one after another, 150 ms apart, of a
 * one-sentence input and of a three-sentence paragraph: time to the first body byte, and to the end.
 * BENCH_WRITE_DOCS=1 writes the section into docs/performance.md under "## Speech engines: first audio byte".
 */
import os from 'node:os';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createCore } from '../src/compose/core.js';
import { createRuntime } from '../src/compose/runtime.js';
import { loadConfig } from '../src/platform/config.js';
import { signToken } from '../src/platform/auth/jwt.js';
import { latency, fmt } from './lib/stats.js';
import { piperTestConfig, piperTestOnnx } from '../test/helpers/onnx-piper.js';

const N = Number(process.env.BENCH_N || 10);
const SECRET = 'bench-secret-0123456789abcdef0123456789abcdef';
const ONE = 'The quick brown fox jumps over the lazy dog.';
const PARAGRAPH = 'The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background. It is easy to tell the depth of a well.';

const lines: string[] = [];
const out = (s = '') => {
  lines.push(s);
  console.log(s);
};

async function main() {
  const dataDir = mkdtempSync(join(tmpdir(), 'portico-bench-engines-'));
  let voicePath = process.env.BENCH_PIPER_MODEL ? resolve(process.env.BENCH_PIPER_MODEL) : '';
  const generated = !voicePath;
  if (generated) {
    voicePath = join(dataDir, 'en_US-bench-medium.onnx');
    writeFileSync(voicePath, piperTestOnnx({ speakers: 13 }));
    writeFileSync(`${voicePath}.json`, JSON.stringify(piperTestConfig({ speakers: 13 })));
  } else if (!existsSync(`${voicePath}.json`)) {
    throw new Error(`${voicePath}.json is missing: a piper voice is its .onnx and the .onnx.json published with it`);
  }
  const modelFile = join(dataDir, 'models.yaml');
  writeFileSync(modelFile, `models:\n  - name: neural\n    provider: piper\n    type: speech\n    path: ${JSON.stringify(voicePath)}\n`);
  const config = loadConfig({ DATA_DIR: dataDir, PORTICO_DB: 'memory', JWT_SECRET: SECRET, LOG_LEVEL: 'silent', PORT: '0', PORTICO_CONFIG: modelFile });
  const core = await createCore(config, { role: 'serve' });
  const runtime = await createRuntime(core);
  const app = runtime.app;
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  const jwt = await signToken(config.jwt.secret!, { userId: 'bench', orgRoles: {}, ttlSeconds: 3600 });
  const created = await app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${jwt}` }, payload: { name: 'bench' } });
  const key = created.json().data.api_key as string;

  async function speak(model: string, voice: string, format: string, input: string) {
    const t0 = performance.now();
    const res = await fetch(`${url}/v1/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, voice, input, response_format: format }),
    });
    if (res.status !== 200) throw new Error(`${model}/${voice}/${format}: ${res.status} ${await res.text()}`);
    const reader = res.body!.getReader();
    let firstMs = -1;
    let bytes = 0;
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      if (firstMs < 0) firstMs = performance.now() - t0;
      bytes += r.value.length;
    }
    return { firstMs, totalMs: performance.now() - t0, bytes };
  }

  const engines = [
    { label: 'flite (slt)', model: 'tts-1', voice: 'alloy' },
    { label: 'espeak-ng (en-us+f3)', model: 'tts-1', voice: 'nova' },
    { label: generated ? 'piper on sherpa-onnx (generated test voice)' : `piper on sherpa-onnx (${voicePath.split('/').pop()})`, model: 'neural', voice: 'alloy' },
  ];
  // warm: each engine loaded and its first sentence spoken before anything is timed
  for (const e of engines) for (let i = 0; i < 3; i++) await speak(e.model, e.voice, 'pcm', ONE);

  out('## Speech engines: first audio byte');
  out();
  out(
    `Measured ${new Date().toISOString().slice(0, 10)} by \`npm run bench:audio\` (bench/speech-engines.ts) on this machine: ${os.cpus().length} cores (${os.cpus()[0]?.model ?? 'unknown CPU'}), ` +
      `Node ${process.version}, through the HTTP API of a listening Portico (PGlite in memory), engines warm, ${N} requests per figure one after another, 150 ms apart. ` +
      `Load average at the start: ${os
        .loadavg()
        .map((x) => x.toFixed(1))
        .join(', ')}.`,
  );
  if (generated) {
    out();
    out(
      'The piper row is the voice the tests build (test/helpers/onnx-piper.ts): a real piper ONNX graph run by sherpa-onnx, with espeak-ng phonemes, ' +
        "levelling and encoding, but a tone instead of a network's inference; a real voice adds its inference time (BENCH_PIPER_MODEL=<voice.onnx> measures one).",
    );
  }
  out();
  out(`One sentence ("${ONE}") and a three-sentence paragraph (${PARAGRAPH.length} characters): first byte and whole request, p50 (p99) in ms.`);
  out();
  out('| Engine | format | one sentence: first byte | one sentence: whole | paragraph: first byte | paragraph: whole |');
  out('| --- | --- | ---: | ---: | ---: | ---: |');
  const settle = () => new Promise((r) => setTimeout(r, 150));
  for (const e of engines) {
    for (const format of ['mp3', 'pcm']) {
      const cells: string[] = [];
      for (const input of [ONE, PARAGRAPH]) {
        const first: number[] = [];
        const total: number[] = [];
        for (let i = 0; i < N; i++) {
          await settle();
          const r = await speak(e.model, e.voice, format, input);
          first.push(r.firstMs);
          total.push(r.totalMs);
        }
        const f = latency(first);
        const t = latency(total);
        cells.push(`${fmt(f.p50)} (${fmt(f.p99)})`, `${fmt(t.p50)} (${fmt(t.p99)})`);
      }
      out(`| ${e.label} | ${format} | ${cells.join(' | ')} |`);
    }
  }
  out();
  out(
    "Every engine streams sentence by sentence: the paragraph's first byte comes after its first sentence is synthesized, not the whole paragraph. The load average above is other work on the same 2 cores: the p99 figures are mostly its noise.",
  );
  out();

  await app.close();
  await runtime.close();
  await core.close();
  rmSync(dataDir, { recursive: true, force: true });

  if (process.env.BENCH_WRITE_DOCS === '1') {
    const path = join(process.cwd(), 'docs/performance.md');
    const doc = readFileSync(path, 'utf8');
    const section = lines.join('\n').trimEnd() + '\n';
    const start = doc.indexOf('## Speech engines: first audio byte');
    let next = start < 0 ? -1 : doc.indexOf('\n## ', start + 3);
    if (next >= 0) next += 1;
    const updated = start < 0 ? doc.trimEnd() + '\n\n' + section : doc.slice(0, start) + section + (next >= 0 ? '\n' + doc.slice(next) : '');
    writeFileSync(path, updated);
    console.error(`wrote the section into ${path}`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
