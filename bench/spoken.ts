/**
 * Spoken answers benchmark (`npm run build && node dist/bench/spoken.js`). Not a test: it prints figures (a
 * Markdown section for docs/performance.md, "Spoken answers").
 *
 * A listening Portico (PGlite in memory, built-in voices) in front of an upstream that writes one sentence, then
 * waits until the client has the first audio before it writes the rest. Per voice (flite alloy, espeak-ng nova),
 * mp3 (BENCH_FORMAT), BENCH_N rounds (default 12); in each round, in turn (the order alternating), on the same load:
 * - spoken: POST /v1/responses stream with modalities audio: the first text delta (from the request) and the first
 *   audio delta (from that text delta: the sentence was complete then);
 * - text: the same request without audio: the first text delta;
 * - baseline: POST /v1/audio/speech of the same sentence, same voice and format: the first audio byte.
 * Ratios: first text spoken / text (what speaking costs the text), and first audio after the sentence / speech's
 * first byte (what the Responses path adds to the speech engine's own latency).
 */
import os from 'node:os';
import type { ModelSpec } from '../src/models/config.js';
import { startPortico } from './lib/portico.js';
import { latency, fmt } from './lib/stats.js';
import { readEvents, startGatedUpstream } from '../test/responses/audio-util.js';

const N = Number(process.env.BENCH_N || 12);
/** mp3 (default) or another answer format (pcm16: no encoder process at all) */
const FORMAT = process.env.BENCH_FORMAT || 'mp3';
const SPEECH_FORMAT = FORMAT === 'pcm16' ? 'pcm' : FORMAT;
const SENTENCE = 'The quick brown fox jumps over the lazy dog.';
const VOICES = [
  ['alloy', 'flite slt'],
  ['nova', 'espeak en-us+f3'],
] as const;

async function main() {
  const g = await startGatedUpstream();
  const models = [{ name: 'gated', provider: 'openai-compatible', base_url: g.url, type: 'text' } as ModelSpec];
  const p = await startPortico({ db: 'pglite', models });
  const key = await p.createKey('bench');
  await p.runtime.audioEngines.warmUp();
  const post = (path: string, body: unknown) =>
    fetch(p.url + path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });

  /** one streamed response; times (ms from the request) of its first text delta and first audio delta */
  async function respond(voice: string | null): Promise<{ text: number; audio: number }> {
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    if (!voice) open();
    g.script([SENTENCE + ' '], gate, ['And that is all.']);
    const t0 = performance.now();
    let text = NaN;
    let audio = NaN;
    const res = await post('/v1/responses', {
      model: 'gated',
      input: 'Say it.',
      stream: true,
      ...(voice ? { modalities: ['text', 'audio'], audio: { voice, format: FORMAT } } : {}),
    });
    await readEvents(res, (ev) => {
      if (ev.type === 'response.output_text.delta' && Number.isNaN(text)) text = performance.now() - t0;
      if (ev.type === 'response.audio.delta' && Number.isNaN(audio)) {
        audio = performance.now() - t0;
        open();
      }
    });
    return { text, audio };
  }

  async function speechFirstByte(voice: string): Promise<number> {
    const t0 = performance.now();
    const res = await post('/v1/audio/speech', { model: 'tts-1', voice, input: SENTENCE, response_format: SPEECH_FORMAT });
    const reader = res.body!.getReader();
    await reader.read();
    const t = performance.now() - t0;
    for (;;) if ((await reader.read()).done) break;
    return t;
  }

  const rows: string[] = [];
  for (const [voice, engine] of VOICES) {
    // warm: the first syntheses of a voice are slower
    for (let i = 0; i < 2; i++) {
      await respond(voice);
      await speechFirstByte(voice);
    }
    const spokenText: number[] = [];
    const spokenAudio: number[] = [];
    const plainText: number[] = [];
    const speech: number[] = [];
    for (let i = 0; i < N; i++) {
      const steps = [
        async () => {
          const r = await respond(voice);
          spokenText.push(r.text);
          spokenAudio.push(r.audio - r.text);
        },
        async () => plainText.push((await respond(null)).text),
        async () => speech.push(await speechFirstByte(voice)),
      ];
      for (const s of i % 2 ? steps.reverse() : steps) await s();
      await new Promise((r) => setTimeout(r, 100));
    }
    const st = latency(spokenText);
    const pt = latency(plainText);
    const sa = latency(spokenAudio);
    const sp = latency(speech);
    rows.push(
      `| ${voice} | ${engine} | ${fmt(st.p50)} | ${fmt(pt.p50)} | ${(st.p50 / pt.p50).toFixed(2)} | ${fmt(sa.p50)} | ${fmt(sa.p99)} | ${fmt(sp.p50)} | ${(sa.p50 / sp.p50).toFixed(2)} |`,
    );
  }
  const load = os.loadavg().map((x) => x.toFixed(1));
  console.log(`## Spoken answers (modalities audio)

Measured ${new Date().toISOString().slice(0, 10)} on ${os.cpus().length} cores (${os.cpus()[0]?.model.trim()}), Node ${process.version}; load average at the end ${load.join(', ')}. Reproduce with \`npm run build && node dist/bench/spoken.js\` (\`BENCH_N\` rounds, default 12). A streamed POST /v1/responses with \`modalities: ["text", "audio"]\`, ${FORMAT} (\`BENCH_FORMAT\`), against an upstream that writes one sentence (${JSON.stringify(SENTENCE)}) and then waits for the client's first audio; each round runs the spoken request, the same request without audio and POST /v1/audio/speech of the sentence, in turn, on the same load. ${N} rounds per voice.

| Voice | Engine | first text p50, spoken (ms) | first text p50, text only (ms) | ratio | first audio after the sentence p50 (ms) | p99 (ms) | /audio/speech first byte p50 (ms) | ratio |
| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
${rows.join('\n')}
`);
  await p.close();
  await g.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
