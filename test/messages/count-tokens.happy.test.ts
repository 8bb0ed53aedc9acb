/**
 * POST /v1/messages/count_tokens through Anthropic's SDK: the serving engine's own count of the conversation
 * (system, messages, tools), exact on the embedded llama engine (the same number a message's usage then reports),
 * the upstream engine's estimate on an OpenAI-compatible model; nothing is generated and nothing is charged. The
 * llama engine serves /v1/messages itself too (JSON and the SDK's stream helper).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { makeTinyGguf } from '../helpers/tiny-gguf.js';
import type { ModelSpec } from '../../src/models/config.js';
import { MODEL, setupMessages, type MessagesEnv } from './helpers.js';

describe('count_tokens, and messages on the embedded llama engine', () => {
  let e: MessagesEnv;
  before(async () => {
    const path = await makeTinyGguf();
    e = await setupMessages({ extra: [{ name: 'tiny', provider: 'llama', path, type: 'text', context_window: 1024, parallel: 2 } as ModelSpec] });
  });
  after(() => e.close());

  const conversation = {
    system: 'Answer briefly.',
    messages: [{ role: 'user' as const, content: 'What is the weather like in the city?' }],
  };

  test('llama: the count is the input a message then uses; tools add to it', async () => {
    const { input_tokens } = await e.anthropic.messages.countTokens({ model: 'tiny', ...conversation });
    assert.ok(input_tokens > 5, String(input_tokens));
    const m = await e.anthropic.messages.create({ model: 'tiny', max_tokens: 4, ...conversation, ...({ temperature: 0 } as object) });
    assert.equal(m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0), input_tokens, 'the same count as the generation used');
    assert.ok(m.stop_reason === 'max_tokens' || m.stop_reason === 'end_turn', String(m.stop_reason));
    if (m.stop_reason === 'max_tokens') assert.equal(m.usage.output_tokens, 4);
    assert.equal(m.content[0]!.type, 'text');

    const withTool = await e.anthropic.messages.countTokens({
      model: 'tiny',
      ...conversation,
      tools: [{ name: 'get_weather', description: 'Weather of a city', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }],
    });
    assert.ok(withTool.input_tokens > input_tokens, `${withTool.input_tokens} > ${input_tokens}`);
  });

  test('llama: the stream helper assembles a generated message; temperature 0 gives the JSON answer again', async () => {
    const body = { model: 'tiny', max_tokens: 8, ...conversation, ...({ temperature: 0 } as object) };
    const json = await e.anthropic.messages.create(body);
    const stream = e.anthropic.messages.stream(body);
    let text = '';
    stream.on('text', (t) => (text += t));
    const m = await stream.finalMessage();
    assert.deepEqual(m.content, json.content);
    assert.equal(text, (json.content[0] as { text: string }).text);
    assert.equal(m.usage.output_tokens, json.usage.output_tokens);
  });

  test('an upstream model: the engine estimate, larger for a longer conversation; the upstream is not called and nothing is charged', async () => {
    const before = await e.usage('alice');
    const n = e.up.requests.length;
    const short = await e.anthropic.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    const long = await e.anthropic.messages.countTokens({
      model: MODEL,
      system: [{ type: 'text', text: 'You are a careful assistant who answers every question at length.' }],
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'f', input: { a: 'long argument text' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'a result of some length, with words' }] },
      ],
      tools: [{ name: 'f', input_schema: { type: 'object', properties: { a: { type: 'string' } } } }],
    });
    assert.ok(short.input_tokens > 0);
    assert.ok(long.input_tokens > short.input_tokens, `${long.input_tokens} > ${short.input_tokens}`);
    assert.deepEqual(Object.keys(long), ['input_tokens']);
    assert.equal(e.up.requests.length, n, 'nothing was sent upstream');
    assert.deepEqual(await e.usage('alice'), before, 'nothing was charged');
  });
});
