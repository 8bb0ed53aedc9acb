/**
 * Issue 26 §3: POST /v1/audio/transcriptions with stream=true answers Server-Sent Events as OpenAI does
 * (transcript.text.delta as the audio is recognized, then transcript.text.done with the text and the usage), read
 * with the official SDK's stream (for await); whisper-1 ignores the flag, as OpenAI documents. The recognizer is
 * the real pocketsphinx on speech made by the embedded voices (and, to watch the deltas come while the audio is
 * still being recognized, a scripted pocketsphinx whose pieces end when the test says: ./fake-decoder.ts).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import type { TranscriptionStreamEvent } from 'openai/resources/audio/transcriptions';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { client, wavFile, wordErrorRate } from './helpers.js';
import { FakeDecoder, alive, byLength, eventsOf, twoPieces } from './fake-decoder.js';
import { ReplayDecoder } from './replay-decoder.js';

const SENTENCE = 'The weather today is sunny and warm.';
const RATE = 24000;

/** the events of a stream, in order */
async function collect(stream: AsyncIterable<TranscriptionStreamEvent>): Promise<TranscriptionStreamEvent[]> {
  const out: TranscriptionStreamEvent[] = [];
  for await (const e of stream) out.push(e);
  return out;
}

/** deltas then one done, nothing after it; returns the deltas and the done event */
function shape(events: TranscriptionStreamEvent[]) {
  assert.ok(events.length >= 2, `at least a delta and the done event: ${JSON.stringify(events)}`);
  const done = events.at(-1)!;
  assert.equal(done.type, 'transcript.text.done', JSON.stringify(events));
  const deltas = events.slice(0, -1);
  for (const d of deltas) assert.equal(d.type, 'transcript.text.delta', JSON.stringify(events));
  return { deltas: deltas.map((d) => (d as { delta: string }).delta), done: done as Extract<TranscriptionStreamEvent, { type: 'transcript.text.done' }> };
}

/**
 * The real pocketsphinx decodes each distinct piece of audio once: the first stream of the long audio and the first
 * request with the short clip run it; the later requests with the same audio (the non-streamed answer to compare,
 * the wire, the headers) get its output replayed (./replay-decoder.ts), everything after the decoder still real.
 */
describe('POST /v1/audio/transcriptions stream=true (pocketsphinx)', () => {
  let t: TestApp & { url?: string };
  let openai: OpenAI;
  let key: string;
  let one: Buffer;
  let long: Buffer;
  let longSeconds: number;
  let decoder: ReplayDecoder;
  before(async () => {
    decoder = new ReplayDecoder();
    // pieces of at most 5 s: four sentences (about 14 s) are recognized in several pieces
    t = await buildTestApp({ listen: true, env: { AUDIO_PIECE_SECONDS: '5' } });
    ({ openai, key } = await client(t));
    const pcm = Buffer.from(await (await openai.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: SENTENCE, response_format: 'pcm' })).arrayBuffer());
    const sentence = new Int16Array(pcm.buffer.slice(pcm.byteOffset, pcm.byteOffset + (pcm.length & ~1)));
    one = wavFile(sentence, RATE);
    // the sentence four times, a second of silence after each
    const tiled = new Int16Array(4 * (sentence.length + RATE));
    for (let i = 0; i < 4; i++) tiled.set(sentence, i * (sentence.length + RATE));
    long = wavFile(tiled, RATE);
    longSeconds = tiled.length / RATE;
  });
  after(async () => {
    await t.close();
    decoder.close();
  });

  test('long audio: a delta per recognized piece, then done; the deltas make done.text, which is the non-streamed text', async () => {
    const { data: stream, response } = await openai.audio.transcriptions.create({ file: await toFile(long, 'long.wav'), model: 'gpt-4o-transcribe', stream: true }).withResponse();
    assert.equal(response.status, 200);
    assert.match(String(response.headers.get('content-type')), /^text\/event-stream/);
    assert.equal(response.headers.get('x-portico-engine'), 'pocketsphinx');
    const { deltas, done } = shape(await collect(stream));
    assert.ok(deltas.length > 1, `more than one delta for ${longSeconds.toFixed(1)} s in 5-s pieces: ${JSON.stringify(deltas)}`);
    assert.equal(deltas.join(''), done.text, 'the deltas put together are the text');
    assert.deepEqual(done.usage, { type: 'duration', seconds: Math.ceil(longSeconds) } as unknown, 'usage: audio seconds, as the non-streamed answer');
    const reference = Array(4).fill(SENTENCE).join(' ');
    assert.ok(wordErrorRate(reference, done.text) <= 0.35, `recognized: ${done.text}`);
    // the same audio not streamed: the same text (the same pieces, the same recognizer)
    const plain = await openai.audio.transcriptions.create({ file: await toFile(long, 'long.wav'), model: 'gpt-4o-transcribe' });
    assert.equal(plain.text, done.text);
  });

  test('a short clip on gpt-4o-mini-transcribe, response_format text: one delta and done; charged once, as the usage says', async () => {
    const user = 'stream-usage';
    const me = await client(t, user);
    const stream = await me.openai.audio.transcriptions.create({ file: await toFile(one, 'one.wav'), model: 'gpt-4o-mini-transcribe', response_format: 'text', stream: true });
    const { deltas, done } = shape(await collect(stream));
    assert.equal(deltas.length, 1);
    assert.equal(deltas[0], done.text);
    assert.ok(wordErrorRate(SENTENCE, done.text) <= 0.25, done.text);
    const rows = await t.services.db.db.selectFrom('usage_records').selectAll().where('user_id', '=', user).execute();
    assert.equal(rows.length, 1, 'one usage record');
    assert.equal(rows[0]!.operation, 'transcription');
    assert.ok(Math.abs(Number(rows[0]!.audio_seconds) - (one.length - 44) / 2 / RATE) < 0.01, `${rows[0]!.audio_seconds}`);
  });

  test('the wire: `data: <json>` lines only, no event lines, no [DONE]: the done event is the last', async () => {
    const fd = new FormData();
    fd.append('file', new Blob([new Uint8Array(one)]), 'one.wav');
    fd.append('model', 'gpt-4o-transcribe');
    fd.append('stream', 'true');
    const res = await fetch(`${t.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: fd });
    assert.equal(res.status, 200);
    const body = await res.text();
    const blocks = body.split('\n\n').filter((b) => b !== '');
    assert.ok(body.endsWith('\n\n'));
    for (const b of blocks) assert.match(b, /^data: \{.*\}$/, `one data line per event: ${JSON.stringify(b)}`);
    const types = blocks.map((b) => (JSON.parse(b.slice(6)) as { type: string }).type);
    assert.deepEqual(types, ['transcript.text.delta', 'transcript.text.done']);
  });

  test('whisper-1 ignores stream=true (as OpenAI documents): the ordinary JSON answer, with the engine header', async () => {
    const fd = new FormData();
    fd.append('file', new Blob([new Uint8Array(one)]), 'one.wav');
    fd.append('model', 'whisper-1');
    fd.append('stream', 'true');
    const res = await fetch(`${t.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: fd });
    assert.equal(res.status, 200);
    assert.match(String(res.headers.get('content-type')), /^application\/json/);
    assert.equal(res.headers.get('x-portico-engine'), 'pocketsphinx');
    const body = (await res.json()) as { text: string; usage: unknown };
    assert.ok(wordErrorRate(SENTENCE, body.text) <= 0.25, body.text);
    assert.deepEqual(body.usage, { type: 'duration', seconds: Math.ceil((one.length - 44) / 2 / RATE) });
    // and through the SDK's non-streamed call: the same answer
    const r = await openai.audio.transcriptions.create({ file: await toFile(one, 'one.wav'), model: 'whisper-1', stream: false });
    assert.equal(r.text, body.text);
  });

  test('every non-streamed transcription and translation names its engine: x-portico-engine: pocketsphinx', async () => {
    for (const [path, model, format] of [
      ['transcriptions', 'whisper-1', 'verbose_json'],
      ['transcriptions', 'gpt-4o-transcribe', 'text'],
      ['translations', 'whisper-1', 'json'],
    ] as const) {
      const { response } = await (path === 'transcriptions'
        ? openai.audio.transcriptions.create({ file: await toFile(one, 'one.wav'), model, response_format: format }).withResponse()
        : openai.audio.translations.create({ file: await toFile(one, 'one.wav'), model, response_format: format }).withResponse());
      assert.equal(response.headers.get('x-portico-engine'), 'pocketsphinx', `${path} ${model} ${format}`);
    }
  });
});

describe('stream=true: deltas leave as the pieces are recognized, in the order of the audio (scripted recognizer)', () => {
  const decoder = new FakeDecoder();
  let t: TestApp & { url?: string };
  let key: string;
  before(async () => {
    process.env.PORTICO_FAKE_DECODER_DIR = decoder.dir;
    t = await buildTestApp({ listen: true, models: [decoder.spec('asr')], env: { AUDIO_PIECE_SECONDS: '5', AUDIO_MAX_WAIT_MS: '3600000' } });
    ({ key } = await client(t));
  });
  after(async () => {
    await t.close();
    decoder.close();
  });

  test("piece 1's text is sent while piece 2 is still being recognized; then piece 2's; then done", async () => {
    const audio = twoPieces();
    const fd = new FormData();
    fd.append('file', new Blob([new Uint8Array(audio)]), 'a.wav');
    fd.append('model', 'asr');
    fd.append('stream', 'true');
    // the answer's head leaves with the first event: it is awaited once a piece is released
    const answer = fetch(`${t.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: fd });
    const [first, second] = byLength(await decoder.started(2));
    // the second piece is released first: nothing may be sent for it before the first piece's text
    decoder.release(second);
    decoder.release(first);
    const res = await answer;
    const events = eventsOf(res);
    const e1 = await events.next();
    assert.deepEqual(e1.value, { type: 'transcript.text.delta', delta: 'Piece3' });
    const e2 = await events.next();
    assert.deepEqual(e2.value, { type: 'transcript.text.delta', delta: ' Piece5' });
    const e3 = await events.next();
    assert.deepEqual(e3.value, { type: 'transcript.text.done', text: 'Piece3 Piece5', usage: { type: 'duration', seconds: 8 } });
    assert.equal((await events.next()).done, true);
    assert.equal(res.headers.get('x-portico-engine'), 'pocketsphinx');
  });

  test('the first delta comes before the last piece is done (it is streamed, not sent at the end)', async () => {
    const audio = twoPieces();
    const fd = new FormData();
    fd.append('file', new Blob([new Uint8Array(audio)]), 'a.wav');
    fd.append('model', 'asr');
    fd.append('stream', 'true');
    const before = decoder.starts().length;
    const answer = fetch(`${t.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: fd });
    const [first, second] = byLength((await decoder.started(before + 2)).slice(before));
    decoder.release(first);
    const events = eventsOf(await answer);
    assert.deepEqual((await events.next()).value, { type: 'transcript.text.delta', delta: 'Piece3' });
    assert.ok(!decoder.released(second) && alive(second.pid), 'the second piece is still being recognized');
    decoder.release(second);
    assert.deepEqual((await events.next()).value, { type: 'transcript.text.delta', delta: ' Piece5' });
    assert.equal(((await events.next()).value as { type: string }).type, 'transcript.text.done');
  });
});
