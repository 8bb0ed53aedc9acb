/**
 * verbose_json segments always carry the ten fields the SDK's TranscriptionSegment requires, whatever the engine
 * can tell (docs/api.md, "Transcript segments": filled, never omitted), with the engine's values where it has them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { formatTranscript } from '../../src/audio/transcript-format.js';
import type { Transcript } from '../../src/engines/types.js';

const FIELDS = ['avg_logprob', 'compression_ratio', 'end', 'id', 'no_speech_prob', 'seek', 'start', 'temperature', 'text', 'tokens'];
const opts = { task: 'transcribe' as const, format: 'verbose_json' as const, granularities: [], duration: 3, temperature: 0.2 };

function segments(t: Transcript): any[] {
  return (formatTranscript(t, opts).body as any).segments;
}

test('an engine that reports no confidence and no tokens (the whisper.cpp binding): every field is there, typed as the SDK says', () => {
  const [s] = segments({ text: 'Hello world.', segments: [{ start: 0, end: 1.5, text: 'Hello world.' }] });
  assert.deepEqual(Object.keys(s).sort(), FIELDS);
  assert.deepEqual(s.tokens, []);
  for (const f of ['avg_logprob', 'compression_ratio', 'no_speech_prob', 'seek', 'start', 'end', 'temperature', 'id']) assert.equal(typeof s[f], 'number', f);
  // the stand-ins for "unknown" are the values the usual filters keep
  assert.equal(s.avg_logprob, 0);
  assert.equal(s.no_speech_prob, 0);
  assert.equal(s.temperature, 0.2, "the request's temperature when the engine does not say");
  assert.ok(s.compression_ratio > 0, 'computed from the text');
});

test("an engine's own values are kept as they are", () => {
  const [s] = segments({
    text: 'Hi.',
    segments: [{ start: 31, end: 32, text: 'Hi.', tokens: [50364, 2421], avgLogprob: -0.42, noSpeechProb: 0.03, compressionRatio: 1.1, temperature: 0 }],
  });
  assert.deepEqual([s.tokens, s.avg_logprob, s.no_speech_prob, s.compression_ratio, s.temperature, s.seek], [[50364, 2421], -0.42, 0.03, 1.1, 0, 3000]);
});
