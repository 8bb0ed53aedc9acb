/**
 * POST /v1/chat/completions through the official SDK, on the scripted upstream: forwarded as the client sent
 * it (only the model name mapped), the upstream's answer passed back (JSON and streams, with and without
 * include_usage), the SDK's helpers (.stream(), .parse() with zod and with a JSON schema, tool round trips),
 * usage recorded and priced; and a chat completion Portico generates itself from an engine that does not speak
 * Chat Completions (an upstream on the Responses API).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ModelSpec } from '../../src/models/config.js';
import { z } from 'zod';
import { zodFunction, zodResponseFormat } from 'openai/helpers/zod';
import { EMBED, MODEL, VIA_RESPONSES, readChatStream, setupChat, type ChatEnv } from './helpers.js';

/** A server that answers every chat completion with one JSON object, whatever `stream` says. */
async function startJsonOnlyUpstream(): Promise<{ url: string; close(): Promise<void> }> {
  const srv = http.createServer((req, res) => {
    let b = '';
    req.on('data', (d) => (b += d));
    req.on('end', () => {
      const j = JSON.parse(b);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: 'chatcmpl-plain',
          object: 'chat.completion',
          created: 1,
          model: j.model,
          choices: [{ index: 0, message: { role: 'assistant', content: 'plain answer' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 2, completion_tokens: 2, total_tokens: 4 },
        }),
      );
    });
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}/v1`, close: () => new Promise((r) => srv.close(() => r())) };
}

describe('chat completions forwarded to an upstream (SDK)', () => {
  let e: ChatEnv;
  let jsonOnly: Awaited<ReturnType<typeof startJsonOnlyUpstream>>;
  before(async () => {
    jsonOnly = await startJsonOnlyUpstream();
    e = await setupChat({ extra: [{ name: 'ignores-stream', provider: 'openai-compatible', type: 'text', base_url: jsonOnly.url } as ModelSpec] });
  });
  after(async () => {
    await e.close();
    await jsonOnly.close();
  });

  test('create: the body is forwarded as sent (model mapped), the answer comes back with the client model name, usage recorded and priced', async () => {
    e.up.script({ text: 'Hello there.', usage: { prompt_tokens: 30, completion_tokens: 4, cached_tokens: 10 } });
    const body = {
      model: MODEL,
      messages: [
        { role: 'system' as const, content: 'Be brief.' },
        {
          role: 'user' as const,
          name: 'ann',
          content: [
            { type: 'text' as const, text: 'What is in this image?' },
            { type: 'image_url' as const, image_url: { url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'low' as const } },
          ],
        },
      ],
      temperature: 0.3,
      top_p: 0.9,
      max_completion_tokens: 50,
      stop: ['\n\n', 'END'],
      seed: 42,
      user: 'end-user-7',
      metadata: { team: 'blue' },
      presence_penalty: 0.5,
      frequency_penalty: 0.1,
      response_format: { type: 'text' as const },
      n: 1,
    };
    const r = await e.client.chat.completions.create(body);
    assert.deepEqual(e.last(), { ...body, model: 'upstream-model' }, 'forwarded as sent, only the model name mapped');
    assert.equal(e.up.requests[e.up.requests.length - 1]!.path, '/v1/chat/completions');
    assert.equal(r.object, 'chat.completion');
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.model, MODEL, "the client's model name, not the upstream's");
    assert.equal(r.choices[0]!.message.content, 'Hello there.');
    assert.equal(r.choices[0]!.finish_reason, 'stop');
    assert.deepEqual(r.usage, { prompt_tokens: 30, completion_tokens: 4, total_tokens: 34, prompt_tokens_details: { cached_tokens: 10 } });
    const rows = (await e.usage('alice')).filter((x) => x.operation === 'chat.completions');
    assert.equal(rows.length, 1);
    assert.equal(rows[0]!.model, MODEL);
    assert.equal(rows[0]!.requests, 1);
    assert.equal(rows[0]!.input_tokens, 30);
    assert.equal(rows[0]!.output_tokens, 4);
    // 30 input tokens at 1 credit per million, 4 output at 2: 0.000038
    assert.equal(rows[0]!.cost, 0.000038);
  });

  test('a dated model name the upstream reports is not passed on: the answer names the model the client sent', async () => {
    e.up.script({ text: 'ok', model: 'upstream-model-2025-01-01' });
    const r = await e.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.model, MODEL);
  });

  test('stream with include_usage: chunks as the upstream sent them, usage: null on each and the usage chunk last, then [DONE]', async () => {
    e.up.script({ text: 'one two three', chunks: 3, usage: { prompt_tokens: 12, completion_tokens: 3 } });
    const res = await e.call('POST', '/v1/chat/completions', {
      model: MODEL,
      messages: [{ role: 'user', content: 'count' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const { chunks, done, errors } = await readChatStream(res);
    assert.equal(done, true);
    assert.deepEqual(errors, []);
    assert.deepEqual(e.last().stream_options, { include_usage: true });
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), 'one two three');
    for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null, 'usage: null on every chunk but the last');
    const last = chunks[chunks.length - 1];
    assert.deepEqual(last.choices, []);
    assert.deepEqual(last.usage, { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 });
    assert.ok(chunks.every((c) => c.model === MODEL && c.object === 'chat.completion.chunk'));
    assert.equal(chunks.filter((c) => c.choices[0]?.finish_reason === 'stop').length, 1);
  });

  test('stream without include_usage: the upstream is still asked for usage (it is charged), the client sees none of it', async () => {
    const before = (await e.usage('alice')).find((x) => x.operation === 'chat.completions')?.input_tokens ?? 0;
    e.up.script({ text: 'abc', chunks: 2, usage: { prompt_tokens: 7, completion_tokens: 2 } });
    const res = await e.call('POST', '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'x' }], stream: true });
    const { chunks, done } = await readChatStream(res);
    assert.equal(done, true);
    assert.deepEqual(e.last().stream_options, { include_usage: true }, 'asked upstream');
    assert.ok(
      chunks.every((c) => !('usage' in c)),
      'no usage field in any chunk',
    );
    assert.ok(
      chunks.every((c) => c.choices.length === 1),
      'no usage chunk',
    );
    const after = (await e.usage('alice')).find((x) => x.operation === 'chat.completions')!.input_tokens;
    assert.equal(after - before, 7, "charged the upstream's count");
  });

  test('SDK stream iteration and the ChatCompletionStream helper (.stream()): deltas, then the final completion', async () => {
    e.up.script({ text: 'Hello streaming world', chunks: 4 });
    let text = '';
    const s = await e.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } });
    let usage: unknown;
    for await (const c of s) {
      text += c.choices[0]?.delta?.content ?? '';
      if (c.usage) usage = c.usage;
    }
    assert.equal(text, 'Hello streaming world');
    assert.ok(usage);

    e.up.script({ text: 'Helper says hi', chunks: 3 });
    const helper = e.client.chat.completions.stream({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    const deltas: string[] = [];
    helper.on('content', (d) => deltas.push(d));
    const final = await helper.finalChatCompletion();
    assert.equal(deltas.join(''), 'Helper says hi');
    assert.equal(final.choices[0]!.message.content, 'Helper says hi');
    assert.equal(final.model, MODEL);
  });

  test('.parse() with a zod schema and with a JSON schema: response_format forwarded, message.parsed', async () => {
    const Weather = z.object({ city: z.string(), celsius: z.number() });
    e.up.script({ text: '{"city":"Paris","celsius":21.5}' });
    const r = await e.client.chat.completions.parse({ model: MODEL, messages: [{ role: 'user', content: 'Weather?' }], response_format: zodResponseFormat(Weather, 'weather') });
    assert.deepEqual(r.choices[0]!.message.parsed, { city: 'Paris', celsius: 21.5 });
    const sent = e.last().response_format;
    assert.equal(sent.type, 'json_schema');
    assert.equal(sent.json_schema.name, 'weather');
    assert.equal(sent.json_schema.strict, true);
    assert.deepEqual(sent.json_schema.schema.required, ['city', 'celsius']);

    e.up.script({ text: '{"ok":true}' });
    const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
    const r2 = await e.client.chat.completions.parse({
      model: MODEL,
      messages: [{ role: 'user', content: 'ok?' }],
      response_format: { type: 'json_schema', json_schema: { name: 'flag', schema, strict: true } },
    });
    assert.deepEqual(r2.choices[0]!.message.parsed, { ok: true });
    assert.deepEqual(e.last().response_format, { type: 'json_schema', json_schema: { name: 'flag', schema, strict: true } });

    e.up.script({ text: '{"a":1}' });
    const r3 = await e.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'json' }], response_format: { type: 'json_object' } });
    assert.deepEqual(JSON.parse(r3.choices[0]!.message.content!), { a: 1 });
  });

  test('tool round trip: parallel calls come back, the assistant tool_calls and tool messages go out as sent', async () => {
    const tools = [
      {
        type: 'function' as const,
        function: { name: 'get_weather', description: 'weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
      },
      { type: 'function' as const, function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
    ];
    e.up.script({
      toolCalls: [
        { id: 'call_a', name: 'get_weather', arguments: '{"city":"Paris"}' },
        { id: 'call_b', name: 'get_time', arguments: '{}' },
      ],
    });
    const first = await e.client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Weather and time in Paris?' }],
      tools,
      tool_choice: 'auto',
      parallel_tool_calls: true,
    });
    const msg = first.choices[0]!.message;
    assert.equal(first.choices[0]!.finish_reason, 'tool_calls');
    assert.deepEqual(
      msg.tool_calls!.map((c) => (c.type === 'function' ? [c.id, c.function.name, c.function.arguments] : [])),
      [
        ['call_a', 'get_weather', '{"city":"Paris"}'],
        ['call_b', 'get_time', '{}'],
      ],
    );
    assert.deepEqual(e.last().tools, tools);
    assert.equal(e.last().tool_choice, 'auto');
    assert.equal(e.last().parallel_tool_calls, true);

    e.up.script({ text: 'It is 21 °C in Paris at noon.' });
    const messages = [
      { role: 'user' as const, content: 'Weather and time in Paris?' },
      msg,
      { role: 'tool' as const, tool_call_id: 'call_a', content: '{"celsius":21}' },
      { role: 'tool' as const, tool_call_id: 'call_b', content: [{ type: 'text' as const, text: '12:00' }] },
    ];
    const second = await e.client.chat.completions.create({ model: MODEL, messages, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } } });
    assert.equal(second.choices[0]!.message.content, 'It is 21 °C in Paris at noon.');
    const sent = e.last();
    assert.equal(sent.messages[1].role, 'assistant');
    assert.deepEqual(sent.messages[1].tool_calls, msg.tool_calls);
    assert.deepEqual(sent.messages.slice(2), messages.slice(2));
    assert.deepEqual(sent.tool_choice, { type: 'function', function: { name: 'get_weather' } });
  });

  test('runTools with a zod function: the SDK runs the tool and sends its result back', async () => {
    e.up.script({ toolCalls: [{ id: 'call_x', name: 'add', arguments: '{"a":2,"b":3}' }] }, { text: 'The sum is 5.' });
    const runner = e.client.chat.completions.runTools({
      model: MODEL,
      messages: [{ role: 'user', content: 'Add 2 and 3' }],
      tools: [zodFunction({ name: 'add', parameters: z.object({ a: z.number(), b: z.number() }), function: ({ a, b }) => a + b })],
    });
    assert.equal(await runner.finalContent(), 'The sum is 5.');
    const sent = e.last().messages;
    assert.equal(sent[sent.length - 1].role, 'tool');
    assert.equal(sent[sent.length - 1].tool_call_id, 'call_x');
    assert.equal(sent[sent.length - 1].content, '5');
  });

  test('streamed tool calls: the SDK assembles them', async () => {
    e.up.script({ toolCalls: [{ id: 'call_s', name: 'lookup', arguments: ['{"q":', '"portico"}'] }] });
    const s = e.client.chat.completions.stream({
      model: MODEL,
      messages: [{ role: 'user', content: 'look it up' }],
      tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } } }],
    });
    const final = await s.finalChatCompletion();
    const call = final.choices[0]!.message.tool_calls![0]!;
    assert.equal(call.type === 'function' && call.function.arguments, '{"q":"portico"}');
    assert.equal(final.choices[0]!.finish_reason, 'tool_calls');
  });

  test('logprobs and n are forwarded and answered by the upstream', async () => {
    e.up.script({ text: ['Hi', ' there'] });
    const r = await e.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], logprobs: true, top_logprobs: 2, n: 1 });
    assert.equal(e.last().logprobs, true);
    assert.equal(e.last().top_logprobs, 2);
    assert.deepEqual(
      r.choices[0]!.logprobs!.content!.map((x) => x.token),
      ['Hi', ' there'],
    );
  });

  test('n = 2, streamed: both choices come through in the upstream order, the usage chunk last, charged from it', async () => {
    const c = (choice: number, delta: object, finish: string | null) =>
      `data: ${JSON.stringify({ id: 'chatcmpl-n2', object: 'chat.completion.chunk', created: 1, model: 'upstream-model', choices: [{ index: choice, delta, logprobs: null, finish_reason: finish }], usage: null })}\n\n`;
    e.up.script({
      raw: [
        c(0, { role: 'assistant', content: 'A' }, null),
        c(1, { role: 'assistant', content: 'B' }, null),
        c(0, {}, 'stop'),
        c(1, { content: 'b' }, null),
        c(1, {}, 'length'),
        `data: ${JSON.stringify({ id: 'chatcmpl-n2', object: 'chat.completion.chunk', created: 1, model: 'upstream-model', choices: [], usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 } })}\n\n`,
        'data: [DONE]\n\n',
      ],
    });
    const { chunks, done } = await readChatStream(
      await e.call('POST', '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'two' }], n: 2, stream: true, stream_options: { include_usage: true } }),
    );
    assert.equal(done, true);
    assert.deepEqual(
      chunks.map((x) => (x.choices[0] ? `${x.choices[0].index}:${x.choices[0].delta.content ?? ''}:${x.choices[0].finish_reason ?? ''}` : `usage:${x.usage.total_tokens}`)),
      ['0:A:', '1:B:', '0::stop', '1:b:', '1::length', 'usage:8'],
    );
    assert.ok(chunks.every((x) => x.model === MODEL));
    assert.equal(e.last().n, 2);
  });

  test("developer messages reach an open upstream as system messages (the engine's developer role); everything else is untouched", async () => {
    e.up.script({ text: 'ok' });
    await e.client.chat.completions.create({
      model: MODEL,
      messages: [
        { role: 'developer', content: 'Rules.' },
        { role: 'user', content: 'hi' },
      ],
    });
    assert.deepEqual(e.last().messages, [
      { role: 'system', content: 'Rules.' },
      { role: 'user', content: 'hi' },
    ]);
  });

  test('an upstream that ignores stream: true and answers JSON still gives the client a stream', async () => {
    const s = e.client.chat.completions.stream({ model: 'ignores-stream', messages: [{ role: 'user', content: 'hi' }], stream_options: { include_usage: true } });
    const final = await s.finalChatCompletion();
    assert.equal(final.choices[0]!.message.content, 'plain answer');
    assert.equal(final.id, 'chatcmpl-plain');
    assert.equal(final.model, 'ignores-stream');
    assert.deepEqual(final.usage, { prompt_tokens: 2, completion_tokens: 2, total_tokens: 4 });
  });
});

describe('chat completions generated by Portico (an engine that does not speak Chat Completions)', () => {
  let e: ChatEnv;
  before(async () => {
    e = await setupChat();
  });
  after(() => e.close());

  test('create: the chat request becomes a generation (here: the upstream Responses API), the answer a chat.completion', async () => {
    e.up.script({ text: 'Generated answer.', usage: { prompt_tokens: 9, completion_tokens: 3 } });
    const r = await e.client.chat.completions.create({
      model: VIA_RESPONSES,
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'hi' },
      ],
      max_tokens: 20,
      temperature: 0.5,
      top_p: 0.8,
      reasoning_effort: 'low',
    });
    const sent = e.last();
    assert.equal(sent.top_p, 0.8);
    assert.equal(sent.reasoning.effort, 'low');
    assert.equal(e.up.requests[e.up.requests.length - 1]!.path, '/v1/responses', 'generated, not forwarded');
    assert.equal(sent.max_output_tokens, 20);
    assert.equal(sent.temperature, 0.5);
    assert.equal(r.object, 'chat.completion');
    assert.match(r.id, /^chatcmpl-[A-Za-z0-9]{29}$/);
    assert.equal(r.model, VIA_RESPONSES);
    assert.ok(Number.isInteger(r.created) && Math.abs(r.created - Date.now() / 1000) < 60);
    assert.deepEqual(r.choices, [
      { index: 0, message: { role: 'assistant', content: 'Generated answer.', refusal: null, annotations: [] }, logprobs: null, finish_reason: 'stop' },
    ]);
    assert.equal(r.usage!.prompt_tokens, 9);
    assert.equal(r.usage!.completion_tokens, 3);
    assert.equal(r.usage!.total_tokens, 12);
  });

  test('stream with include_usage, and tool calls with their index', async () => {
    e.up.script({ text: 'abc', chunks: 3, usage: { prompt_tokens: 4, completion_tokens: 3 } });
    const { chunks, done } = await readChatStream(
      await e.call('POST', '/v1/chat/completions', { model: VIA_RESPONSES, messages: [{ role: 'user', content: 'x' }], stream: true, stream_options: { include_usage: true } }),
    );
    assert.equal(done, true);
    assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '', refusal: null });
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), 'abc');
    assert.equal(new Set(chunks.map((c) => c.id)).size, 1, 'one id for every chunk');
    const last = chunks[chunks.length - 1];
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.prompt_tokens, 4);
    assert.equal(chunks[chunks.length - 2].choices[0].finish_reason, 'stop');

    e.up.script({
      toolCalls: [
        { id: 'call_1', name: 'f', arguments: '{"x":1}' },
        { id: 'call_2', name: 'g', arguments: '{}' },
      ],
    });
    const s = e.client.chat.completions.stream({
      model: VIA_RESPONSES,
      messages: [{ role: 'user', content: 'call' }],
      tools: [
        { type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { x: { type: 'number' } } } } },
        { type: 'function', function: { name: 'g' } },
      ],
    });
    const final = await s.finalChatCompletion();
    assert.equal(final.choices[0]!.finish_reason, 'tool_calls');
    assert.deepEqual(
      final.choices[0]!.message.tool_calls!.map((c) => (c.type === 'function' ? [c.id, c.function.name, c.function.arguments] : [])),
      [
        ['call_1', 'f', '{"x":1}'],
        ['call_2', 'g', '{}'],
      ],
    );
    assert.equal(final.choices[0]!.message.content, null);
  });

  test('a tool round trip: the assistant calls and tool results reach the engine as its conversation', async () => {
    e.up.script({ text: 'Done.' });
    await e.client.chat.completions.create({
      model: VIA_RESPONSES,
      messages: [
        { role: 'user', content: 'weather?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_w', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } }] },
        { role: 'tool', tool_call_id: 'call_w', content: 'sunny' },
      ],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
    });
    const input = e.last().input;
    assert.ok(input.some((i: any) => i.type === 'function_call' && i.call_id === 'call_w' && i.name === 'get_weather' && i.arguments === '{"city":"Rome"}'));
    assert.ok(input.some((i: any) => i.type === 'function_call_output' && i.call_id === 'call_w' && i.output === 'sunny'));
  });

  test('usage of a generated completion is recorded under chat.completions', async () => {
    e.up.script({ text: 'x', usage: { prompt_tokens: 5, completion_tokens: 1 } });
    await e.client.chat.completions.create({ model: VIA_RESPONSES, messages: [{ role: 'user', content: 'x' }] });
    const row = (await e.usage('alice')).find((x) => x.operation === 'chat.completions' && x.model === VIA_RESPONSES);
    assert.ok(row && row.input_tokens >= 5 && row.requests >= 1);
  });

  test('the OpenAPI document has both routes with their request and answer schemas', async () => {
    const doc = (await (await fetch(`${e.url}/openapi.json`)).json()) as any;
    const chat = doc.paths['/v1/chat/completions'].post;
    assert.deepEqual(chat.security, [{ apiKey: [] }]);
    const req = chat.requestBody.content['application/json'].schema;
    assert.deepEqual(req.required.sort(), ['messages', 'model']);
    for (const k of ['tools', 'tool_choice', 'response_format', 'stream_options', 'max_completion_tokens', 'seed', 'logprobs']) assert.ok(req.properties[k], k);
    assert.ok(chat.responses['200'].content['application/json'].schema.properties.choices);
    assert.ok(chat.responses['200'].content['text/event-stream']);
    assert.ok(chat.responses['4XX'] && chat.responses['5XX'], 'errors in the OpenAI shape');
    const emb = doc.paths['/v1/embeddings'].post;
    assert.deepEqual(emb.requestBody.content['application/json'].schema.required.sort(), ['input', 'model']);
    assert.ok(emb.responses['200'].content['application/json'].schema.properties.usage);
  });

  test('/v1/models lists the embeddings model with its type', async () => {
    const list = await e.client.models.list();
    const m = list.data.find((x) => x.id === EMBED) as any;
    assert.equal(m.type, 'embeddings');
  });
});
