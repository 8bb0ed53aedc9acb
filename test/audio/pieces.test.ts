/**
 * Long audio in pieces (src/audio/pieces.ts): at most the piece length, contiguous, cut in the pauses rather than
 * in the sound; and the pieces' transcripts put back together on the audio's own time line.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { joinTranscripts, pieces, PIECE_RATE } from '../../src/audio/pieces.js';

/** `seconds` of audio: 440 Hz tone bursts of `burst` seconds separated by `gap` seconds of silence, from the start */
function bursts(seconds: number, burst: number, gap: number): Float32Array {
  const pcm = new Float32Array(Math.round(seconds * PIECE_RATE));
  for (let i = 0; i < pcm.length; i++) {
    const t = i / PIECE_RATE;
    if (t % (burst + gap) < burst) pcm[i] = 0.5 * Math.sin(2 * Math.PI * 440 * t);
  }
  return pcm;
}

describe('pieces', () => {
  test('audio no longer than a piece is one piece', () => {
    assert.deepEqual(pieces(new Float32Array(30 * PIECE_RATE), 30), [{ start: 0, end: 30 * PIECE_RATE }]);
    assert.deepEqual(pieces(new Float32Array(100), 30), [{ start: 0, end: 100 }]);
  });

  test('long audio: pieces of at most the length, about equal, contiguous, each cut inside a pause', () => {
    // 3.7 s of sound, 0.5 s of silence: 9.5 minutes
    const pcm = bursts(570, 3.7, 0.5);
    const ps = pieces(pcm, 30);
    assert.ok(ps.length >= 19 && ps.length <= 570 / 22.5, `${ps.length} pieces: about as few as the length allows`);
    assert.equal(ps[0]!.start, 0);
    assert.equal(ps[ps.length - 1]!.end, pcm.length);
    for (let i = 0; i < ps.length; i++) {
      const p = ps[i]!;
      const seconds = (p.end - p.start) / PIECE_RATE;
      assert.ok(seconds <= 30 && seconds >= 15, `piece ${i}: ${seconds} s`);
      if (i > 0) assert.equal(p.start, ps[i - 1]!.end, 'contiguous');
      if (i < ps.length - 1) {
        // the cut is in a gap: the 20 ms around it are silent
        for (let j = p.end - 160; j < p.end + 160; j++) assert.equal(pcm[j], 0, `cut ${i} at ${p.end / PIECE_RATE} s is in the sound`);
      }
    }
  });

  test('audio without pauses is cut anyway, at most the piece length', () => {
    const pcm = bursts(95, 1000, 0);
    const ps = pieces(pcm, 30);
    assert.ok(ps.length >= 4 && ps.length <= 95 / 22.5, `${ps.length} pieces`);
    for (const p of ps) assert.ok(p.end - p.start <= 30 * PIECE_RATE && p.end - p.start >= 15 * PIECE_RATE);
    assert.equal(ps[3]!.end, pcm.length);
  });

  test("the transcripts of the pieces as one: times shifted by the piece's start, texts joined, the first language", () => {
    const t = joinTranscripts(
      [
        {
          offset: 0,
          transcript: {
            text: ' hello there ',
            language: 'en',
            duration: 10,
            segments: [{ start: 0.5, end: 2, text: 'hello there' }],
            words: [{ word: 'hello', start: 0.5, end: 1 }],
          },
        },
        { offset: 10, transcript: { text: '', duration: 5, segments: [] } },
        {
          offset: 15.25,
          transcript: {
            text: 'again',
            language: 'de',
            duration: 8,
            segments: [{ start: 1, end: 1.5, text: 'again', tokens: [1, 2] }],
            words: [{ word: 'again', start: 1, end: 1.5 }],
          },
        },
      ],
      23.25,
    );
    assert.deepEqual(t, {
      text: 'hello there again',
      language: 'en',
      duration: 23.25,
      segments: [
        { start: 0.5, end: 2, text: 'hello there' },
        { start: 16.25, end: 16.75, text: 'again', tokens: [1, 2] },
      ],
      words: [
        { word: 'hello', start: 0.5, end: 1 },
        { word: 'again', start: 16.25, end: 16.75 },
      ],
    });
  });
});
