/**
 * The anthropic provider's engine against a mock that speaks Anthropic's Messages wire (test/helpers/anthropic-mock.ts,
 * typed with @anthropic-ai/sdk): the request as Anthropic takes it, the headers, streamed and whole answers,
 * reasoning, tool calls, structured output, usage with cache reads and writes, stop reasons, error statuses, the
 * refusals of what Anthropic cannot do, and the transport's failures (refused, reset, hang, break, garbage).
 */
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { createAnthropicEngine } from '../../src/engines/anthropic/index.js';
import { anthropic } from '../../src/engines/anthropic/provider.js';
import { EngineError, type GenerateEvent, type GenerateRequest, type TextEngine } from '../../src/engines/types.js';
import { withStoredSecret, type ProviderContext } from '../../src/engines/provider.js';
import { startAnthropicMock, type AnthropicMock } from '../helpers/anthropic-mock.js';
import { stallWatch } from '../helpers/wait.js';
import { collect, failure, text, reasoning, done, toolCalls } from '../helpers/engine-events.js';

const KEY = 'sk-ant-secret-123';
let up: AnthropicMock;
let engine: TextEngine;

before(async () => {
  up = await startAnthropicMock({ apiKey: KEY });
  engine = createAnthropicEngine({ baseUrl: up.url, apiKey: KEY, maxTokens: 1000 });
});
after(async () => {
  await engine.close();
  await up.close();
});
beforeEach(() => up.reset());

const req = (over: Partial<GenerateRequest> = {}): GenerateRequest => ({ model: 'claude-test', messages: [{ role: 'user', content: 'Hi' }], ...over });

// ------------------------------------------------------------------ the request

test('the request: path, headers (x-api-key, anthropic-version, no Authorization), system from system and developer messages, max_tokens default', async () => {
  await collect(
    engine.generate(
      req({
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'developer', content: [{ type: 'text', text: 'Answer in French.' }] },
          { role: 'user', content: 'Hi' },
        ],
        temperature: 0.5,
        topP: 0.9,
        stop: ['END'],
      }),
    ),
  );
  const r = up.requests[0]!;
  assert.equal(r.path, '/v1/messages');
  assert.equal(r.headers['x-api-key'], KEY);
  assert.equal(r.headers['anthropic-version'], '2023-06-01');
  assert.equal(r.headers.authorization, undefined, 'the key goes in x-api-key only');
  assert.deepEqual(r.body, {
    model: 'claude-test',
    max_tokens: 1000,
    system: 'Be brief.\n\nAnswer in French.',
    messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }],
    stop_sequences: ['END'],
    temperature: 0.5,
    top_p: 0.9,
    stream: true,
  });
});

test('the request: images (data URL -> base64 source, http URL -> url source), tool calls and results, same-role turns merged', async () => {
  await collect(
    engine.generate(
      req({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What is this?' },
              { type: 'image_url', url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'auto' },
            ],
          },
          { role: 'user', content: [{ type: 'image_url', url: 'https://example.com/cat.jpg', detail: 'high' }] },
          {
            role: 'assistant',
            content: 'Let me look.',
            toolCalls: [
              { callId: 'toolu_1', name: 'lookup', arguments: '{"q":"cat"}' },
              { callId: 'toolu_2', name: 'now', arguments: '' },
            ],
          },
          { role: 'tool', toolCallId: 'toolu_1', content: 'a cat' },
          { role: 'tool', toolCallId: 'toolu_2', content: '12:00' },
          { role: 'user', content: 'And so?' },
        ],
        tools: [{ name: 'lookup', description: 'Looks up', parameters: { type: 'object', properties: { q: { type: 'string' } } }, strict: true }, { name: 'now' }],
        toolChoice: 'auto',
        maxOutputTokens: 300,
      }),
    ),
  );
  const b = up.requests[0]!.body;
  assert.deepEqual(b.messages, [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'What is this?' },
        { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
        { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
      ],
    },
    {
      role: 'assistant',
      content: [
        { type: 'text', text: 'Let me look.' },
        { type: 'tool_use', id: 'toolu_1', name: 'lookup', input: { q: 'cat' } },
        { type: 'tool_use', id: 'toolu_2', name: 'now', input: {} },
      ],
    },
    {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'toolu_1', content: 'a cat' },
        { type: 'tool_result', tool_use_id: 'toolu_2', content: '12:00' },
        { type: 'text', text: 'And so?' },
      ],
    },
  ]);
  assert.deepEqual(b.tools, [
    { name: 'lookup', description: 'Looks up', input_schema: { type: 'object', properties: { q: { type: 'string' } } }, strict: true },
    { name: 'now', input_schema: { type: 'object', properties: {} } },
  ]);
  assert.deepEqual(b.tool_choice, { type: 'auto' });
  assert.equal(b.max_tokens, 300);
});

test('the request: tool_choice none / required -> any / a function -> tool; parallel_tool_calls false -> disable_parallel_tool_use', async () => {
  const tools = [{ name: 'f', parameters: { type: 'object' } }];
  const cases: Array<[Partial<GenerateRequest>, unknown]> = [
    [{ toolChoice: 'none' }, { type: 'none' }],
    [{ toolChoice: 'required' }, { type: 'any' }],
    [{ toolChoice: { type: 'function', name: 'f' } }, { type: 'tool', name: 'f' }],
    [
      { toolChoice: 'required', parallelToolCalls: false },
      { type: 'any', disable_parallel_tool_use: true },
    ],
    [{ parallelToolCalls: false }, { type: 'auto', disable_parallel_tool_use: true }],
  ];
  for (const [over, want] of cases) {
    up.reset();
    await collect(engine.generate(req({ tools, ...over })));
    assert.deepEqual(up.requests[0]!.body.tool_choice, want, JSON.stringify(over));
  }
});

test('refused before any call, naming the parameter: penalties, seed, temperature above 1, detail low, a participant name, an unknown effort', async () => {
  const cases: Array<[Partial<GenerateRequest>, RegExp]> = [
    [{ presencePenalty: 0.5 }, /'presence_penalty' is not supported/],
    [{ frequencyPenalty: 0.5 }, /'frequency_penalty' is not supported/],
    [{ seed: 7 }, /'seed' is not supported/],
    [{ temperature: 1.5 }, /'temperature' 1.5 .*0 to 1/],
    [{ messages: [{ role: 'user', content: [{ type: 'image_url', url: 'https://x/y.png', detail: 'low' }] }] }, /detail 'low'/],
    [{ messages: [{ role: 'user', content: 'hi', name: 'bob' }] }, /messages\[0\]\.name/],
    [{ reasoningEffort: 'extreme' }, /reasoning effort 'extreme'/],
    [{ messages: [{ role: 'user', content: [{ type: 'image_url', url: 'file:///etc/passwd' }] }] }, /data: URL \(base64\) or an http\(s\) URL/],
  ];
  for (const [over, message] of cases) {
    const { error } = await failure(engine.generate(req(over)));
    assert.equal(error.status, 400, JSON.stringify(over));
    assert.equal(error.code, 'unsupported_parameter', JSON.stringify(over));
    assert.match(error.message, message);
  }
  assert.equal(up.requests.length, 0, 'nothing was sent upstream');
});

// ------------------------------------------------------------------ the answer

test('streamed text: deltas as they come, the upstream model, usage with cache reads and writes as input, cache reads as cached, cache writes as written', async () => {
  up.script({
    text: 'Hello there, friend.',
    chunks: 3,
    ping: true,
    model: 'claude-test-20250101',
    usage: { input_tokens: 5, cache_read_input_tokens: 100, cache_creation_input_tokens: 20, output_tokens: 7 },
  });
  const evs = await collect(engine.generate(req()));
  assert.equal(evs.filter((e) => e.type === 'text_delta').length, 3);
  assert.equal(text(evs), 'Hello there, friend.');
  const d = done(evs);
  assert.equal(d.finishReason, 'stop');
  assert.equal(d.model, 'claude-test-20250101');
  assert.deepEqual(d.usage, { inputTokens: 125, outputTokens: 7, cachedTokens: 100, cacheWriteTokens: 20 });
});

test('stream false: one JSON answer is asked for (no stream field), the events are the same as streamed', async () => {
  const reply = {
    text: 'Whole answer.',
    thinking: 'Thinking it over.',
    toolUses: [{ name: 'f', input: { a: 1 } }],
    usage: { input_tokens: 3, output_tokens: 9, thinking_tokens: 4 },
  };
  up.script(reply, reply);
  const whole = await collect(engine.generate(req({ stream: false, tools: [{ name: 'f' }] })));
  assert.equal(up.requests[0]!.body.stream, undefined);
  const streamed = await collect(engine.generate(req({ tools: [{ name: 'f' }] })));
  const norm = (evs: GenerateEvent[]) => ({ text: text(evs), reasoning: reasoning(evs), calls: toolCalls(evs).map((c) => [c.name, c.arguments]), done: done(evs) });
  assert.deepEqual(norm(whole), norm(streamed));
  assert.deepEqual(norm(whole).calls, [['f', '{"a":1}']]);
  assert.deepEqual(done(whole).usage, { inputTokens: 3, outputTokens: 9, reasoningTokens: 4 });
  assert.equal(done(whole).finishReason, 'tool_calls');
});

test('reasoning: effort -> thinking with a budget (max_tokens above it; a budget named by the client as it is), thinking deltas -> reasoning before the text; redacted thinking says nothing', async () => {
  up.script({ thinking: 'Let me think about this.', chunks: 2, redacted: true, text: 'Done.' });
  const evs = await collect(engine.generate(req({ reasoningEffort: 'medium' })));
  const b = up.requests[0]!.body;
  assert.deepEqual(b.thinking, { type: 'enabled', budget_tokens: 2048 });
  assert.equal(b.max_tokens, 1000 + 2048, 'the default cap is kept for the answer, the budget on top');
  assert.equal(reasoning(evs), 'Let me think about this.');
  assert.ok(evs.findIndex((e) => e.type === 'reasoning_delta') < evs.findIndex((e) => e.type === 'text_delta'));
  assert.equal(text(evs), 'Done.');
  // a client's cap counts the thinking: it bounds the budget, and one too small for any thinking is refused
  up.reset();
  await collect(engine.generate(req({ reasoningEffort: 'high', maxOutputTokens: 3000 })));
  assert.deepEqual(up.requests[0]!.body.thinking, { type: 'enabled', budget_tokens: 2999 });
  assert.equal(up.requests[0]!.body.max_tokens, 3000);
  const { error } = await failure(engine.generate(req({ reasoningEffort: 'low', maxOutputTokens: 500 })));
  assert.equal(error.status, 400);
  assert.match(error.message, /above 1024/);
  // none: no thinking at all
  up.reset();
  await collect(engine.generate(req({ reasoningEffort: 'none' })));
  assert.equal(up.requests[0]!.body.thinking, undefined);
  // a budget the client named (the Messages API's budget_tokens) is sent as it is, not its effort's figure
  up.reset();
  await collect(engine.generate(req({ reasoningEffort: 'medium', reasoningBudget: 5000, maxOutputTokens: 8000 })));
  assert.deepEqual(up.requests[0]!.body.thinking, { type: 'enabled', budget_tokens: 5000 });
});

test('tool calls: streamed input_json_delta pieces -> start, deltas, end; two calls one after the other; a call without input gets {}', async () => {
  up.script({
    text: 'Checking.',
    toolUses: [
      { id: 'toolu_a', name: 'weather', input: ['{"city":', '"Paris"}'] },
      { id: 'toolu_b', name: 'now', input: [] },
    ],
  });
  const evs = await collect(engine.generate(req({ tools: [{ name: 'weather' }, { name: 'now' }] })));
  assert.deepEqual(toolCalls(evs), [
    { callId: 'toolu_a', name: 'weather', arguments: '{"city":"Paris"}' },
    { callId: 'toolu_b', name: 'now', arguments: '{}' },
  ]);
  assert.equal(text(evs), 'Checking.');
  assert.equal(done(evs).finishReason, 'tool_calls');
});

test('tool calls: parallel_tool_calls false keeps only the first call (should the upstream send two); max_tool_calls keeps that many', async () => {
  up.script({
    toolUses: [
      { name: 'a', input: { x: 1 } },
      { name: 'b', input: { y: 2 } },
    ],
  });
  let evs = await collect(engine.generate(req({ tools: [{ name: 'a' }, { name: 'b' }], parallelToolCalls: false })));
  assert.deepEqual(
    toolCalls(evs).map((c) => c.name),
    ['a'],
  );
  up.script({
    toolUses: [
      { name: 'a', input: { x: 1 } },
      { name: 'b', input: { y: 2 } },
      { name: 'a', input: { x: 3 } },
    ],
  });
  evs = await collect(engine.generate(req({ tools: [{ name: 'a' }, { name: 'b' }], maxToolCalls: 2 })));
  assert.deepEqual(
    toolCalls(evs).map((c) => c.arguments),
    ['{"x":1}', '{"y":2}'],
  );
  assert.equal(up.requests[1]!.body.tool_choice, undefined, 'more than one call allowed: nothing to tell Anthropic');
});

test('structured output: a forced tool of the format name, its input streamed back as the text, finish stop (streamed and whole)', async () => {
  const schema = { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] };
  for (const stream of [true, false]) {
    up.reset();
    up.script((body) => ({ toolUses: [{ name: body.tools[0].name, input: ['{"answer":', '"42"}'] }] }));
    const evs = await collect(engine.generate(req({ stream, format: { type: 'json_schema', name: 'the answer', schema, strict: true } })));
    const b = up.requests[0]!.body;
    assert.deepEqual(b.tools, [
      { name: 'the_answer', description: 'Give the answer as the input of this tool: it is the JSON object the user asked for.', input_schema: schema, strict: true },
    ]);
    assert.deepEqual(b.tool_choice, { type: 'tool', name: 'the_answer' });
    assert.deepEqual(JSON.parse(text(evs)), { answer: '42' });
    assert.equal(toolCalls(evs).length, 0, 'no tool call for the client');
    assert.equal(done(evs).finishReason, 'stop');
  }
  // JSON mode: any object; with the client's own tools, the model must call one of them or answer
  up.reset();
  up.script({ toolUses: [{ name: 'json_answer', input: { ok: true } }] });
  const evs = await collect(engine.generate(req({ format: { type: 'json_object' }, tools: [{ name: 'f' }] })));
  assert.deepEqual(up.requests[0]!.body.tool_choice, { type: 'any' });
  assert.deepEqual(
    up.requests[0]!.body.tools.map((t: { name: string }) => t.name),
    ['f', 'json_answer'],
  );
  assert.equal(text(evs), '{"ok":true}');
  // with reasoning: Anthropic refuses a forced tool with thinking, so Portico says so before calling
  const { error } = await failure(engine.generate(req({ format: { type: 'json_object' }, reasoningEffort: 'low' })));
  assert.equal(error.code, 'unsupported_parameter');
  assert.match(error.message, /Structured output .* with reasoning/);
});

test('stop reasons: max_tokens -> length (a cut call says so), stop_sequence -> stop, refusal -> content_filter', async () => {
  up.script({ toolUses: [{ name: 'f', input: ['{"a":'] }], stopReason: 'max_tokens' }, { text: 'a b', stopReason: 'stop_sequence' }, { text: 'I cannot', stopReason: 'refusal' });
  let evs = await collect(engine.generate(req({ tools: [{ name: 'f' }] })));
  assert.deepEqual(toolCalls(evs), [{ callId: toolCalls(evs)[0]!.callId, name: 'f', arguments: '{"a":', incomplete: true }]);
  assert.equal(done(evs).finishReason, 'length');
  evs = await collect(engine.generate(req()));
  assert.equal(done(evs).finishReason, 'stop');
  evs = await collect(engine.generate(req()));
  assert.equal(done(evs).finishReason, 'content_filter');
});

// ------------------------------------------------------------------ errors

test('error statuses: 400 with the message, 401/403 an operator problem without the body, 404 retryable, 413, a prompt too long', async () => {
  up.script(
    { status: 400, errorMessage: 'messages: roles must alternate' },
    { status: 401, errorMessage: `invalid x-api-key ${KEY}` },
    { status: 403, errorMessage: 'no access' },
    { status: 404, errorMessage: 'model: claude-nope' },
    { status: 413, errorMessage: 'Request exceeds the maximum allowed number of bytes.' },
    { status: 400, errorMessage: 'prompt is too long: 250000 tokens > 200000 maximum' },
  );
  let { error } = await failure(engine.generate(req()));
  assert.deepEqual([error.status, error.retryable, error.upstreamStatus], [400, false, 400]);
  assert.match(error.message, /roles must alternate/);
  for (const s of [401, 403]) {
    ({ error } = await failure(engine.generate(req())));
    assert.deepEqual([error.status, error.code, error.retryable], [502, 'upstream_auth_failed', true], String(s));
    assert.doesNotMatch(error.message, /sk-ant|no access/);
  }
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.status, error.retryable], [502, true]);
  assert.match(error.message, /claude-nope/);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.status, error.code], [413, 'payload_too_large']);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.status, error.code], [400, 'context_length_exceeded']);
});

test('429 and 529 (overloaded): retryable, with the retry-after passed on; 500 a retryable 502', async () => {
  up.script(
    { status: 429, errorMessage: 'Number of request tokens has exceeded your rate limit', headers: { 'retry-after': '7' } },
    { status: 529, errorMessage: 'Overloaded', headers: { 'retry-after': '2' } },
    { status: 500, errorMessage: 'Internal server error' },
  );
  let { error } = await failure(engine.generate(req()));
  assert.deepEqual([error.status, error.code, error.retryable, error.retryAfterMs], [429, 'rate_limit_exceeded', true, 7000]);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.status, error.code, error.retryable, error.retryAfterMs], [503, 'engine_unavailable', true, 2000]);
  assert.match(error.message, /overloaded/i);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.status, error.retryable], [502, true]);
});

test('an error event mid-stream: the events before it, then a retryable failure that says what Anthropic said', async () => {
  up.script({ text: ['one ', 'two ', 'three'], errorAfter: 4, errorMessage: 'Overloaded' });
  const { events, error } = await failure(engine.generate(req()));
  assert.equal(text(events), 'one two ');
  assert.equal(error.retryable, true);
  assert.match(error.message, /mid-stream \(overloaded_error\): Overloaded/);
  assert.ok(!events.some((e) => e.type === 'done'));
});

test('the key never leaks: an upstream that echoes it in an error, through the provider (redacted at its boundary)', async () => {
  const e = await anthropic.create.text!({ name: 'c', type: 'text', base_url: up.url, api_key_env: 'MY_ANTHROPIC_KEY' }, ctx({ MY_ANTHROPIC_KEY: KEY }));
  up.script({ status: 400, errorMessage: `your key ${KEY} cannot do that` }, { text: ['a'], errorAfter: 2, errorMessage: `bad ${KEY}` });
  let { error } = await failure(e.generate(req()));
  assert.doesNotMatch(error.message, /sk-ant-secret/);
  assert.match(error.message, /your key \*\*\* cannot/);
  ({ error } = await failure(e.generate(req())));
  assert.doesNotMatch(error.message, /sk-ant-secret/);
  await e.close();
});

// ------------------------------------------------------------------ the transport's failures

test('refused, reset, garbage, a stream that breaks or ends without a stop reason: clear retryable failures', async () => {
  const server = http.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as import('node:net').AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  const refused = createAnthropicEngine({ baseUrl: `http://127.0.0.1:${port}`, apiKey: KEY });
  let { error } = await failure(refused.generate(req()));
  assert.deepEqual([error.code, error.status, error.retryable], ['upstream_unavailable', 502, true]);
  assert.match(error.message, /ECONNREFUSED/);
  await refused.close();

  up.script(
    { reset: true },
    { raw: ['this is not an event stream\n\n'] },
    { rawJson: '{"id": "msg_1", "content": [' },
    { text: ['one ', 'two ', 'three'], breakAfter: 4 },
    { text: 'cut', stopReason: null, noStop: true },
    { text: 'whole', noStop: true },
  );
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.code, error.retryable], ['upstream_unavailable', true]);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.code, error.retryable], ['upstream_stream_broken', true], `garbage instead of events: ${error.message} (${up.requests.length} requests)`);
  ({ error } = await failure(engine.generate(req({ stream: false }))));
  assert.deepEqual([error.status, error.retryable], [502, true], 'an unreadable JSON answer');
  let r = await failure(engine.generate(req()));
  assert.equal(r.error.code, 'upstream_stream_broken');
  assert.equal(text(r.events), 'one two ');
  r = await failure(engine.generate(req()));
  assert.equal(r.error.code, 'upstream_stream_broken');
  assert.match(r.error.message, /ended before the answer was finished/);
  // message_delta said why it stopped: the answer is whole though its message_stop was lost
  const evs = await collect(engine.generate(req()));
  assert.equal(text(evs), 'whole');
  assert.equal(done(evs).finishReason, 'stop');
});

test('no headers within timeoutMs -> 504; a stream silent past it mid-way -> 504 after what came; the upstream request is closed', async () => {
  const e = createAnthropicEngine({ baseUrl: up.url, apiKey: KEY, timeoutMs: 500 });
  up.script({ hang: true }, { text: ['a ', 'b'], hangAfter: 3 });
  const stalls = stallWatch();
  const t0 = Date.now();
  const { error } = await failure(e.generate(req()));
  assert.deepEqual([error.code, error.status, error.retryable], ['upstream_unavailable', 504, true]);
  assert.ok(Date.now() - t0 < 2500 + stalls.stop(), `the timeout came after ${Date.now() - t0} ms`);
  await up.requests[0]!.closed;
  assert.equal(up.requests[0]!.aborted, true);
  const r = await failure(e.generate(req()));
  assert.equal(r.error.status, 504);
  assert.equal(text(r.events), 'a ');
  await e.close();
});

test('abort: the signal closes the upstream request mid-stream', async () => {
  up.script({ text: ['a', 'b', 'c', 'd'], hangAfter: 3 });
  const ctl = new AbortController();
  const it = engine.generate(req({ signal: ctl.signal }))[Symbol.asyncIterator]();
  const first = await it.next();
  assert.equal((first.value as GenerateEvent).type, 'text_delta');
  ctl.abort();
  await assert.rejects(it.next(), (e: unknown) => e instanceof EngineError && e.code === 'aborted');
  await up.requests[0]!.closed;
  assert.equal(up.requests[0]!.aborted, true);
});

// ------------------------------------------------------------------ the provider

function ctx(env: Record<string, string | undefined>): ProviderContext {
  return { env, ttsPoolSize: 1, llamaGpu: 'cpu', log: { info() {}, warn() {} } };
}

test('provider: the key from ANTHROPIC_API_KEY by default, from api_key_env, or stored; none -> a 503 that says what to set', async () => {
  const seen = async (e: TextEngine) => {
    up.reset();
    await collect(e.generate(req()));
    await e.close();
    return up.requests[0]!.headers['x-api-key'];
  };
  assert.equal(await seen(await anthropic.create.text!({ name: 'c', type: 'text', base_url: up.url }, ctx({ ANTHROPIC_API_KEY: KEY }))), KEY);
  const stored = withStoredSecret({ name: 'c', type: 'text' as const, base_url: up.url }, { apiKey: KEY, version: '1' });
  assert.equal(await seen(await anthropic.create.text!(stored, ctx({}))), KEY);
  await assert.rejects(anthropic.create.text!({ name: 'c', type: 'text', base_url: up.url }, ctx({})), (e: unknown) => {
    assert.ok(e instanceof EngineError);
    assert.equal(e.status, 503);
    assert.match(e.message, /has no key: set ANTHROPIC_API_KEY/);
    return true;
  });
  // anthropic_version, anthropic_beta and max_tokens of the model file
  const e = await anthropic.create.text!(
    { name: 'c', type: 'text', base_url: up.url, anthropic_version: '2024-01-01', anthropic_beta: ['a-1', 'b-2'], max_tokens: 77 },
    ctx({ ANTHROPIC_API_KEY: KEY }),
  );
  up.reset();
  await collect(e.generate(req()));
  assert.equal(up.requests[0]!.headers['anthropic-version'], '2024-01-01');
  assert.equal(up.requests[0]!.headers['anthropic-beta'], 'a-1,b-2');
  assert.equal(up.requests[0]!.body.max_tokens, 77);
  await e.close();
});

test('provider: the model-file check (base_url, api_key_env) and the probes (GET /v1/models, a one-token message)', async () => {
  assert.match(anthropic.check!({ name: 'c', type: 'text', base_url: 'ftp://x' }) ?? '', /http/);
  assert.match(anthropic.check!({ name: 'c', type: 'text', api_key_env: 'NOPE' }, {}) ?? '', /NOPE, which is not set/);
  assert.equal(anthropic.check!({ name: 'c', type: 'text' }, {}), undefined);
  await engine.probe!('models', 'claude-test', AbortSignal.timeout(5000));
  assert.equal(up.requests[0]!.path, '/v1/models');
  assert.equal(up.requests[0]!.headers['x-api-key'], KEY);
  await engine.probe!('completion', 'claude-test', AbortSignal.timeout(5000));
  assert.deepEqual(up.requests[1]!.body, { model: 'claude-test', max_tokens: 1, messages: [{ role: 'user', content: 'ping' }] });
});

test('prompt caching (cache_prompt): cache_control on the system prompt and on the last block of the last turn', async () => {
  const e = createAnthropicEngine({ baseUrl: up.url, apiKey: KEY, cachePrompt: true });
  await collect(
    e.generate(
      req({
        messages: [
          { role: 'system', content: 'Long rules.' },
          { role: 'user', content: 'Hi' },
        ],
      }),
    ),
  );
  const b = up.requests[0]!.body;
  assert.deepEqual(b.system, [{ type: 'text', text: 'Long rules.', cache_control: { type: 'ephemeral' } }]);
  assert.deepEqual(b.messages, [{ role: 'user', content: [{ type: 'text', text: 'Hi', cache_control: { type: 'ephemeral' } }] }]);
  await e.close();
});

test("the mock speaks Anthropic's wire: the official SDK reads its streamed and whole answers (so the engine is tested against that wire)", async () => {
  const { default: Anthropic } = await import('@anthropic-ai/sdk');
  const sdk = new Anthropic({ apiKey: KEY, baseURL: up.url, maxRetries: 0 });
  up.script(
    {
      thinking: 'Hmm.',
      text: 'Hello there.',
      chunks: 2,
      toolUses: [{ name: 'f', input: ['{"a":', '1}'] }],
      ping: true,
      usage: { input_tokens: 4, output_tokens: 6, cache_read_input_tokens: 2 },
    },
    { text: 'Whole.' },
    { status: 529, errorMessage: 'Overloaded' },
  );
  const final = await sdk.messages
    .stream({ model: 'claude-test', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }], tools: [{ name: 'f', input_schema: { type: 'object' } }] })
    .finalMessage();
  assert.deepEqual(
    final.content.map((b) => b.type),
    ['thinking', 'text', 'tool_use'],
  );
  assert.equal(final.content[1]!.type === 'text' && final.content[1].text, 'Hello there.');
  assert.deepEqual(final.content[2]!.type === 'tool_use' && final.content[2].input, { a: 1 });
  assert.equal(final.stop_reason, 'tool_use');
  assert.deepEqual([final.usage.input_tokens, final.usage.cache_read_input_tokens, final.usage.output_tokens], [4, 2, 6]);
  const whole = await sdk.messages.create({ model: 'claude-test', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(whole.content[0]!.type === 'text' && whole.content[0].text, 'Whole.');
  await assert.rejects(sdk.messages.create({ model: 'claude-test', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }), (e: unknown) => {
    assert.ok(e instanceof Anthropic.APIError);
    assert.equal(e.status, 529);
    assert.match(e.message, /Overloaded/);
    return true;
  });
});
