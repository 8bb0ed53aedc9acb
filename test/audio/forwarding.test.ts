/**
 * Configured models with provider openai-compatible (type speech / transcription) forward to an upstream audio
 * server (test/helpers/scripted-audio-upstream.ts), through a real listening Portico and the openai SDK.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { DEFAULT_VERBOSE_JSON, startScriptedAudioUpstream, tone, type ScriptedAudioUpstream } from '../helpers/scripted-audio-upstream.js';
import type { ModelSpec } from '../../src/models/config.js';
import { assertApiError, client, parseSrt, probe, rejects, wavFile } from './helpers.js';

describe('openai-compatible audio models forward to the upstream', () => {
  let t: TestApp & { url?: string };
  let up: ScriptedAudioUpstream;
  let openai: OpenAI;
  const audio = wavFile(tone(1.5, 16000), 16000);
  before(async () => {
    up = await startScriptedAudioUpstream();
    process.env.PORTICO_TEST_UPSTREAM_KEY = 'up-secret';
    const models = [
      {
        name: 'remote-tts',
        provider: 'openai-compatible',
        type: 'speech',
        base_url: up.baseUrl,
        upstream_model: 'kokoro',
        api_key_env: 'PORTICO_TEST_UPSTREAM_KEY',
        voices: ['af_bella'],
      } as ModelSpec,
      {
        name: 'remote-stt',
        provider: 'openai-compatible',
        type: 'transcription',
        base_url: up.baseUrl,
        upstream_model: 'Systran/faster-whisper-small',
        api_key_env: 'PORTICO_TEST_UPSTREAM_KEY',
      } as ModelSpec,
    ];
    t = await buildTestApp({ listen: true, models, builtins: true });
    ({ openai } = await client(t));
  });
  after(async () => {
    await t.close();
    await up.close();
  });

  test('speech: the upstream is asked for pcm with the upstream model, voice and speed; the answer is re-encoded in the asked format', async () => {
    const before = up.requests.length;
    up.script({ type: 'pcm', samples: tone(1), chunkSizes: [4801, 3, 9600], intervalMs: 5 });
    const res = await openai.audio.speech.create({ model: 'remote-tts', voice: 'nova', input: 'Forward me.', response_format: 'mp3', speed: 1.25 });
    assert.equal(res.headers.get('content-type'), 'audio/mpeg');
    const p = await probe(Buffer.from(await res.arrayBuffer()));
    assert.equal(p.codec, 'mp3');
    assert.equal(p.sampleRate, 24000);
    assert.ok(Math.abs(p.duration - 1) < 0.15, `one second of tone: ${p.duration}`);
    const r = up.requests[before];
    assert.equal(r.path, '/v1/audio/speech');
    assert.equal(r.headers.authorization, 'Bearer up-secret');
    assert.deepEqual(r.json, { model: 'kokoro', input: 'Forward me.', voice: 'nova', response_format: 'pcm', speed: 1.25 });
    // an upstream-specific voice configured for the model is accepted; wav is exact
    const wav = await openai.audio.speech.create({ model: 'remote-tts', voice: 'af_bella' as 'nova', input: 'x', response_format: 'wav' });
    const bytes = Buffer.from(await wav.arrayBuffer());
    assert.equal(bytes.length, 44 + 48000);
    assert.equal((up.requests.at(-1)!.json as { voice: string }).voice, 'af_bella');
    // the upstream decides what it can speak: text the embedded voices refuse (Thai), a voice new to the
    // thirteen (marin) and tts quality are not Portico's business here
    up.script({ type: 'pcm', samples: tone(0.5), chunkSizes: [24000], intervalMs: 0 });
    const thai = await openai.audio.speech.create({ model: 'remote-tts', voice: 'marin', input: 'สวัสดีครับ', response_format: 'pcm' });
    assert.equal(Buffer.from(await thai.arrayBuffer()).length, 24000);
    assert.deepEqual(up.requests.at(-1)!.json, { model: 'kokoro', input: 'สวัสดีครับ', voice: 'marin', response_format: 'pcm', speed: 1 });
  });

  test('speech: upstream errors before the first byte become OpenAI-shape errors (400 passes through, 401 -> 502)', async () => {
    up.script({ type: 'error', status: 400, message: 'input contains unsupported characters' });
    assertApiError(await rejects(openai.audio.speech.create({ model: 'remote-tts', voice: 'alloy', input: 'x' })), 400, undefined, undefined, /unsupported characters/);
    up.script({ type: 'error', status: 401, message: 'bad key' });
    assertApiError(await rejects(openai.audio.speech.create({ model: 'remote-tts', voice: 'alloy', input: 'x' })), 502, 'engine_error');
    // a voice outside the thirteen and the configured ones
    assertApiError(await rejects(openai.audio.speech.create({ model: 'remote-tts', voice: 'bob' as 'alloy', input: 'x' })), 400, 'validation_error', 'voice');
  });

  test('speech: a client disconnect cancels the upstream request', async () => {
    up.script({ type: 'pcm', samples: tone(0.2), chunkSizes: [4800], intervalMs: 20, endless: true });
    const ac = new AbortController();
    const res = await fetch(`${t.url}/v1/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${openai.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'remote-tts', voice: 'alloy', input: 'endless', response_format: 'pcm' }),
      signal: ac.signal,
    });
    await res.body!.getReader().read();
    ac.abort();
    const rec = up.requests.at(-1)!;
    await Promise.race([rec.done, new Promise((_, rej) => setTimeout(() => rej(new Error('upstream still streaming')), 3000))]);
    assert.equal(rec.clientAborted, true);
  });

  test('transcription: the upload is forwarded as multipart (verbose_json upstream) and shaped in every format', async () => {
    const n = up.requests.length;
    const json = await openai.audio.transcriptions.create({ file: await toFile(audio, 'clip.wav'), model: 'remote-stt', language: 'en', prompt: 'Star Wars', temperature: 0.3 });
    assert.equal(json.text, DEFAULT_VERBOSE_JSON.text);
    const r = up.requests[n];
    assert.equal(r.path, '/v1/audio/transcriptions');
    assert.equal(r.headers.authorization, 'Bearer up-secret');
    assert.deepEqual(r.fields.model, ['Systran/faster-whisper-small']);
    assert.deepEqual(r.fields.response_format, ['verbose_json']);
    assert.deepEqual(r.fields.language, ['en']);
    assert.deepEqual(r.fields.prompt, ['Star Wars']);
    assert.deepEqual(r.fields.temperature, ['0.3']);
    assert.equal(r.files.length, 1);
    assert.equal(r.files[0].filename, 'clip.wav');
    assert.ok(r.files[0].bytes.equals(audio), 'the original bytes are forwarded');

    const v = (await openai.audio.transcriptions.create({
      file: await toFile(audio, 'clip.wav'),
      model: 'remote-stt',
      response_format: 'verbose_json',
      timestamp_granularities: ['word'],
    })) as OpenAI.Audio.TranscriptionVerbose;
    assert.deepEqual(up.requests.at(-1)!.fields['timestamp_granularities[]'], ['word', 'segment']);
    assert.equal(v.language, 'english');
    assert.equal(v.duration, 2.5);
    assert.deepEqual(
      v.words!.map((w) => w.word),
      ['Hello', 'there,', 'general', 'Kenobi.'],
    );
    assert.equal(v.segments, undefined);
    const srt = (await openai.audio.transcriptions.create({ file: await toFile(audio, 'clip.wav'), model: 'remote-stt', response_format: 'srt' })) as unknown as string;
    assert.deepEqual(parseSrt(srt), [{ index: 1, start: 0, end: 2.5, text: 'Hello there, general Kenobi.' }]);
    // usage: the upstream's duration
    const rows = await t.services.db.db.selectFrom('usage_records').selectAll().where('model', '=', 'remote-stt').execute();
    assert.equal(rows.length, 3);
    assert.ok(rows.every((x) => x.audio_seconds === 2.5 && x.operation === 'transcription'));
  });

  test('translation is forwarded to /audio/translations; upstream 400 passes through, 500 -> 502', async () => {
    up.script({
      type: 'json',
      body: { ...DEFAULT_VERBOSE_JSON, task: 'translate', language: 'german', text: 'Good morning.', segments: [{ ...DEFAULT_VERBOSE_JSON.segments[0], text: ' Good morning.' }] },
    });
    const v = (await openai.audio.translations.create({ file: await toFile(audio, 'clip.wav'), model: 'remote-stt', response_format: 'verbose_json' })) as unknown as {
      task: string;
      language: string;
      text: string;
    };
    assert.equal(up.requests.at(-1)!.path, '/v1/audio/translations');
    assert.equal(v.task, 'translate');
    assert.equal(v.language, 'german');
    assert.equal(v.text, 'Good morning.');
    up.script({ type: 'error', status: 400, message: 'Audio file is too short.', code: 'audio_too_short' });
    assertApiError(await rejects(openai.audio.transcriptions.create({ file: await toFile(audio, 'clip.wav'), model: 'remote-stt' })), 400, 'audio_too_short');
    up.script({ type: 'error', status: 500, message: 'boom' });
    assertApiError(await rejects(openai.audio.transcriptions.create({ file: await toFile(audio, 'clip.wav'), model: 'remote-stt' })), 502, 'engine_error');
  });
});
