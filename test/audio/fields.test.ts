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
});
