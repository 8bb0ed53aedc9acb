/**
 * Issue 26 §3: POST /v1/audio/speech with stream_format "sse" answers speech.audio.delta events (base64 of the
 * audio file in the response_format asked for) then speech.audio.done with the usage, as OpenAI does for
 * gpt-4o-mini-tts; read with the official SDK (the answer's Response parsed by its SSE stream helper). The decoded
 * deltas put together are one valid file of the format (ffmpeg decodes it), as long as the audio answer's.
 * Every speech answer names the engine that spoke it (x-portico-engine).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { Stream } from 'openai/core/streaming';
import { NO_VOICE_WARM_UP, buildTestApp, type TestApp } from '../helpers/app.js';
import { client, probe } from './helpers.js';

const FORMATS = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] as const;
const RATES: Record<(typeof FORMATS)[number], number> = { mp3: 24000, opus: 48000, aac: 24000, flac: 24000, wav: 24000, pcm: 24000 };
const CODECS: Record<(typeof FORMATS)[number], string> = { mp3: 'mp3', opus: 'opus', aac: 'aac', flac: 'flac', wav: 'pcm_s16le', pcm: 'pcm_s16le' };
const SENTENCE = 'The weather today is sunny and warm.';
/** several sentences, so several deltas: four (10-13 s of speech) show it as well as six did */
const LONG = Array.from({ length: 4 }, (_, i) => `This is sentence number ${i + 1} of a text that is read aloud.`).join(' ');

type SpeechEvent = { type: 'speech.audio.delta'; audio: string } | { type: 'speech.audio.done'; usage: Record<string, number> };

describe('POST /v1/audio/speech stream_format sse', () => {
  let t: TestApp & { url?: string };
  let openai: OpenAI;
  before(async () => {
    t = await buildTestApp({ listen: true, runtime: NO_VOICE_WARM_UP });
    ({ openai } = await client(t));
  });
  after(() => t.close());

  /** the events of a speech answer with stream_format sse, through the SDK, and the answer's headers */
  async function sse(body: Omit<OpenAI.Audio.SpeechCreateParams, 'stream_format'>) {
    const { data, response } = await openai.audio.speech.create({ ...body, stream_format: 'sse' }).withResponse();
    const events: SpeechEvent[] = [];
    for await (const e of Stream.fromSSEResponse<SpeechEvent>(data, new AbortController())) events.push(e);
    assert.ok(events.length >= 2, JSON.stringify(events).slice(0, 300));
    const done = events.at(-1)!;
    assert.equal(done.type, 'speech.audio.done');
    const deltas = events.slice(0, -1);
    for (const d of deltas) assert.equal(d.type, 'speech.audio.delta');
    const audio = Buffer.concat(deltas.map((d) => Buffer.from((d as { audio: string }).audio, 'base64')));
    return { response, deltas: deltas.length, audio, usage: (done as { usage: Record<string, number> }).usage };
  }

  test('every format: the decoded deltas are one valid file of it, as long as the audio answer; usage counts the characters', async () => {
    for (const format of FORMATS) {
      const got = await sse({ model: 'gpt-4o-mini-tts', voice: 'alloy', input: SENTENCE, response_format: format });
      assert.match(String(got.response.headers.get('content-type')), /^text\/event-stream/, format);
      assert.equal(got.response.headers.get('x-portico-engine'), 'flite', format);
      assert.deepEqual(got.usage, { input_tokens: 0, output_tokens: 0, total_tokens: 0, characters: SENTENCE.length }, format);
      const p = await probe(got.audio, format === 'pcm');
      assert.equal(p.codec, CODECS[format], format);
      assert.equal(p.sampleRate, RATES[format], format);
      const plain = Buffer.from(await (await openai.audio.speech.create({ model: 'gpt-4o-mini-tts', voice: 'alloy', input: SENTENCE, response_format: format })).arrayBuffer());
      const q = await probe(plain, format === 'pcm');
      assert.ok(p.duration > 1, `${format}: ${p.duration} s of audio`);
      assert.ok(Math.abs(p.duration - q.duration) < 0.1, `${format}: ${p.duration} s as events, ${q.duration} s as audio`);
      if (format === 'wav') assert.equal(got.audio.indexOf('RIFF', 1), -1, 'one container: one WAV header');
    }
  });

  test('a text of several sentences comes in several deltas (sent as each part is encoded), one file', async () => {
    const got = await sse({ model: 'gpt-4o-mini-tts', voice: 'ash', input: LONG, response_format: 'mp3' });
    assert.ok(got.deltas > 1, `${got.deltas} deltas`);
    assert.equal(got.response.headers.get('x-portico-engine'), 'espeak-ng');
    const p = await probe(got.audio);
    assert.ok(p.duration > 6, `${p.duration} s`);
  });

  test('the wire: `data: <json>` lines only, no event lines, no [DONE]', async () => {
    const { data } = await openai.audio.speech.create({ model: 'gpt-4o-mini-tts', voice: 'alloy', input: SENTENCE, response_format: 'pcm', stream_format: 'sse' }).withResponse();
    const body = await data.text();
    assert.ok(body.endsWith('\n\n'));
    const blocks = body.split('\n\n').filter((b) => b !== '');
    for (const b of blocks) assert.match(b, /^data: \{.*\}$/, JSON.stringify(b).slice(0, 200));
    assert.equal((JSON.parse(blocks.at(-1)!.slice(6)) as { type: string }).type, 'speech.audio.done');
  });

  test('x-portico-engine on every speech answer: the voice engine, and both when a sentence in another script is read by espeak-ng', async () => {
    const header = async (voice: string, input: string, stream_format?: 'sse') =>
      (
        await openai.audio.speech
          .create({ model: 'tts-1-hd', voice, input, response_format: 'pcm', ...(stream_format ? { model: 'gpt-4o-mini-tts', stream_format } : {}) })
          .withResponse()
      ).response.headers.get('x-portico-engine');
    assert.equal(await header('alloy', SENTENCE), 'flite');
    assert.equal(await header('ash', SENTENCE), 'espeak-ng');
    assert.equal(await header('alloy', `${SENTENCE} Привет, как дела?`), 'flite, espeak-ng');
    assert.equal(await header('alloy', `${SENTENCE} Привет, как дела?`, 'sse'), 'flite, espeak-ng');
  });
});
