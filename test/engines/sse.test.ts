import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SseParser } from '../../src/engines/shared/sse.js';

function parse(pieces: string[]): [string, string][] {
  const out: [string, string][] = [];
  const p = new SseParser((data, event) => out.push([event, data]));
  for (const s of pieces) p.push(s);
  p.end();
  return out;
}

const input =
  ': comment\r\n' +
  'event: a\r\ndata: one\r\n\r\n' +
  'data:two\rdata:  three\r\r' +
  'id: 7\nretry: 100\nunknown\ndata\n\n' + // empty data: not dispatched
  'event: b\ndata: {"x":"é🙂"}\n\n' +
  'data: [DONE]\n\n' +
  'data: tail-without-blank-line';

const expected: [string, string][] = [
  ['a', 'one'],
  ['', 'two\n three'],
  ['b', '{"x":"é🙂"}'],
  ['', '[DONE]'],
  ['', 'tail-without-blank-line'],
];

test('sse: whole input', () => {
  assert.deepEqual(parse([input]), expected);
});

test('sse: split at every position into two and into single characters gives the same events', () => {
  for (let i = 0; i <= input.length; i++) assert.deepEqual(parse([input.slice(0, i), input.slice(i)]), expected, `split at ${i}`);
  assert.deepEqual(parse([...input]), expected);
});

test('sse: a CR at the end of a chunk followed by LF in the next is one line end', () => {
  assert.deepEqual(parse(['data: x\r', '\n\r', '\ndata: y\n\n']), [
    ['', 'x'],
    ['', 'y'],
  ]);
});
