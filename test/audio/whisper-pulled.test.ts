/**
 * A whisper model pulled with `portico models pull whisper:<name>` serves whisper-1 (and the other built-in
 * transcription models) at once, through the binding PORTICO_WHISPER_BINDING names (here a fake with the
 * wrapper's API; whisper-real.test.ts runs the real binary npm installs); when the binding cannot be loaded,
 * whisper-1 answers 503 saying so, with no server path, and never falls back to pocketsphinx; /v1/models and
 * the pull say which engine it is.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import OpenAI, { toFile } from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { FakeHub } from '../helpers/fake-hub.js';
import { portico } from '../cli/helpers.js';
import { wavFile } from './helpers.js';
import { detectPocketsphinx } from '../../src/engines/pocketsphinx/index.js';

/** the binding's API (initWhisper -> context with transcribeData/release), answering a fixed transcript */
const FAKE_BINDING = `
export const calls = [];
export async function initWhisper(opts) {
  calls.push(opts.filePath);
  return {
    transcribeData(audio, options) {
      return { stop: async () => {}, promise: Promise.resolve({ isAborted: false, language: 'en', result: ' The weather today is sunny.', segments: [{ text: ' The weather today is sunny.', t0: 0, t1: 1500 }] }) };
    },
    async release() {},
  };
}
`;

/** a binding that is not installed anywhere */
const ABSENT = '@fugood/node-whisper-definitely-absent';

function ggml(size: number): Buffer {
  const b = Buffer.alloc(size, 7);
  b.writeUInt32LE(0x67676d6c, 0); // whisper.cpp's GGML_FILE_MAGIC
  return b;
}

/** 1.5 s of a 440 Hz tone at 16 kHz */
function tone(): Buffer {
  const s = new Int16Array(24000);
  for (let i = 0; i < s.length; i++) s[i] = Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / 16000));
  return wavFile(s, 16000);
}

describe('a pulled whisper model serves whisper-1', () => {
  let hub: FakeHub;
  let modelsDir: string;
  let dir: string;
  let withBinding: TestApp & { url?: string };
  let without: TestApp & { url?: string };
  let fakeUrl: string;
  before(async () => {
    hub = await new FakeHub().start();
    hub.addRepo({ owner: 'ggerganov', repo: 'whisper.cpp', files: [{ path: 'ggml-tiny.en.bin', data: ggml(64 * 1024) }] });
    modelsDir = mkdtempSync(join(tmpdir(), 'portico-whisper-pull-'));
    dir = mkdtempSync(join(tmpdir(), 'portico-fake-binding-'));
    writeFileSync(join(dir, 'binding.mjs'), FAKE_BINDING);
    fakeUrl = pathToFileURL(join(dir, 'binding.mjs')).href;
    // the pull says when the transcription models cannot run (here: a binding that is not there)
    const pulled = await portico(['models', 'pull', 'whisper:tiny.en'], {
      MODELS_DIR: modelsDir,
      PORTICO_HF_ENDPOINT: hub.url,
      DATA_DIR: modelsDir,
      PORTICO_WHISPER_BINDING: ABSENT,
    });
    assert.equal(pulled.code, 0, pulled.stderr);
    assert.match(pulled.stdout, /pulled whisper-tiny\.en \(transcription/);
    assert.match(pulled.stdout, /whisper-1 and the other transcription models answer 503 until the whisper engine can run here: /);
    // a server whose binding cannot be loaded; the next test starts one with the fake
    process.env.PORTICO_WHISPER_BINDING = ABSENT;
    without = await buildTestApp({ listen: true, builtins: true, models: [], env: { MODELS_DIR: modelsDir } });
  });
  after(async () => {
    await withBinding?.close();
    delete process.env.PORTICO_WHISPER_BINDING;
    await without?.close();
    await hub.close();
    rmSync(modelsDir, { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  });

  test('a binding that cannot be loaded: 503 engine_unavailable saying so, no server path, no fallback to pocketsphinx', async () => {
    // pocketsphinx is installed here (the transcription suites need it): a 503 is the decision, not a lack of engines
    assert.equal(detectPocketsphinx().available, true);
    const client = new OpenAI({ apiKey: await without.inferenceKey('w'), baseURL: `${without.url}/v1`, maxRetries: 0 });
    for (const model of ['whisper-1', 'whisper-tiny.en']) {
      const err = (await client.audio.transcriptions.create({ file: await toFile(tone(), 'a.wav'), model }).catch((e) => e)) as InstanceType<typeof OpenAI.APIError>;
      assert.ok(err instanceof OpenAI.APIError, String(err));
      assert.equal(err.status, 503);
      assert.equal(err.code, 'engine_unavailable');
      const message = (err.error as { message: string }).message;
      assert.match(message, /the whisper engine cannot run on this server: the binding PORTICO_WHISPER_BINDING names could not be loaded/);
      assert.ok(!message.includes(modelsDir) && !message.includes(tmpdir()), `no server path: ${message}`);
    }
    const w1 = ((await client.models.list()).data as any[]).find((m) => m.id === 'whisper-1');
    assert.match(w1.engine, /^whisper \(whisper-tiny\.en\), not installed: transcriptions answer 503/);
  });
  test('with the binding: whisper-1, gpt-4o-transcribe and the pulled name transcribe with the pulled file; /v1/models says whisper', async () => {
    // the binding "installed" (the fake), for a server started now
    process.env.PORTICO_WHISPER_BINDING = fakeUrl;
    withBinding = await buildTestApp({ listen: true, builtins: true, models: [], env: { MODELS_DIR: modelsDir } });
    const client = new OpenAI({ apiKey: await withBinding.inferenceKey('w'), baseURL: `${withBinding.url}/v1`, maxRetries: 0 });
    for (const model of ['whisper-1', 'gpt-4o-transcribe', 'whisper-tiny.en']) {
      const r = await client.audio.transcriptions.create({ file: await toFile(tone(), 'a.wav'), model });
      assert.equal(r.text, 'The weather today is sunny.', model);
    }
    const fake = (await import(fakeUrl)) as { calls: string[] };
    assert.ok(fake.calls.length >= 1);
    assert.ok(
      fake.calls.every((p) => p === join(modelsDir, 'hf/ggerganov/whisper.cpp/ggml-tiny.en.bin')),
      'the pulled file',
    );
    const models = (await client.models.list()).data as any[];
    assert.equal(models.find((m) => m.id === 'whisper-1').engine, 'whisper (whisper-tiny.en)');
    const pulled = models.find((m) => m.id === 'whisper-tiny.en');
    assert.equal(pulled.type, 'transcription');
    assert.equal(pulled.engine, 'whisper');
  });
});
