/**
 * Voice activity detection (src/engines/shared/vad): the Silero detector (sherpa-onnx's Vad on the model of the
 * optional @ricky0123/vad-web) and the energy fallback, on audio made here: two sentences spoken by the embedded
 * espeak-ng engine at the voices' level (-20 dBFS), with silence around and between them, and white noise at
 * -60 dBFS over all of it. Where each sentence is is known (its first to last 10 ms over -45 dBFS, measured before
 * the noise is added), so every frame decision is checked against it.
 *
 * The Silero tests skip only where neither sherpa-onnx-node nor @ricky0123/vad-web is installed and CI is not set;
 * where both are installed, Silero must be the active detector.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createEspeakEngine } from '../../src/engines/espeak/index.js';
import type { EmbeddedSpeechEngine } from '../../src/engines/shared/tts.js';
import { resampleFloat } from '../../src/codec/pcm.js';
import type { VoiceActivityDetector } from '../../src/engines/types.js';
import {
  VoiceActivity,
  createVoiceActivityDetector,
  energyLevels,
  voiceActivityEngine,
  voiceActivityStatus,
  type VoiceActivityEngine,
} from '../../src/engines/shared/vad/index.js';
import { installedSileroModel } from '../../src/engines/shared/vad/silero.js';
import { loadSileroRuntime, type SherpaVadModule } from '../../src/engines/shared/vad/silero.js';
import { loadSherpa } from '../../src/engines/shared/sherpa.js';
import { EXIT_MARK, SPEECH_MARK, STAND_IN, release, standInControl } from '../helpers/sherpa-stand-in.js';
import { countTurns } from '../helpers/turns.js';
import { timed, waitFor } from '../helpers/wait.js';

const RATE = 16000;
const SENTENCES = ['The quick brown fox jumps over the lazy dog.', 'We will meet at the station tomorrow morning.'];

function installed(name: string): boolean {
  try {
    createRequire(import.meta.url).resolve(name);
    return true;
  } catch {
    return false;
  }
}
const sileroInstalled = installed('sherpa-onnx-node') && installed('@ricky0123/vad-web/package.json');
const modelInstalled = installed('@ricky0123/vad-web/package.json');
/** the tests of the worker thread run a stand-in for sherpa-onnx (test/helpers/sherpa-stand-in.ts) on the real model file */
const skipModel = !modelInstalled && !process.env.CI ? '@ricky0123/vad-web not installed (npm ci --omit=optional)' : false;
const STAND_IN_URL = new URL('../helpers/sherpa-stand-in.js', import.meta.url).href;
const skipSilero = !sileroInstalled && !process.env.CI ? 'sherpa-onnx-node or @ricky0123/vad-web not installed (npm ci --omit=optional)' : false;

/** a repeatable noise source (xorshift32), uniform in [-1, 1) */
function noise(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 2147483648 - 1;
  };
}

/** first and last sample of the 10 ms frames over -45 dBFS */
function extent(x: Float32Array): [number, number] {
  const f = RATE / 100;
  let first = -1;
  let last = -1;
  for (let i = 0; i + f <= x.length; i += f) {
    let e = 0;
    for (let j = i; j < i + f; j++) e += x[j]! * x[j]!;
    if (10 * Math.log10(e / f + 1e-12) > -45) {
      if (first < 0) first = i;
      last = i + f;
    }
  }
  assert.ok(first >= 0, 'the sentence has speech');
  return [first, last];
}

interface Scene {
  /** the audio, 16 kHz */
  audio: Float32Array;
  /** [start, end) of each sentence's speech, in samples */
  speech: Array<[number, number]>;
}

let espeak: EmbeddedSpeechEngine;
let scene: Scene;
/** the scene with the speech 28 dB quieter (about -48 dBFS), the same noise */
let quiet: Scene;

async function speak(text: string): Promise<Float32Array> {
  const parts: Int16Array[] = [];
  let rate = 0;
  for await (const c of espeak.synthesize({ text, voice: 'en-us+m3', speed: 1, quality: 'hd' })) {
    parts.push(c.samples);
    rate = c.sampleRate;
  }
  const n = parts.reduce((a, p) => a + p.length, 0);
  const f = new Float32Array(n);
  let o = 0;
  for (const p of parts) for (let i = 0; i < p.length; i++) f[o++] = p[i]! / 32768;
  return resampleFloat(f, rate, RATE);
}

/** 1 s of silence, sentence, 1.5 s of silence, sentence, 1.5 s of silence; noise at -60 dBFS over all of it */
function makeScene(sentences: Float32Array[], gain: number): Scene {
  const gaps = [RATE, 1.5 * RATE, 1.5 * RATE];
  const total = gaps.reduce((a, b) => a + b, 0) + sentences.reduce((a, s) => a + s.length, 0);
  const audio = new Float32Array(total);
  const speech: Array<[number, number]> = [];
  let at = gaps[0]!;
  sentences.forEach((s, k) => {
    for (let i = 0; i < s.length; i++) audio[at + i] = s[i]! * gain;
    const [a, b] = extent(s);
    speech.push([at + a, at + b]);
    at += s.length + gaps[k + 1]!;
  });
  const rnd = noise(42);
  const amp = 0.001 * Math.sqrt(3); // RMS 0.001: -60 dBFS
  for (let i = 0; i < audio.length; i++) audio[i] += amp * rnd();
  return { audio, speech };
}

before(async () => {
  espeak = createEspeakEngine({ poolSize: 1, warmVoices: ['en-us+m3'] });
  await espeak.ready();
  const sentences = await Promise.all(SENTENCES.map(speak));
  scene = makeScene(sentences, 1);
  quiet = makeScene(sentences, Math.pow(10, -28 / 20));
});

after(async () => {
  await espeak?.close();
});

/** all decisions for the scene, the audio pushed whole */
function decide(d: VoiceActivityDetector, audio: Float32Array): Promise<boolean[]> {
  return d.push(audio);
}

function frameLabel(s: Scene, frame: number, size: number, toleranceSamples: number): 'speech' | 'silence' | 'either' {
  const a = frame * size;
  const b = a + size;
  for (const [start, end] of s.speech) {
    if (a >= start && b <= end) return 'speech';
    if (b > start - toleranceSamples && a < end + toleranceSamples) return 'either';
  }
  return 'silence';
}

/** Checks the decisions against where the speech is; gives what it found, for the message. */
function checkAgainstScene(name: string, decisions: boolean[], size: number, s: Scene): void {
  assert.equal(decisions.length, Math.floor(s.audio.length / size), 'one decision per complete frame');
  const tolerance = 0.3 * RATE;
  let silenceFrames = 0;
  let falseSpeech = 0;
  let speechFrames = 0;
  let heard = 0;
  decisions.forEach((d, i) => {
    const label = frameLabel(s, i, size, tolerance);
    if (label === 'silence') {
      silenceFrames++;
      if (d) falseSpeech++;
    } else if (label === 'speech') {
      speechFrames++;
      if (d) heard++;
    }
  });
  const picture = decisions.map((d) => (d ? '#' : '.')).join('');
  assert.ok(silenceFrames > 60 && speechFrames > 60, `${silenceFrames} silence and ${speechFrames} speech frames to judge`);
  assert.ok(falseSpeech <= 1, `${name}: ${falseSpeech} of ${silenceFrames} silent frames taken for speech\n${picture}`);
  assert.ok(heard >= 0.85 * speechFrames, `${name}: ${heard} of ${speechFrames} speech frames heard\n${picture}`);
  // each sentence's start and end are found within the tolerance
  for (const [start, end] of s.speech) {
    const first = decisions.findIndex((d, i) => d && (i + 1) * size > start - tolerance);
    assert.ok(first >= 0 && Math.abs(first * size - start) <= tolerance, `${name}: speech at ${start / RATE}s found at ${(first * size) / RATE}s\n${picture}`);
    let last = -1;
    for (let i = 0; i < decisions.length; i++) if (decisions[i] && i * size < end + tolerance) last = i;
    assert.ok(Math.abs((last + 1) * size - end) <= tolerance, `${name}: speech ending at ${end / RATE}s taken to end at ${((last + 1) * size) / RATE}s\n${picture}`);
  }
}

/** cuts the audio into chunks of odd lengths, cyclically */
function* oddChunks(audio: Float32Array): Generator<Float32Array> {
  const lengths = [1, 7, 511, 513, 1000, 33, 4096, 2];
  for (let at = 0, k = 0; at < audio.length; k++) {
    const n = lengths[k % lengths.length]!;
    yield audio.subarray(at, at + n);
    at += n;
  }
}

const count = (ds: boolean[]) => ds.filter(Boolean).length;

for (const engine of ['silero', 'energy'] as const satisfies readonly VoiceActivityEngine[]) {
  describe(`${engine} detector`, { skip: engine === 'silero' ? skipSilero : false }, () => {
    const vad = new VoiceActivity();
    const make = (threshold = 0.5) => vad.create({ threshold }, engine);

    test('is the detector asked for, deciding per frame of 512 samples (32 ms)', async () => {
      if (engine === 'silero') assert.equal(await vad.engine(), 'silero', (await vad.status()).reason);
      const d = await make();
      assert.equal(d.name, engine);
      assert.equal(d.frameSamples, 512);
      assert.deepEqual(await d.push(new Float32Array(511)), []);
      assert.equal((await d.push(new Float32Array(1))).length, 1);
      assert.equal((await d.push(new Float32Array(1024 + 5))).length, 2);
      d.close();
    });

    test('finds the speech where it is and silence in the silence and the low noise', async () => {
      const d = await make();
      checkAgainstScene(engine, await decide(d, scene.audio), d.frameSamples, scene);
      d.close();
    });

    test('odd chunk lengths give the same decisions as one push', async () => {
      const whole = await make();
      const expected = await whole.push(scene.audio);
      whole.close();
      const d = await make();
      const got: boolean[] = [];
      for (const c of oddChunks(scene.audio)) got.push(...(await d.push(c)));
      d.close();
      assert.deepEqual(got, expected);
    });

    test('reset() forgets the audio so far: afterwards it decides as a new detector', async () => {
      // from 50 ms before the second sentence: what came before would change the first decisions
      const next = scene.audio.subarray(scene.speech[1]![0] - 800);
      const fresh = await make();
      const expected = await fresh.push(next);
      fresh.close();
      const d = await make();
      // stopped in the middle of the first sentence, and of a frame
      await d.push(scene.audio.subarray(0, scene.speech[0]![0] + RATE + 300));
      d.reset();
      assert.deepEqual(await d.push(next), expected);
      d.close();
      // a closed detector's state does not reach the next one (Silero reuses its Vad)
      const used = await make();
      await used.push(scene.audio.subarray(0, scene.speech[0]![0] + RATE + 300));
      used.close();
      const again = await make();
      assert.deepEqual(await again.push(next), expected);
      again.close();
    });

    test('the threshold moves the decision', async () => {
      const at = async (threshold: number, audio: Float32Array) => {
        const d = await make(threshold);
        const n = count(await d.push(audio));
        d.close();
        return n;
      };
      const audio = engine === 'energy' ? quiet.audio : scene.audio;
      const low = await at(0.1, audio);
      const mid = await at(0.5, audio);
      const high = await at(0.95, audio);
      assert.ok(low >= mid && mid >= high && low > high, `speech frames at 0.1 / 0.5 / 0.95: ${low} / ${mid} / ${high}`);
      if (engine === 'energy') {
        // speech at about -48 dBFS: over the absolute level of 0.1 (-56 dBFS), under that of 0.5 (-40)
        assert.equal(energyLevels(0.5).absoluteDbfs, -40);
        checkAgainstScene('energy at 0.1 on quiet speech', await (await make(0.1)).push(quiet.audio), 512, quiet);
        assert.ok(high === 0 && mid <= 2, `quiet speech at 0.5 / 0.95: ${mid} / ${high} frames`);
      }
    });

    test('out-of-range and NaN samples are clamped, not passed on; bad input is refused clearly', async () => {
      const d = await make();
      const bad = new Float32Array(2048);
      bad.fill(NaN, 0, 512);
      bad.fill(5, 512, 1024);
      bad.fill(-Infinity, 1024, 1536);
      const ds = await d.push(bad);
      assert.equal(ds.length, 4);
      for (const x of ds) assert.equal(typeof x, 'boolean');
      await assert.rejects(d.push([0.1, 0.2] as unknown as Float32Array), TypeError);
      await assert.rejects(d.push(new Int16Array(512) as unknown as Float32Array), TypeError);
      d.close();
      d.close();
      await assert.rejects(d.push(new Float32Array(512)), /closed/);
      for (const threshold of [-0.1, 1.5, NaN, '0.5' as unknown as number, undefined as unknown as number]) {
        await assert.rejects(vad.create({ threshold }, engine), RangeError, String(threshold));
      }
    });
  });
}

describe('which detector is active', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'portico-vad-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('the machine-wide one is decided once and says itself; Silero where it is installed', { skip: skipSilero }, async () => {
    const [a, b] = await Promise.all([voiceActivityEngine(), voiceActivityEngine()]);
    assert.equal(a, b);
    const s = await voiceActivityStatus();
    assert.equal(s.engine, 'silero', s.reason);
    assert.equal(s.model, 'silero_vad_v5');
    assert.equal(s.modelPath, installedSileroModel());
    const d = await createVoiceActivityDetector({ threshold: 0.5 });
    assert.equal(d.name, 'silero');
    d.close();
    const e = await createVoiceActivityDetector({ threshold: 0.5 }, 'energy');
    assert.equal(e.name, 'energy');
    e.close();
  });

  test('the energy fallback is used, and says why, when the Silero model is missing', async () => {
    const missing = join(dir, 'silero_vad_v5.onnx');
    const vad = new VoiceActivity({ sileroModelPath: missing });
    assert.equal(await vad.engine(), 'energy');
    const s = await vad.status();
    assert.equal(s.engine, 'energy');
    assert.match(s.reason ?? '', /silero_vad_v5\.onnx cannot be read \(ENOENT\).*energy detector is used/);
    const d = await vad.create({ threshold: 0.5 }, 'silero');
    assert.equal(d.name, 'energy');
    checkAgainstScene('fallback', await d.push(scene.audio), d.frameSamples, scene);
    d.close();
  });

  test('a file that is not a known Silero model is never handed to sherpa-onnx (it would end the process): energy', async () => {
    const wrong = join(dir, 'garbage.onnx');
    writeFileSync(wrong, Buffer.from('not an onnx model'));
    const control = standInControl();
    const vad = new VoiceActivity({ sileroModelPath: wrong, sherpaModule: STAND_IN_URL, sherpaData: { control } });
    const s = await vad.status();
    assert.equal(s.engine, 'energy');
    assert.match(s.reason ?? '', /garbage\.onnx is not a Silero model known to load/);
    assert.equal(Atomics.load(control, STAND_IN.LOADS), 0, 'the runtime was never loaded');
    assert.equal(Atomics.load(control, STAND_IN.MADE), 0);
    // said for good: no second worker tries again
    assert.equal((await vad.create({ threshold: 0.5 })).name, 'energy');
    assert.equal(vad.workersStarted, 1);
  });

  test('expected(): told from the files alone, no worker started (the start-up has no use for it); once loaded, what the load found', { skip: skipModel }, async () => {
    const vad = new VoiceActivity({ sherpaModule: join(dir, 'no-sherpa.js') });
    const before = await vad.expected();
    assert.equal(before.engine, 'silero');
    assert.equal(before.model, 'silero_vad_v5');
    assert.equal(vad.workersStarted, 0, 'expected() starts nothing');
    // the load then finds the runtime missing: from then on, expected() says what the load found
    assert.equal((await vad.status()).engine, 'energy');
    assert.equal(vad.workersStarted, 1);
    assert.equal((await vad.expected()).engine, 'energy');
    const missing = new VoiceActivity({ sileroModelPath: join(dir, 'none.onnx') });
    const e = await missing.expected();
    assert.equal(e.engine, 'energy');
    assert.match(e.reason ?? '', /none\.onnx cannot be read/);
  });

  test('sherpa-onnx missing: energy, with the reason', { skip: skipModel }, async () => {
    const vad = new VoiceActivity({ sherpaModule: pathToFileURL(join(dir, 'no-sherpa.js')).href });
    const s = await vad.status();
    assert.equal(s.engine, 'energy');
    assert.match(s.reason ?? '', /sherpa-onnx-node, the optional dependency that runs the Silero model, could not be loaded \(Cannot find module/);
    assert.equal((await vad.create({ threshold: 0.5 })).name, 'energy');
  });
});

/** a frame (512 samples) of one value, its first sample `first` */
function frame(value: number, first = value): Float32Array {
  const f = new Float32Array(512).fill(value);
  f[0] = first;
  return f;
}

function frames(...fs: Float32Array[]): Float32Array {
  const out = new Float32Array(fs.length * 512);
  fs.forEach((f, i) => out.set(f, i * 512));
  return out;
}

describe('the Silero worker thread', { skip: skipModel }, () => {
  const standIn = (control: Int32Array) => new VoiceActivity({ sherpaModule: STAND_IN_URL, sherpaData: { control } });
  /** the stand-in's speech frame, a steady 0.2 frame (speech to energy only), silence */
  const SPEECH = frame(0, SPEECH_MARK);
  const STEADY = frame(0.2);
  const SILENCE = frame(0);

  test('loading the runtime and making a detector happen off the main thread: its event loop runs while a Vad is made', async () => {
    const control = standInControl();
    Atomics.store(control, STAND_IN.HOLD, 1);
    const vad = standIn(control);
    const turns = countTurns();
    let settled = false;
    const first = vad.create({ threshold: 0.5 }).finally(() => (settled = true));
    // the load makes a Vad (to prove the runtime) and holds in its constructor until this thread lets it go: this
    // thread sees it waiting only if its event loop runs meanwhile (on this thread, the constructor would wait for
    // ever: the test would time out, and the Vad, refused, would leave an energy detector)
    await waitFor(() => Atomics.load(control, STAND_IN.HELD) === 1, { what: 'the load to make its Vad' });
    const during = turns.count;
    assert.equal(settled, false, 'the detector is not had before its Vad is made');
    release(control);
    const d = await first;
    assert.equal(d.name, 'silero');
    // the load's Vad, kept, is the first session's: one made in all
    assert.equal(Atomics.load(control, STAND_IN.MADE), 1);
    // a session at another threshold needs a new Vad: made in the worker too
    let settled2 = false;
    const second = vad.create({ threshold: 0.3 }).finally(() => (settled2 = true));
    await waitFor(() => Atomics.load(control, STAND_IN.HELD) === 1, { what: 'a new detector to make its Vad' });
    assert.equal(settled2, false);
    release(control);
    const d2 = await second;
    assert.equal(d2.name, 'silero');
    assert.equal(Atomics.load(control, STAND_IN.MADE), 2);
    turns.stop();
    assert.ok(during > 0, 'the event loop turned while the load made its Vad');
    // the frames are decided in the worker, by the stand-in
    assert.deepEqual(await d.push(frames(SPEECH, STEADY, SILENCE, SPEECH)), [true, false, false, true]);
    assert.deepEqual(await d2.push(frames(STEADY)), [false]);
    d.close();
    d2.close();
    await vad.close();
  });

  test('a worker that stops (a crash) takes nothing down: its detectors go on as energy detectors, the next one gets a new worker', async () => {
    const control = standInControl();
    const vad = standIn(control);
    const a = await vad.create({ threshold: 0.5 });
    const b = await vad.create({ threshold: 0.5 });
    assert.deepEqual(await a.push(frames(SPEECH, STEADY)), [true, false]);
    // a's frame that ends the worker, then b's frames: sent before the worker stopped, never answered by it
    const half = frames(SILENCE, STEADY).subarray(0, 700);
    const pa = a.push(frames(SILENCE, frame(0, EXIT_MARK), STEADY));
    const pb = b.push(half);
    const [da, db] = await Promise.all([pa, pb]);
    // decided by the energy detector: the steady 0.2 frame is speech to it (and silence to the stand-in)
    assert.equal(da.length, 3);
    assert.equal(da[2], true);
    assert.deepEqual(db, [false]);
    for (const d of [a, b]) {
      assert.equal(d.name, 'energy');
      assert.match(d.fallbackReason ?? '', /the Silero worker thread stopped \(exit code 70\)/);
    }
    // b's frame cut in the middle goes on where it was
    assert.deepEqual(await b.push(frames(STEADY, STEADY).subarray(700 - 512)), [true, true]);
    assert.equal(Atomics.load(control, STAND_IN.LOADS), 1);
    // the next detector starts a new worker, which loads again
    const c = await vad.create({ threshold: 0.5 });
    assert.equal(c.name, 'silero');
    assert.equal(vad.workersStarted, 2);
    assert.equal(Atomics.load(control, STAND_IN.LOADS), 2);
    assert.deepEqual(await c.push(frames(SPEECH, STEADY)), [true, false]);
    for (const d of [a, b, c]) d.close();
    assert.equal((await vad.status()).engine, 'silero');
    await vad.close();
  });

  test('a worker that stops while loading: that detector is energy, the next tries a new worker; three in a row and Silero is given up', async () => {
    const control = standInControl();
    Atomics.store(control, STAND_IN.EXIT_ON_MAKE, 1);
    const vad = standIn(control);
    const d = await vad.create({ threshold: 0.5 });
    assert.equal(d.name, 'energy');
    assert.match((await vad.status()).reason ?? '', /the Silero worker thread stopped \(exit code 71\)/);
    assert.equal(vad.workersStarted, 2, 'status() tried a new worker');
    assert.equal((await vad.create({ threshold: 0.5 })).name, 'energy');
    assert.equal(vad.workersStarted, 3);
    // given up: no fourth worker, and the reason says why
    assert.equal((await vad.create({ threshold: 0.5 })).name, 'energy');
    assert.equal(vad.workersStarted, 3);
    assert.match((await vad.status()).reason ?? '', /stopped while loading 3 times in a row/);
    // one that loads in between starts the count again
    const again = standIn(control);
    assert.equal((await again.create({ threshold: 0.5 })).name, 'energy');
    Atomics.store(control, STAND_IN.EXIT_ON_MAKE, 0);
    assert.equal((await again.create({ threshold: 0.5 })).name, 'silero');
    await again.close();
  });

  test('close() ends an idle worker (an app closing); one with a detector open is left to it; the next detector starts a new one', async () => {
    const control = standInControl();
    const vad = standIn(control);
    const d = await vad.create({ threshold: 0.5 });
    await vad.close();
    // another app's session still uses it
    assert.deepEqual(await d.push(frames(SPEECH)), [true]);
    assert.equal(d.name, 'silero');
    d.close();
    await vad.close();
    const e = await vad.create({ threshold: 0.5 });
    assert.equal(e.name, 'silero');
    assert.equal(vad.workersStarted, 2);
    e.close();
    await vad.close();
  });

  test('the worker keeps no process alive when idle, and keeps it while a detector waits for an answer', async () => {
    // a process that makes a detector, leaves it open, and prints the decisions it awaited: it must print them (the
    // worker is ref'd while an answer is due) and then end by itself (the idle worker is unref'd)
    const script = `
      import { VoiceActivity } from ${JSON.stringify(new URL('../../src/engines/shared/vad/index.js', import.meta.url).href)};
      const vad = new VoiceActivity({ sherpaModule: ${JSON.stringify(STAND_IN_URL)} });
      const d = await vad.create({ threshold: 0.5 });
      const f = new Float32Array(1024);
      f[0] = ${SPEECH_MARK};
      d.push(f).then((ds) => console.log(d.name, JSON.stringify(ds)));
    `;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.error, undefined, 'the process ended by itself');
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'silero [true,false]');
  });
});

describe('Silero in its worker, for real', { skip: skipSilero }, () => {
  test('the first load and a new detector hold the main thread far less than the same work on it did', async (t) => {
    // on the main thread (as before the worker): the longest event-loop stall of the load and of a new detector
    const onMain = await timed(async () => {
      const runtime = await loadSileroRuntime(() => loadSherpa<SherpaVadModule>());
      runtime.create(0.31).close();
    });
    // in the worker: the same work, from a first detector to one at a new threshold
    const vad = new VoiceActivity();
    const inWorker = await timed(async () => {
      (await vad.create({ threshold: 0.5 })).close();
      (await vad.create({ threshold: 0.31 })).close();
    });
    const s = await vad.status();
    await vad.close();
    assert.equal(s.engine, 'silero', s.reason);
    t.diagnostic(`event-loop stall: ${inWorker.stallMs.toFixed(1)} ms with the worker (its load ${s.loadMs?.toFixed(0)} ms), ${onMain.stallMs.toFixed(1)} ms on the main thread`);
    assert.ok(
      inWorker.stallMs < onMain.stallMs / 2,
      `event-loop stall: ${inWorker.stallMs.toFixed(1)} ms with the worker (its load ${s.loadMs?.toFixed(0)} ms), ${onMain.stallMs.toFixed(1)} ms on the main thread`,
    );
  });
});
