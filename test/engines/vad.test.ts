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
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
function decide(d: VoiceActivityDetector, audio: Float32Array): boolean[] {
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
      assert.deepEqual(d.push(new Float32Array(511)), []);
      assert.equal(d.push(new Float32Array(1)).length, 1);
      assert.equal(d.push(new Float32Array(1024 + 5)).length, 2);
      d.close();
    });

    test('finds the speech where it is and silence in the silence and the low noise', async () => {
      const d = await make();
      checkAgainstScene(engine, decide(d, scene.audio), d.frameSamples, scene);
      d.close();
    });

    test('odd chunk lengths give the same decisions as one push', async () => {
      const whole = await make();
      const expected = whole.push(scene.audio);
      whole.close();
      const d = await make();
      const got: boolean[] = [];
      for (const c of oddChunks(scene.audio)) got.push(...d.push(c));
      d.close();
      assert.deepEqual(got, expected);
    });

    test('reset() forgets the audio so far: afterwards it decides as a new detector', async () => {
      // from 50 ms before the second sentence: what came before would change the first decisions
      const next = scene.audio.subarray(scene.speech[1]![0] - 800);
      const fresh = await make();
      const expected = fresh.push(next);
      fresh.close();
      const d = await make();
      // stopped in the middle of the first sentence, and of a frame
      d.push(scene.audio.subarray(0, scene.speech[0]![0] + RATE + 300));
      d.reset();
      assert.deepEqual(d.push(next), expected);
      d.close();
      // a closed detector's state does not reach the next one (Silero reuses its Vad)
      const used = await make();
      used.push(scene.audio.subarray(0, scene.speech[0]![0] + RATE + 300));
      used.close();
      const again = await make();
      assert.deepEqual(again.push(next), expected);
      again.close();
    });

    test('the threshold moves the decision', async () => {
      const at = async (threshold: number, audio: Float32Array) => {
        const d = await make(threshold);
        const n = count(d.push(audio));
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
      const ds = d.push(bad);
      assert.equal(ds.length, 4);
      for (const x of ds) assert.equal(typeof x, 'boolean');
      assert.throws(() => d.push([0.1, 0.2] as unknown as Float32Array), TypeError);
      assert.throws(() => d.push(new Int16Array(512) as unknown as Float32Array), TypeError);
      d.close();
      d.close();
      assert.throws(() => d.push(new Float32Array(512)), /closed/);
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
    checkAgainstScene('fallback', d.push(scene.audio), d.frameSamples, scene);
    d.close();
  });

  test('a file that is not a known Silero model is never handed to sherpa-onnx (it would end the process): energy', async () => {
    const wrong = join(dir, 'garbage.onnx');
    writeFileSync(wrong, Buffer.from('not an onnx model'));
    let loaded = false;
    const vad = new VoiceActivity({
      sileroModelPath: wrong,
      loadSherpa: () => {
        loaded = true;
        throw new Error('must not be reached');
      },
    });
    const s = await vad.status();
    assert.equal(s.engine, 'energy');
    assert.match(s.reason ?? '', /garbage\.onnx is not a Silero model known to load/);
    assert.equal(loaded, false);
  });

  test('expected(): told from the files alone, nothing loaded (the start-up must not block ~0.2 s); once loaded, what the load found', { skip: skipSilero }, async () => {
    let loads = 0;
    const vad = new VoiceActivity({
      loadSherpa: () => {
        loads++;
        throw new Error("Cannot find module 'sherpa-onnx-node'");
      },
    });
    const before = await vad.expected();
    assert.equal(before.engine, 'silero');
    assert.equal(before.model, 'silero_vad_v5');
    assert.equal(loads, 0, 'expected() loads nothing');
    // the load then finds sherpa-onnx missing: from then on, expected() says what the load found
    assert.equal((await vad.status()).engine, 'energy');
    assert.equal(loads, 1);
    assert.equal((await vad.expected()).engine, 'energy');
    const missing = new VoiceActivity({ sileroModelPath: join(dir, 'none.onnx') });
    const e = await missing.expected();
    assert.equal(e.engine, 'energy');
    assert.match(e.reason ?? '', /none\.onnx cannot be read/);
  });

  test('sherpa-onnx missing: energy, with the reason', { skip: skipSilero }, async () => {
    const vad = new VoiceActivity({
      loadSherpa: () => {
        throw new Error("Cannot find module 'sherpa-onnx-node'");
      },
    });
    const s = await vad.status();
    assert.equal(s.engine, 'energy');
    assert.match(s.reason ?? '', /sherpa-onnx-node, the optional dependency that runs the Silero model, could not be loaded \(Cannot find module/);
    assert.equal((await vad.create({ threshold: 0.5 })).name, 'energy');
  });
});
