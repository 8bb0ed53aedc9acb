/**
 * npm run bench:realtime [-- --turns N] [--silence 200,500]: the turn latency of a Realtime session on Portico's own
 * engines (src/realtime: server VAD, the built-in recognizer, a text model, the built-in speech), from the end of the
 * user's speech to the first `response.output_audio.delta`. Not a test: it prints a Markdown section for
 * docs/performance.md ("Realtime: turn latency").
 *
 * - Portico listens in this process (PGlite in memory, the built-in audio and realtime models, engines warm). Its text
 *   model is a scripted upstream (test/helpers/scripted-upstream.ts) answering at a fixed rate: the role chunk after
 *   UPSTREAM_FIRST_MS, then one word every UPSTREAM_EVERY_MS, three sentences; so the upstream's share of a turn is a
 *   known constant (its time to the end of the first sentence) and the rest is Portico's.
 * - The question is spoken once by Portico's tts-1 (alloy) as 24 kHz PCM, its silent ends trimmed. Each turn, a raw
 *   `ws` client (ws:// on the plain port) sends 300 ms of silence, the speech and then silence, in 20 ms appends AT
 *   THEIR REAL-TIME PACE, as a microphone would, until response.done. Real time, not faster: the pipeline is built
 *   for it (the recognizer starts on the turn so far at each pause while the user goes on, and the VAD's
 *   silence_duration_ms is counted in audio, so audio sent faster than real time would make the silence take less
 *   wall time than it does for a real user and the latency look smaller than it is).
 * - Speech end = the moment the append holding the last speech sample was sent (the speech is padded at its start
 *   so that it ends on an append's boundary). Every server event is stamped when the client receives it; the
 *   upstream's request is stamped when it arrives there (the transcript is ready and the text model is asked).
 * - Per silence_duration_ms (SILENCES, default 200 and OpenAI's default 500): N turns on one session (the
 *   conversation grows), and N sessions of one turn each; transcription events on (whisper-1: the transcript is made
 *   for the text model whether or not they are asked for, so they cost nothing extra).
 * - The baseline, in the same rounds on the same load: what a client doing it by hand over HTTP waits after the user
 *   stopped (and without any silence to wait for: it knows): POST /v1/audio/transcriptions of the same speech (wav),
 *   then a streamed POST /v1/chat/completions on the same upstream to its first complete sentence, then POST
 *   /v1/audio/speech of that sentence (pcm, alloy) to its first byte.
 * Each round runs every path once, in an order that turns round by round. The figures are p50 and p95 of N.
 */
import os from 'node:os';
import { WebSocket } from 'ws';
import type { ModelSpec } from '../src/models/config.js';
import { completeSentencesLength } from '../src/engines/shared/sentences.js';
import { startScriptedUpstream, type Reply } from '../test/helpers/scripted-upstream.js';
import { startPortico } from './lib/portico.js';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const TURNS = Number(arg('turns') ?? process.env.BENCH_TURNS ?? 20);
const SILENCES = (arg('silence') ?? '200,500').split(',').map(Number);
const RATE = 24000;
const CHUNK_MS = 20;
const CHUNK_BYTES = (RATE * CHUNK_MS * 2) / 1000;
const LEAD_MS = 300;
const QUESTION = 'What will the weather be like in Paris tomorrow?';
const UPSTREAM_FIRST_MS = 100;
const UPSTREAM_EVERY_MS = 20;
const ANSWER = 'Tomorrow in Paris it will be sunny and warm. Expect a light breeze in the afternoon. It should stay dry all day.';
const WORDS = ANSWER.split(' ').map((w, i, a) => (i < a.length - 1 ? w + ' ' : w));
/** the word that completes the first sentence (its trailing space tells it is complete) */
const FIRST_SENTENCE_WORDS = WORDS.findIndex((_, i) => completeSentencesLength(WORDS.slice(0, i + 1).join('')) > 0) + 1;
const FIRST_SENTENCE = WORDS.slice(0, FIRST_SENTENCE_WORDS).join('').trim();
/** the upstream's fixed time from the request to the chunk that completes the first sentence (role chunk first) */
const UPSTREAM_TTFS = UPSTREAM_FIRST_MS + FIRST_SENTENCE_WORDS * UPSTREAM_EVERY_MS;
const TEXT_MODEL = 'answerer';

const quantile = (xs: number[], q: number) => {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (!s.length) return NaN;
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
};
const f0 = (x: number) => (Number.isFinite(x) ? x.toFixed(0) : '-');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** the times of one turn, ms from the end of the speech */
interface Turn {
  stopped: number;
  committed: number;
  created: number;
  upstream: number;
  transcript: number;
  audio: number;
  heard: number;
  heardText: string;
}

async function main(): Promise<void> {
  const up = await startScriptedUpstream();
  const reply: Reply = { text: WORDS, headerDelayMs: UPSTREAM_FIRST_MS, delayMs: UPSTREAM_EVERY_MS };
  up.defaultReply = reply;
  const models = [{ name: TEXT_MODEL, provider: 'openai-compatible', base_url: up.url, upstream_model: 'm', type: 'text', retries: 0 } as ModelSpec];
  const p = await startPortico({ db: 'pglite', models });
  const key = await p.createKey('bench');
  await p.runtime.audioEngines.warmUp();
  const auth = { authorization: `Bearer ${key}` };
  const post = (path: string, body: unknown) => fetch(p.url + path, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });

  // the question, spoken once by tts-1, trimmed to its speech (-40 dBFS), padded at its start to end on an append
  const raw = Buffer.from(await (await post('/v1/audio/speech', { model: 'tts-1', voice: 'alloy', input: QUESTION, response_format: 'pcm' })).arrayBuffer());
  const loud = (i: number) => Math.abs(raw.readInt16LE(i * 2)) > 328;
  let a = 0;
  let b = raw.length / 2;
  while (a < b && !loud(a)) a++;
  while (b > a && !loud(b - 1)) b--;
  const speech = raw.subarray(a * 2, b * 2);
  const lead = Buffer.alloc(LEAD_MS * 48 + ((CHUNK_BYTES - (speech.length % CHUNK_BYTES)) % CHUNK_BYTES));
  const spoken = Buffer.concat([lead, speech]);
  const speechMs = speech.length / 48;

  const list: any = await (await fetch(p.url + '/v1/models', { headers: auth })).json();
  const rt = list.data.find((m: any) => m.id === 'gpt-realtime');
  const whisper = list.data.find((m: any) => m.id === 'whisper-1');
  const tts = list.data.find((m: any) => m.id === 'tts-1');

  /** a realtime session on a raw socket: events stamped on arrival */
  async function open(silenceMs: number) {
    const ws = new WebSocket(`${p.url.replace('http', 'ws')}/v1/realtime?model=gpt-realtime`, { headers: auth });
    const events: Array<{ at: number; e: any }> = [];
    ws.on('message', (d) => events.push({ at: performance.now(), e: JSON.parse(d.toString()) }));
    await new Promise<void>((res, rej) => {
      ws.once('open', () => res());
      ws.once('error', rej);
    });
    const waitType = async (type: string, from = 0, timeoutMs = 30_000) => {
      const t0 = performance.now();
      for (;;) {
        const hit = events.slice(from).find((x) => x.e.type === type || x.e.type === 'error');
        if (hit) {
          if (hit.e.type === 'error') throw new Error(JSON.stringify(hit.e.error));
          return hit;
        }
        if (performance.now() - t0 > timeoutMs) throw new Error(`no ${type} in ${timeoutMs} ms`);
        await sleep(5);
      }
    };
    await waitType('session.created');
    ws.send(
      JSON.stringify({
        type: 'session.update',
        session: {
          type: 'realtime',
          instructions: 'Answer briefly.',
          audio: { input: { transcription: { model: 'whisper-1' }, turn_detection: { type: 'server_vad', silence_duration_ms: silenceMs } } },
        },
      }),
    );
    await waitType('session.updated');
    /** one turn: the audio at its real-time pace, then silence until response.done */
    async function turn(): Promise<Turn> {
      const from = events.length;
      const upFrom = up.requests.length;
      const t0 = performance.now();
      let k = 0;
      let speechEnd = NaN;
      const chunks = spoken.length / CHUNK_BYTES;
      const silent = Buffer.alloc(CHUNK_BYTES).toString('base64');
      for (;;) {
        const due = t0 + k * CHUNK_MS;
        const now = performance.now();
        if (due > now) await sleep(due - now);
        const audio = k < chunks ? spoken.subarray(k * CHUNK_BYTES, (k + 1) * CHUNK_BYTES).toString('base64') : silent;
        ws.send(JSON.stringify({ type: 'input_audio_buffer.append', audio }));
        if (k === chunks - 1) speechEnd = performance.now();
        k++;
        if (k > chunks && events.slice(from).some((x) => x.e.type === 'response.done' || x.e.type === 'error')) break;
        if (k * CHUNK_MS > 60_000) throw new Error('no response.done within 60 s of audio');
      }
      const got = events.slice(from);
      const err = got.find((x) => x.e.type === 'error');
      if (err) throw new Error(JSON.stringify(err.e.error));
      const at = (type: string) => (got.find((x) => x.e.type === type)?.at ?? NaN) - speechEnd;
      const heard = got.find((x) => x.e.type === 'conversation.item.input_audio_transcription.completed');
      const req = up.requests[upFrom];
      return {
        stopped: at('input_audio_buffer.speech_stopped'),
        committed: at('input_audio_buffer.committed'),
        created: at('response.created'),
        upstream: req ? req.at - speechEnd : NaN,
        transcript: at('response.output_audio_transcript.delta'),
        audio: at('response.output_audio.delta'),
        heard: heard ? heard.at - speechEnd : NaN,
        heardText: heard?.e.transcript ?? '',
      };
    }
    return { turn, close: () => ws.close() };
  }

  /** the same work by hand over HTTP: transcription, then the text model to its first sentence, then that sentence's first audio byte */
  const wav = (() => {
    const h = Buffer.alloc(44);
    h.write('RIFF', 0);
    h.writeUInt32LE(36 + speech.length, 4);
    h.write('WAVEfmt ', 8);
    h.writeUInt32LE(16, 16);
    h.writeUInt16LE(1, 20);
    h.writeUInt16LE(1, 22);
    h.writeUInt32LE(RATE, 24);
    h.writeUInt32LE(RATE * 2, 28);
    h.writeUInt16LE(2, 32);
    h.writeUInt16LE(16, 34);
    h.write('data', 36);
    h.writeUInt32LE(speech.length, 40);
    return Buffer.concat([h, speech]);
  })();
  async function byHand(): Promise<{ asr: number; text: number; speech: number; total: number }> {
    const t0 = performance.now();
    const form = new FormData();
    form.append('model', 'whisper-1');
    form.append('file', new Blob([wav], { type: 'audio/wav' }), 'q.wav');
    const tr = await fetch(p.url + '/v1/audio/transcriptions', { method: 'POST', headers: auth, body: form });
    if (tr.status !== 200) throw new Error(`transcriptions ${tr.status}: ${await tr.text()}`);
    const said = ((await tr.json()) as any).text as string;
    const t1 = performance.now();
    const chat = await post('/v1/chat/completions', { model: TEXT_MODEL, stream: true, messages: [{ role: 'user', content: said || '?' }] });
    const reader = chat.body!.getReader();
    const dec = new TextDecoder();
    let text = '';
    let sse = '';
    let sentence = '';
    while (!sentence) {
      const { done, value } = await reader.read();
      if (done) throw new Error('the chat stream ended without a sentence');
      sse += dec.decode(value, { stream: true });
      let nl: number;
      while ((nl = sse.indexOf('\n\n')) >= 0) {
        const line = sse.slice(0, nl).replace(/^data: /, '');
        sse = sse.slice(nl + 2);
        if (line === '[DONE]') continue;
        text += JSON.parse(line).choices?.[0]?.delta?.content ?? '';
      }
      const n = completeSentencesLength(text);
      if (n > 0) sentence = text.slice(0, n).trim();
    }
    const t2 = performance.now();
    void reader.cancel();
    const sp = await post('/v1/audio/speech', { model: 'tts-1', voice: 'alloy', input: sentence, response_format: 'pcm' });
    const r2 = sp.body!.getReader();
    await r2.read();
    const t3 = performance.now();
    for (;;) if ((await r2.read()).done) break;
    return { asr: t1 - t0, text: t2 - t1, speech: t3 - t2, total: t3 - t0 };
  }

  // warm every path once
  {
    const s = await open(500);
    await s.turn();
    s.close();
    await byHand();
  }
  const loadStart = os.loadavg();
  const cpu0 = process.cpuUsage();
  const wall0 = performance.now();
  type Path = { name: string; silence: number; mode: 'one session' | 'new sessions'; turns: Turn[] };
  const paths: Path[] = [];
  const kept = new Map<number, Awaited<ReturnType<typeof open>>>();
  for (const silence of SILENCES) {
    paths.push({ name: `one session, silence ${silence}`, silence, mode: 'one session', turns: [] });
    paths.push({ name: `new sessions, silence ${silence}`, silence, mode: 'new sessions', turns: [] });
    kept.set(silence, await open(silence));
  }
  const hand: Array<{ asr: number; text: number; speech: number; total: number }> = [];
  for (let i = 0; i < TURNS; i++) {
    const steps: Array<() => Promise<void>> = paths.map((path) => async () => {
      if (path.mode === 'one session') path.turns.push(await kept.get(path.silence)!.turn());
      else {
        const s = await open(path.silence);
        path.turns.push(await s.turn());
        s.close();
      }
    });
    steps.push(async () => void hand.push(await byHand()));
    // the order turns round by round, so no path always follows the same one
    const r = i % steps.length;
    for (const s of [...steps.slice(r), ...steps.slice(0, r)]) await s();
    if (process.env.BENCH_VERBOSE) process.stderr.write(`round ${i + 1}/${TURNS}\n`);
  }
  for (const s of kept.values()) s.close();
  const wallS = (performance.now() - wall0) / 1000;
  const c = process.cpuUsage(cpu0);
  const loadEnd = os.loadavg();

  const handP50 = quantile(
    hand.map((h) => h.total),
    0.5,
  );
  const rows: string[] = [];
  const parts: string[] = [];
  for (const path of paths) {
    const t = path.turns;
    const col = (g: (x: Turn) => number) => `${f0(quantile(t.map(g), 0.5))} / ${f0(quantile(t.map(g), 0.95))}`;
    const portico = (x: Turn) => x.audio - path.silence - UPSTREAM_TTFS;
    const ratio = quantile(
      t.map((x) => x.audio - path.silence),
      0.5,
    );
    rows.push(`| ${path.mode} | ${path.silence} | ${col((x) => x.audio)} | ${col((x) => x.audio - x.stopped)} | ${col(portico)} | ${(ratio / handP50).toFixed(2)} |`);
    parts.push(
      `| ${path.mode} | ${path.silence} | ${col((x) => x.stopped)} | ${col((x) => x.created - x.stopped)} | ${col((x) => x.upstream - x.stopped)} | ${col((x) => x.transcript - x.upstream)} | ${col((x) => x.audio - x.transcript)} | ${col((x) => x.heard)} |`,
    );
  }
  const heardAll = new Map<string, number>();
  for (const path of paths) for (const x of path.turns) heardAll.set(x.heardText, (heardAll.get(x.heardText) ?? 0) + 1);
  const hq = (g: (h: (typeof hand)[number]) => number) => `${f0(quantile(hand.map(g), 0.5))} / ${f0(quantile(hand.map(g), 0.95))}`;
  const load = (l: number[]) => l.map((x) => x.toFixed(1)).join(', ');
  console.log(`### ${new Date().toISOString().slice(0, 10)}: end of speech to the first audio

\`npm run bench:realtime -- --turns ${TURNS}\` on ${os.cpus().length} cores (${os.cpus()[0]?.model.trim()}), Node ${process.version}; load average ${load(loadStart)} at the start, ${load(loadEnd)} at the end; ${wallS.toFixed(0)} s, this process's CPU ${((c.user + c.system) / 1e6 / wallS).toFixed(2)} cores on average.
Realtime model gpt-realtime: voice activity ${rt?.parts?.voice_activity ?? '?'}; recognizer (whisper-1) ${whisper?.engine ?? whisper?.owned_by ?? '?'}; speech (tts-1, alloy) ${tts?.engine ?? '?'}; text model: a scripted upstream, first chunk after ${UPSTREAM_FIRST_MS} ms then a word every ${UPSTREAM_EVERY_MS} ms, its first sentence (${JSON.stringify(FIRST_SENTENCE)}) complete ${UPSTREAM_TTFS} ms after the request.
The question: ${JSON.stringify(QUESTION)}, ${(speechMs / 1000).toFixed(2)} s of speech (tts-1 alloy, 24 kHz), sent in ${CHUNK_MS} ms appends at their real-time pace. ${TURNS} turns per row (p50 / p95, ms).

| session | silence_duration_ms | speech end -> first audio | speech_stopped -> first audio | Portico's part (minus silence and upstream) | ratio to by hand (p50, minus silence) |
| --- | ---: | ---: | ---: | ---: | ---: |
${rows.join('\n')}

By hand over HTTP (the same speech, same rounds): transcription ${hq((h) => h.asr)}, chat to its first sentence ${hq((h) => h.text)}, /audio/speech first byte ${hq((h) => h.speech)}, in all ${hq((h) => h.total)}.

The parts (p50 / p95, ms), each from the event before it; "text model asked" is the request's arrival at the upstream (the transcript is ready):

| session | silence_duration_ms | speech end -> speech_stopped | -> response.created | speech_stopped -> text model asked | -> first transcript delta | -> first audio delta | speech end -> transcription.completed |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
${parts.join('\n')}

Heard: ${[...heardAll].map(([t, n]) => `${JSON.stringify(t)} x${n}`).join(', ')}
`);
  await p.close();
  await up.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
