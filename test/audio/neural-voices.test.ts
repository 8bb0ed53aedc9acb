/**
 * Neural voices: a piper voice pulled with `portico models pull piper:<voice>` from a local hub (test/helpers/
 * fake-hub.ts) and spoken by the real sherpa-onnx runtime (sherpa-onnx-node, the optional dependency). The voice is
 * built here (test/helpers/onnx-piper.ts): a real piper ONNX graph whose output is a tone at 110 Hz x (speaker id
 * + 1), as long as the phonemes times length_scale, so which speaker each OpenAI voice reached and the speed are
 * measured in the decoded audio.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { NO_VOICE_WARM_UP, buildTestApp, type TestApp } from '../helpers/app.js';
import { FakeHub } from '../helpers/fake-hub.js';
import { portico } from '../cli/helpers.js';
import { client, run } from './helpers.js';
import { trimmedLevelDb } from '../helpers/voice-features.js';
import { PIPER_TEST_BASE_HZ, piperTestConfig, piperTestOnnx } from '../helpers/onnx-piper.js';
import { createPiperEngine } from '../../src/engines/piper/index.js';
import { onnxMetadataKeys, parsePiperConfig, prepareVoice, tokensText } from '../../src/engines/piper/voice-files.js';
import type { PcmChunk } from '../../src/engines/types.js';
import { parseModelRef } from '../../src/models/pull/refs.js';
import { defaultModelName } from '../../src/models/pull/names.js';

const VOICES = ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'onyx', 'nova', 'sage', 'shimmer', 'verse', 'marin', 'cedar'] as const;
const FORMATS = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] as const;
const RATES: Record<(typeof FORMATS)[number], number> = { mp3: 24000, opus: 48000, aac: 24000, flac: 24000, wav: 24000, pcm: 24000 };
const CODECS: Record<(typeof FORMATS)[number], string> = { mp3: 'mp3', opus: 'opus', aac: 'aac', flac: 'flac', wav: 'pcm_s16le', pcm: 'pcm_s16le' };
const SENTENCE = 'The weather today is sunny and warm.';
const VOICE_PATH = 'en/en_US/portico_test/medium/en_US-portico_test-medium.onnx';

/**
 * One ffmpeg run per response: what its stream is (codec, sample rate, channels, from ffmpeg's own report) and its
 * samples decoded whole, as 24 kHz mono s16 (`raw`: the bytes are pcm at 24 kHz).
 */
async function decode(bytes: Buffer, raw = false): Promise<{ codec: string; sampleRate: number; mono: boolean; samples: Int16Array }> {
  const inArgs = raw ? ['-f', 's16le', '-ar', '24000', '-ac', '1'] : [];
  const { stdout, stderr } = await run('ffmpeg', ['-hide_banner', ...inArgs, '-i', 'pipe:0', '-f', 's16le', '-ac', '1', '-ar', '24000', 'pipe:1'], bytes);
  const m = /Stream #0:0.*?: Audio: (\w+)[^,]*, (\d+) Hz, (mono|1 channels)/.exec(stderr);
  assert.ok(m, `ffmpeg's report: ${stderr}`);
  return { codec: m[1]!, sampleRate: Number(m[2]), mono: true, samples: new Int16Array(stdout.buffer.slice(stdout.byteOffset, stdout.byteOffset + (stdout.length & ~1))) };
}

/** The samples of a response as 24 kHz mono s16 (`raw`: pcm already). */
async function decodePcm(bytes: Buffer, raw = false): Promise<Int16Array> {
  const out = raw ? bytes : (await run('ffmpeg', ['-v', 'error', '-i', 'pipe:0', '-f', 's16le', '-ac', '1', '-ar', '24000', 'pipe:1'], bytes)).stdout;
  return new Int16Array(out.buffer.slice(out.byteOffset, out.byteOffset + (out.length & ~1)));
}

/** The tone's frequency: zero crossings per second between its first and last loud sample. */
function toneHz(x: Int16Array, rate: number): number {
  let first = 0;
  while (first < x.length && Math.abs(x[first]!) < 1000) first++;
  let last = x.length - 1;
  while (last > first && Math.abs(x[last]!) < 1000) last--;
  let crossings = 0;
  for (let i = first + 1; i <= last; i++) if (x[i - 1]! < 0 !== x[i]! < 0) crossings++;
  return crossings / 2 / ((last - first) / rate);
}

async function collect(it: AsyncIterable<PcmChunk>): Promise<PcmChunk[]> {
  const out: PcmChunk[] = [];
  for await (const c of it) out.push(c);
  return out;
}

describe('neural voices (piper on sherpa-onnx)', () => {
  let hub: FakeHub;
  let modelsDir: string;
  let t: TestApp & { url?: string };
  let openai: OpenAI;
  before(async () => {
    hub = await new FakeHub().start();
    hub.addRepo({
      owner: 'rhasspy',
      repo: 'piper-voices',
      files: [
        { path: VOICE_PATH, data: piperTestOnnx({ speakers: 13 }), lfs: true },
        { path: `${VOICE_PATH}.json`, data: Buffer.from(JSON.stringify(piperTestConfig({ speakers: 13 }))), lfs: false },
      ],
    });
    modelsDir = mkdtempSync(join(tmpdir(), 'portico-piper-pull-'));
    const pulled = await portico(['models', 'pull', 'piper:en_US-portico_test-medium'], { MODELS_DIR: modelsDir, PORTICO_HF_ENDPOINT: hub.url, DATA_DIR: modelsDir });
    assert.equal(pulled.code, 0, pulled.stderr);
    assert.match(pulled.stdout, /pulled piper-en_us-portico_test-medium \(speech/);
    assert.match(pulled.stdout, /speaks the 13 OpenAI voice names/);
    t = await buildTestApp({ listen: true, builtins: true, models: [], env: { MODELS_DIR: modelsDir }, runtime: NO_VOICE_WARM_UP });
    ({ openai } = await client(t));
  });
  after(async () => {
    await t?.close();
    await hub?.close();
    rmSync(modelsDir, { recursive: true, force: true });
  });

  test('the pull takes the voice and its .onnx.json from rhasspy/piper-voices; the catalogue lists it as speech', () => {
    const voice = join(modelsDir, 'hf/rhasspy/piper-voices', VOICE_PATH);
    assert.ok(existsSync(voice) && existsSync(`${voice}.json`));
    assert.deepEqual(JSON.parse(readFileSync(`${voice}.json`, 'utf8')).num_speakers, 13);
    const catalogue = JSON.parse(readFileSync(join(modelsDir, 'models.json'), 'utf8')) as { models: Array<{ name: string; kind: string; format: string }> };
    assert.deepEqual(
      catalogue.models.map((m) => [m.name, m.kind, m.format]),
      [['piper-en_us-portico_test-medium', 'speech', 'onnx']],
    );
  });

  test('/v1/models shows the pulled voice and which speaker says each OpenAI voice, on it and on the built-in speech models', async () => {
    const models = (await openai.models.list()).data as unknown as Array<{ id: string; type: string; engine: string }>;
    const m = models.find((x) => x.id === 'piper-en_us-portico_test-medium');
    assert.ok(m, models.map((x) => x.id).join(', '));
    assert.equal(m.type, 'speech');
    assert.match(m.engine, /^piper voice en_US-portico_test-medium \(sherpa-onnx\), 13 speakers: alloy=speaker0, ash=speaker1, .*cedar=speaker12$/);
    for (const id of ['tts-1', 'tts-1-hd', 'gpt-4o-mini-tts']) {
      assert.equal(models.find((x) => x.id === id)!.engine, `${m.engine} (model piper-en_us-portico_test-medium); other scripts: espeak-ng`, id);
    }
  });

  test('the built-in speech models speak with the pulled voice (each name its speaker); other scripts stay on espeak-ng', async () => {
    for (const [model, voice, i] of [
      ['tts-1', 'alloy', 0],
      ['tts-1-hd', 'echo', 4],
      ['gpt-4o-mini-tts', 'cedar', 12],
    ] as const) {
      const res = await openai.audio.speech.create({ model, voice, input: SENTENCE, response_format: 'wav' }).asResponse();
      assert.equal(res.headers.get('x-portico-engine'), 'piper', `${model}: the header names the neural voice that spoke`);
      const hz = toneHz(await decodePcm(Buffer.from(await res.arrayBuffer())), 24000);
      const want = PIPER_TEST_BASE_HZ * (i + 1);
      assert.ok(Math.abs(hz - want) / want < 0.03, `${model}/${voice}: ${hz.toFixed(1)} Hz, want ${want}`);
    }
    // Russian is not the voice's language: espeak-ng speaks it (speech, not the model's pure tone)
    const res = await openai.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: 'Привет, как дела?', response_format: 'wav' }).asResponse();
    assert.equal(res.headers.get('x-portico-engine'), 'espeak-ng');
    const hz = toneHz(await decodePcm(Buffer.from(await res.arrayBuffer())), 24000);
    assert.ok(Math.abs(hz - PIPER_TEST_BASE_HZ) > 20, `espeak-ng speech, not the 110 Hz tone: ${hz.toFixed(1)} Hz`);
  });

  test('all 13 voices decode at the wire rate; each voice is its own speaker; loudness at the common level; every format on the lowest and highest voice', async () => {
    const hz: Record<string, number> = {};
    for (const voice of VOICES) {
      const durations: number[] = [];
      // which speaker a voice reaches and its level are the wav's (every voice); the encoding to each format comes
      // after the voice and is the same for all of them: every format on the lowest and the highest tone (alloy,
      // cedar), not on all 13 voices (78 syntheses and decodes where 23 check the same)
      const formats = voice === 'alloy' || voice === 'cedar' ? FORMATS : (['wav'] as const);
      await Promise.all(
        formats.map(async (format) => {
          const res = await openai.audio.speech.create({ model: 'piper-en_us-portico_test-medium', voice, input: SENTENCE, response_format: format });
          const d = await decode(Buffer.from(await res.arrayBuffer()), format === 'pcm');
          assert.equal(d.sampleRate, RATES[format], `${voice}/${format} sample rate`);
          assert.equal(d.codec, CODECS[format], `${voice}/${format} codec`);
          assert.ok(d.mono, `${voice}/${format} mono`);
          durations.push(d.samples.length / 24000);
          if (format === 'wav') {
            hz[voice] = toneHz(d.samples, 24000);
            const level = trimmedLevelDb(d.samples, 24000);
            // the model's tone is at -13.5 dBFS; every Portico voice is brought to about -20 (within +-2 dB of the others)
            assert.ok(level > -22.5 && level < -18.5, `${voice}: ${level.toFixed(1)} dB`);
          }
        }),
      );
      // the same audio in every format (codec padding aside)
      assert.ok(Math.min(...durations) > 0.3 && Math.max(...durations) - Math.min(...durations) < 0.15, `${voice}: ${durations.map((x) => x.toFixed(2)).join(' ')}`);
    }
    // voice i reached speaker i: its tone is 110 Hz x (i + 1)
    VOICES.forEach((v, i) => {
      const want = PIPER_TEST_BASE_HZ * (i + 1);
      assert.ok(Math.abs(hz[v]! - want) / want < 0.03, `${v}: ${hz[v]!.toFixed(1)} Hz, speaker ${i} is ${want} Hz`);
    });
  });

  test('speed reaches the model (length_scale = 1 / speed)', async () => {
    const len: number[] = [];
    for (const speed of [0.5, 1, 2]) {
      const res = await openai.audio.speech.create({ model: 'piper-en_us-portico_test-medium', voice: 'nova', input: SENTENCE, response_format: 'pcm', speed });
      len.push((await decodePcm(Buffer.from(await res.arrayBuffer()), true)).length);
    }
    assert.ok(Math.abs(len[0]! / len[1]! - 2) < 0.2, `0.5 vs 1: ${len}`);
    assert.ok(Math.abs(len[1]! / len[2]! - 2) < 0.2, `1 vs 2: ${len}`);
  });

  test('an unknown voice is a 400 in the OpenAI error shape', async () => {
    const err = (await openai.audio.speech.create({ model: 'piper-en_us-portico_test-medium', voice: 'nobody' as 'alloy', input: SENTENCE }).catch((e) => e)) as InstanceType<
      typeof OpenAI.APIError
    >;
    assert.ok(err instanceof OpenAI.APIError, String(err));
    assert.equal(err.status, 400);
    assert.equal(err.param, 'voice');
  });
});

describe('the piper engine', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'portico-piper-engine-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('speaks sentence by sentence: one chunk per sentence, the first as soon as the first sentence is made', async () => {
    writeFileSync(join(dir, 'v.onnx'), piperTestOnnx({ speakers: 13 }));
    writeFileSync(join(dir, 'v.onnx.json'), JSON.stringify(piperTestConfig({ speakers: 13 })));
    const engine = await createPiperEngine({ modelPath: join(dir, 'v.onnx') });
    const text = 'One short sentence. A second, rather longer sentence follows it here. Then a third one.';
    const chunks = await collect(engine.synthesize({ text, voice: 'alloy', speed: 1 }));
    assert.equal(chunks.length, 3);
    assert.ok(chunks.every((c) => c.sampleRate === 22050));
    // each chunk is its own sentence's audio (length in proportion to its phonemes), not the whole text at once
    assert.ok(chunks[1]!.samples.length > chunks[0]!.samples.length * 1.5, chunks.map((c) => c.samples.length).join(' '));
    await engine.close();
  });

  test('the tokens file leaves out what sherpa-onnx cannot read (symbols of several code points, line breaks); a space is its id alone', () => {
    const config = parsePiperConfig(
      JSON.stringify({ audio: { sample_rate: 22050 }, phoneme_id_map: { _: [0], '^': [1], $: [2], ' ': [3], ab: [4], '\n': [5], ɪ: [6] } }),
      'x.json',
    );
    assert.equal(tokensText(config.phonemeIds), '_ 0\n^ 1\n$ 2\n3\nɪ 6\n');
  });

  test("piper's own files get sherpa-onnx's metadata in a copy; files that have it are used as they are", async () => {
    writeFileSync(join(dir, 'plain.onnx'), piperTestOnnx());
    writeFileSync(join(dir, 'plain.onnx.json'), JSON.stringify(piperTestConfig()));
    assert.equal((await onnxMetadataKeys(join(dir, 'plain.onnx'))).size, 0);
    const p = await prepareVoice(join(dir, 'plain.onnx'));
    assert.notEqual(p.model, join(dir, 'plain.onnx'));
    const keys = await onnxMetadataKeys(p.model);
    for (const k of ['comment', 'sample_rate', 'n_speakers', 'voice', 'language', 'model_type']) assert.ok(keys.has(k), k);
    writeFileSync(join(dir, 'sherpa.onnx'), piperTestOnnx({ withSherpaMetadata: true }));
    writeFileSync(join(dir, 'sherpa.onnx.json'), JSON.stringify(piperTestConfig()));
    assert.equal((await prepareVoice(join(dir, 'sherpa.onnx'))).model, join(dir, 'sherpa.onnx'));
  });

  test('a voice with one speaker (no sid input) speaks every name with it; bad files are refused with a message, not a crash', async () => {
    writeFileSync(join(dir, 'one.onnx'), piperTestOnnx({ speakers: 1, sampleRate: 16000 }));
    writeFileSync(join(dir, 'one.onnx.json'), JSON.stringify(piperTestConfig({ speakers: 1, sampleRate: 16000 })));
    const engine = await createPiperEngine({ modelPath: join(dir, 'one.onnx') });
    const [a] = await collect(engine.synthesize({ text: SENTENCE, voice: 'cedar', speed: 1 }));
    assert.equal(a!.sampleRate, 16000);
    assert.ok(Math.abs(toneHz(a!.samples, 16000) - PIPER_TEST_BASE_HZ) < 5);
    // not a piper config: refused before sherpa-onnx (which would end the process) sees it
    writeFileSync(join(dir, 'bad.onnx'), piperTestOnnx());
    writeFileSync(join(dir, 'bad.onnx.json'), JSON.stringify({ audio: { sample_rate: 22050 }, phoneme_id_map: { _: [0], ab: [1], '\n': [2], $: [3] } }));
    await assert.rejects(
      createPiperEngine({ modelPath: join(dir, 'bad.onnx') }),
      (e: Error & { code?: string }) => e.code === 'engine_unavailable' && /has no "\^"/.test(e.message),
    );
    writeFileSync(join(dir, 'bad.onnx.json'), JSON.stringify({ audio: { sample_rate: 96000 }, phoneme_id_map: { _: [0], '^': [1], $: [2] } }));
    await assert.rejects(createPiperEngine({ modelPath: join(dir, 'bad.onnx') }), /sample_rate/);
    await assert.rejects(createPiperEngine({ modelPath: join(dir, 'one.onnx'), dataDir: dir }), /not espeak-ng's data folder/);
    await assert.rejects(createPiperEngine({ modelPath: join(dir, 'missing.onnx') }), /cannot be read/);
  });
});

describe('a neural voice that cannot be loaded', () => {
  let dir: string;
  let t: TestApp & { url?: string };
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'portico-piper-broken-'));
    writeFileSync(join(dir, 'v.onnx'), piperTestOnnx());
    writeFileSync(join(dir, 'v.onnx.json'), JSON.stringify(piperTestConfig()));
    t = await buildTestApp({
      listen: true,
      builtins: true,
      models: [{ name: 'broken-voice', provider: 'piper', type: 'speech', path: join(dir, 'v.onnx'), data_dir: join(dir, 'no-such-folder') } as never],
    });
  });
  after(async () => {
    await t?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('answers 503 engine_unavailable saying why, on its own name and on tts-1 (no silent fall back to the formant voices)', async () => {
    const { openai } = await client(t);
    for (const model of ['broken-voice', 'tts-1']) {
      const err = (await openai.audio.speech.create({ model, voice: 'alloy', input: SENTENCE }).catch((e) => e)) as InstanceType<typeof OpenAI.APIError>;
      assert.ok(err instanceof OpenAI.APIError, `${model}: ${String(err)}`);
      assert.equal(err.status, 503, model);
      assert.equal(err.code, 'engine_unavailable', model);
      assert.match((err.error as { message: string }).message, /not espeak-ng's data folder/, model);
      assert.ok(!(err.error as { message: string }).message.includes(dir), `no server path: ${(err.error as { message: string }).message}`);
    }
  });
});

describe('piper references', () => {
  test('piper:<voice> is the voice in rhasspy/piper-voices; a name not of the form <lang>_<REGION>-<name>-<quality> is refused', () => {
    assert.deepEqual(parseModelRef('piper:en_US-libritts_r-medium', 'https://huggingface.co'), {
      kind: 'hf-file',
      text: 'piper:en_US-libritts_r-medium',
      owner: 'rhasspy',
      repo: 'piper-voices',
      file: 'en/en_US/libritts_r/medium/en_US-libritts_r-medium.onnx',
      revision: 'main',
      piper: 'en_US-libritts_r-medium',
    });
    assert.equal((parseModelRef('piper:en_GB-alba-medium', 'https://huggingface.co') as { file: string }).file, 'en/en_GB/alba/medium/en_GB-alba-medium.onnx');
    for (const bad of ['piper:', 'piper:libritts', 'piper:en_US-../x-medium', 'piper:en_US-amy-huge']) {
      assert.throws(
        () => parseModelRef(bad, 'https://huggingface.co'),
        (e: Error & { code?: string }) => e.code === 'bad_ref' && /piper voices are named/.test(e.message),
        bad,
      );
    }
    assert.equal(defaultModelName('en/en_US/libritts_r/medium/en_US-libritts_r-medium.onnx'), 'piper-en_us-libritts_r-medium');
  });

  test('a voice the hub does not have is a clear failure of the pull', async () => {
    const hub = await new FakeHub().start();
    const modelsDir = mkdtempSync(join(tmpdir(), 'portico-piper-missing-'));
    try {
      hub.addRepo({ owner: 'rhasspy', repo: 'piper-voices', files: [] });
      const r = await portico(['models', 'pull', 'piper:en_US-nobody-low'], { MODELS_DIR: modelsDir, PORTICO_HF_ENDPOINT: hub.url, DATA_DIR: modelsDir });
      assert.equal(r.code, 1);
      assert.match(r.stderr, /piper has no voice "en_US-nobody-low"/);
    } finally {
      await hub.close();
      rmSync(modelsDir, { recursive: true, force: true });
    }
  });
});
