/**
 * Spoken answers, what goes wrong: bad `modalities` / `audio` (a 400 naming the parameter, before the model is
 * asked), a speech engine or encoder that fails mid-answer (a failed response with its error, never a completed one
 * with short audio), text no voice reads, and a client that leaves (synthesis, encoder and model all stop).
 */
import { describe, test, before } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EngineError, type PcmChunk, type SpeechEngine, type SpeechRequest } from '../../src/engines/types.js';
import { ffmpegBinary, setFfmpegBinary, spareEncoderCount } from '../../src/codec/index.js';
import { eventually as until, ffmpegChildren } from '../audio/helpers.js';
import { MODEL, checkFraming, expectError, readSse, types, type Env } from './util.js';
import { joinedAudio, readEvents, sharedGatedApp, type GatedUpstream } from './audio-util.js';

const body = (extra: Record<string, unknown> = {}) => ({ model: MODEL, input: 'Talk.', modalities: ['text', 'audio'], ...extra });

/**
 * One app (the built-in voices warmed, the gated model beside the scripted one) for both groups: the bad input
 * never reaches a voice or a model, and each failure test puts back the engine or encoder it broke. Each group
 * had its own app, which with its warm-up syntheses cost more than the group's tests.
 */
const app = sharedGatedApp((gated) => [{ name: 'gated', provider: 'openai-compatible', base_url: gated, type: 'text' } as never]);

describe('spoken answers: bad input is a 400 naming the parameter, and the model is not asked', () => {
  let e: Env;
  before(async () => {
    ({ e } = await app());
  });

  const cases: Array<[string, Record<string, unknown>, string, string, RegExp]> = [
    [
      'an unknown voice',
      { audio: { voice: 'robot' } },
      'audio.voice',
      'invalid_value',
      /Supported voices are: alloy, ash, ballad, coral, echo, fable, onyx, nova, sage, shimmer, verse, marin, cedar/,
    ],
    ['an unknown format', { audio: { format: 'ogg' } }, 'audio.format', 'invalid_value', /wav.*mp3.*opus.*flac.*pcm16.*aac/],
    ['a custom voice object', { audio: { voice: { id: 'voice_1234' } } }, 'audio.voice', 'invalid_type', /string/],
    ['an empty voice', { audio: { voice: '' } }, 'audio.voice', 'string_below_min_length', /.+/],
    ['an unknown field of audio', { audio: { voice: 'alloy', speed: 2 } }, 'audio.speed', 'unknown_parameter', /Unknown parameter/],
    ['audio that is not an object', { audio: 'alloy' }, 'audio', 'invalid_type', /.+/],
    ['an unknown modality', { modalities: ['text', 'video'] }, 'modalities[1]', 'invalid_value', /text.*audio/],
    ['modalities that is not an array', { modalities: 'audio' }, 'modalities', 'invalid_type', /array/],
    ['too many modalities', { modalities: ['text', 'audio', 'text'] }, 'modalities', 'array_above_max_length', /2/],
    ['a bad voice with text only (a typo is said, not ignored)', { modalities: ['text'], audio: { voice: 'alloyy' } }, 'audio.voice', 'invalid_value', /alloy/],
  ];
  for (const [what, extra, param, code, message] of cases) {
    test(what, async () => {
      const n = e.up.requests.length;
      for (const stream of [false, true]) {
        const err = await expectError(await e.call('POST', '/v1/responses', { ...body(extra), stream }), 400, code, param);
        assert.match(err.message, message);
        assert.equal(err.type, 'invalid_request_error');
      }
      assert.equal(e.up.requests.length, n, 'the model was not asked');
    });
  }

  test('audio null and modalities null are as good as absent', async () => {
    e.up.script({ text: 'Fine.' });
    const r = await e.call('POST', '/v1/responses', { model: MODEL, input: 'x', audio: null });
    assert.equal(r.status, 200);
    assert.deepEqual(
      ((await r.json()) as any).output[0].content.map((c: any) => c.type),
      ['output_text'],
    );
  });
});

/** Replaces the embedded voices' synthesis for the length of `f` (the engine every built-in voice goes through). */
async function withSynthesis(e: Env, wrap: (original: SpeechEngine['synthesize']) => SpeechEngine['synthesize'], f: () => Promise<void>) {
  const engine = (await e.t.services.audioEngines.speech(e.t.services.models.get('tts-1')!)) as SpeechEngine;
  const original = engine.synthesize.bind(engine);
  (engine as { synthesize: SpeechEngine['synthesize'] }).synthesize = wrap(original);
  try {
    await f();
  } finally {
    (engine as { synthesize: SpeechEngine['synthesize'] }).synthesize = original;
  }
}

/** Synthesis that fails at its `n`th call (1-based), after the earlier ones were spoken. */
const failingAt =
  (n: number) =>
  (original: SpeechEngine['synthesize']): SpeechEngine['synthesize'] => {
    let calls = 0;
    return (req: SpeechRequest) =>
      (async function* (): AsyncGenerator<PcmChunk> {
        if (++calls >= n) throw new EngineError('the synthesizer crashed', 'engine_error', 500);
        yield* original(req);
      })();
  };

describe('spoken answers: failures mid-answer', () => {
  let e: Env;
  let g: GatedUpstream;
  before(async () => {
    ({ e, g } = await app());
  });

  /** A gate the test opens when the client has seen the first audio (a test that never sees it times out). */
  function audioGate(): { gate: Promise<void>; onEvent: (ev: any) => void } {
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    return { gate, onEvent: (ev) => ev.type === 'response.audio.delta' && open() };
  }

  test('the speech engine fails at the second sentence (stream): audio of the first came, then error and response.failed; the model is stopped', async () => {
    await withSynthesis(e, failingAt(2), async () => {
      // the second sentence (which breaks the speech engine) comes once the first one's audio is out
      const { gate, onEvent } = audioGate();
      g.script(['First sentence is fine. '], gate, ['Second one breaks. ', ...Array.from({ length: 200 }, (_, i) => `More text ${i}. `)]);
      const n = g.requests.length;
      const res = await e.call('POST', '/v1/responses', { ...body({ model: 'gated', audio: { voice: 'alloy', format: 'mp3' } }), stream: true });
      const events = await readEvents(res, onEvent);
      events.forEach((x, i) => assert.equal(x.sequence_number, i));
      const t = types(events);
      assert.ok(t.includes('response.audio.delta'), 'the first sentence was spoken and sent');
      assert.deepEqual(t.slice(-2), ['error', 'response.failed']);
      assert.ok(!t.includes('response.completed'), 'not completed');
      assert.ok(t.includes('response.audio.done'), 'the spoken part is closed (no item left open)');
      const failed = events[events.length - 1].response;
      assert.equal(failed.status, 'failed');
      assert.equal(failed.error.code, 'engine_error');
      assert.match(failed.error.message, /speech engine failed.*the synthesizer crashed/);
      assert.equal(events[events.length - 2].code, 'engine_error');
      assert.equal(failed.output[0].status, 'incomplete', 'the message is incomplete, not passed off as complete');
      const item = events.find((x) => x.type === 'response.output_item.done').item;
      assert.equal(item.status, 'incomplete');
      // the failed object keeps what was sent, no more (the audio of the first sentence, or its beginning)
      assert.equal(failed.output[0].content[1].data, joinedAudio(events));
      assert.ok(joinedAudio(events).length > 0);
      // the model was stopped: its request was aborted before its 200 more pieces were written
      const upReq = g.requests[n];
      await Promise.race([upReq.closed, new Promise((_, rej) => setTimeout(() => rej(new Error('upstream still open')), 3000))]);
      assert.equal(upReq.aborted, true, 'the model generation was stopped');
      // stored as failed
      const got = (await (await e.call('GET', `/v1/responses/${failed.id}`)).json()) as any;
      assert.equal(got.status, 'failed');
      assert.equal(got.error.code, 'engine_error');
    });
  });

  test('the speech engine fails (JSON): the answer is the failed object with its error, not a completed one', async () => {
    await withSynthesis(e, failingAt(1), async () => {
      e.up.script({ text: 'This will not be spoken. Nor this.' });
      const res = await e.call('POST', '/v1/responses', body({ audio: { format: 'wav' } }));
      const r = (await res.json()) as any;
      assert.equal(r.status, 'failed');
      assert.equal(r.error.code, 'engine_error');
      assert.equal(r.error.type, 'server_error');
      assert.equal(r.output[0].status, 'incomplete');
      assert.equal(r.output[0].content[1].data, '', 'no audio was made');
    });
  });

  test('the encoder dies mid-answer: failed with the speech engine named, the encoder gone', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'portico-ffmpeg-'));
    const real = ffmpegBinary().path;
    const fake = join(dir, 'ffmpeg');
    // a real encoder whose output stops after 2 kB, then fails (a crash mid-stream)
    writeFileSync(fake, `#!/bin/sh\n"${real}" "$@" | head -c 2048\nexit 1\n`);
    chmodSync(fake, 0o755);
    setFfmpegBinary(fake);
    try {
      e.up.script({ text: ['A first sentence to speak. ', 'A second sentence to speak. ', 'And a third one to speak.'], delayMs: 100 });
      const events = checkFraming(await readSse(await e.call('POST', '/v1/responses', { ...body({ audio: { format: 'mp3' } }), stream: true })));
      const t = types(events);
      assert.deepEqual(t.slice(-2), ['error', 'response.failed']);
      const failed = events[events.length - 1].response;
      assert.equal(failed.error.code, 'engine_error');
      assert.match(failed.error.message, /speech engine failed/);
      assert.equal(failed.output[0].status, 'incomplete');
    } finally {
      setFfmpegBinary(undefined);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('text in a script no voice reads: failed with unsupported_language after what could be spoken', async () => {
    const { gate, onEvent } = audioGate();
    g.script(['Hello, this part is English. '], gate, ['สวัสดีครับ นี่คือภาษาไทย. ', 'Back to English.']);
    const events = await readEvents(await e.call('POST', '/v1/responses', { ...body({ model: 'gated', audio: { voice: 'alloy', format: 'opus' } }), stream: true }), onEvent);
    const failed = events[events.length - 1].response;
    assert.equal(failed.status, 'failed');
    assert.equal(failed.error.code, 'unsupported_language');
    assert.match(failed.error.message, /Thai/);
    assert.ok(types(events).includes('response.audio.delta'), 'the English sentence was spoken first');
    // the same text as JSON
    e.up.script({ text: 'สวัสดีครับ.' });
    const r = (await (await e.call('POST', '/v1/responses', body())).json()) as any;
    assert.equal(r.status, 'failed');
    assert.equal(r.error.code, 'unsupported_language');
  });

  test('a client that leaves mid-answer stops the model, the synthesis and the encoder', async () => {
    let synthesizing = 0;
    await withSynthesis(
      e,
      (original) => (req) =>
        (async function* () {
          synthesizing++;
          try {
            yield* original(req);
          } finally {
            synthesizing--;
          }
        })(),
      async () => {
        e.up.script({ text: Array.from({ length: 60 }, (_, i) => `Sentence number ${i} goes on a while. `), delayMs: 50 });
        const n = e.up.requests.length;
        const res = await e.call('POST', '/v1/responses', { ...body({ audio: { format: 'mp3' } }), stream: true });
        const reader = res.body!.getReader();
        let seen = '';
        while (!seen.includes('response.audio.delta')) seen += new TextDecoder().decode((await reader.read()).value);
        await reader.cancel();
        const upReq = e.up.requests[n];
        await Promise.race([upReq.closed, new Promise((_, rej) => setTimeout(() => rej(new Error('upstream still open')), 3000))]);
        assert.equal(upReq.aborted, true, 'the model was stopped');
        await until(() => synthesizing === 0, 5000, 'the synthesis to stop');
        await until(async () => (await ffmpegChildren()) <= spareEncoderCount(), 5000, 'the encoder to exit');
      },
    );
  });
});
