/**
 * The one validation policy on the multipart audio routes: unknown form fields are refused naming the field,
 * OpenAI fields this server does not implement are refused as unsupported. Checked before any decoding.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { client } from './helpers.js';

describe('audio uploads: one validation policy for form fields', () => {
  let t: TestApp & { url?: string };
  let key: string;
  before(async () => {
    t = await buildTestApp({ listen: true });
    ({ key } = await client(t));
  });
  after(() => t.close());

  const post = (path: 'transcriptions' | 'translations', fields: Record<string, string>, lang?: string) => {
    const fd = new FormData();
    fd.append('file', new Blob([new Uint8Array(Buffer.from('RIFF....WAVEfmt '))]), 'a.wav');
    for (const [k, v] of Object.entries(fields)) fd.append(k, v);
    return fetch(`${t.url}/v1/audio/${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, ...(lang ? { 'accept-language': lang } : {}) }, body: fd });
  };

  test("an unknown field -> 400 unknown_parameter naming it (transcriptions and translations), in the caller's language", async () => {
    for (const path of ['transcriptions', 'translations'] as const) {
      const res = await post(path, { model: 'whisper-1', temprature: '0.2' });
      assert.equal(res.status, 400);
      const body = await res.json();
      assert.deepEqual(body, { error: { message: "Unknown parameter: 'temprature'.", type: 'invalid_request_error', param: 'temprature', code: 'unknown_parameter' } });
    }
    const zh = await (await post('transcriptions', { model: 'whisper-1', foo: 'x' }, 'zh-CN')).json();
    assert.equal(zh.error.message, "未知参数：'foo'。");
  });

  test("OpenAI's fields this server does not implement -> 400 unsupported_parameter", async () => {
    for (const [field, param] of [
      ['include[]', 'include'],
      ['chunking_strategy', 'chunking_strategy'],
    ] as const) {
      const res = await post('transcriptions', { model: 'whisper-1', [field]: 'auto' });
      assert.equal(res.status, 400);
      const body = await res.json();
      assert.equal(body.error.code, 'unsupported_parameter');
      assert.equal(body.error.param, param);
    }
  });

  test('prompt and instructions count characters (code points: an emoji is one) and say the count they checked', async () => {
    const emoji = (n: number) => '😀'.repeat(n);
    // 4096 emoji (8192 UTF-16 units) are within the limit: the request goes on (to the recognizer, or the file,
    // which is not audio) and is answered for something else than the prompt
    const within = (await (await post('transcriptions', { model: 'whisper-1', prompt: emoji(4096) })).json()).error;
    assert.notEqual(within.param, 'prompt', within.message);
    assert.doesNotMatch(within.message, /too long/);
    const over = await post('transcriptions', { model: 'whisper-1', prompt: emoji(4097) });
    assert.equal(over.status, 400);
    const e = (await over.json()).error;
    assert.equal(e.message, "'prompt' is too long: 4097 characters; the maximum is 4096.");
    assert.equal(e.param, 'prompt');
    const speech = (instructions: string) =>
      fetch(`${t.url}/v1/audio/speech`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini-tts', voice: 'alloy', input: 'Hi.', response_format: 'pcm', instructions }),
      });
    const refused = await speech(emoji(4097));
    assert.equal(refused.status, 400);
    assert.equal(
      (await refused.json()).error.message,
      "Invalid 'instructions': string too long. Expected a string with maximum length 4096, but got a string with length 4097 instead.",
    );
    const spoken = await speech(emoji(4096));
    assert.equal(spoken.status, 200, await spoken.clone().text());
    assert.ok((await spoken.arrayBuffer()).byteLength > 0);
  });
});
