/**
 * Issue 26 §3 on forwarded models (provider openai-compatible, an upstream audio server:
 * test/helpers/scripted-audio-upstream.ts): stream=true transcriptions are served as events from the upstream's
 * ordinary answer (asked for verbose_json, as every forwarded transcription: upstreams such as speaches or
 * LocalAI do not all stream), the whole text in one delta when it comes; speech with stream_format sse is the
 * upstream's audio re-encoded as events. Every answer names the engine: x-portico-engine: openai-compatible.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import { Stream } from 'openai/core/streaming';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { DEFAULT_VERBOSE_JSON, startScriptedAudioUpstream, tone, type ScriptedAudioUpstream } from '../helpers/scripted-audio-upstream.js';
import type { ModelSpec } from '../../src/models/config.js';
import { client, eventually, probe, wavFile } from './helpers.js';

describe('forwarded audio models: streamed answers and the engine header', () => {
  let t: TestApp & { url?: string };
  let up: ScriptedAudioUpstream;
  let openai: OpenAI;
  const audio = wavFile(tone(1.5, 16000), 16000);
  before(async () => {
    up = await startScriptedAudioUpstream();
    const models = [
      { name: 'remote-tts', provider: 'openai-compatible', type: 'speech', base_url: up.baseUrl, upstream_model: 'kokoro' } as ModelSpec,
      { name: 'remote-stt', provider: 'openai-compatible', type: 'transcription', base_url: up.baseUrl, upstream_model: 'faster-whisper-small' } as ModelSpec,
    ];
    t = await buildTestApp({ listen: true, models, builtins: true });
    ({ openai } = await client(t));
  });
  after(async () => {
    await t.close();
    await up.close();
  });

  test('transcription stream=true: the upstream is asked as usual; its text comes as one delta, then done with its length as usage', async () => {
    const n = up.requests.length;
    const { data: stream, response } = await openai.audio.transcriptions.create({ file: await toFile(audio, 'clip.wav'), model: 'remote-stt', stream: true }).withResponse();
    assert.equal(response.headers.get('x-portico-engine'), 'openai-compatible');
    const events: unknown[] = [];
    for await (const e of stream) events.push(e);
    assert.deepEqual(events, [
      { type: 'transcript.text.delta', delta: DEFAULT_VERBOSE_JSON.text },
      { type: 'transcript.text.done', text: DEFAULT_VERBOSE_JSON.text, usage: { type: 'duration', seconds: 3 } },
    ]);
    const r = up.requests[n]!;
    assert.deepEqual(r.fields.response_format, ['verbose_json']);
    assert.equal(r.fields.stream, undefined, 'the upstream is not asked to stream');
  });

  test('the non-streamed answers name the engine too', async () => {
    const { response } = await openai.audio.transcriptions.create({ file: await toFile(audio, 'clip.wav'), model: 'remote-stt' }).withResponse();
    assert.equal(response.headers.get('x-portico-engine'), 'openai-compatible');
    up.script({ type: 'pcm', samples: tone(0.5), chunkSizes: [24000], intervalMs: 0 });
    const speech = await openai.audio.speech.create({ model: 'remote-tts', voice: 'nova', input: 'Forward me.', response_format: 'pcm' }).withResponse();
    assert.equal(speech.response.headers.get('x-portico-engine'), 'openai-compatible');
  });

  test('speech stream_format sse: the upstream audio, re-encoded, as speech.audio.delta events; one valid file', async () => {
    up.script({ type: 'pcm', samples: tone(1), chunkSizes: [4801, 3, 9600], intervalMs: 5 });
    const { data, response } = await openai.audio.speech
      .create({ model: 'remote-tts', voice: 'nova', input: 'Forward me.', response_format: 'wav', stream_format: 'sse' })
      .withResponse();
    assert.equal(response.headers.get('x-portico-engine'), 'openai-compatible');
    const events: Array<{ type: string; audio?: string; usage?: unknown }> = [];
    for await (const e of Stream.fromSSEResponse<{ type: string; audio?: string }>(data, new AbortController())) events.push(e);
    assert.equal(events.at(-1)!.type, 'speech.audio.done');
    const bytes = Buffer.concat(events.slice(0, -1).map((e) => Buffer.from(e.audio!, 'base64')));
    const p = await probe(bytes);
    assert.equal(p.codec, 'pcm_s16le');
    assert.ok(Math.abs(p.duration - 1) < 0.05, `one second of tone: ${p.duration}`);
  });

  test('speech sse streams as the audio is made: the first delta comes while the upstream is still sending; leaving stops it, charged once', async () => {
    const user = 'sse-endless';
    const me = await client(t, user);
    const n = up.requests.length;
    // the upstream never finishes: the events can only come as the audio is made
    up.script({ type: 'pcm', samples: tone(0.2), chunkSizes: [4800], intervalMs: 5, endless: true });
    const ac = new AbortController();
    const { data } = await me.openai.audio.speech
      .create({ model: 'remote-tts', voice: 'nova', input: 'Never ending.', response_format: 'pcm', stream_format: 'sse' }, { signal: ac.signal })
      .withResponse();
    let first: { type: string; audio?: string } | undefined;
    for await (const e of Stream.fromSSEResponse<{ type: string; audio?: string }>(data, ac)) {
      first = e;
      break;
    }
    assert.equal(first?.type, 'speech.audio.delta');
    assert.ok(Buffer.from(first!.audio!, 'base64').length > 0);
    // the client left: Portico leaves the upstream too
    await eventually(() => up.requests[n]!.clientAborted, 30_000, 'the upstream request was abandoned');
    const usage = () => t.services.db.db.selectFrom('usage_records').selectAll().where('user_id', '=', user).execute();
    await eventually(async () => (await usage()).length > 0, 30_000, 'usage recorded');
    const rows = await usage();
    assert.equal(rows.length, 1, 'charged once');
    assert.equal(Number(rows[0]!.characters), 'Never ending.'.length);
  });
});
