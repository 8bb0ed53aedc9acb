/**
 * Issue 22, §5 with the real recognizer: pocketsphinx (the built-in whisper-1 here) behind the real route and
 * scheduler. Key A sends three long clips, key B then a short one: B's transcript comes back before the first of
 * A's is done (the pieces of A's clips and B's clip take turns), and A's long clip, recognized in pieces, is still
 * one transcript on its own time line. Only orders of events are compared, never durations.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { eventually, wavFile, wordErrorRate } from './helpers.js';

const SENTENCE = 'The weather today is sunny and warm.';
const RATE = 24000;
/**
 * A's clips: 10 sentences (~33 s, four pieces of at most 10 s). When B's clip takes the first slot to free, A's first
 * clip still has a piece and a half (~13 s of audio) to go on the other slot, against B's ~2.5 s: the order is not a
 * close race on any machine. (It was 15 sentences, five pieces: half again as much decoding for the same order.)
 */
const A_SENTENCES = 10;

describe("pocketsphinx: a short clip of key B is served before the rest of key A's long clips", () => {
  let t: TestApp & { url?: string };
  let sentence: Int16Array;
  before(async () => {
    t = await buildTestApp({ listen: true, env: { AUDIO_PIECE_SECONDS: '10', AUDIO_MAX_WAIT_MS: '3600000', AUDIO_MAX_QUEUED_SECONDS_PER_KEY: '3600' } });
    const key = await t.inferenceKey('voice');
    const openai = new OpenAI({ apiKey: key, baseURL: `${t.url}/v1`, maxRetries: 0 });
    const wav = Buffer.from(await (await openai.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: SENTENCE, response_format: 'pcm' })).arrayBuffer());
    sentence = new Int16Array(wav.buffer.slice(wav.byteOffset, wav.byteOffset + (wav.length & ~1)));
  });
  after(() => t.close());

  /** the sentence `times` times, a second of silence after each */
  function tiled(times: number): Buffer {
    const gap = RATE;
    const out = new Int16Array(times * (sentence.length + gap));
    for (let i = 0; i < times; i++) out.set(sentence, i * (sentence.length + gap));
    return wavFile(out, RATE);
  }

  async function keyOf(user: string): Promise<{ key: string; id: string }> {
    const res = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${await t.token(user)}` }, payload: { name: user } });
    assert.equal(res.statusCode, 200, res.body);
    const d = res.json().data as { api_key: string; id: string };
    return { key: d.api_key, id: d.id };
  }

  function transcribe(key: string, audio: Buffer, ended: string[], name: string) {
    const ac = new AbortController();
    const fd = new FormData();
    fd.append('file', new Blob([new Uint8Array(audio)]), 'a.wav');
    fd.append('model', 'whisper-1');
    fd.append('response_format', 'verbose_json');
    const outcome = fetch(`${t.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: fd, signal: ac.signal })
      .then(async (r) => {
        const body = (await r.json()) as { text: string; segments: Array<{ start: number; end: number; text: string }>; duration: number };
        ended.push(name);
        return { status: r.status, body };
      })
      .catch((e: Error) => ({ status: 0, body: { text: e.name, segments: [], duration: 0 } }));
    return { abort: () => ac.abort(), outcome };
  }

  test(`B (one sentence) is answered before A's first clip of ${A_SENTENCES} sentences is; A's clip comes back whole`, async () => {
    const a = await keyOf('anna');
    const b = await keyOf('bert');
    const q = t.runtime.audioEngines.transcriptionQueue;
    const ended: string[] = [];
    const long = tiled(A_SENTENCES);
    const seconds = (long.length - 44) / 2 / RATE;
    const first = transcribe(a.key, long, ended, 'A1');
    // A's first clip is admitted first (its pieces lead A's queue), then two more
    await eventually(() => (q.snapshot().keys.find((k) => k.key === a.id)?.queued ?? 0) > 0, 60_000, "A's first clip queued");
    const more = [2, 3].map((i) => transcribe(a.key, long, ended, `A${i}`));
    await eventually(() => (q.snapshot().keys.find((k) => k.key === a.id)?.queued ?? 0) > 2 * seconds, 60_000, "A's three clips queued");
    const short = transcribe(b.key, wavFile(sentence, RATE), ended, 'B');
    const answer = await short.outcome;
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.ok(wordErrorRate(SENTENCE, answer.body.text) <= 0.25, `B: ${answer.body.text}`);
    assert.deepEqual(ended, ['B'], 'B was answered while every clip of A still had pieces to go');

    // A's other clips go away (out of the queue at once); its first is recognized to the end, in pieces
    for (const m of more) m.abort();
    const whole = await first.outcome;
    assert.equal(whole.status, 200, JSON.stringify(whole.body));
    assert.ok(Math.abs(whole.body.duration - seconds) < 0.01);
    assert.ok(wordErrorRate(Array(A_SENTENCES).fill(SENTENCE).join(' '), whole.body.text) <= 0.25, `A1: ${whole.body.text}`);
    const segs = whole.body.segments;
    for (let i = 1; i < segs.length; i++) assert.ok(segs[i]!.start >= segs[i - 1]!.end - 0.001, `segments in order: ${JSON.stringify(segs.slice(i - 1, i + 1))}`);
    assert.ok(segs[segs.length - 1]!.end > seconds - 6, `the last segment near the end: ${segs[segs.length - 1]!.end} of ${seconds} s`);
    await eventually(() => q.snapshot().keys.length === 0, 60_000, 'the queue empty');
  });
});
