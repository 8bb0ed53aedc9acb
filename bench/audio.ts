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
 */
import os from 'node:os';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildApp, closeServices, createServices } from '../src/app.js';
import { apiPlugins } from '../src/api/plugins.js';
import { loadConfig } from '../src/platform/config.js';
import { signToken } from '../src/platform/auth/jwt.js';
import { latency, fmt } from './lib/stats.js';

const N = Number(process.env.BENCH_N || 10);
const SECRET = 'bench-secret-0123456789abcdef0123456789abcdef';
const VOICES = ['alloy', 'echo', 'fable', 'onyx', 'nova', 'shimmer'] as const;
const FORMATS = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] as const;
const ONE_SENTENCE = 'The quick brown fox jumps over the lazy dog.';
const PARAGRAPH =
  'The weather today is sunny and warm. Please call me tomorrow morning at nine o\'clock. We will meet at the station at noon and walk to the old harbour together.';

async function main() {
  const dataDir = mkdtempSync(join(tmpdir(), 'portico-bench-audio-'));
  const config = loadConfig({ DATA_DIR: dataDir, PORTICO_DB: 'memory', JWT_SECRET: SECRET, LOG_LEVEL: 'silent', PORT: '0' });
  const services = await createServices(config);
  const app = await buildApp(services, { apiPlugins });
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  const jwt = await signToken(config.jwt.secret!, { userId: 'bench', orgRoles: {}, ttlSeconds: 3600 });
  const created = await app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${jwt}` }, payload: { name: 'bench' } });
  const key = created.json().data.api_key as string;
  const auth = { authorization: `Bearer ${key}` };

  /** One speech request: ms to the first body byte, ms to the end, bytes. */
  async function speak(voice: string, format: string, input: string, speed = 1) {
    const t0 = performance.now();
    const res = await fetch(`${url}/v1/audio/speech`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tts-1', voice, input, response_format: format, speed }),
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

  const lines: string[] = [];
  const out = (s = '') => {
    lines.push(s);
    console.log(s);
  };

  // warm-up: load both engines in both workers, start the spare encoders of every format
  for (const v of VOICES) for (const f of FORMATS) await speak(v, f, 'Warm up.');
  await Promise.all(VOICES.map((v) => speak(v, 'pcm', 'Warm up the second worker.')));

  out('## Audio API');
  out();
  out(
    `Measured 2026-11-22 on the development machine: ${os.cpus().length} cores (${os.cpus()[0]?.model.trim() ?? 'unknown CPU'}, shared with other work), ` +
      `Node ${process.version}, Linux ${os.arch()}; Debian ffmpeg, pocketsphinx 0.8 (pocketsphinx_continuous). Reproduce with ` +
      '`npm run bench:audio` (`BENCH_N` requests per first-byte figure; `BENCH_WRITE_DOCS=1` rewrites this section). All requests go ' +
      'through the HTTP API of a listening Portico (inference key, PGlite in memory, usage records written), engines warm. ' +
      `Load average when the run started: ${os.loadavg().map((x) => x.toFixed(1)).join(', ')} (other builds and tests were running on the same 2 cores, so the figures are pessimistic and noisy).`,
  );
  out();

  // ---------------------------------------------------------------- first byte
  out(`Time to the first audio byte for a one-sentence input ("${ONE_SENTENCE}", ${N} requests one after another):`);
  out();
  out('| Voice | Engine | mp3 p50 (ms) | mp3 p99 (ms) | pcm p50 (ms) | pcm p99 (ms) |');
  out('| --- | --- | ---: | ---: | ---: | ---: |');
  const { embeddedVoiceFor } = await import('../src/audio/voices.js');
  let worstMp3P50 = 0;
  for (const v of VOICES) {
    const mp3: number[] = [];
    const pcm: number[] = [];
    for (let i = 0; i < N; i++) {
      mp3.push((await speak(v, 'mp3', ONE_SENTENCE)).firstMs);
      pcm.push((await speak(v, 'pcm', ONE_SENTENCE)).firstMs);
    }
    const a = latency(mp3);
    const b = latency(pcm);
    worstMp3P50 = Math.max(worstMp3P50, a.p50);
    const t = embeddedVoiceFor(v);
    out(`| ${v} | ${t.engine} ${t.voice} | ${fmt(a.p50)} | ${fmt(a.p99)} | ${fmt(b.p50)} | ${fmt(b.p99)} |`);
  }
  out();
  out(`Aim: mp3 first byte under 150 ms for a one-sentence input: ${worstMp3P50 < 150 ? 'met' : 'NOT met'} (slowest voice p50 ${fmt(worstMp3P50)} ms).`);
  out();

  // ---------------------------------------------------------------- real-time factor
  out(`Real-time factor (wall time of the whole request / duration of the audio; below 1 is faster than real time) for a three-sentence paragraph (${PARAGRAPH.length} characters), mean of 3:`);
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

  for (const l of ['Reading the figures:', "- The first byte of pcm and wav is the first sentence's PCM: flite synthesizes a sentence at once (40-100 ms for", "  this one), espeak-ng streams within a sentence (10-25 ms). mp3/opus/aac add the encoder's own delay (a warm", '  spare ffmpeg is used, so no process start-up; libmp3lame needs a few frames before its first packet).', '- Whole requests run 20-100 times faster than real time; the encoded formats cost 1-3 % of the audio length more', '  than wav/pcm (one ffmpeg process per response).', '- Concurrency: the two cores are the limit (2 flite + 2 espeak workers, the ffmpeg encoders and the event loop', "  share them), so more concurrent requests raise each request's time while the audio produced per second stays", '  about the same; with other work on the machine the rows vary by +-30 % between runs.', '- pocketsphinx transcribes at about 0.35-0.4 x real time (one process per request, at most 2 at once).']) out(l);
  out();

  await app.close();
  await closeServices(services);
  rmSync(dataDir, { recursive: true, force: true });

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
