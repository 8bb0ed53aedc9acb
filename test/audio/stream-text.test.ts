/**
 * OrderedText (src/audio/stream.ts): what the recognizer says, for pieces that end in any order, becomes deltas in
 * the order of the audio whose concatenation is the joined transcript (joinTranscripts: trimmed texts, one space
 * between); an engine's own deltas (onText) go out at once for the piece at the head, are held for the others.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { OrderedText } from '../../src/audio/stream.js';
import { joinTranscripts } from '../../src/audio/pieces.js';

function recorder(count: number) {
  const out: string[] = [];
  return { out, text: new OrderedText(count, (d) => out.push(d)) };
}

describe('OrderedText', () => {
  test('pieces done out of order: their text leaves in audio order, joined as joinTranscripts joins it', () => {
    const { out, text } = recorder(3);
    text.done(2, ' three ');
    text.done(1, 'two');
    assert.deepEqual(out, [], 'nothing before the first piece');
    text.done(0, ' one');
    assert.deepEqual(out, ['one', ' two', ' three']);
    const joined = joinTranscripts(
      ['one', 'two', ' three '].map((t, i) => ({ offset: i * 5, transcript: { text: t, segments: [] } })),
      15,
    );
    assert.equal(out.join(''), joined.text);
    assert.equal(text.text, joined.text);
  });

  test("an engine's deltas: at once for the head piece (surrounding spaces held back), held for a later one", () => {
    const { out, text } = recorder(2);
    text.delta(0, ' Hello');
    text.delta(0, ' there ');
    text.delta(1, ' Second');
    assert.deepEqual(out, ['Hello', ' there']);
    text.delta(0, 'friend.');
    assert.deepEqual(out.join(''), 'Hello there friend.');
    text.done(0, ' Hello there friend.');
    // the next piece's text so far leaves as soon as it is at the head
    assert.deepEqual(out.slice(3), [' Second']);
    text.delta(1, ' piece');
    text.done(1, 'Second piece, done.');
    assert.equal(text.text, 'Hello there friend. Second piece, done.');
    assert.equal(out.join(''), text.text);
  });

  test('an empty piece adds nothing (no double space); a final text that revises the deltas sends nothing it cannot append', () => {
    const { out, text } = recorder(3);
    text.done(0, 'a');
    text.done(1, '   ');
    text.done(2, 'c');
    assert.equal(out.join(''), 'a c');
    const r = recorder(1);
    r.text.delta(0, 'the cat');
    r.text.delta(0, ' sat');
    r.text.done(0, 'the cat sat.');
    assert.deepEqual(r.out, ['the cat', ' sat', '.']);
    const v = recorder(1);
    v.text.delta(0, 'teh');
    v.text.done(0, 'the');
    assert.deepEqual(v.out, ['teh'], 'a stream cannot take words back: nothing contradicting is appended');
  });
});
