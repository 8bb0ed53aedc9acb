/**
 * Embedded text-to-speech engines (flite, espeak-ng) in worker threads, and the OpenAI voice map: thirteen
 * distinct voices, one level, hd against standard quality, sentences in other scripts.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createFliteEngine, type EmbeddedSpeechEngine } from '../../src/engines/flite/index.js';
import { createEspeakEngine } from '../../src/engines/espeak/index.js';
import { splitSentences } from '../../src/engines/shared/sentences.js';
import { espeakRate } from '../../src/engines/espeak/rate.js';
import { EngineError, type PcmChunk, type SpeechQuality, type SpeechRequest, type Voice } from '../../src/engines/types.js';
import { OPENAI_VOICES, embeddedVoiceFor, isOpenAiVoice, planSpeech, speakEmbedded } from '../../src/audio/voices.js';
import { ESPEAK_TABLE_VOICES } from '../../src/engines/espeak/provider.js';
import { FLITE_PITCHED_VOICES } from '../../src/engines/flite/index.js';
import { applyGain, normalizeSentence, speechLevelDb, TARGET_LEVEL_DBFS } from '../../src/engines/shared/loudness.js';
import { concatInt16, ltas, ltasDistance, medianF0, rms, trimmedLevelDb } from '../helpers/voice-features.js';
import { stallWatch } from '../helpers/wait.js';
import { resampleStream } from '../../src/codec/index.js';
import { timeStretch } from '../../src/codec/stretch.js';

interface Collected {
  chunks: PcmChunk[];
  /** ms since the request, per chunk */
  times: number[];
  samples: Int16Array;
  sampleRate: number;
  seconds: number;
  totalMs: number;
}

async function collect(engine: EmbeddedSpeechEngine, req: SpeechRequest): Promise<Collected> {
  const t0 = performance.now();
  const chunks: PcmChunk[] = [];
  const times: number[] = [];
  for await (const c of engine.synthesize(req)) {
    chunks.push(c);
    times.push(performance.now() - t0);
  }
  const samples = concatInt16(chunks.map((c) => c.samples));
  const sampleRate = chunks[0]?.sampleRate ?? 0;
  return { chunks, times, samples, sampleRate, seconds: sampleRate ? samples.length / sampleRate : 0, totalMs: performance.now() - t0 };
}

const LONG_TEXT = Array.from({ length: 10 }, (_, i) => `This is sentence number ${i + 1} of a longer text, which is read one sentence at a time.`).join(' ');

let flite: EmbeddedSpeechEngine;
let espeak: EmbeddedSpeechEngine;

before(async () => {
  flite = createFliteEngine({ poolSize: 2 });
  espeak = createEspeakEngine({ poolSize: 2, warmVoices: ESPEAK_TABLE_VOICES });
  await Promise.all([flite.ready(), espeak.ready()]);
});

after(async () => {
  await Promise.all([flite?.close(), espeak?.close()]);
});

function engineFor(kind: string): EmbeddedSpeechEngine {
  return kind === 'flite' ? flite : espeak;
}

const FEMALE: readonly Voice[] = ['alloy', 'coral', 'nova', 'sage', 'shimmer', 'marin'];
const STANDARD_SENTENCE = 'The rainbow is a division of white light into many beautiful colors.';

/** Speaks `text` with an OpenAI voice through the voice table, as the API does; PCM at its native rate(s). */
async function speak(voice: Voice, text: string, quality: SpeechQuality = 'standard', speed = 1): Promise<PcmChunk[]> {
  const chunks: PcmChunk[] = [];
  for await (const c of speakEmbedded({ text, voice, speed, quality }, async (k) => engineFor(k))) chunks.push(c);
  return chunks;
}

/** The chunks as one signal at 16 kHz. */
async function at16k(chunks: PcmChunk[]): Promise<Int16Array> {
  const parts: Int16Array[] = [];
  for await (const p of resampleStream(
    (async function* () {
      yield* chunks;
    })(),
    16000,
  ))
    parts.push(p);
  return concatInt16(parts);
}

describe('voice map', () => {
  test('the thirteen OpenAI voices, each on an engine voice that exists, no two with the same engine voice and pitch', () => {
    assert.deepEqual([...OPENAI_VOICES], ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'onyx', 'nova', 'sage', 'shimmer', 'verse', 'marin', 'cedar']);
    const targets = OPENAI_VOICES.map((v) => embeddedVoiceFor(v));
    assert.equal(new Set(targets.map((t) => `${t.engine}/${t.voice}@${t.pitch ?? 1}`)).size, 13);
    for (const t of targets) {
      assert.ok(engineFor(t.engine).voices.includes(t.voice), `${t.voice} is a voice of ${t.engine}`);
      if (t.pitch !== undefined && t.engine === 'flite') assert.ok(FLITE_PITCHED_VOICES.includes(t.voice), `${t.voice} can change pitch`);
      assert.ok(Math.abs(t.gainDb) <= 12);
    }
    for (const v of ['ash', 'ballad', 'coral', 'sage', 'verse', 'marin', 'cedar', 'alloy']) assert.equal(isOpenAiVoice(v), true, v);
    assert.equal(isOpenAiVoice('bob'), false);
    assert.equal(isOpenAiVoice('toString'), false);
  });

  test('every voice is audible, and every pair differs in pitch (8 % or more) or in spectrum (LTAS 2 dB or more) on the same sentence', async () => {
    const feats: { voice: Voice; f0: number; ltas: number[] }[] = [];
    for (const v of OPENAI_VOICES) {
      const chunks = await speak(v, STANDARD_SENTENCE);
      const t = embeddedVoiceFor(v);
      assert.ok(
        chunks.every((c) => c.sampleRate === (t.engine === 'flite' ? 16000 : 22050)),
        `${v} native rate`,
      );
      const pcm = await at16k(chunks);
      const seconds = pcm.length / 16000;
      assert.ok(seconds > 2 && seconds < 7, `${v}: ${seconds.toFixed(2)} s of audio`);
      assert.ok(rms(pcm) > 500, `${v}: audible (rms ${rms(pcm).toFixed(0)})`);
      const f0 = medianF0(pcm, 16000);
      assert.ok(f0 > 60 && f0 < 400, `${v}: plausible F0 ${f0}`);
      feats.push({ voice: v, f0, ltas: ltas(pcm, 16000) });
    }
    const alike = (a: { f0: number; ltas: number[] }, b: { f0: number; ltas: number[] }) => Math.max(a.f0, b.f0) / Math.min(a.f0, b.f0) < 1.08 && ltasDistance(a.ltas, b.ltas) < 2;
    for (let i = 0; i < feats.length; i++) {
      for (let j = i + 1; j < feats.length; j++) {
        const a = feats[i];
        const b = feats[j];
        assert.ok(!alike(a, b), `${a.voice} and ${b.voice} sound alike: F0 ${a.f0.toFixed(0)}/${b.f0.toFixed(0)} Hz, LTAS distance ${ltasDistance(a.ltas, b.ltas).toFixed(2)} dB`);
      }
    }
    // the measure does tell alike voices: the same flite voice 3 % higher, the same espeak voice at almost its own pitch
    for (const [kind, voice, pitch] of [
      ['flite', 'slt', 1.03],
      ['espeak', 'en-us+m3', 1.02],
    ] as const) {
      const base = await at16k((await collect(engineFor(kind), { text: STANDARD_SENTENCE, voice, speed: 1 })).chunks);
      const near = await at16k((await collect(engineFor(kind), { text: STANDARD_SENTENCE, voice, speed: 1, pitch })).chunks);
      const fa = { f0: medianF0(base, 16000), ltas: ltas(base, 16000) };
      const fb = { f0: medianF0(near, 16000), ltas: ltas(near, 16000) };
      assert.ok(alike(fa, fb), `${voice} vs x${pitch}: F0 ${fa.f0.toFixed(0)}/${fb.f0.toFixed(0)}, LTAS ${ltasDistance(fa.ltas, fb.ltas).toFixed(2)}`);
    }
    // female voices above 140 Hz, male ones below
    for (const f of feats) {
      if (FEMALE.includes(f.voice)) assert.ok(f.f0 > 140, `${f.voice} (female) at ${f.f0.toFixed(0)} Hz`);
      else assert.ok(f.f0 < 140, `${f.voice} (male) at ${f.f0.toFixed(0)} Hz`);
    }
  });

  test('pitch: flite slt and kal16, and espeak, move F0 by the factor asked; rms has no pitch control and says so', async () => {
    for (const [kind, voice, factor, tol] of [
      ['flite', 'slt', 1.2, 0.05],
      ['flite', 'kal16', 1.3, 0.08],
      ['espeak', 'en-us+m3', 1.2, 0.1],
    ] as const) {
      const base = await at16k((await collect(engineFor(kind), { text: STANDARD_SENTENCE, voice, speed: 1 })).chunks);
      const moved = await at16k((await collect(engineFor(kind), { text: STANDARD_SENTENCE, voice, speed: 1, pitch: factor })).chunks);
      const ratio = medianF0(moved, 16000) / medianF0(base, 16000);
      assert.ok(Math.abs(ratio - factor) <= tol, `${kind} ${voice} x${factor}: F0 ratio ${ratio.toFixed(3)}`);
    }
    assert.throws(
      () => flite.synthesize({ text: 'x', voice: 'rms', speed: 1, pitch: 1.2 }),
      (e: unknown) => e instanceof EngineError && e.status === 400 && /no pitch control/.test(e.message),
    );
    assert.throws(
      () => espeak.synthesize({ text: 'x', voice: 'en-us', speed: 1, pitch: 3 }),
      (e: unknown) => e instanceof EngineError && e.status === 400,
    );
  });
});

describe('loudness', () => {
  test('the limiter bends peaks instead of clipping; the level ignores leading and trailing silence', () => {
    const rate = 16000;
    const tone = new Int16Array(rate);
    for (let i = 0; i < rate; i++) tone[i] = Math.round(30000 * Math.sin((2 * Math.PI * 220 * i) / rate));
    const loud = applyGain(tone.slice(), 4);
    assert.ok(loud.every((v) => v <= 32767 && v >= -32768));
    assert.ok(Math.max(...loud) > 31000, 'peaks are bent towards full scale, not flattened low');
    const quiet = applyGain(tone.slice(), 0.5);
    assert.ok(
      quiet.every((v, i) => Math.abs(v - tone[i] * 0.5) <= 0.5),
      'below the knee the gain is linear',
    );
    // a -20 dBFS sine with 0.5 s of silence either side
    const a = 32768 * Math.SQRT2 * 0.1;
    const padded = new Int16Array(2 * rate);
    for (let i = 0; i < rate; i++) padded[rate / 2 + i] = Math.round(a * Math.sin((2 * Math.PI * 300 * i) / rate));
    assert.ok(Math.abs(speechLevelDb(padded, rate) - -20) < 0.1, `level ${speechLevelDb(padded, rate)}`);
    assert.equal(speechLevelDb(new Int16Array(rate), rate), -Infinity);
    const n = normalizeSentence(padded.slice(), rate, -26);
    assert.ok(Math.abs(speechLevelDb(n, rate) - -26) < 0.1);
  });

  test('standard: every voice, with its fixed gain, is within 2 dB of -20 dBFS on a standard sentence', async () => {
    for (const v of OPENAI_VOICES) {
      const chunks = await speak(v, STANDARD_SENTENCE);
      const level = trimmedLevelDb(concatInt16(chunks.map((c) => c.samples)), chunks[0].sampleRate);
      assert.ok(Math.abs(level - TARGET_LEVEL_DBFS) <= 2, `${v}: ${level.toFixed(1)} dBFS`);
    }
  });

  test('hd: each sentence is set to -20 dBFS within 0.3 dB, whatever the voice (one chunk per sentence)', async () => {
    const sentences = ['Stop right there!', 'The birch canoe slid on the smooth planks, and nobody saw it go.', 'Why?', 'Four hours of steady work faced us.'];
    for (const v of ['alloy', 'onyx', 'nova', 'cedar'] as const) {
      const chunks = await speak(v, sentences.join(' '), 'hd');
      assert.equal(chunks.length, sentences.length, `${v}: one chunk per sentence`);
      for (const c of chunks) {
        const level = trimmedLevelDb(c.samples, c.sampleRate);
        assert.ok(Math.abs(level - TARGET_LEVEL_DBFS) <= 0.3, `${v}: sentence at ${level.toFixed(2)} dBFS`);
      }
    }
  });
});

describe('hd and standard quality', () => {
  const FIRST_LONG = 'When the first sentence is rather long, it is cut at its first comma, so that audio starts sooner. Then more.';

  test('standard cuts a long first sentence at its first clause to start sooner; hd speaks it whole', async () => {
    assert.deepEqual(planSpeech(FIRST_LONG, 'alloy', 'standard')[0].sentences, [
      'When the first sentence is rather long,',
      'it is cut at its first comma, so that audio starts sooner.',
      'Then more.',
    ]);
    assert.deepEqual(planSpeech(FIRST_LONG, 'alloy', 'hd')[0].sentences, [
      'When the first sentence is rather long, it is cut at its first comma, so that audio starts sooner.',
      'Then more.',
    ]);
    const std = await speak('alloy', FIRST_LONG, 'standard');
    const hd = await speak('alloy', FIRST_LONG, 'hd');
    const secs = (c: PcmChunk) => c.samples.length / c.sampleRate;
    assert.ok(secs(std[0]) < 3, `standard: first chunk ${secs(std[0]).toFixed(2)} s (the clause)`);
    assert.ok(secs(hd[0]) > 4, `hd: first chunk ${secs(hd[0]).toFixed(2)} s (the whole sentence)`);
  });

  test('espeak streams within a sentence at standard quality, and sends the sentence whole at hd', async () => {
    const sentence = 'Glue the sheet to the dark blue background, then put the box beside the parked truck and wait.';
    const std = await speak('nova', sentence, 'standard');
    const hd = await speak('nova', sentence, 'hd');
    assert.ok(std.length >= 4, `standard: ${std.length} chunks`);
    assert.equal(hd.length, 1);
    const total = (cs: PcmChunk[]) => cs.reduce((n, c) => n + c.samples.length, 0);
    assert.ok(Math.abs(total(std) - total(hd)) < 0.05 * total(hd), 'the same speech');
  });
});

describe('languages', () => {
  test('sentences in other scripts go to the espeak-ng voice of their language; Latin script stays with the voice', () => {
    const plan = (text: string, voice: Voice = 'alloy') => planSpeech(text, voice).map((r) => [r.engine, r.voice, r.sentences.length]);
    assert.deepEqual(plan('Hello there. 你好，世界。 Goodbye now.'), [
      ['flite', 'slt', 1],
      ['espeak', 'cmn+f1', 1],
      ['flite', 'slt', 1],
    ]);
    assert.deepEqual(plan('我喜欢学习中文。今天天气很好。', 'echo'), [['espeak', 'cmn+m1', 2]]);
    assert.deepEqual(plan('こんにちは、おげんきですか。', 'nova'), [['espeak', 'ja+f3', 1]]);
    assert.deepEqual(plan('오늘 날씨가 정말 좋네요.', 'onyx'), [['espeak', 'ko+m4', 1]]);
    assert.deepEqual(plan('Сегодня хорошая погода.'), [['espeak', 'ru+f1', 1]]);
    assert.deepEqual(plan('Сьогодні гарна погода.'), [['espeak', 'uk+f1', 1]]);
    assert.deepEqual(plan('الطقس جميل اليوم.'), [['espeak', 'ar+f1', 1]]);
    assert.deepEqual(plan('امروز هوا گرم است.'), [['espeak', 'fa+f1', 1]]);
    assert.deepEqual(plan('Σήμερα ο καιρός είναι καλός.'), [['espeak', 'el+f1', 1]]);
    assert.deepEqual(plan('आज मौसम अच्छा है।'), [['espeak', 'hi+f1', 1]]);
    // Latin script with accents, digits, emoji and symbols: the voice itself
    assert.deepEqual(plan('Café au lait, 3 € — great! 👍', 'ash'), [['espeak', 'en-us+m3', 1]]);
    assert.deepEqual(plan('Déjà vu.', 'fable'), [['flite', 'awb', 1]]);
  });

  test('scripts no engine here reads are refused with a 400 that says what is spoken', () => {
    for (const [text, what] of [
      ['สวัสดีครับ', /Thai script/],
      ['Hello שלום', /Hebrew script/],
      ['東京は日本の首都です。', /kanji/],
      ['ᠮᠣᠩᠭᠣᠯ', /Mongolian/],
    ] as const) {
      assert.throws(
        () => planSpeech(text, 'alloy'),
        (e: unknown) => e instanceof EngineError && e.status === 400 && e.code === 'unsupported_language' && what.test(e.message) && /Chinese/.test(e.message),
        text,
      );
    }
  });

  test('Chinese on a flite voice is spoken in Mandarin: plausible duration and level, not silence', async () => {
    const text = '我喜欢学习中文。今天天气很好。'; // 13 syllables
    for (const v of ['alloy', 'echo'] as const) {
      const chunks = await speak(v, text);
      assert.ok(
        chunks.every((c) => c.sampleRate === 22050),
        'espeak-ng spoke it',
      );
      const pcm = concatInt16(chunks.map((c) => c.samples));
      const seconds = pcm.length / 22050;
      assert.ok(seconds > 13 * 0.15 && seconds < 13 * 0.6, `${v}: ${seconds.toFixed(2)} s for 13 syllables`);
      assert.ok(Math.abs(trimmedLevelDb(pcm, 22050) - TARGET_LEVEL_DBFS) <= 3, `${v}: level ${trimmedLevelDb(pcm, 22050).toFixed(1)}`);
    }
  });
});

for (const [kind, voice] of [
  ['flite', 'slt'],
  ['espeak', 'en-us+f3'],
] as const) {
  describe(`${kind} engine`, () => {
    test('speed 0.5 / 1 / 2 changes the duration by more than 1.5x per step; 0.25 and 4 go further', async () => {
      const text = 'Speed changes how long this sentence takes to say.';
      const d: Record<number, number> = {};
      for (const speed of [0.25, 0.5, 1, 2, 4]) d[speed] = (await collect(engineFor(kind), { text, voice, speed })).seconds;
      assert.ok(d[0.5] / d[1] > 1.5, `0.5 vs 1: ${d[0.5]} / ${d[1]}`);
      assert.ok(d[1] / d[2] > 1.5, `1 vs 2: ${d[1]} / ${d[2]}`);
      assert.ok(d[0.25] / d[0.5] > 1.5, `0.25 vs 0.5: ${d[0.25]} / ${d[0.5]}`);
      assert.ok(d[2] / d[4] > 1.5, `2 vs 4: ${d[2]} / ${d[4]}`);
      // roughly proportional overall (3.0 .. 5.0 expected at 4x the speed)
      assert.ok(d[1] / d[4] > 3 && d[1] / d[4] < 5, `1 vs 4: ${d[1] / d[4]}`);
    });

    test('a long input streams sentence by sentence: the first chunk comes long before the end', async () => {
      const r = await collect(engineFor(kind), { text: LONG_TEXT, voice, speed: 1 });
      assert.ok(r.chunks.length >= 10, `${r.chunks.length} chunks`);
      assert.ok(r.seconds > 20, `${r.seconds} s`);
      const first = r.times[0];
      const last = r.times[r.times.length - 1];
      assert.ok(first < last / 3, `first chunk at ${first.toFixed(0)} ms, last at ${last.toFixed(0)} ms`);
      assert.ok(new Set(r.times.map((t) => Math.round(t / 5))).size >= 5, 'chunks arrive at different times');
      for (const c of r.chunks) assert.equal(c.sampleRate, kind === 'flite' ? 16000 : 22050);
    });

    test('an unknown voice is an EngineError with status 400', () => {
      assert.throws(
        () => engineFor(kind).synthesize({ text: 'x', voice: 'no-such-voice', speed: 1 }),
        (e: unknown) => e instanceof EngineError && e.status === 400 && e.code === 'invalid_voice',
      );
    });

    test('an already aborted signal throws at once', async () => {
      const ac = new AbortController();
      ac.abort();
      await assert.rejects(collect(engineFor(kind), { text: 'Hello.', voice, speed: 1, signal: ac.signal }), { name: 'AbortError' });
    });
  });
}

describe('off the event loop', () => {
  test('abort stops synthesis promptly and frees the worker', async () => {
    const engine = createFliteEngine({ poolSize: 1 });
    try {
      await engine.ready();
      // about 30 sentences: several seconds of flite work if it were not stopped
      const text = Array.from({ length: 30 }, (_, i) => `Sentence ${i + 1} is here to make the work long enough to notice.`).join(' ');
      const ac = new AbortController();
      // bounds below: the expected time plus what this process's event loop was stalled (a busy machine's slack)
      const stalls = stallWatch();
      let received = 0;
      let abortedAt = 0;
      let thrown: unknown;
      try {
        for await (const c of engine.synthesize({ text, voice: 'slt', speed: 1, signal: ac.signal })) {
          assert.ok(c.samples.length > 0);
          received++;
          if (received === 2) {
            abortedAt = performance.now();
            ac.abort();
          }
        }
      } catch (e) {
        thrown = e;
      }
      const stoppedMs = performance.now() - abortedAt;
      assert.equal((thrown as Error)?.name, 'AbortError');
      assert.equal(received, 2, 'nothing is yielded after the abort');
      assert.ok(stoppedMs < 100 + stalls.maxMs(), `iteration ended ${stoppedMs.toFixed(0)} ms after the abort (${stalls.maxMs().toFixed(0)} ms of stalls)`);
      // the single worker is free again: a new request is served quickly, not after 28 more sentences
      const t0 = performance.now();
      const next = await collect(engine, { text: 'Next request.', voice: 'kal16', speed: 1 });
      assert.ok(next.seconds > 0.3);
      const waited = performance.now() - t0;
      assert.ok(waited < 1500 + stalls.stop(), `next request took ${waited.toFixed(0)} ms`);
    } finally {
      await engine.close();
    }
  });

  test('espeak stops in the middle of a sentence when aborted', async () => {
    const ac = new AbortController();
    const words = Array.from({ length: 60 }, (_, i) => `word${i}`).join(' ');
    let received = 0;
    await assert.rejects(
      async () => {
        for await (const _ of espeak.synthesize({ text: words, voice: 'en-us+f5', speed: 1, signal: ac.signal })) {
          received++;
          ac.abort();
        }
      },
      { name: 'AbortError' },
    );
    assert.equal(received, 1);
  });

  test('breaking out of the loop stops the remaining sentences', async () => {
    let n = 0;
    for await (const _ of flite.synthesize({ text: LONG_TEXT, voice: 'kal16', speed: 1 })) {
      if (++n === 1) break;
    }
    // the pool still works afterwards
    const r = await collect(flite, { text: 'Still alive.', voice: 'kal16', speed: 1 });
    assert.ok(r.seconds > 0.3);
  });

  test('a timer keeps firing while the workers synthesize', async () => {
    // Two long pieces, each one synchronous flite run inside the worker. Their length is calibrated on this
    // machine (a fixed text once took 292 ms on a fast CI machine, too short to matter, and the same text is
    // slow on a loaded one), so the run lasts well over the precondition below whatever the machine's speed.
    // Were synthesis on the main thread, the timer would be starved for a whole piece: about half the run,
    // twice the bound asserted on the longest gap.
    const engine = createFliteEngine({ poolSize: 1, maxSentenceChars: 100_000 });
    try {
      await engine.ready();
      // no clause punctuation: each sentence below is one piece (no early cut of the first sentence)
      const words =
        'This deliberately long sentence with many words and several clauses keeps the flite synthesizer busy for a good while ' +
        'so that if it ran on the main thread the timer below would be starved which is exactly what this test checks does not happen';
      const speak = async (text: string) => {
        let chunks = 0;
        for await (const _ of engine.synthesize({ text, voice: 'slt', speed: 1 })) chunks++;
        return chunks;
      };
      // calibration (also warms the worker up): how long one run of `words` takes here
      const c0 = performance.now();
      await speak(`${words}.`);
      const once = Math.max(1, performance.now() - c0);
      // repeats of `words` in one piece so a piece takes ~500 ms; doubled if the run still came out too short
      let repeats = Math.min(64, Math.max(1, Math.ceil(500 / once)));
      let elapsed = 0;
      let chunks = 0;
      let gaps: number[] = [];
      for (let attempt = 0; attempt < 4; attempt++, repeats = Math.min(256, repeats * 2)) {
        const piece = `${Array(repeats).fill(words).join(' ')}.`;
        gaps = [];
        let last = performance.now();
        const timer = setInterval(() => {
          const now = performance.now();
          gaps.push(now - last);
          last = now;
        }, 10);
        const t0 = performance.now();
        try {
          chunks = await speak(`${piece} ${piece}`);
        } finally {
          clearInterval(timer);
        }
        elapsed = performance.now() - t0;
        if (elapsed >= 600) break;
      }
      assert.ok(chunks >= 2);
      assert.ok(elapsed >= 600, `synthesis took ${elapsed.toFixed(0)} ms (long enough to matter)`);
      const maxGap = Math.max(...gaps);
      assert.ok(gaps.length >= elapsed / 10 / 3, `${gaps.length} ticks in ${elapsed.toFixed(0)} ms`);
      assert.ok(maxGap < elapsed / 4, `longest timer gap ${maxGap.toFixed(0)} ms of ${elapsed.toFixed(0)} ms`);
    } finally {
      await engine.close();
    }
  });

  test('two requests run in parallel on a pool of two', async () => {
    const [a, b] = await Promise.all([
      collect(flite, { text: 'First of two parallel requests.', voice: 'rms', speed: 1 }),
      collect(flite, { text: 'Second of two parallel requests.', voice: 'awb', speed: 1 }),
    ]);
    assert.ok(a.seconds > 1 && b.seconds > 1);
  });
});

describe('sentence splitting', () => {
  test('splits at sentence ends, not at abbreviations, initials or decimals', () => {
    assert.deepEqual(splitSentences('Dr. Smith paid $3.50 for it. Did he? Yes!  Mr. J. R. Doe agreed... Then left.'), [
      'Dr. Smith paid $3.50 for it.',
      'Did he?',
      'Yes!',
      'Mr. J. R. Doe agreed...',
      'Then left.',
    ]);
    assert.deepEqual(splitSentences('One.\n\nTwo\nlines joined'), ['One.', 'Two lines joined']);
    assert.deepEqual(splitSentences('  ...  \n '), []);
  });

  test('long sentences are cut at clauses or spaces, the first one early', () => {
    const long = Array.from({ length: 80 }, (_, i) => `w${i}`).join(' ');
    const parts = splitSentences(long, 100);
    assert.ok(parts.length >= 3);
    for (const p of parts) assert.ok(p.length <= 100, p);
    assert.equal(parts.join(' '), long);
    const first = splitSentences('When the first sentence is rather long, it is cut at its first comma, so that audio starts sooner.');
    assert.deepEqual(first, ['When the first sentence is rather long,', 'it is cut at its first comma, so that audio starts sooner.']);
    assert.deepEqual(splitSentences('When the first sentence is rather long, it is cut at its first comma, so that audio starts sooner.', 240, Infinity), [
      'When the first sentence is rather long, it is cut at its first comma, so that audio starts sooner.',
    ]);
  });

  test('Chinese and Japanese full stops end sentences without a space; long CJK text is cut at its commas', () => {
    assert.deepEqual(splitSentences('我喜欢学习中文。今天天气很好！你呢？'), ['我喜欢学习中文。', '今天天气很好！', '你呢？']);
    assert.deepEqual(splitSentences('「はい。」と言った。'), ['「はい。」', 'と言った。']);
    const long = Array.from({ length: 30 }, () => '今天天气很好').join('，') + '。';
    const parts = splitSentences(long, 100);
    assert.ok(parts.length >= 2);
    for (const p of parts) assert.ok(p.length <= 100 && /[，。]$/.test(p), p);
    assert.equal(parts.join(''), long);
  });
});

describe('speed helpers', () => {
  test('espeak rate stays in 80..450 wpm and the rest is time stretching', () => {
    assert.deepEqual(espeakRate(1), { wpm: 175, residual: 1 });
    assert.deepEqual(espeakRate(2), { wpm: 350, residual: 1 });
    const slow = espeakRate(0.25);
    assert.equal(slow.wpm, 80);
    assert.ok(Math.abs(slow.residual - 43.75 / 80) < 1e-9);
    const fast = espeakRate(4);
    assert.equal(fast.wpm, 450);
    assert.ok(Math.abs(fast.residual - 700 / 450) < 1e-9);
  });

  test('time stretching changes length, not pitch', () => {
    const rate = 16000;
    const tone = new Int16Array(rate); // 1 s of 200 Hz
    for (let i = 0; i < tone.length; i++) tone[i] = Math.round(10000 * Math.sin((2 * Math.PI * 200 * i) / rate));
    for (const speed of [0.5, 1.6]) {
      const out = timeStretch(tone, speed, rate);
      assert.equal(out.length, Math.round(rate / speed));
      const f0 = medianF0(out, rate);
      assert.ok(Math.abs(f0 - 200) < 10, `pitch after stretch ${speed}: ${f0}`);
    }
  });
});
