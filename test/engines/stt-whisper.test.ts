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
import { createWhisperEngine, detectWhisperBinding, tokensToWords, whisperComputeScale, whisperUnavailableHint } from '../../src/engines/whisper/index.js';
import { EngineError, type TranscribeRequest } from '../../src/engines/types.js';
import { fromEngineError } from '../../src/api/engine-errors.js';
import { hangingWhisperState, writeHangingWhisper, type FakeWhisperState } from '../helpers/whisper-hang.js';
import { waitFor } from '../helpers/wait.js';

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

/** the bound on a job in these tests: small, and not scaled by the audio's length */
const SMALL_BOUND = { floorMs: 100, perAudioSecondMs: 0 };

/** a model file whose header is no whisper header: the bound is not scaled by the model */
function fakeModel(dir: string): string {
  const model = join(dir, 'ggml-fake.bin');
  writeFileSync(model, 'not really a model');
  return model;
}

const timedOut = (e: unknown) => {
  assert.ok(e instanceof EngineError, String(e));
  assert.equal(e.code, 'upstream_timeout');
  assert.equal(e.status, 504);
  assert.match(e.message, /^whisper did not finish within 1 s for 2\.0 s of audio; the job was stopped and the model is loaded again for the next request$/);
  // the one error table's engine timeout: 504 upstream_timeout, a server_error in the OpenAI shape
  const app = fromEngineError(e);
  assert.equal(app.code, 'upstream_timeout');
  assert.equal(app.status, 504);
  return true;
};

/** runs `f` with the hanging fake binding written as `name` (its own module and state) and a model file, in a temporary directory */
async function withHangingWhisper(name: string, f: (w: { url: string; state: FakeWhisperState; modelPath: string }) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'portico-hang-whisper-'));
  try {
    const url = writeHangingWhisper(dir, name);
    await f({ url, state: await hangingWhisperState(url), modelPath: fakeModel(dir) });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('whisper: a job that never settles is stopped and answered 504 within its bound; the job queued behind it runs on a fresh context', async () => {
  await withHangingWhisper('hanging-whisper.mjs', async ({ url, state, modelPath }) => {
    const logged: object[] = [];
    const engine = createWhisperEngine({ modelPath, packageName: url, timeout: SMALL_BOUND, log: { warn: (o) => logged.push(o) } });
    const texts: string[] = [];
    const hung = engine.transcribe(req({ prompt: 'hang-after-text', onText: (d) => texts.push(d) }));
    await waitFor(() => state.jobs.length === 1, { what: 'the hung job handed to the binding' });
    // a second request meanwhile waits for the context instead of being handed to it beside the hung job
    const next = engine.transcribe(req());
    await assert.rejects(hung, timedOut);
    assert.deepEqual(texts, [' Hello'], 'the text before the hang was passed on');
    assert.deepEqual(state.stops, [1], "the hung job's stop() was called");
    assert.deepEqual(state.releases, [1], 'its context released (not awaited)');
    assert.deepEqual(logged, [{ limitMs: 100, audioSeconds: 2 }]);
    const r = await next;
    assert.equal(r.text, 'Fresh text.');
    assert.equal(state.inits, 2, 'a fresh context');
    assert.deepEqual(
      state.jobs.map((j) => j.ctx),
      [1, 2],
      'the queued job ran on the fresh context',
    );
    // the hung job settling late (a failure, a segment) reaches no one and breaks nothing
    state.jobs[0]!.onNewSegments?.({ segments: [{ text: ' late', t0: 0, t1: 1 }] });
    state.jobs[0]!.reject(new Error('late failure'));
    assert.deepEqual(texts, [' Hello']);
    assert.equal((await engine.transcribe(req())).text, 'Fresh text.');
    assert.equal(state.inits, 2, 'the fresh context is kept');
    await engine.close();
    assert.deepEqual(state.releases, [1, 2]);
  });
});

test('whisper: a hung job whose release never settles blocks nothing: the next request gets a fresh context', async () => {
  await withHangingWhisper('hanging-release.mjs', async ({ url, state, modelPath }) => {
    const engine = createWhisperEngine({ modelPath, packageName: url, timeout: SMALL_BOUND });
    assert.equal((await engine.transcribe(req())).text, 'Fresh text.');
    state.hangRelease = true;
    await assert.rejects(engine.transcribe(req({ prompt: 'hang' })), timedOut);
    assert.deepEqual(state.stops, [1]);
    assert.deepEqual(state.releases, [1], 'release called, and it never settles');
    assert.equal((await engine.transcribe(req())).text, 'Fresh text.');
    assert.deepEqual(
      state.jobs.map((j) => j.ctx),
      [1, 1, 2],
    );
    // a second hang on the fresh context: the same again, a third context
    await assert.rejects(engine.transcribe(req({ prompt: 'hang' })), timedOut);
    assert.equal((await engine.transcribe(req())).text, 'Fresh text.');
    assert.equal(state.inits, 3);
    state.hangRelease = false;
    await engine.close();
  });
});

test('whisper: close() does not wait for ever on a release that never settles (a job that never ended may hold it)', async () => {
  await withHangingWhisper('hanging-close.mjs', async ({ url, state, modelPath }) => {
    const warned: string[] = [];
    const log = { warn: (_o: object, m?: string) => void warned.push(m ?? '') };
    const engine = createWhisperEngine({ modelPath, packageName: url, timeout: SMALL_BOUND, closeWaitMs: 50, log });
    assert.equal((await engine.transcribe(req())).text, 'Fresh text.');
    state.hangRelease = true;
    await engine.close();
    assert.deepEqual(state.releases, [1], 'release was asked for');
    assert.ok(
      warned.some((m) => /not released in time/.test(m)),
      warned.join('; '),
    );
  });
});

test('whisper: one job at a time on the context; a client that leaves stops its job, or leaves the wait for the context at once', async () => {
  await withHangingWhisper('one-at-a-time.mjs', async ({ url, state, modelPath }) => {
    // a bound no test reaches: the client's leaving is what ends these jobs
    const engine = createWhisperEngine({ modelPath, packageName: url, timeout: { floorMs: 3_600_000 } });
    assert.equal(engine.concurrency, 1, 'it tells the audio scheduler so');
    const first = new AbortController();
    const a = engine.transcribe(req({ prompt: 'wait', signal: first.signal }));
    await waitFor(() => state.jobs.length === 1, { what: 'the first job' });
    const second = new AbortController();
    const b = engine.transcribe(req({ signal: second.signal }));
    const c = engine.transcribe(req({ prompt: 'wait' }));
    // the second's client leaves while it waits for the context: refused at once, the first still running
    second.abort();
    await assert.rejects(b, (e: unknown) => e instanceof EngineError && e.code === 'aborted');
    assert.equal(state.jobs.length, 1, 'nothing else was handed to the binding');
    assert.equal(state.jobs[0]!.settled, false);
    // the first's client leaves: its job is stopped, as before; it ends as the binding says (aborted)
    first.abort();
    await waitFor(() => state.stops.length === 1, { what: "the first job's stop()" });
    state.jobs[0]!.resolve({ isAborted: true, result: '', segments: [] });
    await assert.rejects(a, (e: unknown) => e instanceof EngineError && e.code === 'aborted');
    // only then the third
    await waitFor(() => state.jobs.length === 2, { what: 'the third job' });
    state.jobs[1]!.resolve({ isAborted: false, language: 'en', result: ' Third.', segments: [{ text: ' Third.', t0: 0, t1: 500 }] });
    assert.equal((await c).text, 'Third.');
    assert.equal(state.maxRunning, 1);
    assert.equal(state.inits, 1, 'no context dropped');
    await engine.close();
  });
});

test("whisper: the bound on a job scales with the model's compute, from its header", () => {
  const dims = (audioState: number, audioLayers: number, textState: number, textLayers: number) => ({ nVocab: 51865, ftype: 1, audioState, audioLayers, textState, textLayers });
  assert.equal(whisperComputeScale(dims(512, 6, 512, 6)), 1, 'base');
  assert.equal(whisperComputeScale(dims(384, 4, 384, 4)), 1, 'tiny counts as base');
  assert.equal(whisperComputeScale(dims(768, 12, 768, 12)), 4.5, 'small');
  assert.equal(whisperComputeScale(dims(1024, 24, 1024, 24)), 16, 'medium');
  assert.ok(Math.abs(whisperComputeScale(dims(1280, 32, 1280, 32)) - 33.33) < 0.01, 'large');
  assert.equal(whisperComputeScale(dims(1280, 32, 1280, 4)), 18.75, 'large-v3-turbo');
  assert.equal(whisperComputeScale(undefined), 1, 'no header');
  assert.equal(whisperComputeScale(dims(0x07070707, 0x07070707, 0x07070707, 0x07070707)), 1, 'not a real header');
});
