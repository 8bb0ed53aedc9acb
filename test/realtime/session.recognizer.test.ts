/**
 * Server VAD and the recognizer: a turn's transcript is made from its speech, not from the silence that ended it
 * (silence_duration_ms of it, which stays in the committed item's audio as OpenAI keeps it). When a pause inside
 * the turn already started the recognizer on all of the speech, the end of the turn runs no second recognition on
 * the silence (with pocketsphinx: a process start, a few hundred ms of the turn's latency; bench/realtime.ts).
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { TranscriptionEngine } from '../../src/engines/types.js';
import { append, setupRealtime, silence, speak, type RtEnv } from './util.js';

describe('realtime: the recognizer hears the turn, not the silence that ended it', () => {
  let e: RtEnv;
  /** seconds of audio given to the recognizer, per run */
  const heard: number[] = [];
  before(async () => {
    e = await setupRealtime();
    const audio = e.t.services.audioEngines;
    const transcription = audio.transcription.bind(audio);
    audio.transcription = async (spec) => {
      const engine = await transcription(spec);
      const spy: TranscriptionEngine = Object.create(engine);
      spy.transcribe = (r) => {
        if (r.pcm16k) heard.push(r.pcm16k.length / 16000);
        return engine.transcribe(r);
      };
      return spy;
    };
  });
  after(() => e.close());

  for (const silenceMs of [200, 800]) {
    test(`silence_duration_ms ${silenceMs}: the recognizer gets the speech and ${silenceMs > 240 ? 'none' : 'at most 100 ms'} of the silence after it`, async () => {
      const question = await speak(e, 'What is the weather like today?');
      const questionSeconds = question.length / 48000;
      e.up.script({ text: 'Sunny.' });
      heard.length = 0;
      const s = await e.open();
      await s.next('session.created');
      s.send({
        type: 'session.update',
        session: {
          type: 'realtime',
          audio: { input: { transcription: { model: 'whisper-1' }, turn_detection: { type: 'server_vad', silence_duration_ms: silenceMs } } },
        },
      });
      await s.next('session.updated');
      append(s, Buffer.concat([silence(0.5), question, silence(1.5)]));
      const started = await s.next('input_audio_buffer.speech_started');
      const stopped = await s.next('input_audio_buffer.speech_stopped');
      const completed = await s.next('conversation.item.input_audio_transcription.completed');
      assert.ok(completed.transcript.length > 0, 'the recognizer heard words');
      // the item keeps the whole turn, the silence that ended it included (OpenAI's audio_end_ms)
      const turnSeconds = (stopped.audio_end_ms - started.audio_start_ms) / 1000;
      assert.ok(Math.abs(completed.usage.seconds - turnSeconds) < 0.05, `${completed.usage.seconds} s committed, ${turnSeconds} s of turn`);
      assert.ok(heard.length >= 1, 'the recognizer ran');
      const total = heard.reduce((a, b) => a + b, 0);
      // the speech with its prefix padding (300 ms) and at most the 100 ms tail: not the silence that ended it
      assert.ok(total < questionSeconds + 0.3 + 0.25, `${total} s recognized in ${heard.length} run(s) for ${questionSeconds} s of speech; the turn was ${turnSeconds} s`);
      assert.ok(total < turnSeconds - silenceMs / 1000 + 0.15, `${total} s recognized of a ${turnSeconds} s turn that ended with ${silenceMs} ms of silence`);
      await s.next('response.done');
      s.close();
    });
  }
});
