/**
 * Audio API benchmark (npm run bench:audio). Not a test: it prints figures (a Markdown section).
 *
 * Through the HTTP API of a listening Portico (PGlite in memory, built-in models, no log output):
 * - time to the first audio byte, mp3 and pcm, per voice, for a one-sentence input;
 * - real-time factor (wall time / audio duration) per voice and format for a three-sentence paragraph;
 * - transcription real-time factor (pocketsphinx, built-in whisper-1) on synthesized speech;
 * - concurrent synthesis throughput: 1 and 4 requests at once (audio seconds produced per wall second).
 *
 * BENCH_N (default 10) requests per first-byte figure; BENCH_WRITE_DOCS=1 writes the section into
 * docs/performance.md under "## Audio API" (replacing that section only).
 *
 * BENCH_BASELINE=/path/to/other/checkout (with its own `dist/`, built): a second Portico from that build runs
 * in the same process, and the first-byte figures of the voices both know are measured on both, request by
 * request in turn (same load, same moment), with the ratio. Its build must export the same entry points
 * (compose/core.js and compose/runtime.js, or the first layout's app.js and api/plugins.js).
 */
import os from 'node:os';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { existsSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { createCore } from '../src/compose/core.js';
import { createRuntime } from '../src/compose/runtime.js';
import { loadConfig } from '../src/platform/config.js';
import { signToken } from '../src/platform/auth/jwt.js';
import { OPENAI_VOICES, embeddedVoiceFor } from '../src/audio/voices.js';
import { levelPiece } from '../src/engines/shared/loudness.js';
import { latency, fmt } from './lib/stats.js';

const N = Number(process.env.BENCH_N || 10);
const SECRET = 'bench-secret-0123456789abcdef0123456789abcdef';
const VOICES = OPENAI_VOICES;
/** the voices every build since the first one serves (for the same-run baseline) */
const OLD_VOICES: readonly string[] = ['alloy', 'echo', 'fable', 'onyx', 'nova', 'shimmer'];
const FORMATS = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] as const;

/** How a build starts a Portico app on a config (the current build, or a baseline checkout of either layout). */
interface Entry {
  loadConfig: (env: Record<string, string>) => { jwt: { secret?: Uint8Array } };
  signToken: typeof signToken;
  start(config: unknown): Promise<{ app: FastifyInstance; close(): Promise<void> }>;
}

const CURRENT: Entry = {
  loadConfig: (env) => loadConfig(env),
  signToken,
  async start(config) {
    const core = await createCore(config as ReturnType<typeof loadConfig>, { role: 'serve' });
    const runtime = await createRuntime(core);
    return {
      app: runtime.app,
      async close() {
        await runtime.app.close();
        await runtime.close();
        await core.close();
      },
    };
  },
};

/** One listening Portico (PGlite in memory) of a build, with an inference key. */
async function startPortico(m: Entry) {
  const dataDir = mkdtempSync(join(tmpdir(), 'portico-bench-audio-'));
  const config = m.loadConfig({ DATA_DIR: dataDir, PORTICO_DB: 'memory', JWT_SECRET: SECRET, LOG_LEVEL: 'silent', PORT: '0' });
  const started = await m.start(config);
  const app = started.app;
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  const jwt = await m.signToken(config.jwt.secret!, { userId: 'bench', orgRoles: {}, ttlSeconds: 3600 });
  const created = await app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${jwt}` }, payload: { name: 'bench' } });
  const key = created.json().data.api_key as string;

  /** One speech request: ms to the first body byte, ms to the end, bytes. */
  async function speak(voice: string, format: string, input: string, speed = 1, model = 'tts-1') {
    const t0 = performance.now();
    const res = await fetch(`${url}/v1/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, voice, input, response_format: format, speed }),
    });
    if (res.status !== 200) throw new Error(`speech ${voice}/${format}: ${res.status} ${await res.text()}`);
    const reader = res.body!.getReader();
    let first = -1;
    const parts: Uint8Array[] = [];
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      if (first < 0) first = performance.now() - t0;
      parts.push(r.value);
    }
    return { firstMs: first, totalMs: performance.now() - t0, bytes: Buffer.concat(parts) };
  }
  async function close() {
    await started.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
  return { url, key, speak, close };
}

/** A baseline build: the layered one (compose/) or the first one (app.ts + api/plugins.ts). */
async function loadBaseline(dir: string): Promise<Entry> {
  const at = (p: string) => import(pathToFileURL(join(resolve(dir), 'dist', p)).href);
  const [c, j] = await Promise.all([at('src/platform/config.js'), at('src/platform/auth/jwt.js')]);
  if (existsSync(join(resolve(dir), 'dist', 'src', 'compose', 'core.js'))) {
    const [core, rt] = await Promise.all([at('src/compose/core.js'), at('src/compose/runtime.js')]);
    return {
      loadConfig: c.loadConfig,
      signToken: j.signToken,
      async start(config) {
        const k = await core.createCore(config, { role: 'serve' });
        const r = await rt.createRuntime(k);
        return { app: r.app, close: async () => (await r.app.close(), await r.close(), await k.close()) };
      },
    };
  }
  const [a, p] = await Promise.all([at('src/app.js'), at('src/api/plugins.js')]);
  return {
    loadConfig: c.loadConfig,
    signToken: j.signToken,
    async start(config) {
      const services = await a.createServices(config);
      const app = await a.buildApp(services, { apiPlugins: p.apiPlugins });
      return { app, close: async () => (await app.close(), await a.closeServices(services)) };
    },
  };
}
const ONE_SENTENCE = 'The quick brown fox jumps over the lazy dog.';
const PARAGRAPH = "The weather today is sunny and warm. Please call me tomorrow morning at nine o'clock. We will meet at the station at noon and walk to the old harbour together.";

async function main() {
  const current = await startPortico(CURRENT);
  const { url, key } = current;
  const auth = { authorization: `Bearer ${key}` };
  const speak = current.speak;
  const baselineDir = process.env.BENCH_BASELINE;
  const baseline = baselineDir ? await startPortico(await loadBaseline(baselineDir)) : undefined;

  const lines: string[] = [];
  const out = (s = '') => {
    lines.push(s);
    console.log(s);
  };

  // warm-up: load both engines in both workers, start the spare encoders of every format
  for (const v of VOICES) for (const f of FORMATS) await speak(v, f, 'Warm up.');
  await Promise.all(VOICES.map((v) => speak(v, 'pcm', 'Warm up the second worker.')));
  if (baseline) {
    for (const v of OLD_VOICES) for (const f of FORMATS) await baseline.speak(v, f, 'Warm up.');
    await Promise.all(OLD_VOICES.map((v) => baseline.speak(v, 'pcm', 'Warm up the second worker.')));
  }

  out('## Audio API');
  out();
  out(
    `Measured ${new Date().toISOString().slice(0, 10)} on the development machine: ${os.cpus().length} cores (${os.cpus()[0]?.model.trim() ?? 'unknown CPU'}, shared with other work), ` +
      `Node ${process.version}, Linux ${os.arch()}; Debian ffmpeg, pocketsphinx 0.8 (pocketsphinx_continuous). Reproduce with ` +
      '`npm run bench:audio` (`BENCH_N` requests per first-byte figure; `BENCH_WRITE_DOCS=1` rewrites this section). All requests go ' +
      'through the HTTP API of a listening Portico (inference key, PGlite in memory, usage records written), engines warm. ' +
      `Load average when the run started: ${os
        .loadavg()
        .map((x) => x.toFixed(1))
        .join(', ')} (other builds and tests were running on the same 2 cores, so the figures are pessimistic and noisy).`,
  );
  out();

  // ---------------------------------------------------------------- first byte
  /** a pause before each measured request: the previous one's after-work (a spare encoder starting, usage) settles */
  const settle = () => new Promise((r) => setTimeout(r, 150));
  out(`Time to the first audio byte for a one-sentence input ("${ONE_SENTENCE}", ${N} requests one after another, 150 ms apart), tts-1:`);
  out();
  let worstMp3P50 = 0;
  const ratios: number[] = [];
  if (baseline) {
    out(
      `Each request alternates with the same request to a second Portico built from the baseline checkout (\`${process.env.BENCH_BASELINE_LABEL ?? baselineDir}\`), ` +
        'running in the same process, so both see the same load (in turn A B B A, then B A A B); ratio = this build / baseline (p50).',
    );
    out();
    out('| Voice | Engine | mp3 p50 (ms) | mp3 p99 (ms) | pcm p50 (ms) | pcm p99 (ms) | baseline mp3 p50 | baseline pcm p50 | ratio mp3 | ratio pcm |');
    out('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  } else {
    out('| Voice | Engine | mp3 p50 (ms) | mp3 p99 (ms) | pcm p50 (ms) | pcm p99 (ms) |');
    out('| --- | --- | ---: | ---: | ---: | ---: |');
  }
  for (const v of VOICES) {
    const mp3: number[] = [];
    const pcm: number[] = [];
    const bmp3: number[] = [];
    const bpcm: number[] = [];
    const withBase = baseline && OLD_VOICES.includes(v);
    const cur = async (format: string, into: number[]) => {
      await settle();
      into.push((await speak(v, format, ONE_SENTENCE)).firstMs);
    };
    const base = async (format: string, into: number[]) => {
      await settle();
      into.push((await baseline!.speak(v, format, ONE_SENTENCE)).firstMs);
    };
    for (let i = 0; i < N; i++) {
      if (!withBase) {
        await cur('mp3', mp3);
        await cur('pcm', pcm);
      } else if (i % 2 === 0) {
        // the order alternates, so neither build always follows the other's mp3 (whose spare encoder starts then)
        await cur('mp3', mp3);
        await base('mp3', bmp3);
        await base('pcm', bpcm);
        await cur('pcm', pcm);
      } else {
        await base('mp3', bmp3);
        await cur('mp3', mp3);
        await cur('pcm', pcm);
        await base('pcm', bpcm);
      }
    }
    const a = latency(mp3);
    const b = latency(pcm);
    worstMp3P50 = Math.max(worstMp3P50, a.p50);
    const t = embeddedVoiceFor(v);
    const engine = `${t.engine} ${t.voice}${t.pitch ? ` x${t.pitch}` : ''}`;
    if (baseline) {
      const cells = withBase ? [latency(bmp3).p50, latency(bpcm).p50] : [];
      if (withBase) ratios.push(a.p50 / cells[0], b.p50 / cells[1]);
      out(
        `| ${v} | ${engine} | ${fmt(a.p50)} | ${fmt(a.p99)} | ${fmt(b.p50)} | ${fmt(b.p99)} | ` +
          (withBase ? `${fmt(cells[0])} | ${fmt(cells[1])} | ${(a.p50 / cells[0]).toFixed(2)} | ${(b.p50 / cells[1]).toFixed(2)} |` : '- | - | - | - |'),
      );
    } else {
      out(`| ${v} | ${engine} | ${fmt(a.p50)} | ${fmt(a.p99)} | ${fmt(b.p50)} | ${fmt(b.p99)} |`);
    }
  }
  out();
  out(`Aim: mp3 first byte under 150 ms for a one-sentence input: ${worstMp3P50 < 150 ? 'met' : 'NOT met'} (slowest voice p50 ${fmt(worstMp3P50)} ms).`);
  if (ratios.length) {
    const geo = Math.exp(ratios.reduce((x, r) => x + Math.log(r), 0) / ratios.length);
    out(`Against the baseline (voices both serve): geometric mean of the p50 ratios ${geo.toFixed(2)} (below 1: this build is faster).`);
  }
  out();

  // the level stage alone (what each sentence or chunk now goes through in the worker), on real speech
  {
    const bytes = (await speak('alloy', 'pcm', ONE_SENTENCE)).bytes;
    const speech = new Int16Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + (bytes.length & ~1)));
    const time = (f: (x: Int16Array) => void) => {
      const us: number[] = [];
      for (let i = 0; i < 300; i++) {
        const x = speech.slice();
        const t0 = process.hrtime.bigint();
        f(x);
        us.push(Number(process.hrtime.bigint() - t0) / 1000);
      }
      return latency(us).p50;
    };
    const fixed = time((x) => levelPiece(x, 24000, { gainDb: -5 }));
    const whole = time((x) => levelPiece(x, 24000, { hd: true }));
    out(
      `The level stage by itself, on this sentence as speech (${(speech.length / 24000).toFixed(2)} s at 24 kHz; the workers run it at the engines' 16 or 22.05 kHz), ` +
        `median of 300 runs in this thread: fixed gain (tts-1) ${fixed.toFixed(0)} µs, measure and set the whole sentence (tts-1-hd) ${whole.toFixed(0)} µs.`,
    );
    out();
  }

  // tts-1-hd: quality before latency (each sentence whole, level set exactly)
  const TWO = 'When the first sentence is rather long, as this one is, tts-1 cuts it at its first comma. The second one is short.';
  out(`tts-1 against tts-1-hd, first byte and whole request for a two-sentence input with a long first sentence ("${TWO}"), mp3, ${N} requests each in turn:`);
  out();
  out('| Voice | tts-1 first byte p50 (ms) | tts-1-hd first byte p50 (ms) | tts-1 whole p50 (ms) | tts-1-hd whole p50 (ms) |');
  out('| --- | ---: | ---: | ---: | ---: |');
  for (const v of ['alloy', 'nova'] as const) {
    const std = { first: [] as number[], total: [] as number[] };
    const hd = { first: [] as number[], total: [] as number[] };
    for (let i = 0; i < N; i++) {
      for (const model of i % 2 === 0 ? ['tts-1', 'tts-1-hd'] : ['tts-1-hd', 'tts-1']) {
        await settle();
        const r = await speak(v, 'mp3', TWO, 1, model);
        const into = model === 'tts-1' ? std : hd;
        into.first.push(r.firstMs);
        into.total.push(r.totalMs);
      }
    }
    out(`| ${v} | ${fmt(latency(std.first).p50)} | ${fmt(latency(hd.first).p50)} | ${fmt(latency(std.total).p50)} | ${fmt(latency(hd.total).p50)} |`);
  }
  out();

  // ---------------------------------------------------------------- real-time factor
  out(
    `Real-time factor (wall time of the whole request / duration of the audio; below 1 is faster than real time) for a three-sentence paragraph (${PARAGRAPH.length} characters), mean of 3:`,
  );
  out();
  out(`| Voice | audio (s) | ${FORMATS.join(' | ')} |`);
  out(`| --- | ---: | ${FORMATS.map(() => '---:').join(' | ')} |`);
  const paragraphSeconds: Record<string, number> = {};
  for (const v of VOICES) {
    const pcm = await speak(v, 'pcm', PARAGRAPH);
    const seconds = pcm.bytes.length / 2 / 24000;
    paragraphSeconds[v] = seconds;
    const cells: string[] = [];
    for (const f of FORMATS) {
      let total = 0;
      for (let i = 0; i < 3; i++) total += (await speak(v, f, PARAGRAPH)).totalMs;
      cells.push((total / 3 / 1000 / seconds).toFixed(3));
    }
    out(`| ${v} | ${seconds.toFixed(2)} | ${cells.join(' | ')} |`);
  }
  out();

  // ---------------------------------------------------------------- transcription
  const wav = (await speak('alloy', 'wav', PARAGRAPH)).bytes;
  const wavSeconds = (wav.length - 44) / 48000;
  const sttMs: number[] = [];
  let text = '';
  for (let i = 0; i < 5; i++) {
    const fd = new FormData();
    fd.append('file', new Blob([new Uint8Array(wav)]), 'speech.wav');
    fd.append('model', 'whisper-1');
    fd.append('response_format', 'verbose_json');
    fd.append('timestamp_granularities[]', 'word');
    const t0 = performance.now();
    const res = await fetch(`${url}/v1/audio/transcriptions`, { method: 'POST', headers: auth, body: fd });
    if (res.status !== 200) throw new Error(`transcription: ${res.status} ${await res.text()}`);
    text = ((await res.json()) as { text: string }).text;
    sttMs.push(performance.now() - t0);
  }
  const stt = latency(sttMs);
  out(
    `Transcription (built-in whisper-1 on pocketsphinx, verbose_json with word timestamps) of ${wavSeconds.toFixed(2)} s of synthesized speech (alloy, wav), 5 requests: ` +
      `p50 ${fmt(stt.p50)} ms, real-time factor ${(stt.p50 / 1000 / wavSeconds).toFixed(3)} (p50) / ${(stt.mean / 1000 / wavSeconds).toFixed(3)} (mean). Recognized: "${text}".`,
  );
  out();

  // ---------------------------------------------------------------- concurrency
  out('Concurrent synthesis (the paragraph, mp3, voices in turn; 2 flite and 2 espeak worker threads, one ffmpeg per response): audio seconds produced per wall-clock second.');
  out();
  out('| Concurrent requests | Requests | Wall time (s) | Audio (s) | Audio s / wall s | Mean request (ms) |');
  out('| ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const conc of [1, 2, 4, 8]) {
    const total = 12;
    let next = 0;
    let audio = 0;
    const per: number[] = [];
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: conc }, async () => {
        while (next < total) {
          const i = next++;
          const v = VOICES[i % VOICES.length];
          const r = await speak(v, 'mp3', PARAGRAPH);
          per.push(r.totalMs);
          audio += paragraphSeconds[v];
        }
      }),
    );
    const wall = (performance.now() - t0) / 1000;
    out(`| ${conc} | ${total} | ${wall.toFixed(2)} | ${audio.toFixed(1)} | ${(audio / wall).toFixed(1)} | ${fmt(per.reduce((a, b) => a + b, 0) / per.length)} |`);
  }
  out();

  for (const l of [
    'Reading the figures:',
    "- The first byte of pcm and wav is the first sentence's PCM: flite synthesizes a sentence at once (40-100 ms for",
    "  this one), espeak-ng streams within a sentence (10-25 ms). mp3/opus/aac add the encoder's own delay (a warm",
    '  spare ffmpeg is used, so no process start-up; libmp3lame needs a few frames before its first packet).',
    '- Whole requests run 20-100 times faster than real time; the encoded formats cost 1-3 % of the audio length more',
    '  than wav/pcm (one ffmpeg process per response).',
    '- Concurrency: the two cores are the limit (2 flite + 2 espeak workers, the ffmpeg encoders and the event loop',
    "  share them), so more concurrent requests raise each request's time while the audio produced per second stays",
    '  about the same; with other work on the machine the rows vary by +-30 % between runs.',
    '- pocketsphinx transcribes at about 0.35-0.4 x real time on a quiet machine (one process per piece of up to AUDIO_PIECE_SECONDS, at most 2 at once per instance).',
    '- tts-1-hd sends a sentence only once it is whole and levelled (no clause cut, espeak-ng not streamed within the',
    '  sentence), so its first byte is the whole first sentence; the whole request costs about the same as tts-1.',
    '- The level stage costs well under a millisecond per sentence (figure above) against 40-100 ms of synthesis; the',
    '  baseline columns, where given, are the build before the level, pitch and voice-routing work, measured in turn with',
    '  this one. On a loaded machine single voices swing both ways (p50 of 10 requests); the geometric mean is the figure.',
  ])
    out(l);
  out();

  await current.close();
  await baseline?.close();

  if (process.env.BENCH_WRITE_DOCS === '1') {
    const path = join(process.cwd(), 'docs/performance.md');
    const doc = readFileSync(path, 'utf8');
    const section = lines.join('\n').trimEnd() + '\n';
    const start = doc.indexOf('\n## Audio API');
    let next: string;
    if (start < 0) next = doc.trimEnd() + '\n\n' + section;
    else {
      const after = doc.indexOf('\n## ', start + 1);
      next = doc.slice(0, start + 1) + section + (after < 0 ? '' : '\n' + doc.slice(after + 1));
    }
    writeFileSync(path, next);
    console.error(`written to ${path}`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
