/**
 * A whisper job that never settles (src/engines/whisper, its bound): over HTTP, with a fake binding
 * (test/helpers/whisper-hang.ts) through PORTICO_WHISPER_BINDING and the bound set small by WHISPER_TIMEOUT_MS
 * (WHISPER_TIMEOUT_PER_AUDIO_SECOND_MS 0). The request fails with 504 upstream_timeout in the OpenAI shape: as an
 * ordinary error answer when nothing was streamed yet, as the stream's `error` event after text was; the job is
 * stopped, the request queued behind it is served on a fresh context, a release that never settles blocks nothing,
 * and the server goes on.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { useHangingWhisper, type FakeWhisperState } from '../helpers/whisper-hang.js';
import { waitFor } from '../helpers/wait.js';
import { assertApiError, client, rejects, wavFile } from './helpers.js';

describe('a whisper job that never settles, over HTTP', () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-whisper-timeout-'));
  let t: TestApp & { url?: string };
  let openai: OpenAI;
  let key: string;
  let state: FakeWhisperState;
  before(async () => {
    const fake = await useHangingWhisper(dir);
    state = fake.state;
    t = await buildTestApp({
      listen: true,
      builtins: true,
      models: [fake.model],
      env: { WHISPER_TIMEOUT_MS: '200', WHISPER_TIMEOUT_PER_AUDIO_SECOND_MS: '0', AUDIO_MAX_WAIT_MS: '3600000' },
    });
    ({ openai, key } = await client(t));
  });
  after(async () => {
    delete process.env.PORTICO_WHISPER_BINDING;
    state.hangRelease = false;
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const clip = () =>
    wavFile(
      new Int16Array(16000).map((_, i) => Math.round(Math.sin(i * 0.3) * 3000)),
      16000,
    );
  const post = (fields: Record<string, string>) => {
    const fd = new FormData();
    fd.append('file', new Blob([new Uint8Array(clip())]), 'a.wav');
    for (const [k, v] of Object.entries(fields)) fd.append(k, v);
    return fetch(`${t.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: fd });
  };
  /** the `data:` events of a streamed answer */
  const eventsOf = (body: string) =>
    body
      .split('\n')
      .filter((l) => l.startsWith('data: '))
      .map((l) => JSON.parse(l.slice(6)) as { type: string; delta?: string; text?: string; error?: { message: string; type: string; param: unknown; code: string } });
  const plain = async () => {
    const r = await openai.audio.transcriptions.create({ file: await toFile(clip(), 'a.wav'), model: 'gpt-4o-transcribe' });
    return r.text;
  };

  test('stream=true, text streamed before the hang: the stream ends with an error event (504 upstream_timeout); the request queued behind it runs on a fresh context', async () => {
    const streamed = post({ model: 'gpt-4o-transcribe', stream: 'true', prompt: 'hang-after-text' });
    await waitFor(() => state.jobs.length === 1, { what: 'the hung job' });
    const queued = plain();
    const res = await streamed;
    assert.equal(res.status, 200);
    assert.match(String(res.headers.get('x-portico-engine')), /^whisper/);
    const events = eventsOf(await res.text());
    assert.deepEqual(
      events.map((e) => e.type),
      ['transcript.text.delta', 'error'],
    );
    assert.equal(events[0]!.delta, 'Hello');
    const error = events[1]!.error!;
    assert.equal(error.code, 'upstream_timeout');
    assert.equal(error.type, 'server_error');
    assert.equal(error.param, null);
    assert.match(error.message, /^whisper did not finish within 1 s for 1\.0 s of audio; the job was stopped and the model is loaded again for the next request$/);
    assert.equal(await queued, 'Fresh text.');
    assert.deepEqual(state.stops, [1], "the hung job's stop()");
    assert.deepEqual(state.releases, [1], 'the hung context released');
    assert.deepEqual(
      state.jobs.map((j) => j.ctx),
      [1, 2],
      'the queued request on the fresh context',
    );
  });

  test('stream=true, nothing streamed yet: an ordinary 504 answer, which the SDK raises as an APIError', async () => {
    const err = await rejects(openai.audio.transcriptions.create({ file: await toFile(clip(), 'a.wav'), model: 'gpt-4o-transcribe', stream: true, prompt: 'hang' }));
    assertApiError(err, 504, 'upstream_timeout', null, /^whisper did not finish within/);
    assert.equal((err as InstanceType<typeof OpenAI.APIError>).type, 'server_error');
    assert.equal(await plain(), 'Fresh text.');
    assert.equal(state.inits, 3);
  });

  test('a release that never settles: the hung request still answers 504, the next is served on a fresh context', async () => {
    state.hangRelease = true;
    const res = await post({ model: 'gpt-4o-transcribe', prompt: 'hang' });
    assert.equal(res.status, 504);
    const body = (await res.json()) as { error: { code: string; type: string } };
    assert.equal(body.error.code, 'upstream_timeout');
    assert.equal(body.error.type, 'server_error');
    assert.equal(await plain(), 'Fresh text.');
    assert.equal(state.inits, 4);
    assert.equal(state.releases.length, 3, 'each hung context released, none awaited');
    state.hangRelease = false;
  });
});
