/**
 * The audio endpoints' security: which keys may call them (route scopes, model scopes, key kinds and states),
 * and that a refused upload is refused from its headers, before its body is read.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { encodeWav } from '../../src/codec/wav.js';

const speechBody = (model = 'tts-1') => JSON.stringify({ model, input: 'Hello.', voice: 'alloy', response_format: 'wav' });

function uploadForm(model = 'whisper-1'): FormData {
  const silence = encodeWav(new Int16Array(16000), 16000);
  const f = new FormData();
  f.append('file', new Blob([new Uint8Array(silence)], { type: 'audio/wav' }), 'a.wav');
  f.append('model', model);
  return f;
}

describe('audio endpoints: scopes, key kinds and key states', () => {
  let t: TestApp & { url?: string };
  before(async () => {
    t = await buildTestApp({ listen: true, builtins: true });
  });
  after(() => t.close());

  const speech = (key: string, model?: string) =>
    fetch(`${t.url}/v1/audio/speech`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: speechBody(model) });
  const upload = (key: string, path: 'transcriptions' | 'translations', model?: string) =>
    fetch(`${t.url}/v1/audio/${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: uploadForm(model) });
  const errorOf = async (res: Response) => ((await res.json()) as { error: { code: string; type: string; message: string } }).error;

  test('a key scoped to responses only is refused 403 insufficient_scope on speech, transcriptions and translations', async () => {
    const key = await t.inferenceKey('alice', { name: 'responses only', scopes: ['responses'] });
    for (const res of [await speech(key), await upload(key, 'transcriptions'), await upload(key, 'translations')]) {
      assert.equal(res.status, 403, res.url);
      const err = await errorOf(res);
      assert.equal(err.code, 'insufficient_scope');
      assert.match(err.message, /"audio" scope/);
    }
  });

  test('a key with the audio scope, and a key without scopes, may speak', async () => {
    const audio = await t.inferenceKey('alice', { name: 'audio', scopes: ['audio'] });
    const any = await t.inferenceKey('alice', { name: 'everything' });
    for (const key of [audio, any]) {
      const res = await speech(key);
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('content-type'), 'audio/wav');
      assert.ok((await res.arrayBuffer()).byteLength > 44, 'audio after the header');
    }
  });

  test('model scopes: a key limited to tts-1 may not use tts-1-hd or whisper-1 (403 naming the model)', async () => {
    const key = await t.inferenceKey('bob', { name: 'tts-1 only', scopes: ['audio', 'model:tts-1'] });
    assert.equal((await speech(key, 'tts-1')).status, 200);
    const hd = await speech(key, 'tts-1-hd');
    assert.equal(hd.status, 403);
    const hdErr = await errorOf(hd);
    assert.equal(hdErr.code, 'insufficient_scope');
    assert.match(hdErr.message, /tts-1-hd/);
    const stt = await upload(key, 'transcriptions', 'whisper-1');
    assert.equal(stt.status, 403);
    assert.match((await errorOf(stt)).message, /whisper-1/);
  });

  test('a Management API Key, a malformed key, a revoked key and no key are all 401', async () => {
    const jwt = await t.token('carol');
    const mk = await t.app.inject({ method: 'POST', url: '/v1/portal/management/api-keys', headers: { authorization: `Bearer ${jwt}` }, payload: { name: 'query' } });
    assert.equal(mk.statusCode, 200, mk.body);
    const management = mk.json().data.api_key as string;
    assert.match(management, /^mk-/);
    assert.equal((await speech(management)).status, 401);
    assert.equal((await upload('sk-not-a-real-key', 'transcriptions')).status, 401);

    const created = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${jwt}` }, payload: { name: 'to revoke' } });
    const k = created.json().data as { id: string; api_key: string };
    assert.equal((await speech(k.api_key)).status, 200);
    const rv = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys/revoke', headers: { authorization: `Bearer ${jwt}` }, payload: { api_key_id: k.id } });
    assert.equal(rv.statusCode, 200);
    const revoked = await speech(k.api_key);
    assert.equal(revoked.status, 401);
    assert.equal((await errorOf(revoked)).code, 'api_key_revoked');

    const none = await fetch(`${t.url}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: speechBody() });
    assert.equal(none.status, 401);
    assert.deepEqual(await errorOf(none).then((e) => [e.type, e.code]), ['authentication_error', 'unauthorized']);
  });

  test('an upload with a key lacking the audio scope is answered 403 from its headers: its 20 MB body is never read', async () => {
    const key = await t.inferenceKey('dave', { name: 'responses only', scopes: ['responses'] });
    const { port } = new URL(t.url!);
    const answer = await new Promise<string>((resolve, reject) => {
      const s = net.connect(Number(port), '127.0.0.1', () => {
        s.write(
          `POST /v1/audio/transcriptions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\n` +
            `content-type: multipart/form-data; boundary=b\r\ncontent-length: ${20 * 1024 * 1024}\r\n\r\n--b\r\n`,
        );
      });
      let got = '';
      s.on('data', (d) => {
        got += d.toString();
        if (got.includes('\r\n\r\n')) {
          s.destroy();
          resolve(got);
        }
      });
      s.on('error', reject);
      setTimeout(() => reject(new Error(`no answer before the body: ${got}`)), 5000).unref();
    });
    assert.match(answer, /^HTTP\/1\.1 403/);
    assert.match(answer, /connection: close/i);
  });
});
