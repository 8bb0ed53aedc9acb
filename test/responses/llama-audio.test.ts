/**
 * Spoken answers written by the embedded llama engine (a generated tiny GGUF) and spoken by Portico's voices:
 * streaming and not, the audio decoded by ffmpeg and measured against the text.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { makeTinyGguf } from '../helpers/tiny-gguf.js';
import type { ModelSpec } from '../../src/models/config.js';
import { checkFraming, readSse, type Env } from './util.js';
import { assertPlausibleDuration, joinedAudio, probeBase64, setupAudio, spokenParts } from './audio-util.js';

describe('spoken answers on the llama engine', () => {
  let e: Env;
  before(async () => {
    const path = await makeTinyGguf();
    e = await setupAudio('pglite', [{ name: 'tiny', provider: 'llama', path, type: 'text', context_window: 1024, parallel: 2 } as ModelSpec]);
  });
  after(() => e.close());

  // the tiny model writes readable nonsense: 40 tokens of it, greedy
  const body = { model: 'tiny', input: 'Say something.', max_output_tokens: 40, temperature: 0, modalities: ['text', 'audio'] };

  test('JSON: the text the model wrote is spoken; its audio has the length of that text', async () => {
    const r: any = await e.client.responses.create({ ...body, audio: { voice: 'fable', format: 'wav' } } as never);
    assert.ok(r.status === 'completed' || r.status === 'incomplete', r.status);
    const { text, audio } = spokenParts(r);
    assert.ok(text.text.length > 10, JSON.stringify(text.text));
    assert.equal(audio.transcript, text.text);
    const p = await probeBase64(audio.data, 'wav');
    await assertPlausibleDuration(e, p.duration, text.text, 'fable');
  });

  test('stream: the audio pieces join into the same audio as the final part, of the right length', async () => {
    const events = checkFraming(await readSse(await e.call('POST', '/v1/responses', { ...body, audio: { voice: 'shimmer', format: 'mp3' }, stream: true })));
    const final = events[events.length - 1].response;
    const { text, audio } = spokenParts(final);
    const joined = joinedAudio(events);
    assert.equal(audio.data, joined);
    assert.equal(
      events
        .filter((x) => x.type === 'response.audio.transcript.delta')
        .map((x) => x.delta)
        .join(''),
      text.text,
    );
    const p = await probeBase64(joined, 'mp3');
    await assertPlausibleDuration(e, p.duration, text.text, 'shimmer');
  });
});
