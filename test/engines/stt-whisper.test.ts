/**
 * The whisper engine without the real binding or weights: the absent package gives the install hint, and a fake
 * module with the binding's API (written to a temp dir) checks the options passed and the result mapping.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createWhisperEngine, detectWhisperBinding, tokensToWords, whisperUnavailableHint } from '../../src/engines/whisper/index.js';
import { EngineError, type TranscribeRequest } from '../../src/engines/types.js';

function req(extra: Partial<TranscribeRequest> = {}): TranscribeRequest {
  return { model: 'whisper-1', file: { bytes: Buffer.alloc(0), filename: 'a.wav' }, pcm16k: new Float32Array(32000), task: 'transcribe', wordTimestamps: false, ...extra };
}

const FAKE = `
export const calls = [];
export let released = 0;
export async function initWhisper(opts) {
  calls.push({ init: opts });
  return {
    transcribeData(audio, options) {
      calls.push({ samples: audio.byteLength / 2, options });
      let stopped = false;
      const promise = new Promise((resolve) => {
        const done = () => resolve(stopped
          ? { isAborted: true, result: '', segments: [] }
          : options.maxLen === 1
            ? { isAborted: false, language: 'de', result: ' Hallo Welt', segments: [
                { text: ' Hal', t0: 0, t1: 200 }, { text: 'lo', t0: 200, t1: 400 }, { text: '[_BEG_]', t0: 400, t1: 400 },
                { text: ' Welt', t0: 1500, t1: 1900 } ] }
            : { isAborted: false, language: options.translate ? 'de' : 'de', result: ' Hallo Welt', segments: [ { text: ' Hallo Welt', t0: 0, t1: 1900 } ] });
        if (options.prompt === 'slow') setTimeout(done, 300); else done();
        this._done = done;
      });
      return { stop: async () => { stopped = true; }, promise };
    },
    async release() { released++; },
  };
}
`;

test('whisper: an absent binding says so without a server path; no model path too; the hint per platform', async () => {
  assert.equal(detectWhisperBinding('@fugood/whisper.node-definitely-absent'), false);
  // npm ci installed this platform's package (package.json optionalDependencies)
  assert.equal(detectWhisperBinding(), true);
  const engine = createWhisperEngine({ modelPath: '/models/ggml-base.bin', packageName: '@fugood/whisper.node-definitely-absent' });
  assert.equal(engine.needsPcm, true);
  assert.equal(engine.canTranslate, true);
  await assert.rejects(engine.transcribe(req()), (e: unknown) => {
    assert.ok(e instanceof EngineError);
    assert.equal(e.code, 'engine_unavailable');
    assert.equal(e.status, 503);
    // what failed, and no server path (the loader's own message, which has paths, goes to the log)
    assert.match(e.message, /the whisper engine cannot run on this server: the binding PORTICO_WHISPER_BINDING names could not be loaded/);
    assert.ok(!e.message.includes('/models/') && !e.message.includes('imported from'), e.message);
    return true;
  });
  await assert.rejects(createWhisperEngine({ modelPath: '' }).transcribe(req()), /no whisper model configured: pull a whisper model \(portico models pull whisper:base\.en\)/);
  assert.match(
    whisperUnavailableHint('darwin', 'arm64'),
    /^its package for this platform \(@fugood\/node-whisper-darwin-arm64\) is missing: reinstall .* \(npm ci, without --omit=optional\)$/,
  );
  assert.match(whisperUnavailableHint('freebsd', 'x64'), /^whisper\.cpp has no prebuilt package for freebsd-x64 .*: set PORTICO_WHISPER_BINDING/);
});

test('whisper: options and result mapping through a fake binding', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-fake-whisper-'));
  try {
    const modPath = join(dir, 'fake-whisper.mjs');
    writeFileSync(modPath, FAKE);
    const model = join(dir, 'ggml-tiny.bin');
    const url = pathToFileURL(modPath).href;
    // model file missing: said without the path (the log has it)
    const logged: object[] = [];
    await assert.rejects(createWhisperEngine({ modelPath: model, packageName: url, log: { warn: (o) => logged.push(o) } }).transcribe(req()), (e: Error) => {
      assert.match(e.message, /the whisper model file is not on the server/);
      assert.ok(!e.message.includes(dir), e.message);
      return true;
    });
    assert.deepEqual(logged, [{ path: model }]);
    writeFileSync(model, 'not really a model');
    const fake = (await import(url)) as { calls: Array<Record<string, any>>; released: number };
    const engine = createWhisperEngine({ modelPath: model, packageName: url, threads: 2 });

    const a = await engine.transcribe(req({ prompt: 'names' }));
    assert.deepEqual(fake.calls[0], { init: { filePath: model, useGpu: false } });
    assert.deepEqual(fake.calls[1], { samples: 32000, options: { language: 'auto', translate: false, temperature: 0, prompt: 'names', maxThreads: 2 } });
    assert.deepEqual(a, { text: 'Hallo Welt', language: 'de', duration: 2, segments: [{ start: 0, end: 1.9, text: 'Hallo Welt' }], words: undefined });

    const b = await engine.transcribe(req({ wordTimestamps: true, language: 'de' }));
    assert.equal(fake.calls.length, 3, 'the context is loaded once');
    assert.equal(fake.calls[2].options.tokenTimestamps, true);
    assert.equal(fake.calls[2].options.maxLen, 1);
    assert.equal(fake.calls[2].options.language, 'de');
    assert.deepEqual(b.words, [
      { word: 'Hallo', start: 0, end: 0.4 },
      { word: 'Welt', start: 1.5, end: 1.9 },
    ]);
    assert.deepEqual(b.segments, [
      { start: 0, end: 0.4, text: 'Hallo' },
      { start: 1.5, end: 1.9, text: 'Welt' },
    ]);

    const c = await engine.transcribe(req({ task: 'translate' }));
    assert.equal(fake.calls[3].options.translate, true);
    assert.equal(c.language, 'en');

    const ac = new AbortController();
    const p = engine.transcribe(req({ prompt: 'slow', signal: ac.signal }));
    setTimeout(() => ac.abort(), 50);
    await assert.rejects(p, (e: unknown) => e instanceof EngineError && e.code === 'aborted');

    await engine.close();
    assert.equal(fake.released, 1);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('whisper: tokens merge into words', () => {
  assert.deepEqual(
    tokensToWords([
      { text: ' I', t0: 0, t1: 100 },
      { text: "'m", t0: 100, t1: 200 },
      { text: ' here', t0: 250, t1: 600 },
      { text: '.', t0: 600, t1: 650 },
    ]),
    [
      { word: "I'm", start: 0, end: 0.2 },
      { word: 'here.', start: 0.25, end: 0.65 },
    ],
  );
});
