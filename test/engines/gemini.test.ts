/**
 * The gemini provider's engines against a mock that speaks Gemini's wire (test/helpers/gemini-mock.ts, typed with
 * @google/genai): the request as Gemini takes it, the key header, streamed and whole answers, thinking, function
 * calls, structured output, safety blocks, usage with cached and thought tokens, Google's error statuses, the
 * refusals of what Gemini cannot do, the transport's failures, embeddings, and the official client against the mock.
 */
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { createGeminiEngine } from '../../src/engines/gemini/index.js';
import { createGeminiEmbeddingsEngine } from '../../src/engines/gemini/embeddings.js';
import { gemini } from '../../src/engines/gemini/provider.js';
import { EngineError, type GenerateEvent, type GenerateRequest, type TextEngine } from '../../src/engines/types.js';
import type { ProviderContext } from '../../src/engines/provider.js';
import { startGeminiMock, type GeminiMock } from '../helpers/gemini-mock.js';
import { stallWatch } from '../helpers/wait.js';
import { startBlackHole } from '../helpers/black-hole.js';
import { collect, failure, text, reasoning, done, toolCalls } from '../helpers/engine-events.js';

const KEY = 'AIza-secret-123';
let up: GeminiMock;
let engine: TextEngine;

before(async () => {
  up = await startGeminiMock({ apiKey: KEY });
  engine = createGeminiEngine({ baseUrl: up.url, apiKey: KEY });
});
after(async () => {
  await engine.close();
  await up.close();
});
beforeEach(() => up.reset());

const req = (over: Partial<GenerateRequest> = {}): GenerateRequest => ({ model: 'gemini-test', messages: [{ role: 'user', content: 'Hi' }], ...over });

// ------------------------------------------------------------------ the request

test('the request: path, key header (x-goog-api-key, no Authorization, no key in the query), systemInstruction, contents, generationConfig', async () => {
  const evs = await collect(
    engine.generate(
      req({
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'developer', content: 'Answer in French.' },
          { role: 'user', content: 'Hi' },
          { role: 'assistant', content: 'Salut.' },
          { role: 'user', content: 'Again' },
        ],
        temperature: 0.3,
        topP: 0.9,
        maxOutputTokens: 50,
        stop: ['END'],
        seed: 7,
        presencePenalty: 0.5,
        frequencyPenalty: 0.25,
      }),
    ),
  );
  assert.equal(text(evs), 'Hello from Gemini.');
  const r = up.requests[0]!;
  assert.equal(r.path, '/v1beta/models/gemini-test:streamGenerateContent');
  assert.equal(r.query.get('alt'), 'sse');
  assert.equal(r.query.get('key'), null);
  assert.equal(r.headers['x-goog-api-key'], KEY);
  assert.equal(r.headers.authorization, undefined);
  assert.deepEqual(r.body, {
    contents: [
      { role: 'user', parts: [{ text: 'Hi' }] },
      { role: 'model', parts: [{ text: 'Salut.' }] },
      { role: 'user', parts: [{ text: 'Again' }] },
    ],
    systemInstruction: { parts: [{ text: 'Be brief.\n\nAnswer in French.' }] },
    generationConfig: { temperature: 0.3, topP: 0.9, maxOutputTokens: 50, stopSequences: ['END'], presencePenalty: 0.5, frequencyPenalty: 0.25, seed: 7 },
  });
});

test('the request: images (data URL -> inlineData, http URL -> fileData with its type), detail -> mediaResolution, tool calls and results by name, turns merged', async () => {
  await collect(
    engine.generate(
      req({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What is this?' },
              { type: 'image_url', url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'high' },
              { type: 'image_url', url: 'https://example.com/cat.JPG?x=1', detail: 'high' },
            ],
          },
          {
            role: 'assistant',
            content: '',
            toolCalls: [
              { callId: 'c1', name: 'look', arguments: '{"q":"cat"}' },
              { callId: 'c2', name: 'size', arguments: '' },
            ],
          },
          { role: 'tool', toolCallId: 'c1', content: 'a cat' },
          { role: 'tool', toolCallId: 'c2', content: [{ type: 'text', text: 'small' }] },
          { role: 'user', content: 'So?' },
        ],
      }),
    ),
  );
  const b = up.requests[0]!.body;
  assert.deepEqual(b.contents, [
    {
      role: 'user',
      parts: [
        { text: 'What is this?' },
        { inlineData: { mimeType: 'image/png', data: 'iVBORw0KGgo=' } },
        { fileData: { mimeType: 'image/jpeg', fileUri: 'https://example.com/cat.JPG?x=1' } },
      ],
    },
    { role: 'model', parts: [{ functionCall: { name: 'look', args: { q: 'cat' } } }, { functionCall: { name: 'size', args: {} } }] },
    {
      role: 'user',
      parts: [{ functionResponse: { name: 'look', response: { output: 'a cat' } } }, { functionResponse: { name: 'size', response: { output: 'small' } } }, { text: 'So?' }],
    },
  ]);
  assert.equal(b.generationConfig.mediaResolution, 'MEDIA_RESOLUTION_HIGH');
  await collect(engine.generate(req({ messages: [{ role: 'user', content: [{ type: 'image_url', url: 'data:image/webp;base64,AAAA', detail: 'low' }] }] })));
  assert.equal(up.requests[1]!.body.generationConfig.mediaResolution, 'MEDIA_RESOLUTION_LOW');
});

test('the request: tools -> functionDeclarations with the JSON schema as parametersJsonSchema; tool_choice auto/none/required/a function', async () => {
  const tools = [
    { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false } },
    { name: 'now' },
  ];
  const choices: [GenerateRequest['toolChoice'], unknown][] = [
    [undefined, undefined],
    ['auto', { functionCallingConfig: { mode: 'AUTO' } }],
    ['none', { functionCallingConfig: { mode: 'NONE' } }],
    ['required', { functionCallingConfig: { mode: 'ANY' } }],
    [{ type: 'function', name: 'now' }, { functionCallingConfig: { mode: 'ANY', allowedFunctionNames: ['now'] } }],
  ];
  for (const [toolChoice, want] of choices) {
    up.reset();
    await collect(engine.generate(req({ tools, toolChoice })));
    const b = up.requests[0]!.body;
    assert.deepEqual(b.tools, [{ functionDeclarations: [{ name: 'get_weather', description: 'Weather', parametersJsonSchema: tools[0]!.parameters }, { name: 'now' }] }]);
    assert.deepEqual(b.toolConfig, want);
  }
});

test('refused before any call, naming the parameter: a participant name, an image URL of unknown type, mixed detail, a non-http URL, an unknown effort, an unknown call id, images in system or tool output', async () => {
  const cases: [Partial<GenerateRequest>, RegExp, string][] = [
    [{ messages: [{ role: 'user', content: 'Hi', name: 'bob' }] }, /messages\[0\]\.name/, 'unsupported_parameter'],
    [{ messages: [{ role: 'user', content: [{ type: 'image_url', url: 'https://example.com/img' }] }] }, /extension/, 'unsupported_parameter'],
    [{ messages: [{ role: 'user', content: [{ type: 'image_url', url: 'ftp://example.com/a.png' }] }] }, /data: URL/, 'unsupported_parameter'],
    [
      {
        messages: [
          {
            role: 'user',
            content: [
              { type: 'image_url', url: 'data:image/png;base64,AA', detail: 'low' },
              { type: 'image_url', url: 'data:image/png;base64,AA' },
            ],
          },
        ],
      },
      /detail/,
      'unsupported_parameter',
    ],
    [{ reasoningEffort: 'extreme' }, /reasoning effort 'extreme'/, 'unsupported_parameter'],
    [
      {
        messages: [
          { role: 'system', content: [{ type: 'image_url', url: 'data:image/png;base64,AA' }] },
          { role: 'user', content: 'x' },
        ],
      },
      /system/,
      'unsupported_parameter',
    ],
    [
      {
        messages: [
          { role: 'user', content: 'x' },
          { role: 'tool', toolCallId: 'nope', content: 'r' },
        ],
      },
      /'nope'/,
      'invalid_value',
    ],
    [{ messages: [{ role: 'assistant', content: '', toolCalls: [{ callId: 'c', name: 'f', arguments: '[1]' }] }] }, /JSON object/, 'invalid_value'],
    [{ toolChoice: { type: 'function', name: 'f' } }, /no tools/, 'invalid_value'],
  ];
  for (const [over, msg, code] of cases) {
    const { error } = await failure(engine.generate(req(over)));
    assert.equal(error.status, 400, String(msg));
    assert.equal(error.code, code, String(msg));
    assert.match(error.message, msg);
  }
  assert.equal(up.requests.length, 0, 'nothing was sent');
});

// ------------------------------------------------------------------ the answer

test('streamed text: deltas as they come, the model version, usage (prompt with its cached part, candidates and thoughts as output)', async () => {
  up.script({
    text: 'Hello there, friend.',
    chunks: 3,
    modelVersion: 'gemini-test-001',
    usage: { promptTokenCount: 100, cachedContentTokenCount: 60, candidatesTokenCount: 5, thoughtsTokenCount: 7, totalTokenCount: 112 },
  });
  const evs = await collect(engine.generate(req()));
  assert.equal(evs.filter((e) => e.type === 'text_delta').length, 3);
  assert.equal(text(evs), 'Hello there, friend.');
  const d = done(evs);
  assert.equal(d.finishReason, 'stop');
  assert.equal(d.model, 'gemini-test-001');
  assert.deepEqual(d.usage, { inputTokens: 100, outputTokens: 12, cachedTokens: 60, reasoningTokens: 7 });
});

test('stream false: generateContent is called, the events are the same as streamed', async () => {
  up.script({ text: 'Whole answer.', chunks: 2 });
  const evs = await collect(engine.generate(req({ stream: false })));
  const r = up.requests[0]!;
  assert.equal(r.path, '/v1beta/models/gemini-test:generateContent');
  assert.equal(r.query.get('alt'), null);
  assert.equal(text(evs), 'Whole answer.');
  assert.equal(done(evs).finishReason, 'stop');
});

test('thinking: effort -> thinkingConfig with a budget and includeThoughts, thought parts -> reasoning before the text; none -> budget 0', async () => {
  up.script({ thought: 'Let me think.', text: 'Done.', usage: { promptTokenCount: 3, candidatesTokenCount: 2, thoughtsTokenCount: 9 } });
  const evs = await collect(engine.generate(req({ reasoningEffort: 'medium' })));
  assert.deepEqual(up.requests[0]!.body.generationConfig, { thinkingConfig: { thinkingBudget: 2048, includeThoughts: true } });
  assert.equal(reasoning(evs), 'Let me think.');
  assert.equal(text(evs), 'Done.');
  assert.ok(evs.findIndex((e) => e.type === 'reasoning_delta') < evs.findIndex((e) => e.type === 'text_delta'));
  assert.deepEqual(done(evs).usage, { inputTokens: 3, outputTokens: 11, reasoningTokens: 9 });
  await collect(engine.generate(req({ reasoningEffort: 'none' })));
  assert.deepEqual(up.requests[1]!.body.generationConfig, { thinkingConfig: { thinkingBudget: 0 } });
  // whole: the same reasoning
  up.script({ thought: ['a', 'b'], text: 'c' });
  const w = await collect(engine.generate(req({ reasoningEffort: 'low', stream: false })));
  assert.equal(reasoning(w), 'ab');
  assert.equal(text(w), 'c');
});

test("function calls: whole calls with stable generated ids (or Gemini's own), finish tool_calls; parallel_tool_calls false keeps the first", async () => {
  up.script({
    text: 'Checking.',
    calls: [
      { name: 'get_weather', args: { city: 'Paris' } },
      { name: 'now', args: {} },
      { name: 'x', args: { a: 1 }, id: 'gem-id-1' },
    ],
  });
  const evs = await collect(engine.generate(req({ tools: [{ name: 'get_weather' }, { name: 'now' }, { name: 'x' }] })));
  const calls = toolCalls(evs);
  assert.deepEqual(
    calls.map((c) => [c.name, c.arguments]),
    [
      ['get_weather', '{"city":"Paris"}'],
      ['now', '{}'],
      ['x', '{"a":1}'],
    ],
  );
  assert.match(calls[0]!.callId, /^call_[0-9a-f]{12}_0$/);
  assert.match(calls[1]!.callId, /^call_[0-9a-f]{12}_1$/);
  assert.equal(calls[2]!.callId, 'gem-id-1');
  assert.equal(done(evs).finishReason, 'tool_calls');
  // another answer: other ids (never repeated within a conversation)
  up.script({ calls: [{ name: 'now', args: {} }] });
  const again = toolCalls(await collect(engine.generate(req({ tools: [{ name: 'now' }] }))));
  assert.notEqual(again[0]!.callId, calls[1]!.callId);
  assert.notEqual(again[0]!.callId.slice(0, 17), calls[0]!.callId.slice(0, 17));

  up.script(
    {
      calls: [
        { name: 'now', args: {} },
        { name: 'now', args: { b: 2 } },
      ],
    },
    {
      calls: [
        { name: 'a', args: {} },
        { name: 'b', args: {} },
        { name: 'c', args: {} },
      ],
    },
  );
  assert.equal(toolCalls(await collect(engine.generate(req({ tools: [{ name: 'now' }], parallelToolCalls: false })))).length, 1);
  assert.equal(toolCalls(await collect(engine.generate(req({ tools: [{ name: 'a' }], maxToolCalls: 2 })))).length, 2);
  // whole
  up.script({ calls: [{ name: 'now', args: { z: true } }] });
  const w = await collect(engine.generate(req({ tools: [{ name: 'now' }], stream: false })));
  assert.deepEqual(
    toolCalls(w).map((c) => c.arguments),
    ['{"z":true}'],
  );
  assert.equal(done(w).finishReason, 'tool_calls');
});

test("thought signatures: a call's signature is given back with it; an unknown one is the documented sentinel on Gemini 3 (first call of a turn), nothing before", async () => {
  for (const stream of [true, false]) {
    up.reset();
    up.script({
      calls: [
        { name: 'f', args: { a: 1 }, signature: `c2lnLWFiYw==${stream}` },
        { name: 'f', args: { a: 2 } },
      ],
    });
    const calls = toolCalls(await collect(engine.generate(req({ tools: [{ name: 'f' }], stream }))));
    const back = (model: string) =>
      req({
        model,
        tools: [{ name: 'f' }],
        messages: [
          { role: 'user', content: 'go' },
          { role: 'assistant', content: '', toolCalls: calls.map((c) => ({ callId: c.callId, name: c.name, arguments: c.arguments })) },
          ...calls.map((c) => ({ role: 'tool' as const, toolCallId: c.callId, content: 'ok' })),
          {
            role: 'assistant',
            content: '',
            toolCalls: [
              { callId: 'from-elsewhere-1', name: 'f', arguments: '{}' },
              { callId: 'from-elsewhere-2', name: 'f', arguments: '{}' },
            ],
          },
          { role: 'tool', toolCallId: 'from-elsewhere-1', content: 'ok' },
          { role: 'tool', toolCallId: 'from-elsewhere-2', content: 'ok' },
        ],
      });
    await collect(engine.generate(back('gemini-test')));
    let turns = up.requests[1]!.body.contents.filter((c: any) => c.role === 'model');
    assert.deepEqual(
      turns.map((t: any) => t.parts.map((p: any) => p.thoughtSignature ?? null)),
      [
        [`c2lnLWFiYw==${stream}`, null],
        [null, null],
      ],
    );
    await collect(engine.generate(back('gemini-3-pro-preview')));
    turns = up.requests[2]!.body.contents.filter((c: any) => c.role === 'model');
    assert.deepEqual(
      turns.map((t: any) => t.parts.map((p: any) => p.thoughtSignature ?? null)),
      [
        [`c2lnLWFiYw==${stream}`, null],
        ['skip_thought_signature_validator', null],
      ],
    );
  }
});

test('structured output: json_schema -> responseMimeType application/json + responseJsonSchema; json_object -> the mime type alone', async () => {
  const schema = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] };
  up.script({ text: ['{"a":', '1}'] });
  const evs = await collect(engine.generate(req({ format: { type: 'json_schema', name: 'answer', schema, strict: true } })));
  assert.deepEqual(up.requests[0]!.body.generationConfig, { responseMimeType: 'application/json', responseJsonSchema: schema });
  assert.deepEqual(JSON.parse(text(evs)), { a: 1 });
  assert.equal(done(evs).finishReason, 'stop');
  await collect(engine.generate(req({ format: { type: 'json_object' } })));
  assert.deepEqual(up.requests[1]!.body.generationConfig, { responseMimeType: 'application/json' });
  await collect(engine.generate(req({ format: { type: 'text' } })));
  assert.equal(up.requests[2]!.body.generationConfig, undefined);
});

test('finish reasons: MAX_TOKENS -> length; SAFETY, RECITATION, PROHIBITED_CONTENT, BLOCKLIST, SPII -> content_filter; a blocked prompt -> content_filter with no text', async () => {
  for (const [reason, want] of [
    ['MAX_TOKENS', 'length'],
    ['SAFETY', 'content_filter'],
    ['RECITATION', 'content_filter'],
    ['PROHIBITED_CONTENT', 'content_filter'],
    ['BLOCKLIST', 'content_filter'],
    ['SPII', 'content_filter'],
    ['OTHER', 'stop'],
  ] as const) {
    up.script({ text: 'partial', finishReason: reason });
    assert.equal(done(await collect(engine.generate(req()))).finishReason, want, reason);
  }
  for (const stream of [true, false]) {
    up.script({ blockReason: 'SAFETY', usage: { promptTokenCount: 8 } });
    const evs = await collect(engine.generate(req({ stream })));
    assert.equal(text(evs), '');
    assert.equal(done(evs).finishReason, 'content_filter');
    assert.equal(done(evs).usage.inputTokens, 8);
  }
});

// ------------------------------------------------------------------ errors

test("error statuses in Google's shape: 400 with its message, a bad key (400 API_KEY_INVALID) and 403 an operator problem, 404 retryable, a prompt too long, 500 and 503", async () => {
  up.script(
    { status: 400, errorMessage: '* GenerateContentRequest.contents: contents is not specified' },
    { status: 403, errorMessage: 'Permission denied on resource project' },
    { status: 404, errorMessage: 'models/gemini-nope is not found for API version v1beta' },
    { status: 400, errorMessage: 'The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).' },
    { status: 500, errorMessage: 'An internal error has occurred.' },
    { status: 503, errorMessage: 'The model is overloaded. Please try again later.', headers: { 'retry-after': '3' } },
  );
  let { error } = await failure(engine.generate(req()));
  assert.deepEqual([error.status, error.retryable, error.upstreamStatus], [400, false, 400]);
  assert.match(error.message, /contents is not specified/);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.code, error.status, error.retryable], ['upstream_auth_failed', 502, true]);
  assert.doesNotMatch(error.message, /project/);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.status, error.retryable], [502, true]);
  assert.match(error.message, /not found/);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.code, error.status], ['context_length_exceeded', 400]);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.status, error.retryable], [502, true]);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.code, error.status, error.retryable, error.retryAfterMs], ['engine_unavailable', 503, true, 3000]);

  const wrong = createGeminiEngine({ baseUrl: up.url, apiKey: 'AIza-wrong' });
  ({ error } = await failure(wrong.generate(req())));
  assert.deepEqual([error.code, error.status, error.retryable], ['upstream_auth_failed', 502, true]);
  assert.doesNotMatch(error.message, /AIza-wrong/);
  await wrong.close();
});

test('429 RESOURCE_EXHAUSTED: retryable, the wait from retry-after, else from its RetryInfo', async () => {
  up.script(
    { status: 429, errorMessage: 'Resource has been exhausted (e.g. check quota).', retryDelay: '7s' },
    { status: 429, errorMessage: 'Quota', retryDelay: '7s', headers: { 'retry-after': '2' } },
    { status: 429, errorMessage: 'Quota' },
  );
  let { error } = await failure(engine.generate(req()));
  assert.deepEqual([error.code, error.status, error.retryable, error.retryAfterMs], ['rate_limit_exceeded', 429, true, 7000]);
  assert.match(error.message, /exhausted.*retry after 7 s/);
  ({ error } = await failure(engine.generate(req())));
  assert.equal(error.retryAfterMs, 2000);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.status, error.retryAfterMs], [429, undefined]);
});

test('an error mid-stream: the chunks before it, then a retryable failure that says what Google said', async () => {
  up.script({ text: ['one ', 'two ', 'three'], errorAfter: 2 });
  const r = await failure(engine.generate(req()));
  assert.equal(text(r.events), 'one two ');
  assert.deepEqual([r.error.code, r.error.status, r.error.retryable], ['engine_unavailable', 503, true]);
  assert.match(r.error.message, /UNAVAILABLE.*overloaded/);
});

test('refused, reset, garbage, a stream that breaks or ends without a finish reason: clear retryable failures', async () => {
  const server = http.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as import('node:net').AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  const refused = createGeminiEngine({ baseUrl: `http://127.0.0.1:${port}`, apiKey: KEY });
  let { error } = await failure(refused.generate(req()));
  assert.deepEqual([error.code, error.status, error.retryable], ['upstream_unavailable', 502, true]);
  assert.match(error.message, /ECONNREFUSED/);
  await refused.close();

  up.script(
    { reset: true },
    { raw: ['data: this is not json\n\n'] },
    { rawJson: '{"candidates": [' },
    { text: ['one ', 'two ', 'three'], breakAfter: 2 },
    { text: 'cut', finishReason: null },
  );
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.code, error.retryable], ['upstream_unavailable', true]);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.code, error.retryable], ['upstream_stream_broken', true]);
  ({ error } = await failure(engine.generate(req({ stream: false }))));
  assert.deepEqual([error.status, error.retryable], [502, true]);
  let r = await failure(engine.generate(req()));
  assert.equal(r.error.code, 'upstream_stream_broken');
  assert.equal(text(r.events), 'one two ');
  r = await failure(engine.generate(req()));
  assert.equal(r.error.code, 'upstream_stream_broken');
  assert.match(r.error.message, /ended before the answer was finished/);
  assert.equal(text(r.events), 'cut');
});

test('no headers within timeoutMs -> 504; a stream silent past it mid-way -> 504 after what came; a connect that hangs -> 504 at connectTimeoutMs', async () => {
  const e = createGeminiEngine({ baseUrl: up.url, apiKey: KEY, timeoutMs: 500 });
  up.script({ hang: true }, { text: ['a ', 'b'], hangAfter: 1 });
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

  // a connect that never completes (a listener whose backlog is full: test/helpers/black-hole.ts)
  const hole = await startBlackHole();
  const c = createGeminiEngine({ baseUrl: `http://127.0.0.1:${hole.port}`, apiKey: KEY, connectTimeoutMs: 300 });
  const stalls2 = stallWatch();
  const t1 = Date.now();
  const f = await failure(c.generate(req()));
  const ms = Date.now() - t1;
  assert.deepEqual([f.error.code, f.error.status, f.error.retryable], ['upstream_unavailable', 504, true]);
  assert.match(f.error.message, /connection within 300 ms/);
  assert.ok(ms >= 295 && ms <= 300 + 300 + stalls2.stop(), `connect timeout after ${ms} ms`);
  await c.close();
  await hole.close();
});

test('abort: the signal closes the upstream request mid-stream', async () => {
  up.script({ text: ['a', 'b', 'c', 'd'], hangAfter: 1 });
  const ctl = new AbortController();
  const it = engine.generate(req({ signal: ctl.signal }))[Symbol.asyncIterator]();
  const first = await it.next();
  assert.equal((first.value as GenerateEvent).type, 'text_delta');
  ctl.abort();
  await assert.rejects(it.next(), (e: unknown) => e instanceof EngineError && e.code === 'aborted');
  await up.requests[0]!.closed;
  assert.equal(up.requests[0]!.aborted, true);
});

// ------------------------------------------------------------------ embeddings

test('embeddings: batchEmbedContents with one request per text, dimensions -> outputDimensionality, vectors in order, usage estimated; token arrays refused', async () => {
  const emb = createGeminiEmbeddingsEngine({ baseUrl: up.url, apiKey: KEY });
  const r = await emb.embed({ model: 'text-embedding-004', input: ['hello world', 'a much longer piece of text to embed'], dimensions: 3 });
  const q = up.requests[0]!;
  assert.equal(q.path, '/v1beta/models/text-embedding-004:batchEmbedContents');
  assert.equal(q.headers['x-goog-api-key'], KEY);
  assert.deepEqual(q.body, {
    requests: [
      { model: 'models/text-embedding-004', content: { parts: [{ text: 'hello world' }] }, outputDimensionality: 3 },
      { model: 'models/text-embedding-004', content: { parts: [{ text: 'a much longer piece of text to embed' }] }, outputDimensionality: 3 },
    ],
  });
  assert.ok(Array.isArray(r.vectors), 'vectors in arrays (packed only for a large OpenAI-wire answer)');
  assert.equal(r.vectors.length, 2);
  assert.ok(r.vectors.every((v) => v.length === 3));
  assert.notDeepEqual(r.vectors[0], r.vectors[1]);
  assert.ok(r.inputTokens > 0);
  await assert.rejects(
    emb.embed({ model: 'text-embedding-004', input: [[1, 2, 3]] }),
    (e: unknown) => e instanceof EngineError && e.code === 'unsupported_parameter' && e.status === 400 && /token arrays/.test(e.message),
  );
  assert.equal(up.requests.length, 1);
  up.script({ status: 429, errorMessage: 'Quota', retryDelay: '4s' }, { rawJson: '{"embeddings":[{"values":[1,2]}]}' });
  await assert.rejects(emb.embed({ model: 'm', input: ['x'] }), (e: unknown) => e instanceof EngineError && e.status === 429 && e.retryAfterMs === 4000);
  await assert.rejects(emb.embed({ model: 'm', input: ['x', 'y'] }), (e: unknown) => e instanceof EngineError && e.status === 502 && /2 inputs/.test(e.message));
  // more than one batch takes (100): consecutive batches, the vectors in input order
  up.reset();
  const many = Array.from({ length: 150 }, (_, i) => 'x'.repeat(i + 1));
  const big = await emb.embed({ model: 'm', input: many });
  assert.deepEqual(
    up.requests.map((q) => q.body.requests.length),
    [100, 50],
  );
  assert.equal(up.requests[1]!.body.requests[0].content.parts[0].text, many[100]);
  assert.ok(Array.isArray(big.vectors));
  assert.equal(big.vectors.length, 150);
  // the mock's vector depends on the text and its place in its batch: the 101st input is the second batch's first
  assert.deepEqual(
    big.vectors[100],
    Array.from({ length: 4 }, (_, k) => ((101 + k) % 7) / 7),
  );
  await emb.close();
});

// ------------------------------------------------------------------ the provider

function ctx(env: Record<string, string | undefined>): ProviderContext {
  return { env, ttsPoolSize: 1, llamaGpu: 'cpu', log: { info() {}, warn() {} } };
}

test('provider: the key from GEMINI_API_KEY by default or api_key_env; none -> a 503 that says what to set; the model-file check', async () => {
  const spec = { name: 'g', provider: 'gemini', base_url: up.url } as never;
  const e = await gemini.create.text!(spec, ctx({ GEMINI_API_KEY: KEY }));
  await collect(e.generate(req()));
  assert.equal(up.requests[0]!.headers['x-goog-api-key'], KEY);
  await e.close();
  const e2 = await gemini.create.embeddings!({ name: 'g', provider: 'gemini', base_url: up.url, api_key_env: 'MY_G' } as never, ctx({ MY_G: KEY }));
  await e2.embed({ model: 'm', input: ['x'] });
  assert.equal(up.requests[1]!.headers['x-goog-api-key'], KEY);
  await e2.close();
  await assert.rejects(gemini.create.text!(spec, ctx({})), (err: unknown) => err instanceof EngineError && err.status === 503 && /GEMINI_API_KEY/.test(err.message));
  assert.match(gemini.check!({ name: 'g', base_url: 'ftp://x' } as never, undefined) ?? '', /http/);
  assert.equal(gemini.check!({ name: 'g', base_url: 'https://generativelanguage.googleapis.com' } as never, undefined), undefined);
});

test("the mock speaks Gemini's wire: the official @google/genai client reads its streamed and whole answers, its embeddings and its errors", async () => {
  const { GoogleGenAI, ApiError } = await import('@google/genai');
  const ai = new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: up.url } });
  up.script(
    {
      thought: 'Hmm.',
      text: 'Hello there.',
      chunks: 2,
      calls: [{ name: 'f', args: { a: 1 } }],
      usage: { promptTokenCount: 4, candidatesTokenCount: 6, cachedContentTokenCount: 2, thoughtsTokenCount: 3 },
    },
    { text: 'Whole.' },
    { status: 429, errorMessage: 'Resource has been exhausted', retryDelay: '7s' },
  );
  const stream = await ai.models.generateContentStream({ model: 'gemini-test', contents: 'hi' });
  let textOut = '';
  let calls: unknown[] = [];
  let usage: any;
  for await (const c of stream) {
    textOut += c.text ?? '';
    if (c.functionCalls) calls = calls.concat(c.functionCalls);
    if (c.usageMetadata) usage = c.usageMetadata;
  }
  assert.equal(textOut, 'Hello there.');
  assert.deepEqual(calls, [{ name: 'f', args: { a: 1 } }]);
  assert.deepEqual([usage.promptTokenCount, usage.cachedContentTokenCount, usage.thoughtsTokenCount], [4, 2, 3]);
  assert.equal(up.requests[0]!.query.get('alt'), 'sse');
  const whole = await ai.models.generateContent({ model: 'gemini-test', contents: 'hi' });
  assert.equal(whole.text, 'Whole.');
  assert.equal(whole.candidates?.[0]?.finishReason, 'STOP');
  await assert.rejects(ai.models.generateContent({ model: 'gemini-test', contents: 'hi' }), (e: unknown) => {
    assert.ok(e instanceof ApiError);
    assert.equal(e.status, 429);
    assert.match(e.message, /exhausted/);
    return true;
  });
  const emb = await ai.models.embedContent({ model: 'text-embedding-004', contents: ['a', 'bb'], config: { outputDimensionality: 5 } });
  assert.equal(emb.embeddings?.length, 2);
  assert.equal(emb.embeddings?.[0]?.values?.length, 5);
  assert.match(up.requests[3]!.path, /:batchEmbedContents$/);
});
