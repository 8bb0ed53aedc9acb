/**
 * POST /v1/audio/speech against a real listening Portico with the official openai SDK as the client, on the
 * embedded engines (flite and espeak-ng voices, src/audio/voices.ts).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { NO_VOICE_WARM_UP, buildTestApp, type TestApp } from '../helpers/app.js';
import { spareEncoderCount } from '../../src/codec/index.js';
import type { PcmChunk, SpeechEngine, SpeechRequest } from '../../src/engines/types.js';
import { assertApiError, client, eventually, ffmpegChildren, probe, rejects, run } from './helpers.js';
import { trimmedLevelDb } from '../helpers/voice-features.js';

/** The samples of a response, as 24 kHz mono s16 (decoded by ffmpeg; `raw`: the bytes are pcm already). */
async function decodePcm(bytes: Buffer, raw = false): Promise<Int16Array> {
  const out = raw ? bytes : (await run('ffmpeg', ['-v', 'error', '-i', 'pipe:0', '-f', 's16le', '-ac', '1', '-ar', '24000', 'pipe:1'], bytes)).stdout;
  return new Int16Array(out.buffer.slice(out.byteOffset, out.byteOffset + (out.length & ~1)));
}

const VOICES = ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'onyx', 'nova', 'sage', 'shimmer', 'verse', 'marin', 'cedar'] as const;
const FORMATS = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] as const;
const RATES: Record<(typeof FORMATS)[number], number> = { mp3: 24000, opus: 48000, aac: 24000, flac: 24000, wav: 24000, pcm: 24000 };
const CODECS: Record<(typeof FORMATS)[number], string> = { mp3: 'mp3', opus: 'opus', aac: 'aac', flac: 'flac', wav: 'pcm_s16le', pcm: 'pcm_s16le' };
const TYPES: Record<(typeof FORMATS)[number], string> = { mp3: 'audio/mpeg', opus: 'audio/ogg', aac: 'audio/aac', flac: 'audio/flac', wav: 'audio/wav', pcm: 'audio/pcm' };
const SENTENCE = 'The weather today is sunny and warm.';
/** long enough that the first chunk comes well before the end (about 25 s of speech, an eighth of it a sentence) */
const LONG = Array.from({ length: 8 }, (_, i) => `This is sentence number ${i + 1} of a long text that is read aloud.`).join(' ');

function count(hay: Buffer, needle: string): number {
  let n = 0;
  for (let i = hay.indexOf(needle); i >= 0; i = hay.indexOf(needle, i + 1)) n++;
  return n;
}

describe('POST /v1/audio/speech', () => {
  let t: TestApp & { url?: string };
  let openai: OpenAI;
  let key: string;
  before(async () => {
    t = await buildTestApp({ listen: true, runtime: NO_VOICE_WARM_UP });
    ({ openai, key } = await client(t));
  });
  after(() => t.close());

  const raw = (body: unknown, signal?: AbortSignal) =>
    fetch(`${t.url}/v1/audio/speech`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body), signal });

  test('GET /v1/models lists the six built-in audio models', async () => {
    const ids = [];
    for await (const m of openai.models.list()) ids.push(m.id);
    for (const id of ['tts-1', 'tts-1-hd', 'gpt-4o-mini-tts', 'whisper-1', 'gpt-4o-transcribe', 'gpt-4o-mini-transcribe']) assert.ok(ids.includes(id), `${id} in ${ids}`);
    // each says what serves it, so nobody mistakes pocketsphinx for whisper
    const whisper1 = (await openai.models.retrieve('whisper-1')) as unknown as { type: string; engine: string };
    assert.equal(whisper1.type, 'transcription');
    assert.match(whisper1.engine, /^pocketsphinx \(English/);
    const tts = (await openai.models.retrieve('tts-1')) as unknown as { type: string; engine: string };
    assert.deepEqual([tts.type, tts.engine], ['speech', 'flite/espeak-ng (embedded voices)']);
  });

  test('every format decodes with the expected codec and sample rate, on a flite and an espeak voice; durations agree across formats within 0.5 s', async () => {
    const durations: Record<string, Record<string, number>> = {};
    for (const voice of ['alloy', 'nova'] as const) {
      durations[voice] = {};
      await Promise.all(
        FORMATS.map(async (format) => {
          const res = await openai.audio.speech.create({ model: 'tts-1', voice, input: SENTENCE, response_format: format });
          assert.equal(res.status, 200);
          assert.equal(res.headers.get('content-type'), TYPES[format]);
          assert.equal(res.headers.get('transfer-encoding'), 'chunked', `${voice}/${format} is streamed`);
          const bytes = Buffer.from(await res.arrayBuffer());
          assert.ok(bytes.length > 1000, `${voice}/${format}: ${bytes.length} bytes`);
          const p = await probe(bytes, format === 'pcm');
          assert.equal(p.sampleRate, RATES[format], `${voice}/${format} sample rate`);
          assert.equal(p.channels, 1, `${voice}/${format} mono`);
          assert.equal(p.codec, CODECS[format], `${voice}/${format} codec`);
          if (format === 'pcm') {
            assert.equal(bytes.length % 2, 0);
            assert.notEqual(bytes.subarray(0, 4).toString('latin1'), 'RIFF', 'pcm has no header');
          }
          // one container per response (no header per chunk)
          if (format === 'wav') {
            assert.equal(count(bytes, 'RIFF'), 1);
            // one sentence: sent whole, with its real length (test/audio/speech-length.test.ts)
            assert.equal(bytes.readUInt32LE(40), bytes.length - 44, 'one sentence: the real data length');
          }
          if (format === 'opus') assert.equal(count(bytes, 'OpusHead'), 1);
          if (format === 'flac') assert.equal(count(bytes, 'fLaC'), 1);
          if (format === 'mp3') assert.ok(count(bytes, 'Xing') + count(bytes, 'Info') <= 1);
          durations[voice][format] = p.duration;
        }),
      );
      const ds = Object.values(durations[voice]);
      assert.ok(Math.min(...ds) > 1, `${voice}: the sentence lasts more than a second (${ds})`);
      assert.ok(Math.max(...ds) - Math.min(...ds) <= 0.5, `${voice}: durations agree within 0.5 s: ${JSON.stringify(durations[voice])}`);
    }
  });

  test('all thirteen voices answer (ash: the SDK example voice too), each at -20 dBFS within 2 dB on a standard sentence', async () => {
    const levels: Record<string, number> = {};
    const seconds: Record<string, number> = {};
    await Promise.all(
      VOICES.map(async (voice) => {
        // pcm: the samples as they are (24 kHz mono s16), no decoder run per voice; that every format, wav included,
        // decodes to them is the test above's, on a voice of each engine
        const res = await openai.audio.speech.create({ model: 'tts-1', voice, input: SENTENCE, response_format: 'pcm' });
        const pcm = await decodePcm(Buffer.from(await res.arrayBuffer()), true);
        seconds[voice] = pcm.length / 24000;
        levels[voice] = trimmedLevelDb(pcm, 24000);
      }),
    );
    for (const voice of VOICES) {
      assert.ok(seconds[voice] > 1 && seconds[voice] < 5, `${voice}: ${seconds[voice].toFixed(2)} s`);
      assert.ok(Math.abs(levels[voice] - -20) <= 2, `${voice}: ${levels[voice].toFixed(1)} dBFS`);
    }
    const spread = Math.max(...Object.values(levels)) - Math.min(...Object.values(levels));
    assert.ok(spread <= 4, `levels spread ${spread.toFixed(1)} dB: ${JSON.stringify(levels)}`);
  });

  test('tts-1-hd is not tts-1: other audio, each sentence set to -20 dBFS exactly, a long first sentence spoken whole', async () => {
    const input = 'When the first sentence is rather long, as this one is, it is cut at its first comma by tts-1.';
    const get = async (model: string, voice: 'alloy' | 'onyx') =>
      decodePcm(Buffer.from(await (await openai.audio.speech.create({ model, voice, input, response_format: 'pcm' })).arrayBuffer()), true);
    for (const voice of ['alloy', 'onyx'] as const) {
      const [std, hd] = await Promise.all([get('tts-1', voice), get('tts-1-hd', voice)]);
      assert.notDeepEqual(Buffer.from(std.buffer), Buffer.from(hd.buffer), `${voice}: different audio`);
      assert.ok(Math.abs(trimmedLevelDb(hd, 24000) - -20) <= 0.5, `${voice} hd: ${trimmedLevelDb(hd, 24000).toFixed(2)} dBFS`);
      assert.ok(Math.abs(trimmedLevelDb(std, 24000) - -20) <= 2.5, `${voice} tts-1: ${trimmedLevelDb(std, 24000).toFixed(2)} dBFS`);
      // tts-1 pauses where it cut the sentence: its audio is longer by that pause
      assert.ok(std.length > hd.length, `${voice}: tts-1 ${std.length} samples, hd ${hd.length}`);
    }
  });

  test('Chinese on a flite voice is spoken in Mandarin; a script no voice reads is a 400 naming input', async () => {
    const res = await openai.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: '我喜欢学习中文。今天天气很好。', response_format: 'wav' });
    const pcm = await decodePcm(Buffer.from(await res.arrayBuffer()));
    const secs = pcm.length / 24000;
    assert.ok(secs > 2 && secs < 8, `${secs.toFixed(2)} s for 13 syllables`);
    assert.ok(Math.abs(trimmedLevelDb(pcm, 24000) - -20) <= 3, `level ${trimmedLevelDb(pcm, 24000).toFixed(1)}`);
    // three languages in one input: each sentence in its own, none dropped
    const mixed = await openai.audio.speech.create({
      model: 'tts-1-hd',
      voice: 'ash',
      input: 'Hello there, my friend. 你好，我的朋友。 Привет, мой друг.',
      response_format: 'mp3',
    });
    const d = (await probe(Buffer.from(await mixed.arrayBuffer()))).duration;
    assert.ok(d > 3 && d < 9, `mixed: ${d.toFixed(2)} s`);
    assertApiError(
      await rejects(openai.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: 'Hello. สวัสดีครับ' })),
      400,
      'unsupported_language',
      'input',
      /Thai script.*Chinese/,
    );
    assertApiError(await rejects(openai.audio.speech.create({ model: 'tts-1', voice: 'nova', input: '東京は日本の首都です。' })), 400, 'unsupported_language', 'input', /kanji/);
  });

  test('speed 0.5, 1, 2 changes the length by more than 1.5x per step (flite and espeak voices)', async () => {
    for (const voice of ['alloy', 'nova'] as const) {
      const len: number[] = [];
      for (const speed of [0.5, 1, 2]) {
        const res = await openai.audio.speech.create({ model: 'tts-1', voice, input: SENTENCE, response_format: 'pcm', speed });
        len.push(Buffer.from(await res.arrayBuffer()).length);
      }
      assert.ok(len[0] / len[1] > 1.5, `${voice}: 0.5 vs 1: ${len}`);
      assert.ok(len[1] / len[2] > 1.5, `${voice}: 1 vs 2: ${len}`);
    }
  });

  test('the body is streamed: for a long input the first chunk arrives well before the end (pcm and mp3)', async () => {
    for (const format of ['pcm', 'mp3'] as const) {
      const t0 = performance.now();
      const res = await raw({ model: 'tts-1', voice: 'alloy', input: LONG, response_format: format });
      assert.equal(res.status, 200);
      const reader = res.body!.getReader();
      let first = -1;
      let chunks = 0;
      let bytes = 0;
      for (;;) {
        const r = await reader.read();
        if (r.done) break;
        if (first < 0) first = performance.now() - t0;
        chunks++;
        bytes += r.value.length;
      }
      const total = performance.now() - t0;
      assert.ok(chunks > 3, `${format}: ${chunks} chunks`);
      assert.ok(first < total / 2, `${format}: first chunk at ${first.toFixed(0)} ms of ${total.toFixed(0)} ms`);
      assert.ok(bytes > 50_000, `${format}: ${bytes} bytes`);
    }
  });

  test('a client that disconnects stops the synthesis and the encoder', async () => {
    const spec = t.services.models.get('tts-1')!;
    const engine = (await t.services.audioEngines.speech(spec)) as SpeechEngine;
    const original = engine.synthesize.bind(engine);
    let yielded = 0;
    let finished = false;
    let sawAbort = false;
    (engine as { synthesize: SpeechEngine['synthesize'] }).synthesize = (req: SpeechRequest) =>
      (async function* (): AsyncGenerator<PcmChunk> {
        try {
          for await (const c of original(req)) {
            yielded++;
            yield c;
          }
        } finally {
          sawAbort = req.signal?.aborted === true;
          finished = true;
        }
      })();
    try {
      const input = Array.from({ length: 60 }, (_, i) => `Sentence ${i + 1} keeps the synthesizer busy for a while.`).join(' ');
      const ac = new AbortController();
      const res = await raw({ model: 'tts-1', voice: 'alloy', input, response_format: 'mp3' }, ac.signal);
      const reader = res.body!.getReader();
      await reader.read();
      ac.abort();
      await eventually(() => finished, 5000, 'the engine generator to finish');
      assert.equal(sawAbort, true, 'the engine saw the abort signal');
      const atStop = yielded;
      // a short pause proving a negative: the generator finished, nothing synthesizes any more
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(yielded, atStop, 'no more synthesis after the disconnect');
      assert.ok(yielded < 60, `stopped early: ${yielded} of 60 sentences`);
      // the response's encoder is gone: only the spare encoders (one per used format) remain
      await eventually(async () => (await ffmpegChildren()) <= spareEncoderCount(), 5000, 'the encoder to exit');
    } finally {
      (engine as { synthesize: SpeechEngine['synthesize'] }).synthesize = original;
    }
    // the server still works
    const ok = await openai.audio.speech.create({ model: 'tts-1', voice: 'echo', input: 'Still here.', response_format: 'wav' });
    assert.ok(Buffer.from(await ok.arrayBuffer()).length > 10_000);
  });

  test('gpt-4o-mini-tts accepts instructions; tts-1-hd works; stream_format audio is accepted', async () => {
    const a = await openai.audio.speech.create({ model: 'gpt-4o-mini-tts', voice: 'shimmer', input: 'Hello.', instructions: 'Speak cheerfully.', response_format: 'wav' });
    assert.ok(Buffer.from(await a.arrayBuffer()).length > 5000);
    const b = await openai.audio.speech.create({ model: 'tts-1-hd', voice: 'fable', input: 'Hello.', response_format: 'flac', stream_format: 'audio' });
    assert.equal((await probe(Buffer.from(await b.arrayBuffer()))).codec, 'flac');
  });

  test('bad input -> 400 in the OpenAI error shape (voice, format, speed, input length, stream_format); unknown model -> 404', async () => {
    const base = { model: 'tts-1', voice: 'alloy', input: 'Hi.' } as const;
    assertApiError(
      await rejects(openai.audio.speech.create({ ...base, voice: 'bob' as 'alloy' })),
      400,
      'validation_error',
      'voice',
      /alloy, ash, ballad, coral, echo, fable, onyx, nova, sage, shimmer, verse, marin, cedar/,
    );
    assertApiError(
      await rejects(openai.audio.speech.create({ ...base, response_format: 'ogg' as 'mp3' })),
      400,
      'invalid_value',
      'response_format',
      /'mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'/,
    );
    assertApiError(await rejects(openai.audio.speech.create({ ...base, speed: 5 })), 400, 'decimal_above_max_value', 'speed', /<= 4/);
    assertApiError(await rejects(openai.audio.speech.create({ ...base, speed: 0.1 })), 400, 'decimal_below_min_value', 'speed', />= 0.25/);
    // one validation policy: an unknown field is refused, naming it
    assertApiError(await rejects(openai.audio.speech.create({ ...base, foo: 1 } as typeof base)), 400, 'unknown_parameter', 'foo', /Unknown parameter: 'foo'/);
    assertApiError(await rejects(openai.audio.speech.create({ ...base, input: 'a'.repeat(4097) })), 400, 'validation_error', 'input', /4096/);
    assertApiError(await rejects(openai.audio.speech.create({ ...base, input: '' })), 400, 'validation_error', 'input');
    assertApiError(await rejects(openai.audio.speech.create({ ...base, stream_format: 'sse' })), 400, 'unsupported_parameter', 'stream_format');
    assertApiError(await rejects(openai.audio.speech.create({ ...base, model: 'no-such-tts' })), 404, 'model_not_found', 'model');
    // a transcription model is not a speech model
    assertApiError(await rejects(openai.audio.speech.create({ ...base, model: 'whisper-1' })), 404, 'model_not_found');
    // exactly 4096 characters is allowed (checked without synthesizing it all: the first bytes are enough)
    const ac = new AbortController();
    const res = await raw({ ...base, input: 'Hello there. '.repeat(316).slice(0, 4096), response_format: 'pcm' }, ac.signal);
    assert.equal(res.status, 200);
    await res.body!.getReader().read();
    ac.abort();
    // no body, wrong types
    const r1 = await fetch(`${t.url}/v1/audio/speech`, { method: 'POST', headers: { authorization: `Bearer ${key}` } });
    assert.equal(r1.status, 400);
    assert.equal((await r1.json()).error.type, 'invalid_request_error');
    const r2 = await raw({ ...base, speed: 'fast' });
    assert.equal(r2.status, 400);
    assert.equal((await r2.json()).error.param, 'speed');
    // no key -> 401
    const r3 = await fetch(`${t.url}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(base) });
    assert.equal(r3.status, 401);
  });

  test('usage: one record per synthesis with the characters, readable through services.usage', async () => {
    const k = await t.inferenceKey('usage-user');
    const o = new OpenAI({ apiKey: k, baseURL: t.url + '/v1', maxRetries: 0 });
    const input = 'Counting characters.';
    const res = await o.audio.speech.create({ model: 'tts-1-hd', voice: 'onyx', input, response_format: 'pcm' });
    await res.arrayBuffer();
    const rows = await t.services.db.db.selectFrom('usage_records').selectAll().where('user_id', '=', 'usage-user').execute();
    assert.equal(rows.length, 1);
    assert.equal(rows[0].operation, 'speech');
    assert.equal(rows[0].model, 'tts-1-hd');
    assert.equal(rows[0].characters, input.length);
    const now = Math.floor(Date.now() / 1000);
    const agg = await t.services.usage.usage({ orgId: rows[0].org_id, userId: 'usage-user' }, now - 60, now + 60, ['operation']);
    assert.equal(agg.total.characters, input.length);
  });
});
