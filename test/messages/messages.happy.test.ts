/**
 * POST /v1/messages through Anthropic's official SDK, in front of a model Portico serves through an
 * OpenAI-compatible upstream (the scripted one): Anthropic's request translated to the engine's (what the upstream
 * receives), the message object and the event stream as Anthropic sends them (the SDK's strict stream helpers
 * assemble them), a tool round trip, thinking, structured output, images, usage recorded and priced.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { MODEL, VIA_RESPONSES, readAnthropicStream, setupMessages, type MessagesEnv } from './helpers.js';

describe('messages (Anthropic SDK) in front of an OpenAI-compatible upstream', () => {
  let e: MessagesEnv;
  before(async () => {
    e = await setupMessages();
  });
  after(() => e.close());

  test('create: system, sampling and stop sequences reach the engine; the message object, its usage, recorded and priced', async () => {
    e.up.script({ text: 'Hello there.', usage: { prompt_tokens: 30, completion_tokens: 4, cached_tokens: 10 } });
    const m = await e.anthropic.messages.create({
      model: MODEL,
      max_tokens: 50,
      system: [
        { type: 'text', text: 'Be brief.' },
        { type: 'text', text: 'Answer in English.', cache_control: { type: 'ephemeral' } },
      ],
      messages: [
        { role: 'user', content: 'Hi!' },
        { role: 'assistant', content: [{ type: 'text', text: 'Hello.' }] },
        { role: 'user', content: [{ type: 'text', text: 'Greet me again.' }] },
      ],
      stop_sequences: ['END'],
      metadata: { user_id: 'end-user-7' },
      ...({ temperature: 0.3, top_p: 0.9 } as object),
    });
    assert.match(m.id, /^msg_[A-Za-z0-9]{24}$/);
    assert.match(m._request_id ?? '', /^req_/, 'the request id, where the SDK reads it');
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.equal(m.model, MODEL, 'the model as the client named it');
    assert.deepEqual(m.content, [{ type: 'text', text: 'Hello there.' }]);
    assert.equal(m.stop_reason, 'end_turn');
    assert.equal(m.stop_sequence, null);
    // Anthropic counts the cached input apart: input_tokens + cache_read_input_tokens is the whole input
    assert.equal(m.usage.input_tokens, 20);
    assert.equal(m.usage.cache_read_input_tokens, 10);
    assert.equal(m.usage.cache_creation_input_tokens, 0);
    assert.equal(m.usage.output_tokens, 4);

    const sent = e.last();
    assert.equal(sent.model, 'upstream-model');
    assert.deepEqual(sent.messages, [
      { role: 'system', content: 'Be brief.\n\nAnswer in English.' },
      { role: 'user', content: 'Hi!' },
      { role: 'assistant', content: 'Hello.' },
      { role: 'user', content: 'Greet me again.' },
    ]);
    assert.equal(sent.max_tokens, 50);
    assert.equal(sent.temperature, 0.3);
    assert.equal(sent.top_p, 0.9);
    assert.deepEqual(sent.stop, ['END']);
    assert.equal(sent.stream, false, 'a JSON answer asks the upstream for one JSON answer');

    const row = (await e.usage('alice')).find((x) => x.operation === 'anthropic.messages' && x.model === MODEL);
    assert.ok(row, 'recorded under the operation the module declares');
    assert.equal(row.requests, 1);
    assert.equal(row.input_tokens, 30);
    assert.equal(row.output_tokens, 4);
    // 1 credit per million input tokens, 2 per million output tokens
    assert.ok(Math.abs(row.cost - (30 * 1 + 4 * 2) / 1e6) < 1e-9, `cost ${row.cost}`);
  });

  test('stream: the SDK stream helper assembles the message from text events; the raw events are in Anthropic order', async () => {
    e.up.script({ text: ['Once ', 'upon ', 'a time.'], usage: { prompt_tokens: 12, completion_tokens: 3 } });
    const stream = e.anthropic.messages.stream({ model: MODEL, max_tokens: 40, messages: [{ role: 'user', content: 'Tell a story.' }] });
    const pieces: string[] = [];
    stream.on('text', (t) => pieces.push(t));
    const m = await stream.finalMessage();
    assert.deepEqual(pieces, ['Once ', 'upon ', 'a time.']);
    assert.deepEqual(m.content, [{ type: 'text', text: 'Once upon a time.' }]);
    assert.equal(m.stop_reason, 'end_turn');
    assert.equal(m.usage.input_tokens, 12);
    assert.equal(m.usage.output_tokens, 3);
    assert.equal(await stream.finalText(), 'Once upon a time.');
    assert.match(stream.request_id ?? '', /^req_/);
    assert.equal(e.last().stream, true);

    e.up.script({ text: ['Hi', '!'], usage: { prompt_tokens: 5, completion_tokens: 2 } });
    const res = await e.call('POST', '/v1/messages', { model: MODEL, max_tokens: 10, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const events = await readAnthropicStream(res);
    assert.deepEqual(
      events.map((x) => x.type),
      ['message_start', 'ping', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'],
    );
    assert.equal(events[0].message.model, MODEL);
    assert.deepEqual(events[0].message.content, []);
    assert.equal(events[0].message.stop_reason, null);
    assert.deepEqual(events[2], { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    assert.deepEqual(events[3], { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi' } });
    assert.deepEqual(events[5], { type: 'content_block_stop', index: 0 });
    assert.deepEqual(events[6].delta, { stop_reason: 'end_turn', stop_sequence: null });
    assert.equal(events[6].usage.output_tokens, 2);
    assert.equal(events[6].usage.input_tokens, 5);
  });

  test('max_tokens reached: stop_reason max_tokens, JSON and stream', async () => {
    e.up.script({ text: 'cut sh', finishReason: 'length', usage: { prompt_tokens: 5, completion_tokens: 3 } });
    const m = await e.anthropic.messages.create({ model: MODEL, max_tokens: 3, messages: [{ role: 'user', content: 'Talk.' }] });
    assert.equal(m.stop_reason, 'max_tokens');
    assert.equal(e.last().max_tokens, 3);
    e.up.script({ text: ['cut', ' sh'], finishReason: 'length', usage: { prompt_tokens: 5, completion_tokens: 3 } });
    const s = await e.anthropic.messages.stream({ model: MODEL, max_tokens: 3, messages: [{ role: 'user', content: 'Talk.' }] }).finalMessage();
    assert.equal(s.stop_reason, 'max_tokens');
    assert.deepEqual(s.content, [{ type: 'text', text: 'cut sh' }]);
  });

  test('tool use round trip: tool_use with its input parsed, then tool_result answered; tool_choice and disable_parallel_tool_use mapped', async () => {
    const tools = [
      {
        name: 'get_weather',
        description: 'The weather in a city',
        input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] },
      },
    ];
    e.up.script({
      text: 'Let me look.',
      toolCalls: [{ id: 'call_w1', name: 'get_weather', arguments: ['{"city":', '"Paris"}'] }],
      usage: { prompt_tokens: 40, completion_tokens: 9 },
    });
    const first = await e.anthropic.messages.create({
      model: MODEL,
      max_tokens: 100,
      tools,
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
    });
    assert.equal(first.stop_reason, 'tool_use');
    assert.equal(first.content.length, 2);
    assert.deepEqual(first.content[0], { type: 'text', text: 'Let me look.' });
    assert.deepEqual(first.content[1], { type: 'tool_use', id: 'call_w1', name: 'get_weather', input: { city: 'Paris' } });
    let sent = e.last();
    assert.deepEqual(sent.tools, [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: tools[0]!.input_schema } }]);
    assert.equal(sent.tool_choice, 'required');
    assert.equal(sent.parallel_tool_calls, false);

    e.up.script({ text: 'It is sunny in Paris.', usage: { prompt_tokens: 60, completion_tokens: 6 } });
    const second = await e.anthropic.messages.create({
      model: MODEL,
      max_tokens: 100,
      tools,
      tool_choice: { type: 'tool', name: 'get_weather' },
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: first.content },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'call_w1', content: [{ type: 'text', text: 'sunny, 24 C' }] },
            { type: 'text', text: 'Thanks.' },
          ],
        },
      ],
    });
    assert.deepEqual(second.content, [{ type: 'text', text: 'It is sunny in Paris.' }]);
    assert.equal(second.stop_reason, 'end_turn');
    sent = e.last();
    assert.deepEqual(sent.messages, [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: 'Let me look.', tool_calls: [{ id: 'call_w1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_w1', content: 'sunny, 24 C', name: 'get_weather' },
      { role: 'user', content: 'Thanks.' },
    ]);
    assert.deepEqual(sent.tool_choice, { type: 'function', function: { name: 'get_weather' } });
    assert.equal(sent.parallel_tool_calls, true);

    // an error result says so in words; tool_choice none sends no tools
    e.up.script({ text: 'Sorry.' });
    await e.anthropic.messages.create({
      model: MODEL,
      max_tokens: 100,
      tools,
      tool_choice: { type: 'none' },
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'call_w2', name: 'get_weather', input: { city: 'Paris' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_w2', content: 'service down', is_error: true }] },
      ],
    });
    sent = e.last();
    assert.equal(sent.messages[2].content, 'Error: service down');
    assert.equal(sent.tools, undefined);
    assert.equal(sent.tool_choice, 'none');
  });

  test('tool use streamed: input_json_delta events, the SDK assembles the parsed input', async () => {
    e.up.script({ toolCalls: [{ id: 'call_s1', name: 'lookup', arguments: ['{"q":', '"tea', '"}'] }], usage: { prompt_tokens: 20, completion_tokens: 5 } });
    const stream = e.anthropic.messages.stream({
      model: MODEL,
      max_tokens: 50,
      tools: [{ name: 'lookup', input_schema: { type: 'object', properties: { q: { type: 'string' } } } }],
      messages: [{ role: 'user', content: 'Find tea.' }],
    });
    const partial: string[] = [];
    stream.on('inputJson', (delta) => partial.push(delta));
    const m = await stream.finalMessage();
    assert.deepEqual(partial, ['{"q":', '"tea', '"}']);
    assert.equal(m.stop_reason, 'tool_use');
    assert.equal(m.content.length, 1);
    assert.equal(m.content[0]!.type, 'tool_use');
    const block = m.content[0] as { id: string; name: string; input: unknown };
    assert.equal(block.id, 'call_s1');
    assert.equal(block.name, 'lookup');
    assert.deepEqual(block.input, { q: 'tea' });
  });

  test('thinking: budget_tokens as a reasoning effort; reasoning comes back as a thinking block before the text (JSON and stream); sent back, it is accepted', async () => {
    e.up.script({ reasoning: 'Two plus two is four.', text: '4', usage: { prompt_tokens: 10, completion_tokens: 8, reasoning_tokens: 5 } });
    const m = await e.anthropic.messages.create({
      model: MODEL,
      max_tokens: 4000,
      thinking: { type: 'enabled', budget_tokens: 2000 },
      messages: [{ role: 'user', content: '2+2?' }],
    });
    assert.equal(e.last().reasoning_effort, 'low');
    assert.deepEqual(m.content, [
      { type: 'thinking', thinking: 'Two plus two is four.', signature: '' },
      { type: 'text', text: '4' },
    ]);
    assert.deepEqual(m.usage.output_tokens_details, { thinking_tokens: 5 });

    e.up.script({ reasoning: ['Hmm, ', 'four.'], text: '4' });
    const stream = e.anthropic.messages.stream({
      model: MODEL,
      max_tokens: 20000,
      thinking: { type: 'enabled', budget_tokens: 10000 },
      messages: [{ role: 'user', content: '2+2?' }],
    });
    const thoughts: string[] = [];
    stream.on('thinking', (d) => thoughts.push(d));
    const s = await stream.finalMessage();
    assert.equal(e.last().reasoning_effort, 'high');
    assert.deepEqual(thoughts, ['Hmm, ', 'four.']);
    assert.equal(s.content[0]!.type, 'thinking');
    assert.equal((s.content[0] as { thinking: string }).thinking, 'Hmm, four.');
    assert.deepEqual(s.content[1], { type: 'text', text: '4' });

    // the thinking block sent back with the conversation is the assistant's reasoning (the upstream is not sent it)
    e.up.script({ text: 'ok' });
    await e.anthropic.messages.create({
      model: MODEL,
      max_tokens: 100,
      messages: [
        { role: 'user', content: '2+2?' },
        { role: 'assistant', content: m.content },
        { role: 'user', content: 'And 3+3?' },
      ],
    });
    assert.deepEqual(e.last().messages[1], { role: 'assistant', content: '4' });
    assert.equal(e.last().reasoning_effort, undefined, 'no thinking asked: no effort sent');
  });

  test('images (base64 and URL) reach the engine as image parts; output_config.format as a JSON schema', async () => {
    e.up.script({ text: '{"animal":"cat"}' });
    const schema = { type: 'object', properties: { animal: { type: 'string' } }, required: ['animal'], additionalProperties: false };
    const m = await e.anthropic.messages.create({
      model: MODEL,
      max_tokens: 50,
      output_config: { format: { type: 'json_schema', schema } },
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
            { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
            { type: 'text', text: 'Which animal?' },
          ],
        },
      ],
    });
    assert.deepEqual(m.content, [{ type: 'text', text: '{"animal":"cat"}' }]);
    const sent = e.last();
    assert.deepEqual(sent.messages[0].content, [
      { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
      { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg' } },
      { type: 'text', text: 'Which animal?' },
    ]);
    assert.deepEqual(sent.response_format, { type: 'json_schema', json_schema: { name: 'output', schema, strict: true } });
  });

  test('a model on an upstream that speaks the Responses API is served too (the engine generates, whatever its wire)', async () => {
    e.up.script({ text: 'via responses' });
    const m = await e.anthropic.messages.create({ model: VIA_RESPONSES, max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] });
    assert.deepEqual(m.content, [{ type: 'text', text: 'via responses' }]);
    assert.equal(m.model, VIA_RESPONSES);
    assert.equal(e.up.requests[e.up.requests.length - 1]!.path, '/v1/responses');
  });
});
