import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Tiktoken } from 'js-tiktoken/lite';
import o200k from 'js-tiktoken/ranks/o200k_base';
import { SCAN_SLICE, estimateTextTokens, estimateTextsTokensInTurns, estimateTokens, estimateTokensInTurns } from '../../src/engines/shared/tokens.js';
import { createOpenAICompatibleEngine } from '../../src/engines/openai-compatible/index.js';
import type { ChatMessage, FunctionTool } from '../../src/engines/types.js';
import { countTurns } from '../helpers/turns.js';

// The estimate feeds context-window checks, TPM limits and budgets before an answer: it must never count much
// less than a real BPE tokenizer (limits would be passed) nor wildly more (requests refused for nothing).
const samples: Record<string, string> = {
  english: 'The weather today is sunny with a light breeze from the west. Portico routes requests to upstream servers, records usage, and enforces budgets per key. ',
  french: "Le temps aujourd'hui est ensoleillé avec une légère brise de l'ouest. Les requêtes sont acheminées vers les serveurs. ",
  russian: 'Сегодня солнечная погода с лёгким западным ветром. Запросы направляются на серверы. ',
  chinese: '今天天气晴朗，西边吹来微风。门廊把请求转发到上游服务器，记录用量，并按密钥执行预算。',
  japanese: '今日はいい天気ですね。リクエストはサーバーに転送されます。',
  javascript: 'function add(a, b) { return a + b; }\nconst x = [1, 2, 3].map((v) => v * 2);\n',
  python: 'def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range(10)])\n',
  json: JSON.stringify({
    type: 'function',
    name: 'get_weather',
    parameters: { type: 'object', properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['c', 'f'] } }, required: ['city'] },
  }),
  numbers: '12345 67890 3.14159 2026-11-25 0x1f2e3d ',
};

test('the token estimate stays between 0.9x and 1.7x of o200k_base on prose, code, JSON and numbers in several scripts', () => {
  const enc = new Tiktoken(o200k);
  for (const [name, text] of Object.entries(samples)) {
    const s = text.repeat(20);
    const real = enc.encode(s).length;
    const ratio = estimateTextTokens(s) / real;
    assert.ok(ratio >= 0.9 && ratio <= 1.7, `${name}: estimate ${estimateTextTokens(s)} for ${real} real tokens (${ratio.toFixed(2)}x)`);
  }
});

test('the token estimate: empty text is 0, a word is at least 1, astral characters and lone surrogates count', () => {
  assert.equal(estimateTextTokens(''), 0);
  assert.equal(estimateTextTokens('a'), 1);
  assert.equal(estimateTextTokens(' '), 0);
  assert.ok(estimateTextTokens('😀😀') >= 2);
  assert.ok(estimateTextTokens('\ud800x') >= 2);
  // messages add their overhead; images their fixed cost
  const one = estimateTokens([{ role: 'user', content: 'hello' }]);
  assert.equal(one, 3 + 4 + estimateTextTokens('hello'));
});

test('a large request is counted in slices with turns of the event loop between them, to the same number', async () => {
  // runs of every kind astride the slice boundaries (a word, digits, punctuation, spaces, CJK, a surrogate pair)
  const mixed = Object.values(samples).join(' ') + '  \t 123456789 ?!?! 😀 ';
  const long = mixed.repeat(Math.ceil((3 * SCAN_SLICE) / mixed.length));
  const messages: ChatMessage[] = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: long },
    { role: 'assistant', content: [{ type: 'text', text: long.slice(7) }], name: 'bot', reasoning: 'x'.repeat(SCAN_SLICE + 5) },
    {
      role: 'user',
      content: [
        { type: 'image_url', url: 'data:,', detail: 'low' },
        { type: 'text', text: 'and this' },
      ],
    },
  ];
  const tools: FunctionTool[] = [{ name: 'f', description: 'd', parameters: { type: 'object' } }];
  const turns = countTurns();
  const inTurns = await estimateTokensInTurns(messages, tools);
  const whileLarge = turns.count;
  turns.reset();
  const small = await estimateTokensInTurns([{ role: 'user', content: 'hello there' }]);
  const whileSmall = turns.stop();
  assert.equal(inTurns, estimateTokens(messages, tools));
  assert.equal(small, estimateTokens([{ role: 'user', content: 'hello there' }]));
  // ~7 slices: a turn of the loop after each (not timed)
  assert.ok(whileLarge >= 4, `the loop turned ${whileLarge} times while ${(2 * long.length) / 1e6} M characters were counted`);
  assert.ok(whileSmall <= 1, `the loop turned ${whileSmall} times for a small request`);
  // the openai-compatible engine counts this way
  const engine = createOpenAICompatibleEngine({ baseUrl: 'http://127.0.0.1:9/v1' });
  const again = countTurns();
  assert.equal(await engine.countTokens({ model: 'm', messages, tools }), inTurns);
  const whileEngine = again.stop();
  assert.ok(whileEngine >= 4, `the loop turned ${whileEngine} times while the engine counted`);
  await engine.close();
});

test("an embeddings request's texts: the same sum of estimates, counted in slices past SCAN_SLICE characters and at once below", async () => {
  const texts = Array.from({ length: 2048 }, (_, i) => `${i} ` + 'word and 12345, '.repeat(60));
  const sum = texts.reduce((n, s) => n + estimateTextTokens(s), 0);
  const turns = countTurns();
  const inTurns = await estimateTextsTokensInTurns(texts);
  const whileLarge = turns.stop();
  assert.equal(inTurns, sum);
  assert.ok(whileLarge >= 4, `the loop turned ${whileLarge} times while ${texts.join('').length / 1e6} M characters were counted`);
  const small = estimateTextsTokensInTurns(['hello there', 'again']);
  assert.equal(small, estimateTextTokens('hello there') + estimateTextTokens('again'), 'a number, not a promise');
});
