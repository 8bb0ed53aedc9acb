/**
 * Issue 26 §3, what goes wrong with stream=true on /v1/audio/transcriptions: every refusal before the first event
 * is an ordinary error answer (status and OpenAI error body, read by the official SDK as an APIError); a failure
 * after it ends the stream with an error event the SDK's stream raises; a client that leaves mid-stream stops the
 * recognition and is charged once, and nothing crashes. The recognizer is a scripted pocketsphinx whose pieces end
 * (or fail) when the test says (./fake-decoder.ts); the built-in models run on the real pocketsphinx.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { assertApiError, client, eventually, rejects, wavFile } from './helpers.js';
import { FakeDecoder, PATIENCE, alive, byLength, eventsOf, twoPieces } from './fake-decoder.js';

describe('POST /v1/audio/transcriptions stream=true: errors', () => {
  const decoder = new FakeDecoder();
  let t: TestApp & { url?: string };
  let openai: OpenAI;
  let key: string;
  before(async () => {
    process.env.PORTICO_FAKE_DECODER_DIR = decoder.dir;
    t = await buildTestApp({ listen: true, builtins: true, models: [decoder.spec('asr')], env: { AUDIO_PIECE_SECONDS: '5', AUDIO_MAX_WAIT_MS: '3600000' } });
    ({ openai, key } = await client(t));
  });
  after(async () => {
    await t.close();
    decoder.close();
  });

  const usageOf = (user: string) => t.services.db.db.selectFrom('usage_records').selectAll().where('user_id', '=', user).execute();
  const form = (fields: Record<string, string>, file?: Buffer) => {
    const fd = new FormData();
    if (file) fd.append('file', new Blob([new Uint8Array(file)]), 'a.wav');
    for (const [k, v] of Object.entries(fields)) fd.append(k, v);
    return fd;
  };
  const post = (path: string, fd: FormData) => fetch(`${t.url}/v1/audio/${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: fd });
  const clip = () =>
    wavFile(
      new Int16Array(16000).map((_, i) => Math.round(Math.sin(i * 0.3) * 3000)),
      16000,
    );

  test('bad fields with stream=true: 400 in the OpenAI error shape, as JSON, before any event', async () => {
    const cases: Array<[string, Record<string, string>, string, string | null]> = [
      ['stream not a boolean', { model: 'gpt-4o-transcribe', stream: 'maybe' }, 'transcriptions', 'stream'],
      ['translations do not stream', { model: 'whisper-1', stream: 'true' }, 'translations', 'stream'],
      ['gpt-4o-transcribe: srt is not one of its formats', { model: 'gpt-4o-transcribe', stream: 'true', response_format: 'srt' }, 'transcriptions', 'response_format'],
      ['a streamed answer is events: verbose_json is refused', { model: 'asr', stream: 'true', response_format: 'verbose_json' }, 'transcriptions', 'response_format'],
      ['word timestamps need verbose_json', { model: 'asr', stream: 'true', 'timestamp_granularities[]': 'word' }, 'transcriptions', 'timestamp_granularities'],
      ['unknown model', { model: 'nope', stream: 'true' }, 'transcriptions', 'model'],
      ['temperature out of range', { model: 'gpt-4o-transcribe', stream: 'true', temperature: '3' }, 'transcriptions', 'temperature'],
    ];
    for (const [what, fields, path, param] of cases) {
      const res = await post(path, form(fields, clip()));
      const body = (await res.json()) as { error: { message: string; type: string; param: string | null; code: unknown } };
      assert.ok(res.status === 400 || res.status === 404, `${what}: ${res.status} ${JSON.stringify(body)}`);
      assert.match(String(res.headers.get('content-type')), /^application\/json/, what);
      assert.equal(body.error.param, param, `${what}: ${JSON.stringify(body)}`);
      assert.equal(typeof body.error.message, 'string');
      assert.equal(body.error.type, 'invalid_request_error', what);
    }
    // stream=true on a translation is unsupported, named as such
    const tr = await post('translations', form({ model: 'whisper-1', stream: 'true' }, clip()));
    assert.equal(((await tr.json()) as { error: { code: string } }).error.code, 'unsupported_parameter');
    // stream=false on a translation is what OpenAI's translations do anyway: accepted
    const ok = await post('translations', form({ model: 'whisper-1', stream: 'false' }, wavFile(new Int16Array(16000), 16000)));
    assert.equal(ok.status, 200, await ok.text());
  });

  test('the SDK sees a refusal before the first event as an APIError (no stream), with the engine header once one was chosen', async () => {
    const empty = await rejects(openai.audio.transcriptions.create({ file: await toFile(Buffer.alloc(0), 'a.wav'), model: 'gpt-4o-transcribe', stream: true }));
    assertApiError(empty, 400, 'invalid_file_format', 'file');
    const res = await post('transcriptions', form({ model: 'gpt-4o-transcribe', stream: 'true' }, Buffer.from('not audio at all')));
    assert.equal(res.status, 400);
    assert.match(String(res.headers.get('content-type')), /^application\/json/);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'invalid_file_format');
    // the recognizer was chosen before the file was found undecodable: it is named
    assert.equal(res.headers.get('x-portico-engine'), 'pocketsphinx');
    const short = await rejects(openai.audio.transcriptions.create({ file: await toFile(wavFile(new Int16Array(100), 16000), 'a.wav'), model: 'asr', stream: true }));
    assertApiError(short, 400, 'audio_too_short', 'file');
  });

  test('a failure after the first event ends the stream with an error event the SDK raises; charged once', async () => {
    const user = 'stream-fails';
    const me = await client(t, user);
    const before = decoder.starts().length;
    const stream = me.openai.audio.transcriptions.create({ file: await toFile(twoPieces(), 'a.wav'), model: 'asr', stream: true });
    const [first, second] = byLength((await decoder.started(before + 2)).slice(before));
    decoder.release(first);
    const seen: unknown[] = [];
    const failure = await rejects(
      (async () => {
        for await (const e of await stream) {
          seen.push(e);
          // the second piece fails once the first piece's text is out
          if (seen.length === 1) decoder.fail(second);
        }
      })(),
    );
    assert.deepEqual(seen, [{ type: 'transcript.text.delta', delta: 'Piece3' }]);
    assert.ok(failure instanceof OpenAI.APIError, `an APIError from the stream: ${String(failure)}`);
    const err = failure.error as { message: string; type: string; code: string };
    assert.equal(err.type, 'server_error');
    assert.equal(err.code, 'engine_error');
    assert.match(err.message, /pocketsphinx failed/);
    // the audio was decoded and recognized in part: charged once, its length
    await eventually(async () => (await usageOf(user)).length > 0, PATIENCE, 'usage recorded');
    const rows = await usageOf(user);
    assert.equal(rows.length, 1);
    assert.equal(Number(rows[0]!.audio_seconds), 8);
  });

  test('the error event on the wire: `data: {"type":"error","error":{message,type,param,code}}`, and the stream ends', async () => {
    const before = decoder.starts().length;
    const answer = post('transcriptions', form({ model: 'asr', stream: 'true' }, twoPieces()));
    const [first, second] = byLength((await decoder.started(before + 2)).slice(before));
    decoder.release(first);
    const events = eventsOf(await answer);
    assert.deepEqual((await events.next()).value, { type: 'transcript.text.delta', delta: 'Piece3' });
    decoder.fail(second);
    const e = (await events.next()).value as { type: string; error: Record<string, unknown> };
    assert.equal(e.type, 'error');
    assert.deepEqual(Object.keys(e.error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal((await events.next()).done, true, 'nothing after the error event');
  });

  test('a client that leaves mid-stream: the recognition stops, it is charged once, and the server serves on', async () => {
    const user = 'stream-leaves';
    const me = await client(t, user);
    const before = decoder.starts().length;
    const stream = me.openai.audio.transcriptions.create({ file: await toFile(twoPieces(), 'a.wav'), model: 'asr', stream: true });
    const [first, second] = byLength((await decoder.started(before + 2)).slice(before));
    decoder.release(first);
    const seen: unknown[] = [];
    for await (const e of await stream) {
      seen.push(e);
      // leaving: the SDK aborts the request when the loop is left
      break;
    }
    assert.deepEqual(seen, [{ type: 'transcript.text.delta', delta: 'Piece3' }]);
    // the second piece's decoder is stopped (never released)
    await eventually(() => !alive(second.pid), PATIENCE, "the second piece's decoder stopped");
    assert.ok(!decoder.released(second));
    await eventually(async () => (await usageOf(user)).length > 0, PATIENCE, 'usage recorded');
    const rows = await usageOf(user);
    assert.equal(rows.length, 1, 'charged once');
    assert.equal(Number(rows[0]!.audio_seconds), 8, 'the whole audio, as a speech client that leaves is charged its whole input');
    // nothing crashed: the next streamed request is served
    const next = me.openai.audio.transcriptions.create({ file: await toFile(twoPieces(), 'a.wav'), model: 'asr', stream: true });
    const pair = byLength((await decoder.started(before + 4)).slice(before + 2));
    for (const s of pair) decoder.release(s);
    const events: Array<{ type: string }> = [];
    for await (const e of await next) events.push(e);
    assert.deepEqual(
      events.map((e) => e.type),
      ['transcript.text.delta', 'transcript.text.delta', 'transcript.text.done'],
    );
    assert.equal((await usageOf(user)).length, 2);
  });
});
