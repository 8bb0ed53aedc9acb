/**
 * whisper.cpp for real, with no manual step: the prebuilt CPU package npm ci installed (package.json
 * optionalDependencies) loads ggml models pulled from a local imitation of the Hugging Face hub with
 * `portico models pull`, and answers the official openai SDK. The models are generated (random weights of the
 * real architecture at tiny dimensions, test/helpers/whisper-ggml.ts): what they say is noise, but the pull,
 * the loader, the encoder and decoder, segments, word timings, translation and the text callbacks are the real ones.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import OpenAI, { toFile } from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { FakeHub } from '../helpers/fake-hub.js';
import { WHISPER_DIMS, writeWhisperGgml } from '../helpers/whisper-ggml.js';
import { portico } from '../cli/helpers.js';
import { wavFile } from './helpers.js';
import { createWhisperEngine, detectWhisperBinding, whisperEnglishOnly, whisperPlatformPackage } from '../../src/engines/whisper/index.js';
import type { TranscribeRequest } from '../../src/engines/types.js';

/** `seconds` of a voiced, speech-like signal at 16 kHz (harmonics of a gliding pitch, syllable envelope) */
function speechLike(seconds: number): Int16Array {
  const rate = 16000;
  const out = new Int16Array(Math.round(seconds * rate));
  let phase = 0;
  for (let i = 0; i < out.length; i++) {
    const t = i / rate;
    phase += (2 * Math.PI * (170 + 50 * Math.sin(2 * Math.PI * 0.7 * t))) / rate;
    let v = 0;
    for (let h = 1; h <= 8; h++) v += Math.sin(h * phase) / h;
    out[i] = Math.round(v * (0.5 + 0.5 * Math.sin(2 * Math.PI * 4 * t)) * 0.25 * 32767);
  }
  return out;
}

const SPEECH = speechLike(2);
const wav = () => toFile(wavFile(SPEECH, 16000), 'speech.wav');

function req(pcm: Int16Array, extra: Partial<TranscribeRequest> = {}): TranscribeRequest {
  const f = new Float32Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) f[i] = pcm[i]! / 32768;
  return { model: 'whisper-1', file: { bytes: Buffer.alloc(0), filename: 'a.wav' }, pcm16k: f, task: 'transcribe', wordTimestamps: false, ...extra };
}

describe('whisper.cpp with no manual step: pulled ggml models on the real binary', () => {
  let hub: FakeHub;
  let dir: string;
  let modelsDir: string;
  let app: TestApp & { url?: string };
  let client: OpenAI;
  const saved = process.env.PORTICO_WHISPER_BINDING;

  before(async () => {
    // the real binary, not a binding named elsewhere
    delete process.env.PORTICO_WHISPER_BINDING;
    dir = mkdtempSync(join(tmpdir(), 'portico-whisper-real-'));
    modelsDir = join(dir, 'models');
    writeWhisperGgml(join(dir, 'en.bin'), WHISPER_DIMS['test.en'], { seed: 7 });
    writeWhisperGgml(join(dir, 'multi.bin'), WHISPER_DIMS.test, { seed: 11 });
    hub = await new FakeHub().start();
    hub.addRepo({
      owner: 'ggerganov',
      repo: 'whisper.cpp',
      files: [
        { path: 'ggml-base.en.bin', data: readFileSync(join(dir, 'en.bin')) },
        { path: 'ggml-base.bin', data: readFileSync(join(dir, 'multi.bin')) },
      ],
    });
    for (const name of ['whisper:base.en', 'whisper:base']) {
      const pulled = await portico(['models', 'pull', name], { MODELS_DIR: modelsDir, PORTICO_HF_ENDPOINT: hub.url, DATA_DIR: modelsDir });
      assert.equal(pulled.code, 0, pulled.stderr);
      assert.match(pulled.stdout, /pulled whisper-base(\.en)? \(transcription/);
      // nothing left to install: the pull does not say the engine is missing
      assert.doesNotMatch(pulled.stdout, /503/);
    }
    app = await buildTestApp({ listen: true, builtins: true, models: [], env: { MODELS_DIR: modelsDir } });
    client = new OpenAI({ apiKey: await app.inferenceKey('w'), baseURL: `${app.url}/v1`, maxRetries: 0, timeout: 60_000 });
  });
  after(async () => {
    await app?.close();
    await hub?.close();
    if (saved === undefined) delete process.env.PORTICO_WHISPER_BINDING;
    else process.env.PORTICO_WHISPER_BINDING = saved;
    rmSync(dir, { recursive: true, force: true });
  });

  test("npm ci installed this platform's prebuilt package, and the pulled files are the generated models", () => {
    assert.equal(detectWhisperBinding(), true);
    assert.equal(whisperEnglishOnly(join(modelsDir, 'hf/ggerganov/whisper.cpp/ggml-base.en.bin')), true);
    assert.equal(whisperEnglishOnly(join(modelsDir, 'hf/ggerganov/whisper.cpp/ggml-base.bin')), false);
  });

  test('whisper-1 and the pulled name answer 200 from the whisper engine; /v1/models says whisper', async () => {
    const models = (await client.models.list()).data as Array<{ id: string; engine?: string; type?: string }>;
    assert.match(models.find((m) => m.id === 'whisper-1')!.engine!, /^whisper \(whisper-base(\.en)?\)$/);
    assert.equal(models.find((m) => m.id === 'whisper-base.en')!.engine, 'whisper');
    assert.equal(models.find((m) => m.id === 'whisper-base')!.engine, 'whisper');
    for (const model of ['whisper-1', 'whisper-base.en']) {
      const { data, response } = await client.audio.transcriptions.create({ file: await wav(), model }).withResponse();
      assert.equal(response.status, 200, model);
      assert.equal(typeof data.text, 'string');
      // random weights decode something (at most 28 tokens per window with this model)
      assert.ok(data.text.trim().length > 0, `${model}: some text`);
      // what a client looks at to know which engine answered
      assert.equal(response.headers.get('x-portico-engine'), 'whisper', `${model}: x-portico-engine`);
    }
  });

  test('verbose_json: segments and words within the audio, the task and language', async () => {
    const r = (await client.audio.transcriptions.create({
      file: await wav(),
      model: 'whisper-base.en',
      response_format: 'verbose_json',
      timestamp_granularities: ['word', 'segment'],
    })) as unknown as {
      task: string;
      language: string;
      duration: number;
      text: string;
      segments: Array<{ id: number; start: number; end: number; text: string; tokens: number[]; temperature: number; avg_logprob: number }>;
      words: Array<{ word: string; start: number; end: number }>;
    };
    assert.equal(r.task, 'transcribe');
    assert.equal(r.language, 'english');
    assert.ok(Math.abs(r.duration - 2) < 0.05, String(r.duration));
    assert.ok(r.segments.length >= 1);
    r.segments.forEach((s, i) => {
      assert.equal(s.id, i);
      assert.ok(s.start >= 0 && s.start <= s.end && s.end <= r.duration + 1e-6, JSON.stringify(s));
      assert.equal(typeof s.text, 'string');
      assert.ok(Array.isArray(s.tokens));
    });
    assert.ok(r.words.length >= 1);
    for (const w of r.words) {
      assert.ok(w.word.length > 0 && !/\s/.test(w.word), JSON.stringify(w));
      assert.ok(w.start >= 0 && w.start <= w.end && w.end <= r.duration + 1e-6, JSON.stringify(w));
    }
    // the words are the text's words (the text's first letter is capitalized, as whisper's are)
    assert.deepEqual(
      r.words.map((w) => w.word.toLowerCase()),
      r.text.toLowerCase().split(/\s+/).filter(Boolean),
    );
  });

  test('gpt-4o-transcribe with stream=true on whisper: transcript.text.delta events as whisper decodes, then done with the same text', async () => {
    const { data: stream, response } = await client.audio.transcriptions.create({ file: await wav(), model: 'gpt-4o-transcribe', stream: true }).withResponse();
    assert.equal(response.headers.get('x-portico-engine'), 'whisper');
    const deltas: string[] = [];
    let done: { text: string; usage?: { type: string; seconds: number } } | undefined;
    for await (const ev of stream) {
      if (ev.type === 'transcript.text.delta') deltas.push(ev.delta);
      else if (ev.type === 'transcript.text.done') done = ev as typeof done;
    }
    assert.ok(done, 'a transcript.text.done event');
    assert.ok(deltas.length >= 1, 'at least one delta');
    assert.equal(deltas.join('').trim(), done.text.trim());
    // (not compared with an answer without streaming: on random weights whisper's temperature fallback samples)
    assert.ok(done.text.trim().length > 0, 'some text');
    assert.equal(done.usage?.type, 'duration');
    assert.equal(done.usage?.seconds, 2);
  });

  test('translations: the multilingual model translates; the English-only one refuses a non-English language', async () => {
    const t = (await client.audio.translations.create({ file: await wav(), model: 'whisper-base', response_format: 'verbose_json' })) as unknown as {
      task: string;
      language: string;
      text: string;
    };
    assert.equal(t.task, 'translate');
    assert.equal(t.language, 'english');
    assert.equal(typeof t.text, 'string');
    // an English-only model: a transcription in German is refused with a 400 saying why (whisper.cpp would ignore it)
    const err = (await client.audio.transcriptions.create({ file: await wav(), model: 'whisper-base.en', language: 'de' }).catch((e) => e)) as InstanceType<typeof OpenAI.APIError>;
    assert.ok(err instanceof OpenAI.APIError, String(err));
    assert.equal(err.status, 400);
    assert.match((err.error as { message: string }).message, /whisper, which recognizes english \(en\) only; language 'de' is not supported/i);
  });

  test('the engine: translate reaches the binary, onText gets the text as it is decoded', async () => {
    // the real binary, wrapped to record the options it is given (PORTICO_WHISPER_BINDING can name such a module)
    const spy = join(dir, 'spy.mjs');
    writeFileSync(
      spy,
      `import { createRequire } from 'node:module';
const real = createRequire(import.meta.url)(${JSON.stringify(createRequire(import.meta.url).resolve(whisperPlatformPackage()))});
export const calls = [];
export class WhisperContext {
  constructor(p) { this.c = new real.WhisperContext(p); }
  transcribeData(a, o) { calls.push({ ...o }); return this.c.transcribeData(a, o); }
  release() { return this.c.release(); }
}
`,
    );
    const path = join(modelsDir, 'hf/ggerganov/whisper.cpp/ggml-base.bin');
    const engine = createWhisperEngine({ modelPath: path, threads: 2, packageName: pathToFileURL(spy).href });
    const { calls } = (await import(pathToFileURL(spy).href)) as { calls: Array<Record<string, unknown>> };
    try {
      assert.equal(engine.canTranslate, true);
      const deltas: string[] = [];
      const transcribed = await engine.transcribe(req(SPEECH, { language: 'de', onText: (d) => deltas.push(d) }));
      assert.ok(deltas.length >= 1, 'onText called');
      assert.equal(deltas.join('').replace(/\s+/g, ' ').trim(), transcribed.text.replace(/\s+/g, ' ').trim());
      assert.equal(calls[0]!.translate, false);
      assert.equal(calls[0]!.language, 'de');
      const translated = await engine.transcribe(req(SPEECH, { language: 'de', task: 'translate' }));
      assert.equal(calls[1]!.translate, true);
      assert.equal(calls[1]!.language, 'de');
      assert.equal(translated.language, 'en');
      assert.equal(typeof translated.text, 'string');
    } finally {
      await engine.close();
    }
    // an f32 file would abort the process in ggml's convolution: refused before the binary sees it
    const f32 = join(dir, 'f32.bin');
    writeWhisperGgml(f32, WHISPER_DIMS['test.en'], { f16: false });
    await assert.rejects(createWhisperEngine({ modelPath: f32 }).transcribe(req(SPEECH)), (e: Error & { status?: number }) => {
      assert.equal(e.status, 503);
      assert.match(e.message, /holds f32 weights, which this whisper\.cpp build cannot run/);
      return true;
    });
    const en = createWhisperEngine({ modelPath: join(modelsDir, 'hf/ggerganov/whisper.cpp/ggml-base.en.bin') });
    assert.equal(en.canTranslate, false);
    assert.deepEqual(en.languages, ['en']);
  });
});
