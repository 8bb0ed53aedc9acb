/**
 * Issue 26 §3: /openapi.json describes the multipart bodies of /v1/audio/transcriptions and /v1/audio/translations
 * (every field typed and described, `file` binary, file and model required), the event streams of the two streamed
 * answers (text/event-stream with the event shapes), and the x-portico-engine header of the audio answers. The
 * body schema only documents: the form is still read as a stream and checked field by field (a field the schema
 * would refuse gets the service's own error, not a schema validation error).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';

describe('OpenAPI: the audio bodies, the streamed answers and the engine header', () => {
  let t: TestApp;
  let doc: any;
  before(async () => {
    t = await buildTestApp({});
    doc = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json();
  });
  after(() => t.close());

  test('transcriptions and translations: multipart/form-data, every field with a type and a description, file binary, file and model required', () => {
    const want = {
      '/v1/audio/transcriptions': ['file', 'model', 'language', 'prompt', 'response_format', 'temperature', 'timestamp_granularities[]', 'stream'],
      '/v1/audio/translations': ['file', 'model', 'prompt', 'response_format', 'temperature'],
    };
    for (const [path, fields] of Object.entries(want)) {
      const body = doc.paths[path].post.requestBody;
      assert.ok(body, `${path} has a request body`);
      assert.deepEqual(Object.keys(body.content), ['multipart/form-data'], path);
      const schema = body.content['multipart/form-data'].schema;
      assert.deepEqual([...schema.required].sort(), ['file', 'model'], path);
      assert.deepEqual(Object.keys(schema.properties).sort(), [...fields].sort(), path);
      for (const f of fields) {
        const p = schema.properties[f];
        assert.ok(p.type, `${path} ${f}: a type`);
        assert.ok(typeof p.description === 'string' && p.description.length > 10, `${path} ${f}: a description`);
      }
      assert.deepEqual([schema.properties.file.type, schema.properties.file.format], ['string', 'binary'], path);
      assert.deepEqual(schema.properties.response_format.enum, ['json', 'text', 'srt', 'verbose_json', 'vtt']);
      assert.equal(schema.properties.temperature.type, 'number');
    }
    assert.equal(doc.paths['/v1/audio/transcriptions'].post.requestBody.content['multipart/form-data'].schema.properties.stream.type, 'boolean');
  });

  test('the streamed answers: text/event-stream with the event shapes; translations do not stream', () => {
    const ok = (path: string) => doc.paths[path].post.responses['200'];
    const tr = ok('/v1/audio/transcriptions').content['text/event-stream'].schema.oneOf;
    assert.deepEqual(
      tr.map((s: any) => s.properties.type.enum[0]),
      ['transcript.text.delta', 'transcript.text.done'],
    );
    assert.deepEqual(tr[1].required, ['type', 'text', 'usage']);
    const sp = ok('/v1/audio/speech').content['text/event-stream'].schema.oneOf;
    assert.deepEqual(
      sp.map((s: any) => s.properties.type.enum[0]),
      ['speech.audio.delta', 'speech.audio.done'],
    );
    assert.equal(sp[0].properties.audio.format, 'byte');
    assert.ok(ok('/v1/audio/speech').content['audio/mpeg'], 'the audio answer is still there');
    assert.equal(ok('/v1/audio/translations').content['text/event-stream'], undefined);
    assert.match(doc.paths['/v1/audio/speech'].post.requestBody.content['application/json'].schema.properties.stream_format.description, /sse/);
  });

  test('every audio answer documents x-portico-engine', () => {
    for (const path of ['/v1/audio/speech', '/v1/audio/transcriptions', '/v1/audio/translations']) {
      const h = doc.paths[path].post.responses['200'].headers?.['x-portico-engine'];
      assert.ok(h, path);
      assert.equal(h.schema.type, 'string');
      assert.match(h.description, /pocketsphinx/);
    }
  });

  test('the documented body is not validated as one: a request without model gets the service error, not a schema error', async () => {
    const key = await t.inferenceKey('oa');
    const boundary = 'xyz';
    const payload = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\nRIFF\r\n--${boundary}--\r\n`;
    const res = await t.app.inject({
      method: 'POST',
      url: '/v1/audio/transcriptions',
      headers: { authorization: `Bearer ${key}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
      payload,
    });
    assert.equal(res.statusCode, 400);
    assert.deepEqual(res.json().error.param, 'model');
    assert.equal(res.json().error.message, "Missing required parameter: 'model'.");
  });
});
