/** completeSentencesLength: how much of a text still being written is whole sentences (the spoken answers' cue). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { completeSentencesLength, splitSentences } from '../../src/engines/shared/sentences.js';

const done = (s: string) => s.slice(0, completeSentencesLength(s));

test('a sentence counts once the space after its end has arrived', () => {
  assert.equal(done('Hello there.'), '');
  assert.equal(done('Hello there. '), 'Hello there.');
  assert.equal(done('Hello there. How are'), 'Hello there.');
  assert.equal(done('Really?! Yes. And th'), 'Really?! Yes.');
  assert.equal(done('He said "stop." Then'), 'He said "stop."');
});

test('abbreviations and initials do not end a sentence', () => {
  assert.equal(done('Mr. Smith and Dr. Jones met, e.g. at noon. Then'), 'Mr. Smith and Dr. Jones met, e.g. at noon.');
  assert.equal(done('J. R. R. Tolkien wrote it. The'), 'J. R. R. Tolkien wrote it.');
  assert.equal(done('Call Mr. '), '');
});

test('CJK full stops need no space; a blank line ends a paragraph', () => {
  assert.equal(done('你好。今天'), '你好。');
  assert.equal(done('A heading\n\nThen text'), 'A heading\n\n');
  assert.equal(done('no end yet'), '');
});

test('the cut agrees with splitSentences: the finished part splits into the same first sentences', () => {
  const text = 'It is 3.14 or so. Mr. Brown agreed! Did he? Yes. Trailing part';
  const head = done(text);
  assert.deepEqual(splitSentences(head, 240, Infinity), splitSentences(text, 240, Infinity).slice(0, -1));
});
