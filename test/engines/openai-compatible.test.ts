import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { createOpenAICompatibleEngine } from '../../src/engines/openai-compatible/index.js';
import { buildChatBody } from '../../src/engines/openai-compatible/chat.js';
import { defaultOutputCap } from '../../src/engines/openai-compatible/provider.js';
import { buildResponsesBody } from '../../src/engines/openai-compatible/responses.js';
import { createOpenAICompatibleEmbeddingsEngine } from '../../src/engines/openai-compatible/embeddings.js';
import { EngineError, type GenerateEvent, type GenerateRequest, type TextEngine } from '../../src/engines/types.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { longestStringify } from '../helpers/stringify-spy.js';
import { stallWatch } from '../helpers/wait.js';
import { collect, failure, text, done, toolCalls } from '../helpers/engine-events.js';

let up: ScriptedUpstream;
let engine: TextEngine;

before(async () => {
  up = await startScriptedUpstream();
  engine = createOpenAICompatibleEngine({ baseUrl: up.url, apiKey: 'sk-secret-123', api: 'chat.completions', contextWindow: 8192 });
});
after(async () => {
  await engine.close();
  await up.close();
});
beforeEach(() => up.reset());

const req = (over: Partial<GenerateRequest> = {}): GenerateRequest => ({ model: 'llama3.2', messages: [{ role: 'user', content: 'Hi' }], ...over });

// ------------------------------------------------------------------ request translation

test('chat: sends the whole request translated, always streaming with usage', async () => {
  up.script({ text: 'ok' });
  await collect(
    engine.generate({
      model: 'llama3.2',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'developer', content: 'Dev rule.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is in' },
            { type: 'image_url', url: 'data:image/png;base64,AAAA', detail: 'low' },
          ],
        },
        { role: 'assistant', content: '', reasoning: 'thinking...', toolCalls: [{ callId: 'call_a', name: 'get_weather', arguments: '{"city":"Paris"}' }] },
        { role: 'tool', toolCallId: 'call_a', content: '{"temp":21}' },
        { role: 'assistant', content: [{ type: 'text', text: 'It is 21.' }] },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'a' },
            { type: 'text', text: 'b' },
          ],
        },
      ],
      tools: [{ name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: true }, { name: 'noargs' }],
      toolChoice: { type: 'function', name: 'get_weather' },
      parallelToolCalls: true,
      format: { type: 'json_schema', name: 'answer', schema: { type: 'object' }, strict: true },
      temperature: 0.2,
      topP: 0.9,
      maxOutputTokens: 77,
      stop: ['END', 'STOP'],
      reasoningEffort: 'low',
    }),
  );
  assert.equal(up.requests.length, 1);
  const r = up.requests[0];
  assert.equal(r.path, '/v1/chat/completions');
  assert.equal(r.headers.authorization, 'Bearer sk-secret-123');
  assert.deepEqual(r.body, {
    model: 'llama3.2',
    messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'system', content: 'Dev rule.' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is in' },
          { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA', detail: 'low' } },
        ],
      },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_a', content: '{"temp":21}', name: 'get_weather' },
      { role: 'assistant', content: 'It is 21.' },
      { role: 'user', content: 'a\nb' },
    ],
    stream: true,
    stream_options: { include_usage: true },
    tools: [
      { type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: true } },
      { type: 'function', function: { name: 'noargs', parameters: { type: 'object', properties: {} } } },
    ],
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
    parallel_tool_calls: true,
    response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: { type: 'object' }, strict: true } },
    stop: ['END', 'STOP'],
    temperature: 0.2,
    top_p: 0.9,
    max_tokens: 77,
    reasoning_effort: 'low',
  });
});

test('chat: minimal request sends no optional fields; json_object; string tool choices; developer role option', async () => {
  up.script({ text: 'ok' }, { text: 'ok' }, { text: 'ok' }, { text: 'ok' });
  await collect(engine.generate(req()));
  assert.deepEqual(up.requests[0].body, { model: 'llama3.2', messages: [{ role: 'user', content: 'Hi' }], stream: true, stream_options: { include_usage: true } });

  await collect(engine.generate(req({ format: { type: 'json_object' }, tools: [{ name: 'f' }], toolChoice: 'required', parallelToolCalls: false })));
  const b = up.requests[1].body;
  assert.deepEqual(b.response_format, { type: 'json_object' });
  assert.equal(b.tool_choice, 'required');
  assert.equal(b.parallel_tool_calls, false);

  // tool_choice / parallel_tool_calls without tools are refused by OpenAI: not sent (except 'none', harmless)
  await collect(engine.generate(req({ toolChoice: 'auto', parallelToolCalls: true, format: { type: 'text' } })));
  assert.equal('tool_choice' in up.requests[2].body, false);
  assert.equal('parallel_tool_calls' in up.requests[2].body, false);
  assert.equal('response_format' in up.requests[2].body, false);

  const dev = createOpenAICompatibleEngine({ baseUrl: up.url, api: 'chat.completions', developerRole: 'developer' });
  await collect(
    dev.generate(
      req({
        messages: [
          { role: 'developer', content: 'x' },
          { role: 'user', content: 'y' },
        ],
      }),
    ),
  );
  assert.equal(up.requests[3].body.messages[0].role, 'developer');
  assert.equal(up.requests[3].headers.authorization, undefined);
  await dev.close();
});

test("chat: the output cap's field: max_tokens by default, max_completion_tokens when configured (and for api.openai.com)", async () => {
  up.script({ text: 'ok' }, { text: 'ok' }, { text: 'ok' });
  await collect(engine.generate(req({ maxOutputTokens: 77, reasoningEffort: 'low' })));
  assert.equal(up.requests[0].body.max_tokens, 77);
  assert.equal('max_completion_tokens' in up.requests[0].body, false);

  // OpenAI's reasoning models refuse max_tokens ("Use 'max_completion_tokens' instead")
  const openai = createOpenAICompatibleEngine({ baseUrl: up.url, api: 'chat.completions', outputCap: 'max_completion_tokens' });
  await collect(openai.generate(req({ maxOutputTokens: 77, reasoningEffort: 'high' })));
  await collect(openai.generate(req({ maxOutputTokens: 12 })));
  assert.equal(up.requests[1].body.max_completion_tokens, 77);
  assert.equal(up.requests[2].body.max_completion_tokens, 12);
  assert.equal('max_tokens' in up.requests[1].body || 'max_tokens' in up.requests[2].body, false);
  await openai.close();

  // the model file's default: OpenAI's own API only
  assert.equal(defaultOutputCap('https://api.openai.com/v1'), 'max_completion_tokens');
  assert.equal(defaultOutputCap('http://127.0.0.1:11434/v1'), 'max_tokens');
  assert.equal(defaultOutputCap('https://api.openai.com.example.net/v1'), 'max_tokens');
  // azure's rule: max_completion_tokens only with a reasoning effort (its reasoning deployments refuse max_tokens)
  assert.equal(buildChatBody(req({ maxOutputTokens: 5, reasoningEffort: 'low' }), { developerRole: 'system', outputCap: 'reasoning' }).max_completion_tokens, 5);
  assert.equal(buildChatBody(req({ maxOutputTokens: 5 }), { developerRole: 'system', outputCap: 'reasoning' }).max_tokens, 5);
});

// ------------------------------------------------------------------ stream mapping

test('chat: text in chunks, the upstream model and usage with cached and reasoning tokens', async () => {
  up.script({ text: 'Hello there, world!', chunks: 5, model: 'llama3.2-2024-09-01', usage: { prompt_tokens: 12, completion_tokens: 5, cached_tokens: 8, reasoning_tokens: 2 } });
  const evs = await collect(engine.generate(req()));
  assert.equal(evs.filter((e) => e.type === 'text_delta').length, 5);
  assert.equal(text(evs), 'Hello there, world!');
  assert.deepEqual(done(evs), {
    type: 'done',
    finishReason: 'stop',
    usage: { inputTokens: 12, outputTokens: 5, cachedTokens: 8, reasoningTokens: 2 },
    model: 'llama3.2-2024-09-01',
  });
});

test('chat: reasoning_content and reasoning become reasoning_delta before the text', async () => {
  up.script({ reasoning: 'Let me think.', chunks: 2, text: ['Answer'] }, { reasoning: 'Hmm', reasoningField: 'reasoning', text: 'B' });
  const evs = await collect(engine.generate(req()));
  assert.deepEqual(
    evs.filter((e) => e.type !== 'done').map((e) => e.type),
    ['reasoning_delta', 'reasoning_delta', 'text_delta'],
  );
  assert.equal(evs.flatMap((e) => (e.type === 'reasoning_delta' ? [e.delta] : [])).join(''), 'Let me think.');
  const evs2 = await collect(engine.generate(req()));
  assert.deepEqual(evs2[0], { type: 'reasoning_delta', delta: 'Hmm' });
  assert.equal(text(evs2), 'B');
});

test('chat: finish_reason length -> done length', async () => {
  up.script({ text: 'truncated', finishReason: 'length' });
  const evs = await collect(engine.generate(req({ maxOutputTokens: 3 })));
  assert.equal(done(evs).finishReason, 'length');
});

test("chat: finish_reason content_filter -> done content_filter (the upstream's filter ended the answer; streamed and whole)", async () => {
  up.script({ text: 'partial', finishReason: 'content_filter' }, { text: 'partial', finishReason: 'content_filter' });
  for (const stream of [true, false]) {
    const evs = await collect(engine.generate(req({ stream })));
    assert.equal(text(evs), 'partial');
    assert.equal(done(evs).finishReason, 'content_filter', `stream ${stream}`);
  }
});

test('chat: a streamed tool call -> start, deltas, end, finish tool_calls', async () => {
  up.script({ toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: ['{"ci', 'ty":', '"Paris"}'] }] });
  const evs = await collect(engine.generate(req({ tools: [{ name: 'get_weather' }] })));
  assert.deepEqual(evs.slice(0, 5), [
    { type: 'tool_call_start', callId: 'call_1', name: 'get_weather' },
    { type: 'tool_call_delta', callId: 'call_1', delta: '{"ci' },
    { type: 'tool_call_delta', callId: 'call_1', delta: 'ty":' },
    { type: 'tool_call_delta', callId: 'call_1', delta: '"Paris"}' },
    { type: 'tool_call_end', callId: 'call_1', arguments: '{"city":"Paris"}' },
  ]);
  assert.equal(done(evs).finishReason, 'tool_calls');
});

test('chat: two interleaved parallel calls come out one after the other, well-formed', async () => {
  up.script({
    interleave: true,
    toolCalls: [
      { id: 'call_a', name: 'get_weather', arguments: ['{"city":', '"Paris"', '}'] },
      { id: 'call_b', name: 'get_time', arguments: ['{"tz":', '"CET"}'] },
    ],
  });
  const evs = await collect(engine.generate(req({ tools: [{ name: 'get_weather' }, { name: 'get_time' }] })));
  assert.deepEqual(toolCalls(evs), [
    { callId: 'call_a', name: 'get_weather', arguments: '{"city":"Paris"}' },
    { callId: 'call_b', name: 'get_time', arguments: '{"tz":"CET"}' },
  ]);
  assert.equal(done(evs).finishReason, 'tool_calls');
});

test('chat: sequential parallel calls, a call without arguments gets "{}"', async () => {
  up.script({
    toolCalls: [
      { id: 'c1', name: 'a', arguments: ['{"x":', '1}'] },
      { id: 'c2', name: 'b', arguments: '' },
      { id: 'c3', name: 'c', arguments: '{"y":2}' },
    ],
  });
  const evs = await collect(engine.generate(req({ tools: [{ name: 'a' }, { name: 'b' }, { name: 'c' }] })));
  assert.deepEqual(toolCalls(evs), [
    { callId: 'c1', name: 'a', arguments: '{"x":1}' },
    { callId: 'c2', name: 'b', arguments: '{}' },
    { callId: 'c3', name: 'c', arguments: '{"y":2}' },
  ]);
});

test('chat: parallelToolCalls false sends parallel_tool_calls false and keeps only the first call', async () => {
  up.script({
    interleave: true,
    toolCalls: [
      { id: 'c1', name: 'a', arguments: ['{"x":', '1}'] },
      { id: 'c2', name: 'b', arguments: ['{"y":', '2}'] },
    ],
  });
  const evs = await collect(engine.generate(req({ tools: [{ name: 'a' }, { name: 'b' }], parallelToolCalls: false })));
  assert.equal(up.requests[0].body.parallel_tool_calls, false);
  assert.deepEqual(toolCalls(evs), [{ callId: 'c1', name: 'a', arguments: '{"x":1}' }]);
  assert.equal(done(evs).finishReason, 'tool_calls');
});

test('chat: text then a tool call in one answer; Ollama-style finish_reason stop with calls -> tool_calls', async () => {
  up.script({ text: 'Checking.', toolCalls: [{ id: 'c1', name: 'a', arguments: '{}' }], finishReason: 'stop' });
  const evs = await collect(engine.generate(req({ tools: [{ name: 'a' }] })));
  assert.deepEqual(
    evs.map((e) => e.type),
    ['text_delta', 'tool_call_start', 'tool_call_delta', 'tool_call_end', 'done'],
  );
  assert.equal(done(evs).finishReason, 'tool_calls');
});

test('chat: calls without ids get generated ids; all calls sent as index 0 with distinct ids stay distinct', async () => {
  up.script({
    raw: [
      'data: {"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"a","arguments":"{\\"q\\":1}"}}]}}]}\n\n',
      'data: {"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\ndata: [DONE]\n\n',
    ],
  });
  const [c] = toolCalls(await collect(engine.generate(req())));
  assert.match(c.callId, /^call_[A-Za-z0-9_-]{16}$/);
  assert.equal(c.arguments, '{"q":1}');

  up.script({
    raw: [
      'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x1","function":{"name":"a","arguments":"{\\"q\\":1}"}}]}}]}\n\n',
      'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x2","function":{"name":"b","arguments":"{\\"q\\":2}"}}]}}]}\n\n',
      'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\ndata: [DONE]\n\n',
    ],
  });
  assert.deepEqual(toolCalls(await collect(engine.generate(req()))), [
    { callId: 'x1', name: 'a', arguments: '{"q":1}' },
    { callId: 'x2', name: 'b', arguments: '{"q":2}' },
  ]);
});

test('chat: no usage from the upstream -> an estimate', async () => {
  up.script({ text: 'abcdefgh', usage: false });
  const d = done(await collect(engine.generate(req({ messages: [{ role: 'user', content: 'x'.repeat(400) }] }))));
  assert.equal(d.usage.outputTokens, 2);
  assert.ok(d.usage.inputTokens >= 100 && d.usage.inputTokens < 120, String(d.usage.inputTokens));
});

test('chat: SSE parsing is robust: CRLF, lone CR, comments, events split anywhere, no blank line, no [DONE]', async () => {
  const body =
    ': keep-alive comment\r\n' +
    'data: {"model":"m-1","choices":[{"index":0,"delta":{"role":"assistant","content":"Hé"}}]}\r\n\r\n' +
    'event: message\rdata: {"choices":[{"index":0,"delta":{"content":" wörld 🙂"}}]}\r\r' +
    'data: {"choices":[{"index":0,"delta":{"content":"!"}}]}\n' +
    'data: {"choices":[{"index":0,"delta":{"content":"?"},"finish_reason":"stop"}]}\n\n' +
    'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}\n\n';
  // split into 3-byte pieces, cutting through CRLF pairs and multi-byte UTF-8 characters
  const bytes = Buffer.from(body);
  const server = http.createServer(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (let i = 0; i < bytes.length; i += 3) {
      res.write(bytes.subarray(i, i + 3));
      if (i % 30 === 0) await new Promise((r) => setImmediate(r));
    }
    res.end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as import('node:net').AddressInfo).port;
  const e = createOpenAICompatibleEngine({ baseUrl: `http://127.0.0.1:${port}/v1`, api: 'chat.completions' });
  try {
    const evs = await collect(e.generate(req()));
    assert.equal(text(evs), 'Hé wörld 🙂!?');
    assert.deepEqual(done(evs), { type: 'done', finishReason: 'stop', usage: { inputTokens: 3, outputTokens: 4 }, model: 'm-1' });
  } finally {
    await e.close();
    server.close();
  }
});

test('chat: an upstream that ignores stream:true and answers JSON still works', async () => {
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        model: 'm-json',
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: 'plain', tool_calls: [{ id: 'c9', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] },
            finish_reason: 'tool_calls',
          },
        ],
        usage: { prompt_tokens: 1, completion_tokens: 2 },
      }),
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const e = createOpenAICompatibleEngine({ baseUrl: `http://127.0.0.1:${(server.address() as import('node:net').AddressInfo).port}/v1`, api: 'chat.completions' });
  try {
    const evs = await collect(e.generate(req()));
    assert.equal(text(evs), 'plain');
    assert.deepEqual(toolCalls(evs), [{ callId: 'c9', name: 'f', arguments: '{"a":1}' }]);
    assert.deepEqual(done(evs), { type: 'done', finishReason: 'tool_calls', usage: { inputTokens: 1, outputTokens: 2 }, model: 'm-json' });
  } finally {
    await e.close();
    server.close();
  }
});

// ------------------------------------------------------------------ errors

test('chat: upstream 400 -> EngineError 400 with the upstream message and code', async () => {
  up.script({
    status: 400,
    errorBody: { error: { message: "This model's maximum context length is 8192 tokens", type: 'invalid_request_error', code: 'context_length_exceeded' } },
  });
  const { error } = await failure(engine.generate(req()));
  assert.equal(error.status, 400);
  assert.equal(error.code, 'context_length_exceeded');
  assert.match(error.message, /maximum context length is 8192/);
});

test('chat: error bodies of other shapes ({error:"..."}, {detail}, plain text)', async () => {
  up.script(
    { status: 422, errorBody: { detail: 'field required: messages' } },
    { status: 400, errorBody: { error: 'model "x" not found, try pulling it first' } },
    { status: 500, errorBody: 'boom' },
  );
  let { error } = await failure(engine.generate(req()));
  assert.equal(error.status, 400);
  assert.equal(error.code, 'invalid_request');
  assert.match(error.message, /field required/);
  ({ error } = await failure(engine.generate(req())));
  assert.match(error.message, /try pulling it first/);
  ({ error } = await failure(engine.generate(req())));
  assert.equal(error.status, 502);
  assert.equal(error.code, 'upstream_error');
  assert.match(error.message, /HTTP 500.*boom/);
});

test('chat: 401/403 -> 502 without the upstream body; the api key never leaks', async () => {
  up.script({ status: 401, errorMessage: 'Incorrect API key provided: sk-secret-123' }, { status: 404, errorMessage: 'model sk-secret-123 not found' });
  let { error } = await failure(engine.generate(req()));
  assert.equal(error.status, 502);
  assert.equal(error.code, 'upstream_auth_failed');
  assert.doesNotMatch(error.message, /sk-secret/);
  ({ error } = await failure(engine.generate(req())));
  assert.equal(error.status, 502);
  assert.doesNotMatch(error.message, /sk-secret/);
  assert.match(error.message, /model \*\*\* not found/);
});

test('chat: 429 -> 429 with retry-after', async () => {
  up.script({ status: 429, errorMessage: 'slow down', headers: { 'retry-after': '7' } });
  const { error } = await failure(engine.generate(req()));
  assert.equal(error.status, 429);
  assert.equal(error.code, 'rate_limit_exceeded');
  assert.match(error.message, /slow down.*retry after 7/);
});

test('chat: connection refused -> upstream_unavailable 502', async () => {
  const server = http.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as import('node:net').AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  const e = createOpenAICompatibleEngine({ baseUrl: `http://127.0.0.1:${port}/v1`, api: 'chat.completions' });
  const { error } = await failure(e.generate(req()));
  assert.equal(error.code, 'upstream_unavailable');
  assert.equal(error.status, 502);
  assert.match(error.message, /ECONNREFUSED/);
  await e.close();
});

test('chat: no answer within timeoutMs -> upstream_unavailable 504, and a stalled stream times out too', async () => {
  // 500 ms: time enough for the first chunk to arrive on a loaded machine; the stall after it is six times longer
  const e = createOpenAICompatibleEngine({ baseUrl: up.url, api: 'chat.completions', timeoutMs: 500 });
  up.script(
    { hang: true },
    { raw: ['data: {"choices":[{"index":0,"delta":{"content":"a "}}]}\n\n', 'data: {"choices":[{"index":0,"delta":{"content":"b"}}]}\n\n'], delayMs: 3000 },
  );
  const stalls = stallWatch();
  const t0 = Date.now();
  const { error } = await failure(e.generate(req()));
  assert.equal(error.code, 'upstream_unavailable');
  assert.equal(error.status, 504);
  // the 500 ms timer fired: late by no more than 2 s plus what the event loop was stalled
  assert.ok(Date.now() - t0 < 2500 + stalls.stop(), `the timeout came after ${Date.now() - t0} ms`);
  const r = await failure(e.generate(req()));
  assert.equal(r.error.status, 504);
  assert.equal(text(r.events), 'a ');
  await e.close();
});

test('chat: a stream that breaks mid-way -> the iterator throws after the events received', async () => {
  up.script({ text: ['one ', 'two ', 'three ', 'four'], breakAfter: 3 });
  const { events, error } = await failure(engine.generate(req()));
  assert.equal(error.code, 'upstream_stream_broken');
  assert.equal(error.status, 502);
  assert.equal(text(events), 'one two ');
  assert.ok(!events.some((e) => e.type === 'done'));
});

test('chat: a stream that ends cleanly but without finish_reason or [DONE] is broken too', async () => {
  up.script({ text: 'partial', finishReason: null, usage: false, noDone: true });
  const { error } = await failure(engine.generate(req()));
  assert.equal(error.code, 'upstream_stream_broken');
});

test('chat: an error object inside the stream -> EngineError', async () => {
  up.script({ raw: ['data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n', 'data: {"error":{"message":"CUDA out of memory","code":"server_error"}}\n\n'] });
  const { events, error } = await failure(engine.generate(req()));
  assert.equal(text(events), 'x');
  assert.match(error.message, /CUDA out of memory/);
  assert.equal(error.code, 'server_error');
});

// ------------------------------------------------------------------ abort and connection reuse

test('abort: the signal closes the upstream request mid-stream', async () => {
  up.script({ text: 'a b c d e f g h', chunks: 8, delayMs: 200 });
  const ac = new AbortController();
  const it = engine.generate(req({ signal: ac.signal }))[Symbol.asyncIterator]();
  const first = await it.next();
  assert.equal((first.value as GenerateEvent).type, 'text_delta');
  ac.abort();
  await assert.rejects(it.next(), (err: unknown) => err instanceof EngineError && err.code === 'aborted');
  const rec = up.requests[0];
  await rec.closed;
  assert.equal(rec.aborted, true);
});

test('abort: an already aborted signal sends nothing; abort before the headers closes the request', async () => {
  const ac = new AbortController();
  ac.abort();
  await assert.rejects(collect(engine.generate(req({ signal: ac.signal }))), (e: unknown) => e instanceof EngineError && e.code === 'aborted');
  assert.equal(up.requests.length, 0);

  up.script({ hang: true });
  const ac2 = new AbortController();
  const p = collect(engine.generate(req({ signal: ac2.signal })));
  const [rec] = await up.waitForRequests(1);
  ac2.abort();
  await assert.rejects(p, (e: unknown) => e instanceof EngineError && e.code === 'aborted');
  await rec.closed;
  assert.equal(rec.aborted, true);
});

test('a consumer that stops iterating closes the upstream request', async () => {
  up.script({ text: 'a b c d e f g h', chunks: 8, delayMs: 100 });
  for await (const e of engine.generate(req())) {
    assert.equal(e.type, 'text_delta');
    break;
  }
  await up.requests[0].closed;
  assert.equal(up.requests[0].aborted, true);
});

test('connections are reused between requests (keep-alive)', async () => {
  const e = createOpenAICompatibleEngine({ baseUrl: up.url, api: 'chat.completions' });
  for (let i = 0; i < 5; i++) {
    up.script({ text: 'x' });
    await collect(e.generate(req()));
  }
  // also when the consumer stops right after `done`
  for (let i = 0; i < 2; i++) {
    up.script({ text: 'y' });
    for await (const ev of e.generate(req())) if (ev.type === 'done') break;
  }
  // the upstream saw the seven requests on at most two TCP connections: undici's pool frees a connection a
  // moment after its response ended, so a request sent at once may take the other (idle) one; never a new
  // connection per request
  const ports = up.requests.slice(-7).map((r) => r.remotePort);
  assert.equal(ports.length, 7);
  assert.ok(new Set(ports).size <= 2, `connections used: ${new Set(ports).size}`);
  await e.close();
});

// ------------------------------------------------------------------ countTokens

test('countTokens: an estimate that grows with the conversation and the tools', async () => {
  const a = await engine.countTokens({ model: 'm', messages: [{ role: 'user', content: 'Hello world, how are you?' }] });
  const b = await engine.countTokens({
    model: 'm',
    messages: [
      { role: 'user', content: 'Hello world, how are you?' },
      { role: 'assistant', content: 'x'.repeat(400) },
    ],
  });
  const c = await engine.countTokens({
    model: 'm',
    messages: [{ role: 'user', content: 'Hello world, how are you?' }],
    tools: [{ name: 'get_weather', parameters: { type: 'object' } }],
  });
  assert.ok(a >= 7 && a <= 20, String(a));
  assert.ok(b >= a + 100, String(b));
  assert.ok(c > a, String(c));
  assert.equal(await engine.countTokens({ model: 'm', messages: [{ role: 'user', content: '日本語' }] }), 3 + 4 + 3);
  assert.equal(engine.contextWindow, 8192);
  assert.equal(engine.kind, 'openai-compatible');
});

// ------------------------------------------------------------------ the scripted upstream itself

test('scripted upstream: non-streamed chat and responses answers, /v1/models, api key check', async () => {
  up.script(
    { text: ['Hi', ' there'], toolCalls: [{ id: 'c1', name: 'f', arguments: '{"a":1}' }], usage: { prompt_tokens: 5, completion_tokens: 2 } },
    { text: 'R', reasoning: 'think' },
  );
  const post = (path: string, body: unknown) =>
    fetch(up.url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
  const c = await post('/chat/completions', { model: 'm1', messages: [] });
  assert.equal(c.object, 'chat.completion');
  assert.equal(c.model, 'm1');
  assert.deepEqual(c.choices[0].message, { role: 'assistant', content: 'Hi there', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] });
  assert.equal(c.choices[0].finish_reason, 'tool_calls');
  assert.deepEqual(c.usage, { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 });
  const r = await post('/responses', { model: 'm2', input: 'x' });
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'completed');
  assert.deepEqual(
    r.output.map((i: any) => i.type),
    ['reasoning', 'message'],
  );
  assert.equal(r.output[1].content[0].text, 'R');
  const m = (await fetch(up.url + '/models').then((x) => x.json())) as any;
  assert.deepEqual(
    m.data.map((x: any) => x.id),
    ['scripted-model'],
  );
  assert.equal(up.requests.length, 3);
  assert.equal(up.requests[1].body.model, 'm2');

  const guarded = await startScriptedUpstream({ apiKey: 'k1', record: false });
  try {
    const e = createOpenAICompatibleEngine({ baseUrl: guarded.url, apiKey: 'k1', api: 'chat.completions' });
    assert.equal(text(await collect(e.generate(req()))), 'Hello from the scripted upstream.');
    await e.close();
    const bad = createOpenAICompatibleEngine({ baseUrl: guarded.url, apiKey: 'wrong', api: 'chat.completions' });
    const { error } = await failure(bad.generate(req()));
    assert.equal(error.code, 'upstream_auth_failed');
    await bad.close();
    assert.equal(guarded.requests.length, 0);
  } finally {
    await guarded.close();
  }
});

// ------------------------------------------------------------------ a non-streaming caller (stream: false)

test('stream false: the upstream is asked for one JSON answer (chat and responses), the events are the same as streamed', async () => {
  for (const api of ['chat.completions', 'responses'] as const) {
    up.reset();
    const e = createOpenAICompatibleEngine({ baseUrl: up.url, api });
    up.script({ text: 'Hello there.', usage: { prompt_tokens: 7, completion_tokens: 3 } }, { text: 'Hello there.', usage: { prompt_tokens: 7, completion_tokens: 3 } });
    const whole = await collect(e.generate(req({ stream: false })));
    const streamed = await collect(e.generate(req()));
    const [a, b] = up.requests;
    assert.equal(a.body.stream, false, api);
    assert.equal(a.body.stream_options, undefined, `${api}: stream_options only with stream`);
    assert.equal(b.body.stream, true, api);
    assert.equal(text(whole), 'Hello there.');
    assert.deepEqual(done(whole), done(streamed));
    assert.deepEqual([done(whole).usage.inputTokens, done(whole).usage.outputTokens], [7, 3]);
    await e.close();
  }
});

test('stream false: an upstream that streams anyway is read as a stream', async () => {
  const e = createOpenAICompatibleEngine({ baseUrl: up.url, api: 'chat.completions' });
  up.script({
    raw: ['data: {"choices":[{"index":0,"delta":{"content":"a "}}]}\n\n', 'data: {"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}]}\n\n', 'data: [DONE]\n\n'],
  });
  const evs = await collect(e.generate(req({ stream: false })));
  assert.equal(text(evs), 'a b');
  assert.equal(done(evs).finishReason, 'stop');
  await e.close();
});

test('stream false: no answer within timeoutMs -> 504; an abort while waiting closes the upstream request', async () => {
  const e = createOpenAICompatibleEngine({ baseUrl: up.url, api: 'chat.completions', timeoutMs: 150 });
  up.script({ hang: true });
  const stalls = stallWatch();
  const t0 = Date.now();
  const { error } = await failure(e.generate(req({ stream: false })));
  assert.equal(error.code, 'upstream_unavailable');
  assert.equal(error.status, 504);
  assert.ok(Date.now() - t0 < 1000 + stalls.stop(), `the 150 ms timeout came after ${Date.now() - t0} ms`);
  await up.requests[0].closed;
  assert.equal(up.requests[0].aborted, true);

  up.reset();
  up.script({ hang: true });
  const ac = new AbortController();
  const p = collect(engine.generate(req({ stream: false, signal: ac.signal })));
  const [rec] = await up.waitForRequests(1);
  ac.abort();
  await assert.rejects(p, (err: unknown) => err instanceof EngineError && err.code === 'aborted');
  await rec.closed;
  assert.equal(rec.aborted, true);
  await e.close();
});

test('stream false: an error status keeps its mapping, an unreadable answer is a 502', async () => {
  up.script({ status: 400, errorMessage: 'context too long' });
  const { error } = await failure(engine.generate(req({ stream: false })));
  assert.equal(error.status, 400);
  assert.match(error.message, /context too long/);
  up.script({ raw: ['{"choices": [oops'], headers: { 'content-type': 'application/json' } });
  const bad = await failure(engine.generate(req({ stream: false })));
  assert.equal(bad.error.status, 502);
});

// ------------------------------------------------------------------ large request bodies

test('a large request body reaches the upstream as JSON.stringify would write it, made in slices (generate, forwarded chat, embeddings)', async () => {
  // ~2.4 MB of messages: past the size where the body is made in slices of ~1 Mi characters
  const big = 'x'.repeat(600_000) + ' \u{1F600} "quoted" é';
  const messages: GenerateRequest['messages'] = Array.from({ length: 4 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: big + i }));
  const expectations: Array<{ name: string; run: () => Promise<unknown>; expected: () => Record<string, unknown> }> = [];
  for (const api of ['chat.completions', 'responses'] as const) {
    const e = createOpenAICompatibleEngine({ baseUrl: up.url, api });
    for (const stream of [false, undefined]) {
      const r = req({ messages, stream });
      expectations.push({
        name: `${api}, stream ${stream}`,
        run: () => collect(e.generate(r)),
        expected: () => (api === 'responses' ? buildResponsesBody(r) : buildChatBody(r, { developerRole: 'system' })),
      });
    }
  }
  const chatBody = { model: 'llama3.2', messages: messages.map((m) => ({ role: m.role, content: m.content })), stream: false };
  expectations.push({ name: 'forwarded chat', run: () => collect(engine.chatCompletions!({ body: chatBody }) as AsyncIterable<GenerateEvent>), expected: () => chatBody });
  const emb = createOpenAICompatibleEmbeddingsEngine({ baseUrl: up.url });
  const embedInput = [big, big + '2', big + '3', big + '4'];
  expectations.push({ name: 'embeddings', run: () => emb.embed({ model: 'e', input: embedInput }), expected: () => ({ model: 'e', input: embedInput, encoding_format: 'float' }) });

  for (const x of expectations) {
    up.reset();
    const { longest } = await longestStringify(x.run);
    const [rec] = up.requests;
    const text = JSON.stringify(x.expected());
    assert.ok(text.length > 2_000_000, x.name);
    assert.deepEqual(rec.body, JSON.parse(text), x.name);
    assert.equal(rec.headers['content-length'], String(Buffer.byteLength(text)), x.name);
    // no single call serialized the whole body (it would hold the event loop for the whole of it)
    assert.ok(longest < text.length / 2, `${x.name}: one JSON.stringify made ${longest} of ${text.length} characters`);
  }
  await emb.close();
});
