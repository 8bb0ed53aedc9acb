/**
 * Issue 26: a client asking for whisper-1 cannot tell pocketsphinx's transcripts from whisper's, so Portico says
 * which recognizer serves the built-in transcription models (the start-up log, /v1/models), and an operator may
 * refuse them instead (TRANSCRIPTION_REQUIRE=whisper): 503 engine_unavailable saying what to install, never
 * pocketsphinx's output. pocketsphinx is installed here (the transcription suites need it): the refusals are the
 * setting's, not a missing engine's.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Writable } from 'node:stream';
import OpenAI, { toFile } from 'openai';
import { buildTestApp, TEST_JWT_SECRET, type TestApp } from '../helpers/app.js';
import { portico, tmp, cleanTmp } from '../cli/helpers.js';
import { loadConfig } from '../../src/platform/config.js';
import { detectPocketsphinx } from '../../src/engines/pocketsphinx/index.js';
import type { ModelSpec } from '../../src/models/spec.js';
import { assertApiError, client, rejects, wavFile } from './helpers.js';

const BUILTIN = ['whisper-1', 'gpt-4o-transcribe', 'gpt-4o-mini-transcribe'];

/** 1.5 s of a 440 Hz tone at 16 kHz (what it says does not matter: no recognizer must be asked) */
function tone(): Buffer {
  const s = new Int16Array(24000);
  for (let i = 0; i < s.length; i++) s[i] = Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / 16000));
  return wavFile(s, 16000);
}

/** A log sink: the JSON lines pino writes. */
function logSink(): { sink: Writable; lines: () => Array<Record<string, any>> } {
  const out: string[] = [];
  const sink = new Writable({ write: (chunk, _e, cb) => (out.push(chunk.toString()), cb()) });
  return {
    sink,
    lines: () =>
      out
        .join('')
        .split('\n')
        .filter((l) => l.trim())
        .map((l) => JSON.parse(l) as Record<string, any>),
  };
}

/** The start-up line about the built-in transcription models. */
function recognizerLine(lines: Array<Record<string, any>>): Record<string, any> {
  const found = lines.filter((l) => typeof l.msg === 'string' && l.msg.startsWith('speech recognition: '));
  assert.equal(found.length, 1, `one start-up line about the recognizer: ${JSON.stringify(found)}`);
  return found[0]!;
}

describe('TRANSCRIPTION_REQUIRE: the setting', () => {
  after(() => cleanTmp());
  const base = () => ({ DATA_DIR: tmp(), JWT_SECRET: TEST_JWT_SECRET });

  test('whisper (any case, spaces around) refuses the weaker recognizers; unset or any keeps today’s behaviour', () => {
    for (const v of ['whisper', ' WHISPER ']) assert.equal(loadConfig({ ...base(), TRANSCRIPTION_REQUIRE: v }).audio.requireWhisperClass, true, v);
    for (const v of [undefined, '', 'any']) assert.equal(loadConfig({ ...base(), TRANSCRIPTION_REQUIRE: v }).audio.requireWhisperClass, undefined, String(v));
  });

  test('another value refuses to start, with a message naming the setting and its values', async () => {
    for (const v of ['whisper.cpp', 'yes', 'pocketsphinx']) {
      assert.throws(
        () => loadConfig({ ...base(), TRANSCRIPTION_REQUIRE: v }),
        (e: Error) => e.name === 'ConfigError' && e.message === `TRANSCRIPTION_REQUIRE must be one of any, whisper; got "${v}"`,
      );
    }
    const r = await portico(['serve'], { ...base(), PORT: '0', PORTICO_DB: 'memory', TRANSCRIPTION_REQUIRE: 'best' });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /TRANSCRIPTION_REQUIRE must be one of any, whisper; got "best"/);
    assert.doesNotMatch(r.stderr, /\bat .*\.js:\d+/, 'no stack trace');
  });
});

describe('unset (the default): pocketsphinx serves the built-in models, and says so', () => {
  let t: TestApp & { url?: string };
  const log = logSink();
  before(async () => {
    assert.equal(detectPocketsphinx().available, true, 'pocketsphinx is installed here');
    t = await buildTestApp({ listen: true, builtins: true, models: [], logDestination: log.sink, env: { LOG_LEVEL: 'info' } });
  });
  after(() => t.close());

  test('the start-up log warns that pocketsphinx serves whisper-1 and the others: English only, far less accurate, and what to do', () => {
    const line = recognizerLine(log.lines());
    assert.equal(line.level, 40, 'a warning');
    assert.deepEqual(line.models, BUILTIN);
    assert.equal(line.engine, 'pocketsphinx');
    assert.match(line.msg, /whisper-1, gpt-4o-transcribe, gpt-4o-mini-transcribe are served by pocketsphinx, which is English only, and far less accurate than whisper/);
    assert.match(line.msg, /portico models pull whisper:base\.en/);
    assert.match(line.msg, /TRANSCRIPTION_REQUIRE=whisper/);
  });

  test('/v1/models says pocketsphinx, and whisper-1 answers with it', async () => {
    const { openai } = await client(t);
    const models = (await openai.models.list()).data as any[];
    for (const name of BUILTIN) assert.match(models.find((m) => m.id === name).engine, /^pocketsphinx \(English/, name);
    const r = await openai.audio.transcriptions.create({ file: await toFile(tone(), 'a.wav'), model: 'whisper-1' });
    assert.equal(typeof r.text, 'string');
  });
});

describe('TRANSCRIPTION_REQUIRE=whisper without a whisper model: the built-in names answer 503, never pocketsphinx', () => {
  let t: TestApp & { url?: string };
  const log = logSink();
  before(async () => {
    t = await buildTestApp({
      listen: true,
      builtins: true,
      // a model the operator named on pocketsphinx is theirs: the setting is about the OpenAI names only
      models: [{ name: 'sphinx', provider: 'pocketsphinx', type: 'transcription' } as ModelSpec],
      logDestination: log.sink,
      env: { LOG_LEVEL: 'info', TRANSCRIPTION_REQUIRE: 'whisper' },
    });
  });
  after(() => t.close());

  test('transcriptions and translations on every built-in name: 503 engine_unavailable saying why and what to install', async () => {
    const { openai } = await client(t);
    for (const model of BUILTIN) {
      const e = await rejects(openai.audio.transcriptions.create({ file: await toFile(tone(), 'a.wav'), model }));
      assertApiError(e, 503, 'engine_unavailable', 'model');
      const message = ((e as InstanceType<typeof OpenAI.APIError>).error as { message: string }).message;
      assert.match(
        message,
        new RegExp(
          `'${model}' is served here by a whisper-class recognizer only \\(TRANSCRIPTION_REQUIRE=whisper refuses pocketsphinx \\(English only, and far less accurate than whisper\\)\\)`,
        ),
      );
      assert.match(message, /portico models pull whisper:base\.en/, 'what to install');
      assert.doesNotMatch(message, /Install pocketsphinx/, 'never suggests the refused recognizer');
    }
    for (const model of ['whisper-1', 'gpt-4o-transcribe']) {
      const e = await rejects(openai.audio.translations.create({ file: await toFile(tone(), 'a.wav'), model }));
      assertApiError(e, 503, 'engine_unavailable', 'model', /TRANSCRIPTION_REQUIRE=whisper refuses pocketsphinx/);
    }
  });

  test('/v1/models shows what would happen; the start-up log warns that the built-in names answer 503', async () => {
    const { openai } = await client(t);
    const models = (await openai.models.list()).data as any[];
    for (const name of BUILTIN) {
      assert.equal(
        models.find((m) => m.id === name).engine,
        'none allowed: TRANSCRIPTION_REQUIRE=whisper refuses pocketsphinx (English only, and far less accurate than whisper); transcriptions answer 503 until there is a whisper model',
      );
    }
    assert.equal(models.find((m) => m.id === 'sphinx').engine, 'pocketsphinx');
    const line = recognizerLine(log.lines());
    assert.equal(line.level, 40);
    assert.equal(line.engine, null);
    assert.match(line.msg, /answer 503 engine_unavailable: TRANSCRIPTION_REQUIRE=whisper refuses pocketsphinx .*portico models pull whisper:base\.en/);
  });

  test('the model the operator named on pocketsphinx still serves', async () => {
    const { openai } = await client(t);
    const r = await openai.audio.transcriptions.create({ file: await toFile(tone(), 'a.wav'), model: 'sphinx' });
    assert.equal(typeof r.text, 'string');
  });
});

describe('TRANSCRIPTION_REQUIRE=whisper with a whisper model: it serves the built-in names', () => {
  let t: TestApp & { url?: string };
  const log = logSink();
  const dir = mkdtempSync(join(tmpdir(), 'portico-require-whisper-'));
  before(async () => {
    // the binding's API (initWhisper -> transcribeData), answering a fixed transcript
    writeFileSync(
      join(dir, 'binding.mjs'),
      `export async function initWhisper() {
  return {
    transcribeData() {
      return { stop: async () => {}, promise: Promise.resolve({ isAborted: false, language: 'en', result: ' Whisper heard this.', segments: [{ text: ' Whisper heard this.', t0: 0, t1: 1500 }] }) };
    },
    async release() {},
  };
}
`,
    );
    writeFileSync(join(dir, 'model.bin'), 'ggml');
    process.env.PORTICO_WHISPER_BINDING = pathToFileURL(join(dir, 'binding.mjs')).href;
    t = await buildTestApp({
      listen: true,
      builtins: true,
      models: [{ name: 'w', provider: 'whisper', type: 'transcription', path: join(dir, 'model.bin') } as ModelSpec],
      logDestination: log.sink,
      env: { LOG_LEVEL: 'info', TRANSCRIPTION_REQUIRE: 'whisper' },
    });
  });
  after(async () => {
    delete process.env.PORTICO_WHISPER_BINDING;
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('whisper-1 and the others answer with whisper; /v1/models and the start-up log (info) say so', async () => {
    const { openai } = await client(t);
    for (const model of BUILTIN) {
      const r = await openai.audio.transcriptions.create({ file: await toFile(tone(), 'a.wav'), model });
      assert.equal(r.text, 'Whisper heard this.', model);
    }
    const models = (await openai.models.list()).data as any[];
    for (const name of BUILTIN) assert.equal(models.find((m) => m.id === name).engine, 'whisper (w)', name);
    const line = recognizerLine(log.lines());
    assert.equal(line.level, 30, 'information, not a warning');
    assert.equal(line.engine, 'whisper');
    assert.equal(line.model, 'w');
    assert.equal(line.msg, 'speech recognition: whisper-1, gpt-4o-transcribe, gpt-4o-mini-transcribe are served by whisper (w)');
  });
});
