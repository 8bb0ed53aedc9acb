// Large JSON texts made in slices (src/platform/json-text.ts): the same text as JSON.stringify, whatever the
// value, and the event loop turns while a large one is made.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { JsonBytes, LARGE_JSON_CHARS, SLICE_CHARS, jsonUtf8, largeJson } from '../../src/platform/json-text.js';
import { countTurns } from '../helpers/turns.js';

async function text(v: unknown, replacer?: (this: unknown, k: string, v: unknown) => unknown): Promise<string | undefined> {
  return (await jsonUtf8(v, replacer))?.text();
}

/** a seeded generator of JSON-ish values with the awkward cases JSON.stringify handles */
function rng(seed: number) {
  return () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
}
const AWKWARD = ['', 'plain', 'quote " and \\ backslash', 'control \u0001\n\t', 'emoji \u{1F600}', 'lone \ud800 high', 'lone \udc00 low', '\u2028\u2029', 'é中文', '\u0000'];
function value(r: () => number, depth: number): unknown {
  const k = Math.floor(r() * (depth > 4 ? 6 : 10));
  switch (k) {
    case 0:
      return null;
    case 1:
      return r() < 0.5;
    case 2:
      return [0, -0, 1.5, 1e21, NaN, Infinity, -Infinity, 42][Math.floor(r() * 8)];
    case 3:
    case 4:
      return AWKWARD[Math.floor(r() * AWKWARD.length)];
    case 5:
      return [undefined, () => 1, Symbol('s')][Math.floor(r() * 3)];
    case 6:
    case 7:
      return Array.from({ length: Math.floor(r() * 5) }, () => value(r, depth + 1));
    case 8:
      return Object.fromEntries(Array.from({ length: Math.floor(r() * 5) }, (_, i) => [AWKWARD[i % AWKWARD.length] + i, value(r, depth + 1)]));
    default:
      return { at: new Date(Math.floor(r() * 1e12)), boxed: [new String('s'), new Number(2), new Boolean(false)], custom: { toJSON: (key: string) => `key:${key}` } };
  }
}

describe('JSON text in slices', () => {
  test('the same text as JSON.stringify for awkward values (seeded), with and without a replacer', async () => {
    const r = rng(7);
    const replacer = function (this: unknown, k: string, v: unknown) {
      // uses the holder and the key, drops some, rewrites strings (as the response store's replacer does)
      if (k === 'plain1') return undefined;
      if (typeof v === 'string') return (v as string & { toWellFormed(): string }).toWellFormed().replace(/\u0000/g, '');
      if (Array.isArray(this) && typeof v === 'number') return v * 2;
      return v;
    };
    for (let i = 0; i < 400; i++) {
      const v = value(r, 0);
      assert.equal(await text(v), JSON.stringify(v), `value ${i}`);
      assert.equal(await text(v, replacer), JSON.stringify(v, replacer), `value ${i} with the replacer`);
    }
    for (const v of [undefined, () => 1, Symbol('x')]) assert.equal(await jsonUtf8(v), undefined);
  });

  test("arrays of numbers (an embedding's vectors, written in one call each): the same text, and the loop turns between them", async () => {
    const vec = (i: number) => [0, -0, 1.5, 1e21, 1e-7, NaN, Infinity, -Infinity, i, Math.fround(Math.sin(i) / 3)];
    const answer = { object: 'list', data: Array.from({ length: 3000 }, (_, i) => ({ object: 'embedding', index: i, embedding: vec(i) })), model: 'm' };
    // and arrays it must not take whole: holes, boxed numbers, a number beside other values, an empty one
    const holey = [1, 2, 3];
    delete holey[1];
    const mixed = [holey, [new Number(2), 3], [1, 'a'], [1, null], [], [[1, 2]], Object.assign([1, 2], { toJSON: () => 'own' })];
    assert.equal(await text(mixed), JSON.stringify(mixed));
    assert.equal(
      await text(mixed, (_k, v) => (typeof v === 'number' ? v + 1 : v)),
      JSON.stringify(mixed, (_k, v) => (typeof v === 'number' ? v + 1 : v)),
    );
    const big = { data: Array.from({ length: 2048 }, (_, i) => ({ embedding: Array.from({ length: 1536 }, (_, k) => Math.fround(Math.sin(i + k))) })) };
    const turns = countTurns();
    const out = await text(big);
    const turned = turns.stop();
    assert.equal(out, JSON.stringify(big));
    // ~60 MB of text in slices of SLICE_CHARS
    assert.ok(turned >= 50, `the loop turned ${turned} times`);
    assert.equal(await text(answer), JSON.stringify(answer));
  });

  test('a cycle is refused as JSON.stringify refuses it; a value seen twice (no cycle) is written twice', async () => {
    const a: Record<string, unknown> = { x: 1 };
    a.self = { back: a };
    await assert.rejects(jsonUtf8(a), TypeError);
    const shared = { s: 'same' };
    assert.equal(await text([shared, { shared }]), JSON.stringify([shared, { shared }]));
  });

  test('large values: the same bytes, strings cut between slices and never inside a surrogate pair', async () => {
    // the shape of the largest accepted request: 4096 messages of ~4 KB, and one text longer than several slices
    const messages = Array.from({ length: 4096 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `m${i} ` + 'x'.repeat(4000) + '\u{1F600}"\\' }));
    const body = { model: 'm', messages, stream: false };
    const got = await jsonUtf8(body);
    assert.ok(got && got.bytes.equals(Buffer.from(JSON.stringify(body))));
    // a pair astride every slice boundary: the cut moves, the text stays
    const long = 'a'.repeat(SLICE_CHARS - 1) + '\u{1F600}'.repeat(SLICE_CHARS) + '\ud800' + 'b';
    const t = await jsonUtf8({ long });
    assert.equal(t!.text(), JSON.stringify({ long }));
    assert.equal(t!.byteLength, Buffer.byteLength(JSON.stringify({ long })));
    // the Buffer owns its memory, so it can be moved to another thread; headroom comes before the text
    assert.equal(got.buffer.byteLength, got.buffer.buffer.byteLength);
    const room = (await jsonUtf8(body, undefined, 3))!;
    assert.equal(room.offset, 3);
    assert.equal(room.buffer.length, 3 + got.byteLength);
    assert.ok(room.bytes.equals(got.bytes));
    assert.equal(new JsonBytes(Buffer.from('xx{}'), 2).text(), '{}');
  });

  test('the event loop turns between slices of a large value, and not for a small one', async () => {
    const big = { items: Array.from({ length: 64 }, () => 'y'.repeat(256 * 1024)) };
    const turns = countTurns();
    await jsonUtf8(big);
    const whileBig = turns.count;
    turns.reset();
    await jsonUtf8({ a: 'small' });
    const whileSmall = turns.stop();
    // 16 MiB in slices of 1 Mi characters: a turn after each; not timed
    assert.ok(whileBig >= 8, `the loop turned ${whileBig} times while 16 MiB was written`);
    assert.ok(whileSmall <= 1, `the loop turned ${whileSmall} times for a small value`);
  });

  test("a large value is not started in the caller's turn: its first slice comes after a turn of the event loop", async () => {
    const big = { items: Array.from({ length: 8 }, () => 'y'.repeat(256 * 1024)) };
    let calls = 0;
    const original = JSON.stringify;
    JSON.stringify = ((...args: Parameters<typeof JSON.stringify>) => {
      calls++;
      return original(...args);
    }) as typeof JSON.stringify;
    let pending: Promise<unknown>;
    try {
      pending = jsonUtf8(big);
      assert.equal(calls, 0, "nothing serialized before the caller's turn ends");
    } finally {
      JSON.stringify = original;
    }
    assert.equal((await pending) !== undefined, true);
  });

  test('largeJson: what may reach the bound, stopping early; small values are not large', () => {
    assert.equal(largeJson({ model: 'm', input: 'hi', tools: [{ type: 'function', name: 'f' }] }), false);
    assert.equal(largeJson({ input: 'x'.repeat(LARGE_JSON_CHARS) }), true);
    assert.equal(largeJson(Array.from({ length: LARGE_JSON_CHARS / 2 }, () => 0)), true, 'many small values count too');
    assert.equal(largeJson({ ['k'.repeat(LARGE_JSON_CHARS)]: 1 }), true, 'keys count');
    assert.equal(largeJson('x'.repeat(100), 50), true);
    assert.equal(largeJson(null), false);
  });
});
