/**
 * The bedrock provider's engine against a mock that speaks Bedrock's Converse wire (test/helpers/bedrock-mock.ts:
 * Converse JSON and AWS's binary event stream, every request's SigV4 signature checked): our SigV4 equal to the
 * AWS SDK's own signer's, the request as Converse takes it, streamed and whole answers, reasoning, tool calls,
 * structured output, usage with cache reads and writes, stop reasons, error statuses and throttling's
 * retry-after, the refusals of what Converse cannot do, and the transport's failures (refused, reset, garbage, a
 * frame with a bad CRC, a break mid-stream, a hang at connect and before the first byte). The official
 * BedrockRuntimeClient reads the mock: the mock speaks the real wire.
 */
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { createBedrockEngine } from '../../src/engines/bedrock/index.js';
import { bedrock } from '../../src/engines/bedrock/provider.js';
import { signRequest } from '../../src/engines/bedrock/sigv4.js';
import { EventStreamDecoder } from '../../src/engines/bedrock/eventstream.js';
import { EngineError, type GenerateEvent, type GenerateRequest, type TextEngine } from '../../src/engines/types.js';
import type { ProviderContext } from '../../src/engines/provider.js';
import { parseModelConfig } from '../../src/models/config.js';
import { startBedrockMock, eventFrame, type BedrockMock } from '../helpers/bedrock-mock.js';
import { stallWatch } from '../helpers/wait.js';
import { collect, failure, text, reasoning, done, toolCalls } from '../helpers/engine-events.js';

const CREDS = { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY' };
const REGION = 'us-east-1';
const MODEL = 'anthropic.claude-3-5-haiku-20241022-v1:0';
let up: BedrockMock;
let engine: TextEngine;

before(async () => {
  up = await startBedrockMock({ credentials: CREDS, region: REGION });
  engine = createBedrockEngine({ baseUrl: up.url, region: REGION, credentials: CREDS, maxTokens: 1000 });
});
after(async () => {
  await engine.close();
  await up.close();
});
beforeEach(() => up.reset());

const req = (over: Partial<GenerateRequest> = {}): GenerateRequest => ({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], ...over });

// ------------------------------------------------------------------ SigV4

test("SigV4: our Authorization header is the AWS SDK signer's own (@smithy/signature-v4), with and without a session token", async () => {
  const { SignatureV4 } = await import('@smithy/signature-v4');
  const { Sha256 } = await import('@smithy/core/checksum');
  const date = new Date('2026-03-04T05:06:07.890Z');
  const body = JSON.stringify({ messages: [{ role: 'user', content: [{ text: 'Héllo' }] }] });
  for (const credentials of [CREDS, { ...CREDS, sessionToken: 'FwoGZXIvYXdzEXAMPLE//token+/=' }]) {
    for (const path of [`/model/${encodeURIComponent(MODEL)}/converse-stream`, '/model/amazon.nova-lite-v1%3A0/converse']) {
      const headers = { 'content-type': 'application/json', accept: 'application/json' };
      const ours = signRequest({ method: 'POST', host: 'bedrock-runtime.us-east-1.amazonaws.com', path, headers, body, region: REGION, service: 'bedrock', credentials, date });
      const signer = new SignatureV4({ credentials, region: REGION, service: 'bedrock', sha256: Sha256 });
      const theirs = await signer.sign(
        {
          method: 'POST',
          protocol: 'https:',
          hostname: 'bedrock-runtime.us-east-1.amazonaws.com',
          path,
          query: {},
          headers: { ...headers, host: 'bedrock-runtime.us-east-1.amazonaws.com' },
          body,
        },
        { signingDate: date },
      );
      assert.equal(ours.authorization, theirs.headers.authorization, `${path} ${credentials === CREDS ? '' : '(session)'}`);
      assert.equal(ours['x-amz-date'], theirs.headers['x-amz-date']);
      assert.equal(ours['x-amz-content-sha256'], theirs.headers['x-amz-content-sha256']);
      assert.equal(ours['x-amz-security-token'], theirs.headers['x-amz-security-token']);
    }
  }
  // a different body or secret: a different signature (the mock's check is not a formality)
  const a = signRequest({ method: 'POST', host: 'h', path: '/model/m/converse', headers: {}, body: 'a', region: REGION, service: 'bedrock', credentials: CREDS, date });
  const b = signRequest({ method: 'POST', host: 'h', path: '/model/m/converse', headers: {}, body: 'b', region: REGION, service: 'bedrock', credentials: CREDS, date });
  assert.notEqual(a.authorization, b.authorization);
});

test('every request is signed (the mock recomputes the signature); a wrong secret is refused by the mock: an operator problem (502)', async () => {
  await collect(engine.generate(req()));
  assert.equal(up.requests[0]!.signed, true);
  assert.match(
    String(up.requests[0]!.headers.authorization),
    /^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\/\d{8}\/us-east-1\/bedrock\/aws4_request, SignedHeaders=[^,]*host;x-amz-content-sha256;x-amz-date, Signature=[0-9a-f]{64}$/,
  );
  const bad = createBedrockEngine({ baseUrl: up.url, region: REGION, credentials: { ...CREDS, secretAccessKey: 'wrong' } });
  const { error } = await failure(bad.generate(req()));
  assert.deepEqual([error.code, error.status, error.retryable], ['upstream_auth_failed', 502, true]);
  assert.equal(up.requests[1]!.signed, false);
  await bad.close();
});

test('a large request (its bytes made in slices by the shared transport, non-ASCII included) is signed over those exact bytes', async () => {
  const big = 'é'.repeat(700_000) + ' fin';
  const evs = await collect(engine.generate(req({ messages: [{ role: 'user', content: big }] })));
  assert.equal(done(evs).finishReason, 'stop');
  assert.equal(up.requests[0]!.signed, true);
  assert.equal(up.requests[0]!.body.messages[0].content[0].text, big);
});

// ------------------------------------------------------------------ the request

test('the request: path (model id encoded), system blocks, inferenceConfig, no model in the body; stream false -> /converse', async () => {
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
        maxOutputTokens: 200,
      }),
    ),
  );
  const r = up.requests[0]!;
  assert.equal(r.path, '/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream');
  assert.equal(r.modelId, MODEL);
  assert.equal(r.stream, true);
  assert.deepEqual(r.body, {
    messages: [{ role: 'user', content: [{ text: 'Hi' }] }],
    system: [{ text: 'Be brief.' }, { text: 'Answer in French.' }],
    inferenceConfig: { maxTokens: 200, temperature: 0.5, topP: 0.9, stopSequences: ['END'] },
  });
  await collect(engine.generate(req({ stream: false })));
  assert.equal(up.requests[1]!.stream, false);
  assert.deepEqual(up.requests[1]!.body, { messages: [{ role: 'user', content: [{ text: 'Hi' }] }] });
});

test('the request: images from data URLs -> bytes, tool calls and results, consecutive same-role turns merged, tools and tool_choice', async () => {
  await collect(
    engine.generate(
      req({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What is this?' },
              { type: 'image_url', url: 'data:image/png;base64,iVBORw0KGgo=' },
            ],
          },
          { role: 'user', content: 'Quickly.' },
          {
            role: 'assistant',
            content: 'Let me look.',
            toolCalls: [
              { callId: 't1', name: 'lookup', arguments: '{"q":"cat"}' },
              { callId: 't2', name: 'now', arguments: '' },
            ],
          },
          { role: 'tool', toolCallId: 't1', content: 'a cat' },
          { role: 'tool', toolCallId: 't2', content: '12:00' },
          { role: 'user', content: 'And so?' },
        ],
        tools: [{ name: 'lookup', description: 'Looks up', parameters: { type: 'object', properties: { q: { type: 'string' } } } }, { name: 'now' }],
        toolChoice: 'required',
      }),
    ),
  );
  assert.deepEqual(up.requests[0]!.body, {
    messages: [
      { role: 'user', content: [{ text: 'What is this?' }, { image: { format: 'png', source: { bytes: 'iVBORw0KGgo=' } } }, { text: 'Quickly.' }] },
      {
        role: 'assistant',
        content: [{ text: 'Let me look.' }, { toolUse: { toolUseId: 't1', name: 'lookup', input: { q: 'cat' } } }, { toolUse: { toolUseId: 't2', name: 'now', input: {} } }],
      },
      {
        role: 'user',
        content: [{ toolResult: { toolUseId: 't1', content: [{ text: 'a cat' }] } }, { toolResult: { toolUseId: 't2', content: [{ text: '12:00' }] } }, { text: 'And so?' }],
      },
    ],
    toolConfig: {
      tools: [
        { toolSpec: { name: 'lookup', description: 'Looks up', inputSchema: { json: { type: 'object', properties: { q: { type: 'string' } } } } } },
        { toolSpec: { name: 'now', inputSchema: { json: { type: 'object', properties: {} } } } },
      ],
      toolChoice: { any: {} },
    },
  });
  await collect(engine.generate(req({ tools: [{ name: 'now' }], toolChoice: { type: 'function', name: 'now' } })));
  assert.deepEqual(up.requests[1]!.body.toolConfig.toolChoice, { tool: { name: 'now' } });
  await collect(engine.generate(req({ tools: [{ name: 'now' }], toolChoice: 'auto' })));
  assert.deepEqual(up.requests[2]!.body.toolConfig.toolChoice, { auto: {} });
  // none: Converse has no such choice, the tools are not sent
  await collect(engine.generate(req({ tools: [{ name: 'now' }], toolChoice: 'none' })));
  assert.equal(up.requests[3]!.body.toolConfig, undefined);
});

test('refused before any call, naming the parameter: penalties, seed, an image URL, detail low, a name, reasoning on a non-Anthropic model, tool_choice none with tool history', async () => {
  const cases: Array<[Partial<GenerateRequest>, RegExp]> = [
    [{ presencePenalty: 0.5 }, /'presence_penalty'/],
    [{ frequencyPenalty: 0.5 }, /'frequency_penalty'/],
    [{ seed: 7 }, /'seed'/],
    [{ messages: [{ role: 'user', content: [{ type: 'image_url', url: 'https://example.com/a.png' }] }] }, /image by URL.*data: URL/],
    [{ messages: [{ role: 'user', content: [{ type: 'image_url', url: 'data:image/png;base64,AA==', detail: 'low' }] }] }, /detail 'low'/],
    [{ messages: [{ role: 'user', content: 'hi', name: 'bob' }] }, /messages\[0\]\.name/],
    [{ model: 'amazon.nova-lite-v1:0', reasoningEffort: 'high' }, /'reasoning'.*not an Anthropic model/],
    [
      {
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: '', toolCalls: [{ callId: 'a', name: 'f', arguments: '{}' }] },
          { role: 'tool', toolCallId: 'a', content: 'x' },
        ],
        tools: [{ name: 'f' }],
        toolChoice: 'none',
      },
      /'tool_choice' none/,
    ],
  ];
  for (const [over, re] of cases) {
    const { error } = await failure(engine.generate(req(over)));
    assert.deepEqual([error.code, error.status], ['unsupported_parameter', 400], error.message);
    assert.match(error.message, re);
  }
  assert.equal(up.requests.length, 0, 'nothing was sent');
});

// ------------------------------------------------------------------ the answer

test('streamed text: deltas as they come, usage with cache reads and writes as input, cache reads as cached, cache writes as written', async () => {
  up.script({ text: 'Hello there, friend.', chunks: 3, usage: { inputTokens: 10, outputTokens: 7, cacheReadInputTokens: 100, cacheWriteInputTokens: 20 } });
  const evs = await collect(engine.generate(req()));
  assert.equal(evs.filter((e) => e.type === 'text_delta').length, 3);
  assert.equal(text(evs), 'Hello there, friend.');
  const d = done(evs);
  assert.equal(d.finishReason, 'stop');
  assert.deepEqual(d.usage, { inputTokens: 130, outputTokens: 7, cachedTokens: 100, cacheWriteTokens: 20 });
});

test('stream false: one ConverseResponse, the same events as streamed (text, reasoning, calls, usage)', async () => {
  const reply = {
    reasoning: 'Think.',
    text: 'Whole answer.',
    toolUses: [{ toolUseId: 'tu1', name: 'f', input: { a: 1 } }],
    usage: { inputTokens: 3, outputTokens: 4, cacheReadInputTokens: 2 },
  };
  up.script(reply, reply);
  const whole = await collect(engine.generate(req({ stream: false, tools: [{ name: 'f' }] })));
  const streamed = await collect(engine.generate(req({ tools: [{ name: 'f' }] })));
  for (const evs of [whole, streamed]) {
    assert.equal(reasoning(evs), 'Think.');
    assert.equal(text(evs), 'Whole answer.');
    assert.deepEqual(toolCalls(evs), [{ callId: 'tu1', name: 'f', arguments: '{"a":1}' }]);
    assert.equal(done(evs).finishReason, 'tool_calls');
    assert.deepEqual(done(evs).usage, { inputTokens: 5, outputTokens: 4, cachedTokens: 2 });
  }
});

test('reasoning: effort -> additionalModelRequestFields thinking budget on Claude (maxTokens above it); reasoningContent -> reasoning', async () => {
  up.script({ reasoning: 'Let me think.', chunks: 2, text: 'Done.' }, {});
  const evs = await collect(engine.generate(req({ reasoningEffort: 'high' })));
  assert.deepEqual(up.requests[0]!.body.additionalModelRequestFields, { thinking: { type: 'enabled', budget_tokens: 4096 } });
  assert.equal(up.requests[0]!.body.inferenceConfig.maxTokens, 1000 + 4096);
  assert.equal(reasoning(evs), 'Let me think.');
  assert.ok(evs.findIndex((e) => e.type === 'reasoning_delta') < evs.findIndex((e) => e.type === 'text_delta'));
  // a cap bounds the budget; too small a cap is refused
  await collect(engine.generate(req({ model: 'us.anthropic.claude-sonnet-4-5-v1:0', reasoningEffort: 'xhigh', maxOutputTokens: 3000 })));
  assert.deepEqual(up.requests[1]!.body.additionalModelRequestFields, { thinking: { type: 'enabled', budget_tokens: 2999 } });
  const { error } = await failure(engine.generate(req({ reasoningEffort: 'low', maxOutputTokens: 500 })));
  assert.deepEqual([error.code, error.status], ['invalid_value', 400]);
});

test('tool calls: start, streamed input pieces, end; a call without input gets {}; parallel_tool_calls false keeps the first; max_tokens cuts a call', async () => {
  up.script(
    {
      text: 'Calling.',
      toolUses: [
        { toolUseId: 'a', name: 'f', input: ['{"x":', '1}'] },
        { toolUseId: 'b', name: 'g', input: [] },
      ],
    },
    {
      toolUses: [
        { toolUseId: 'a', name: 'f', input: { x: 1 } },
        { toolUseId: 'b', name: 'g', input: { y: 2 } },
      ],
    },
    { toolUses: [{ toolUseId: 'c', name: 'f', input: ['{"x":'] }], stopReason: 'max_tokens' },
  );
  let evs = await collect(engine.generate(req({ tools: [{ name: 'f' }, { name: 'g' }] })));
  assert.deepEqual(toolCalls(evs), [
    { callId: 'a', name: 'f', arguments: '{"x":1}' },
    { callId: 'b', name: 'g', arguments: '{}' },
  ]);
  assert.equal(done(evs).finishReason, 'tool_calls');
  evs = await collect(engine.generate(req({ tools: [{ name: 'f' }, { name: 'g' }], parallelToolCalls: false })));
  assert.deepEqual(toolCalls(evs), [{ callId: 'a', name: 'f', arguments: '{"x":1}' }]);
  evs = await collect(engine.generate(req({ tools: [{ name: 'f' }] })));
  assert.deepEqual(toolCalls(evs), [{ callId: 'c', name: 'f', arguments: '{"x":', incomplete: true }]);
  assert.equal(done(evs).finishReason, 'length');
});

test('structured output: a forced tool of the format name, its input streamed back as the text, finish stop (streamed and whole)', async () => {
  const schema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
  up.script({ toolUses: [{ name: 'weather_answer', input: ['{"city":', '"Paris"}'] }] }, { toolUses: [{ name: 'weather_answer', input: { city: 'Paris' } }] });
  for (const stream of [true, false]) {
    const evs = await collect(engine.generate(req({ stream, format: { type: 'json_schema', name: 'weather answer', schema } })));
    assert.deepEqual(JSON.parse(text(evs)), { city: 'Paris' });
    assert.deepEqual(toolCalls(evs), []);
    assert.equal(done(evs).finishReason, 'stop');
  }
  assert.deepEqual(up.requests[0]!.body.toolConfig, {
    tools: [
      { toolSpec: { name: 'weather_answer', description: 'Give the answer as the input of this tool: it is the JSON object the user asked for.', inputSchema: { json: schema } } },
    ],
    toolChoice: { tool: { name: 'weather_answer' } },
  });
  const { error } = await failure(engine.generate(req({ format: { type: 'json_object' }, reasoningEffort: 'low' })));
  assert.equal(error.code, 'unsupported_parameter');
});

test('stop reasons: max_tokens -> length, stop_sequence -> stop, guardrail_intervened and content_filtered -> content_filter', async () => {
  const cases: Array<[string, string]> = [
    ['max_tokens', 'length'],
    ['stop_sequence', 'stop'],
    ['guardrail_intervened', 'content_filter'],
    ['content_filtered', 'content_filter'],
  ];
  for (const [stopReason, finish] of cases) {
    up.script({ text: 'x', stopReason: stopReason as never });
    assert.equal(done(await collect(engine.generate(req()))).finishReason, finish, stopReason);
  }
});

// ------------------------------------------------------------------ errors

test('error statuses (x-amzn-errortype, {message}): 400 with the message, a too-long prompt, 403 and 404 operator problems, 408, 424, 500, 503', async () => {
  up.script(
    { status: 400, errorMessage: 'The model returned the following errors: temperature: range: 0..1' },
    { status: 400, errorMessage: 'Input is too long for requested model.' },
    { status: 403, errorMessage: 'You do not have access to the model with the specified model ID.' },
    { status: 404, errorMessage: 'The provided model identifier is invalid.' },
    { status: 408, errorMessage: 'Model has timed out in processing the request.' },
    { status: 424, errorMessage: 'The model produced an invalid sequence.' },
    { status: 500, errorMessage: 'The server encountered an internal error.' },
    { status: 503, errorMessage: 'Bedrock is unable to process your request.' },
  );
  const expect: Array<[string, number, boolean]> = [
    ['invalid_request', 400, false],
    ['context_length_exceeded', 400, false],
    ['upstream_auth_failed', 502, true],
    ['upstream_not_found', 502, true],
    ['upstream_unavailable', 504, true],
    ['upstream_error', 502, true],
    ['upstream_error', 502, true],
    ['upstream_error', 502, true],
  ];
  for (const [code, status, retryable] of expect) {
    const { error } = await failure(engine.generate(req()));
    assert.deepEqual([error.code, error.status, error.retryable ?? false], [code, status, retryable], error.message);
  }
});

test('429 ThrottlingException: a retryable 429 with the retry-after passed on; a throttling exception mid-stream after the text that came', async () => {
  up.script({ status: 429, errorMessage: 'Too many requests, please wait before trying again.', headers: { 'retry-after': '7' } }, { text: ['a ', 'b ', 'c'], exceptionAfter: 3 });
  let { error } = await failure(engine.generate(req()));
  assert.deepEqual([error.code, error.status, error.retryable, error.retryAfterMs], ['rate_limit_exceeded', 429, true, 7000]);
  assert.match(error.message, /Too many requests/);
  const r = await failure(engine.generate(req()));
  assert.equal(text(r.events), 'a b ');
  assert.deepEqual([r.error.code, r.error.status, r.error.retryable], ['rate_limit_exceeded', 429, true]);
  assert.match(r.error.message, /throttlingException/);
  up.script({ text: 'x', exceptionAfter: 1, exceptionType: 'modelStreamErrorException' });
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.code, error.retryable], ['upstream_error', true]);
});

test('refused, reset, garbage, a corrupt frame (bad CRC), a stream that breaks or ends without a stop reason: clear retryable failures', async () => {
  const server = http.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  const refused = createBedrockEngine({ baseUrl: `http://127.0.0.1:${port}`, region: REGION, credentials: CREDS });
  let { error } = await failure(refused.generate(req()));
  assert.deepEqual([error.code, error.status, error.retryable], ['upstream_unavailable', 502, true]);
  assert.match(error.message, /ECONNREFUSED/);
  await refused.close();

  up.script(
    { reset: true },
    { raw: 'this is not an event stream at all, no' },
    { raw: 'data: {}\n\n', rawType: 'text/event-stream' },
    { raw: '{"output": {"message": ', rawType: 'application/json' },
    { text: ['one ', 'two ', 'three'], corruptAt: 3 },
    { text: ['one ', 'two ', 'three'], breakAfter: 3 },
    { text: 'cut', stopReason: null },
  );
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.code, error.retryable], ['upstream_unavailable', true]);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.code, error.retryable], ['upstream_stream_broken', true], `garbage instead of frames: ${error.message}`);
  ({ error } = await failure(engine.generate(req())));
  assert.deepEqual([error.status, error.retryable], [502, true], 'not an event stream');
  ({ error } = await failure(engine.generate(req({ stream: false }))));
  assert.deepEqual([error.status, error.retryable], [502, true], 'an unreadable JSON answer');
  let r = await failure(engine.generate(req()));
  assert.equal(r.error.code, 'upstream_stream_broken');
  assert.match(r.error.message, /checksum/);
  assert.equal(text(r.events), 'one two ');
  r = await failure(engine.generate(req()));
  assert.equal(r.error.code, 'upstream_stream_broken');
  assert.equal(text(r.events), 'one two ');
  r = await failure(engine.generate(req()));
  assert.equal(r.error.code, 'upstream_stream_broken');
  assert.match(r.error.message, /ended before the answer was finished/);
});

test('no headers within timeoutMs -> 504; a stream silent past it mid-way -> 504 after what came; a hang at connect (TLS never answered) -> 504', async () => {
  const e = createBedrockEngine({ baseUrl: up.url, region: REGION, credentials: CREDS, timeoutMs: 500 });
  up.script({ hang: true }, { text: ['a ', 'b'], hangAfter: 2 });
  const stalls = stallWatch();
  const t0 = Date.now();
  const { error } = await failure(e.generate(req()));
  assert.deepEqual([error.code, error.status, error.retryable], ['upstream_unavailable', 504, true]);
  assert.ok(Date.now() - t0 < 2500 + stalls.stop(), `the timeout came after ${Date.now() - t0} ms`);
  await up.requests[0]!.closed;
  const r = await failure(e.generate(req()));
  assert.equal(r.error.status, 504);
  assert.equal(text(r.events), 'a ');
  await e.close();

  // a TCP server that accepts and never speaks TLS: the connection never opens
  const sockets: net.Socket[] = [];
  const mute = net.createServer((s) => sockets.push(s));
  await new Promise<void>((res) => mute.listen(0, '127.0.0.1', res));
  const hung = createBedrockEngine({ baseUrl: `https://127.0.0.1:${(mute.address() as net.AddressInfo).port}`, region: REGION, credentials: CREDS, connectTimeoutMs: 300 });
  const c = await failure(hung.generate(req()));
  assert.deepEqual([c.error.code, c.error.status, c.error.retryable], ['upstream_unavailable', 504, true]);
  assert.match(c.error.message, /did not accept a connection within 300 ms/);
  await hung.close();
  for (const s of sockets) s.destroy();
  await new Promise<void>((res) => mute.close(() => res()));
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
});

test('the event-stream decoder: messages split anywhere across chunks are whole; a bad prelude CRC is refused', () => {
  const frames = Buffer.concat([eventFrame('messageStart', { role: 'assistant' }), eventFrame('contentBlockDelta', { contentBlockIndex: 0, delta: { text: 'hé' } })]);
  for (const step of [1, 3, 7, frames.length]) {
    const got: string[] = [];
    const d = new EventStreamDecoder((m) => got.push(`${m.headers[':event-type']}:${m.payload.toString('utf8')}`));
    for (let i = 0; i < frames.length; i += step) d.push(frames.subarray(i, i + step));
    d.end();
    assert.equal(got.length, 2);
    assert.match(got[1]!, /^contentBlockDelta:.*"text":"hé"/);
  }
  const bad = Buffer.from(frames);
  bad.writeUInt32BE((bad.readUInt32BE(8) ^ 1) >>> 0, 8);
  assert.throws(() => new EventStreamDecoder(() => {}).push(bad), /prelude checksum/);
  const cut = new EventStreamDecoder(() => {});
  cut.push(frames.subarray(0, 20));
  assert.throws(() => cut.end(), /inside a message/);
});

// ------------------------------------------------------------------ the provider

function ctx(env: Record<string, string | undefined>): ProviderContext {
  return { env, ttsPoolSize: 1, llamaGpu: 'cpu', log: { info() {}, warn() {} } };
}

test('provider: credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, region from the entry or AWS_REGION; none -> a 503 saying what to set', async () => {
  const env = { AWS_ACCESS_KEY_ID: CREDS.accessKeyId, AWS_SECRET_ACCESS_KEY: CREDS.secretAccessKey };
  let e = await bedrock.create.text!({ name: 'c', type: 'text', base_url: up.url }, ctx({ ...env, AWS_REGION: REGION }));
  await collect(e.generate(req()));
  assert.equal(up.requests[0]!.signed, true);
  await e.close();
  e = await bedrock.create.text!({ name: 'c', type: 'text', base_url: up.url, region: REGION }, ctx({ ...env, AWS_REGION: 'eu-west-1' }));
  await collect(e.generate(req()));
  assert.equal(up.requests[1]!.signed, true, 'the entry’s region wins');
  await e.close();
  // a session token is sent and signed; the mock, told of none, still checks the signature over it
  e = await bedrock.create.text!({ name: 'c', type: 'text', base_url: up.url }, ctx({ ...env, AWS_DEFAULT_REGION: REGION, AWS_SESSION_TOKEN: 'tok' }));
  await collect(e.generate(req()));
  assert.equal(up.requests[2]!.headers['x-amz-security-token'], 'tok');
  assert.equal(up.requests[2]!.signed, true);
  await e.close();
  await assert.rejects(
    bedrock.create.text!({ name: 'c', type: 'text', base_url: up.url }, ctx({ AWS_REGION: REGION })),
    /no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY/,
  );
  await assert.rejects(bedrock.create.text!({ name: 'c', type: 'text', base_url: up.url }, ctx(env)), /has no region/);
  await assert.rejects(bedrock.create.text!({ name: 'c', type: 'text' }, ctx({ ...env, AWS_REGION: 'evil.example/x' })), /not an AWS region's name/);
  assert.match(bedrock.check!({ name: 'c', type: 'text', base_url: 'ftp://x' }) ?? '', /http/);
  assert.match(bedrock.check!({ name: 'c', type: 'text', region: 'nowhere' }) ?? '', /'region' must be an AWS region's name/);
  assert.equal(bedrock.check!({ name: 'c', type: 'text', region: 'us-gov-west-1' }), undefined);
  assert.throws(() => parseModelConfig('models:\n  - { name: c, provider: bedrock, region: Mars }\n'), /'region' must be an AWS region's name/);
  await engine.probe!('completion', MODEL, AbortSignal.timeout(5000));
  assert.deepEqual(up.requests[3]!.body, { messages: [{ role: 'user', content: [{ text: 'ping' }] }], inferenceConfig: { maxTokens: 1 } });
});

test("the mock speaks Bedrock's wire: the official BedrockRuntimeClient reads its Converse and ConverseStream answers (event-stream framing included) and its errors", async () => {
  const { BedrockRuntimeClient, ConverseCommand, ConverseStreamCommand, ThrottlingException } = await import('@aws-sdk/client-bedrock-runtime');
  const { NodeHttpHandler } = await import('@smithy/node-http-handler');
  // HTTP/1.1, as Portico speaks to Bedrock (the client's default for streams is HTTP/2)
  const sdk = new BedrockRuntimeClient({ region: REGION, endpoint: up.url, credentials: CREDS, maxAttempts: 1, requestHandler: new NodeHttpHandler() });
  up.script(
    {
      reasoning: 'Hmm.',
      text: 'Hello there.',
      chunks: 2,
      toolUses: [{ toolUseId: 'tu', name: 'f', input: ['{"a":', '1}'] }],
      usage: { inputTokens: 4, outputTokens: 6, cacheReadInputTokens: 2 },
    },
    { text: 'Whole.' },
    { status: 429, errorMessage: 'Too many requests' },
  );
  const stream = await sdk.send(
    new ConverseStreamCommand({
      modelId: MODEL,
      messages: [{ role: 'user', content: [{ text: 'hi' }] }],
      toolConfig: { tools: [{ toolSpec: { name: 'f', inputSchema: { json: { type: 'object' } } } }] },
    }),
  );
  const kinds: string[] = [];
  let txt = '';
  let input = '';
  let stop: string | undefined;
  let usage: unknown;
  for await (const ev of stream.stream!) {
    kinds.push(Object.keys(ev).find((k) => (ev as unknown as Record<string, unknown>)[k] !== undefined)!);
    if (ev.contentBlockDelta?.delta?.text) txt += ev.contentBlockDelta.delta.text;
    if (ev.contentBlockDelta?.delta?.toolUse?.input) input += ev.contentBlockDelta.delta.toolUse.input;
    if (ev.messageStop) stop = ev.messageStop.stopReason;
    if (ev.metadata) usage = ev.metadata.usage;
  }
  assert.equal(up.requests[0]!.signed, true, "the SDK's own signature checks out in the mock");
  assert.deepEqual([kinds[0], kinds.at(-2), kinds.at(-1)], ['messageStart', 'messageStop', 'metadata']);
  assert.ok(kinds.includes('contentBlockStart'));
  assert.equal(txt, 'Hello there.');
  assert.deepEqual(JSON.parse(input), { a: 1 });
  assert.equal(stop, 'tool_use');
  assert.deepEqual(usage, { inputTokens: 4, outputTokens: 6, totalTokens: 12, cacheReadInputTokens: 2 });
  const whole = await sdk.send(new ConverseCommand({ modelId: MODEL, messages: [{ role: 'user', content: [{ text: 'hi' }] }] }));
  assert.equal(whole.output?.message?.content?.[0]?.text, 'Whole.');
  assert.equal(whole.stopReason, 'end_turn');
  await assert.rejects(sdk.send(new ConverseCommand({ modelId: MODEL, messages: [{ role: 'user', content: [{ text: 'hi' }] }] })), (e: unknown) => {
    assert.ok(e instanceof ThrottlingException);
    assert.match(e.message, /Too many requests/);
    return true;
  });
  sdk.destroy();
});
