/**
 * Issue 26 §3, what goes wrong with stream_format "sse" on /v1/audio/speech: refusals come before any event as
 * ordinary error answers (the SDK's APIError); tts-1 and tts-1-hd refuse sse, as OpenAI's do; a client that leaves
 * mid-stream stops the synthesis and is charged once, and the server serves on.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { Stream } from 'openai/core/streaming';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { assertApiError, client, eventually, rejects } from './helpers.js';

const SENTENCE = 'The weather today is sunny and warm.';
const LONG = Array.from({ length: 30 }, (_, i) => `This is sentence number ${i + 1} of a long text that is read aloud.`).join(' ');

describe('POST /v1/audio/speech stream_format sse: errors', () => {
  let t: TestApp & { url?: string };
  let openai: OpenAI;
  before(async () => {
    t = await buildTestApp({ listen: true });
    ({ openai } = await client(t));
  });
  after(() => t.close());

  const usageOf = (user: string) => t.services.db.db.selectFrom('usage_records').selectAll().where('user_id', '=', user).execute();

  test('tts-1 and tts-1-hd refuse sse (as OpenAI documents): 400 unsupported_parameter on stream_format', async () => {
    for (const model of ['tts-1', 'tts-1-hd']) {
      const e = await rejects(openai.audio.speech.create({ model, voice: 'alloy', input: SENTENCE, stream_format: 'sse' }));
      assertApiError(e, 400, 'unsupported_parameter', 'stream_format', /not supported for tts-1/);
    }
  });

  test('bad fields with sse: 400 as JSON before any event', async () => {
    const bad = await client(t, 'sse-bad');
    const cases: Array<[string, Record<string, unknown>, string, string | undefined]> = [
      ['an unknown stream_format', { stream_format: 'bogus' }, 'stream_format', undefined],
      ['an unknown voice', { voice: 'nobody' }, 'voice', undefined],
      ['nothing speakable', { input: '... --- ...' }, 'input', undefined],
      ['a script no voice reads', { input: 'สวัสดีครับ' }, 'input', 'unsupported_language'],
      ['speed out of range', { speed: 9 }, 'speed', undefined],
    ];
    for (const [what, change, param, code] of cases) {
      const res = await fetch(`${t.url}/v1/audio/speech`, {
        method: 'POST',
        headers: { authorization: `Bearer ${bad.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini-tts', voice: 'alloy', input: SENTENCE, stream_format: 'sse', ...change }),
      });
      assert.equal(res.status, 400, what);
      assert.match(String(res.headers.get('content-type')), /^application\/json/, what);
      const body = (await res.json()) as { error: { param: string; code: string; type: string } };
      assert.equal(body.error.param, param, `${what}: ${JSON.stringify(body)}`);
      assert.equal(body.error.type, 'invalid_request_error');
      if (code) assert.equal(body.error.code, code);
    }
    // nothing was charged for any of them
    assert.equal((await usageOf('sse-bad')).length, 0);
  });

  test('a client that leaves mid-stream: the synthesis stops, it is charged once, and the server serves on', async () => {
    const user = 'sse-leaves';
    const me = await client(t, user);
    const ac = new AbortController();
    const { data } = await me.openai.audio.speech
      .create({ model: 'gpt-4o-mini-tts', voice: 'alloy', input: LONG, response_format: 'mp3', stream_format: 'sse' }, { signal: ac.signal })
      .withResponse();
    let first: { type: string } | undefined;
    for await (const e of Stream.fromSSEResponse<{ type: string }>(data, ac)) {
      first = e;
      // leaving: the stream helper aborts the request when the loop is left
      break;
    }
    assert.equal(first?.type, 'speech.audio.delta');
    // the key's synthesis turns are given back (nothing more is synthesized for nobody)
    const queue = t.runtime.audioEngines.speechQueue;
    await eventually(
      () => {
        const s = queue.snapshot();
        return s.running === 0 && s.keys.every((k) => k.queued === 0 && k.waitingTurns === 0 && k.runningTurns === 0);
      },
      60_000,
      "the key's synthesis turns are over",
    );
    await eventually(async () => (await usageOf(user)).length > 0, 60_000, 'usage recorded');
    const rows = await usageOf(user);
    assert.equal(rows.length, 1, 'charged once');
    assert.equal(Number(rows[0]!.characters), LONG.length, 'its whole input, as a speech client that leaves after audio started');
    // the server serves on
    const { data: next } = await me.openai.audio.speech.create({ model: 'gpt-4o-mini-tts', voice: 'alloy', input: SENTENCE, stream_format: 'sse' }).withResponse();
    const types: string[] = [];
    for await (const e of Stream.fromSSEResponse<{ type: string }>(next, new AbortController())) types.push(e.type);
    assert.equal(types.at(-1), 'speech.audio.done');
    assert.equal((await usageOf(user)).length, 2);
  });
});
