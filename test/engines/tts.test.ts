/**
 * Embedded text-to-speech engines (flite, espeak-ng) in worker threads, and the OpenAI voice map.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createFliteEngine, type EmbeddedSpeechEngine } from '../../src/engines/flite/index.js';
import { createEspeakEngine } from '../../src/engines/espeak/index.js';
import { splitSentences } from '../../src/engines/flite/sentences.js';
import { espeakRate } from '../../src/engines/espeak/rate.js';
import { EngineError, type PcmChunk, type SpeechRequest } from '../../src/engines/types.js';
import { OPENAI_VOICES, embeddedVoiceFor, isOpenAiVoice } from '../../src/audio/voices.js';
import { resampleStream } from '../../src/audio/codec/index.js';
import { timeStretch } from '../../src/audio/codec/stretch.js';

interface Collected {
  chunks: PcmChunk[];
  /** ms since the request, per chunk */
  times: number[];
  samples: Int16Array;
  sampleRate: number;
  seconds: number;
  totalMs: number;
}

function concat(parts: Int16Array[]): Int16Array {
  const out = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

async function collect(engine: EmbeddedSpeechEngine, req: SpeechRequest): Promise<Collected> {
  const t0 = performance.now();
  const chunks: PcmChunk[] = [];
  const times: number[] = [];
  for await (const c of engine.synthesize(req)) {
    chunks.push(c);
    times.push(performance.now() - t0);
  }
  const samples = concat(chunks.map((c) => c.samples));
  const sampleRate = chunks[0]?.sampleRate ?? 0;
  return { chunks, times, samples, sampleRate, seconds: sampleRate ? samples.length / sampleRate : 0, totalMs: performance.now() - t0 };
}

function rms(x: Int16Array): number {
  let s = 0;
  for (const v of x) s += v * v;
  return Math.sqrt(s / Math.max(1, x.length));
}

/** Median F0 of voiced frames (autocorrelation) and zero-crossing rate: a crude voice fingerprint. */
function voiceFeatures(x: Int16Array, rate: number): { f0: number; zcr: number } {
  const n = Math.round(rate * 0.04);
  const hop = Math.round(rate * 0.02);
  const overall = rms(x);
  const f0s: number[] = [];
  for (let s = 0; s + n <= x.length; s += hop) {
    let e = 0;
    for (let i = 0; i < n; i++) e += x[s + i] * x[s + i];
    if (Math.sqrt(e / n) < overall * 0.7) continue;
    let best = 0;
    let bestLag = 0;
    for (let lag = Math.floor(rate / 400); lag <= Math.ceil(rate / 70); lag++) {
      let c = 0;
      for (let i = 0; i + lag < n; i++) c += x[s + i] * x[s + i + lag];
      c /= e;
      if (c > best) {
        best = c;
        bestLag = lag;
      }
    }
    if (best > 0.5) f0s.push(rate / bestLag);
  }
  let zc = 0;
  for (let i = 1; i < x.length; i++) if (x[i - 1] < 0 !== x[i] < 0) zc++;
  f0s.sort((a, b) => a - b);
  return { f0: f0s[Math.floor(f0s.length / 2)] ?? 0, zcr: zc / (x.length / rate) };
}

const LONG_TEXT = Array.from(
  { length: 10 },
  (_, i) => `This is sentence number ${i + 1} of a longer text, which is read one sentence at a time.`,
).join(' ');

let flite: EmbeddedSpeechEngine;
let espeak: EmbeddedSpeechEngine;

before(async () => {
  flite = createFliteEngine({ poolSize: 2 });
  espeak = createEspeakEngine({ poolSize: 2 });
  await Promise.all([flite.ready(), espeak.ready()]);
});

after(async () => {
  await Promise.all([flite?.close(), espeak?.close()]);
});

function engineFor(kind: string): EmbeddedSpeechEngine {
  return kind === 'flite' ? flite : espeak;
}

describe('voice map', () => {
  test('maps the six OpenAI voices to six different engine voices', () => {
    const targets = OPENAI_VOICES.map((v) => embeddedVoiceFor(v));
    assert.equal(new Set(targets.map((t) => `${t.engine}/${t.voice}`)).size, 6);
    assert.deepEqual(
      targets.map((t) => `${t.engine}/${t.voice}`),
      ['flite/slt', 'flite/rms', 'flite/awb', 'flite/kal16', 'espeak/en-us+f3', 'espeak/en-us+f5'],
    );
    for (const t of targets) assert.ok(engineFor(t.engine).voices.includes(t.voice), `${t.voice} is a voice of ${t.engine}`);
    assert.equal(isOpenAiVoice('alloy'), true);
    assert.equal(isOpenAiVoice('ballad'), false);
    assert.equal(isOpenAiVoice('toString'), false);
  });

  test('every voice gives audible speech, and the six differ in pitch or spectrum', async () => {
    const feats: { voice: string; f0: number; zcr: number }[] = [];
    for (const v of OPENAI_VOICES) {
      const t = embeddedVoiceFor(v);
      const parts: Int16Array[] = [];
      let nativeRate = 0;
      const engine = engineFor(t.engine);
      const tap = async function* () {
        for await (const c of engine.synthesize({ text: 'The rainbow is a division of white light into many beautiful colors.', voice: t.voice, speed: 1 })) {
          nativeRate = c.sampleRate;
          yield c;
        }
      };
      for await (const p of resampleStream(tap(), 16000)) parts.push(p);
      const pcm = concat(parts);
      const seconds = pcm.length / 16000;
      assert.equal(nativeRate, t.engine === 'flite' ? 16000 : 22050, `${v} native rate`);
      assert.ok(seconds > 2 && seconds < 7, `${v}: ${seconds.toFixed(2)} s of audio`);
      assert.ok(rms(pcm) > 500, `${v}: audible (rms ${rms(pcm).toFixed(0)})`);
      const f = voiceFeatures(pcm, 16000);
      assert.ok(f.f0 > 60 && f.f0 < 400, `${v}: plausible F0 ${f.f0}`);
      feats.push({ voice: v, ...f });
    }
    const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(a, b);
    for (let i = 0; i < feats.length; i++) {
      for (let j = i + 1; j < feats.length; j++) {
        const a = feats[i];
        const b = feats[j];
        assert.ok(
          rel(a.f0, b.f0) > 0.08 || rel(a.zcr, b.zcr) > 0.08,
          `${a.voice} and ${b.voice} sound alike: F0 ${a.f0.toFixed(0)}/${b.f0.toFixed(0)} Hz, ZCR ${a.zcr.toFixed(0)}/${b.zcr.toFixed(0)}`,
        );
      }
    }
    // female voices above male ones
    const f0 = Object.fromEntries(feats.map((f) => [f.voice, f.f0]));
    assert.ok(f0.alloy > f0.echo && f0.nova > f0.onyx && f0.shimmer > f0.onyx);
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
      assert.ok(stoppedMs < 100, `iteration ended ${stoppedMs.toFixed(0)} ms after the abort`);
      // the single worker is free again: a new request is served quickly, not after 28 more sentences
      const t0 = performance.now();
      const next = await collect(engine, { text: 'Next request.', voice: 'kal16', speed: 1 });
      assert.ok(next.seconds > 0.3);
      const waited = performance.now() - t0;
      assert.ok(waited < 1500, `next request took ${waited.toFixed(0)} ms`);
    } finally {
      await engine.close();
    }
  });

  test('espeak stops in the middle of a sentence when aborted', async () => {
    const ac = new AbortController();
    const words = Array.from({ length: 60 }, (_, i) => `word${i}`).join(' ');
    let received = 0;
    await assert.rejects(async () => {
      for await (const _ of espeak.synthesize({ text: words, voice: 'en-us+f5', speed: 1, signal: ac.signal, })) {
        received++;
        ac.abort();
      }
    }, { name: 'AbortError' });
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
    // long pieces: each is one synchronous flite run of several hundred ms inside a worker
    const engine = createFliteEngine({ poolSize: 1, maxSentenceChars: 400 });
    try {
      await engine.ready();
      const sentence =
        'This deliberately long sentence, with many words and several clauses, keeps the flite synthesizer busy for a good while, ' +
        'so that if it ran on the main thread the timer below would be starved, which is exactly what this test checks does not happen';
      const gaps: number[] = [];
      let last = performance.now();
      const timer = setInterval(() => {
        const now = performance.now();
        gaps.push(now - last);
        last = now;
      }, 10);
      const t0 = performance.now();
      let chunks = 0;
      try {
        for await (const _ of engine.synthesize({ text: `${sentence}. ${sentence}.`, voice: 'slt', speed: 1 })) chunks++;
      } finally {
        clearInterval(timer);
      }
      const elapsed = performance.now() - t0;
      assert.ok(chunks >= 2);
      assert.ok(elapsed > 300, `synthesis took ${elapsed.toFixed(0)} ms (long enough to matter)`);
      const maxGap = Math.max(...gaps);
      assert.ok(gaps.length >= elapsed / 10 / 3, `${gaps.length} ticks in ${elapsed.toFixed(0)} ms`);
      assert.ok(maxGap < elapsed / 2 && maxGap < 150, `longest timer gap ${maxGap.toFixed(0)} ms of ${elapsed.toFixed(0)} ms`);
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
      const f = voiceFeatures(out, rate);
      assert.ok(Math.abs(f.f0 - 200) < 10, `pitch after stretch ${speed}: ${f.f0}`);
    }
  });
});
