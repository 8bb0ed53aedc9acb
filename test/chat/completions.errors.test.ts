/**
 * POST /v1/chat/completions refuses bad input of every kind with a clear 4xx in OpenAI's error shape (never a
 * 5xx, never a crash), before anything reaches the engine; what an engine that generates cannot do is refused
 * naming it; upstream failures before and during a stream become the right statuses and stream errors.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { MODEL, VIA_RESPONSES, expectError, readChatStream, setupChat, type ChatEnv } from './helpers.js';
import { waitFor } from '../helpers/wait.js';

const user = [{ role: 'user', content: 'hi' }];
process.env.CHAT_TEST_UPSTREAM_KEY = 'sk-upstream-secret-0123456789';

describe('chat completions: bad input', () => {
  let e: ChatEnv;
  before(async () => {
    e = await setupChat();
  });
  after(() => e.close());

  const post = (body: unknown) => e.call('POST', '/v1/chat/completions', body);

  test('schema: unknown, missing, wrongly typed and out-of-range parameters name the parameter and OpenAI code', async () => {
    const cases: Array<[unknown, string, string, RegExp?]> = [
      // forwarded to an upstream that speaks Chat Completions (test/chat/forwarding.test.ts); refused where Portico generates
      [{ model: VIA_RESPONSES, messages: user, foo: 1 }, 'unsupported_parameter', 'foo', /'foo' is not a parameter of OpenAI's Chat Completions API/],
      [{ messages: user }, 'missing_required_parameter', 'model'],
      [{ model: MODEL }, 'missing_required_parameter', 'messages'],
      [{ model: MODEL, messages: [] }, 'array_below_min_length', 'messages'],
      [{ model: MODEL, messages: 'hi' }, 'invalid_type', 'messages'],
      [{ model: MODEL, messages: [{ role: 'robot', content: 'x' }] }, 'invalid_value', 'messages[0].role', /'system', 'developer', 'user', 'assistant', 'tool'/],
      [{ model: MODEL, messages: [{ role: 'user', content: 'x', extra: 1 }] }, 'unknown_parameter', 'messages[0].extra'],
      [{ model: MODEL, messages: user, temperature: '1' }, 'invalid_type', 'temperature'],
      [{ model: MODEL, messages: user, temperature: 2.5 }, 'decimal_above_max_value', 'temperature'],
      [{ model: MODEL, messages: user, top_p: -0.1 }, 'decimal_below_min_value', 'top_p'],
      [{ model: MODEL, messages: user, max_tokens: 0 }, 'integer_below_min_value', 'max_tokens'],
      [{ model: MODEL, messages: user, max_completion_tokens: 1.5 }, 'invalid_type', 'max_completion_tokens'],
      [{ model: MODEL, messages: user, n: 0 }, 'integer_below_min_value', 'n'],
      [{ model: MODEL, messages: user, stop: ['a', 'b', 'c', 'd', 'e'] }, 'array_above_max_length', 'stop'],
      [{ model: MODEL, messages: user, top_logprobs: 21, logprobs: true }, 'integer_above_max_value', 'top_logprobs'],
      [{ model: MODEL, messages: user, stream: 'yes' }, 'invalid_type', 'stream'],
      [{ model: MODEL, messages: user, tool_choice: 'bogus' }, 'invalid_value', 'tool_choice'],
      [{ model: MODEL, messages: user, tools: [{ type: 'function', function: { name: 'bad name' } }] }, 'invalid_value', 'tools[0].function.name'],
      [{ model: MODEL, messages: user, tools: [{ type: 'retrieval' }] }, 'invalid_value', 'tools[0].type'],
      [{ model: MODEL, messages: user, response_format: { type: 'xml' } }, 'invalid_value', 'response_format.type'],
      [{ model: MODEL, messages: user, stream: true, stream_options: { include_usage: 'yes' } }, 'invalid_type', 'stream_options.include_usage'],
      [{ model: MODEL, messages: user, logit_bias: { abc: 1 } }, 'unknown_parameter', 'logit_bias.abc'],
      [{ model: MODEL, messages: user, metadata: { k: 1 } }, 'invalid_type', 'metadata.k'],
      [{ model: MODEL, messages: [{ role: 'user', content: [{ type: 'video', text: 'x' }] }] }, 'invalid_value', 'messages[0].content[0].type'],
    ];
    for (const [body, code, param, message] of cases) {
      const err = await expectError(await post(body), 400, code, param);
      if (message) assert.match(err.message, message);
    }
    assert.equal(e.up.requests.length, 0, 'nothing reached the upstream');
  });

  test('messages: the fields and parts of each role', async () => {
    const cases: Array<[unknown[], string, string]> = [
      [[{ role: 'user' }], 'missing_required_parameter', 'messages[0].content'],
      [[{ role: 'system', content: null }], 'missing_required_parameter', 'messages[0].content'],
      [[{ role: 'user', content: 'x', tool_calls: [] }], 'unknown_parameter', 'messages[0].tool_calls'],
      [[{ role: 'user', content: 'x', tool_call_id: 'c' }], 'unknown_parameter', 'messages[0].tool_call_id'],
      [[{ role: 'system', content: 'x', reasoning_content: 'y' }], 'unknown_parameter', 'messages[0].reasoning_content'],
      [[{ role: 'user', content: 'x', annotations: [] }], 'unknown_parameter', 'messages[0].annotations'],
      [[{ role: 'tool', content: 'x' }], 'missing_required_parameter', 'messages[0].tool_call_id'],
      [[{ role: 'assistant' }], 'missing_required_parameter', 'messages[0].content'],
      [[{ role: 'system', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }], 'invalid_value', 'messages[0].content[0].type'],
      [[{ role: 'assistant', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }], 'invalid_value', 'messages[0].content[0].type'],
      [[{ role: 'user', content: [{ type: 'text' }] }], 'missing_required_parameter', 'messages[0].content[0].text'],
      [[{ role: 'user', content: [{ type: 'text', text: 'a', image_url: { url: 'http://x' } }] }], 'unknown_parameter', 'messages[0].content[0].image_url'],
      [[{ role: 'user', content: [] }], 'invalid_value', 'messages[0].content'],
      [[{ role: 'assistant', tool_calls: [{ id: 'c', type: 'function' }] }], 'missing_required_parameter', 'messages[0].tool_calls[0].function'],
      [[{ role: 'function', content: 'x' }], 'missing_required_parameter', 'messages[0].name'],
    ];
    for (const [messages, code, param] of cases) await expectError(await post({ model: MODEL, messages }), 400, code, param);
    assert.equal(e.up.requests.length, 0);
  });

  test('rules across parameters', async () => {
    const tool = { type: 'function', function: { name: 'f' } };
    const cases: Array<[Record<string, unknown>, string, string | null, RegExp]> = [
      [{ stream_options: { include_usage: true } }, 'invalid_value', 'stream_options', /only allowed when 'stream' is enabled/],
      [{ max_tokens: 5, max_completion_tokens: 6 }, 'invalid_value', 'max_tokens', /Set one of/],
      [{ top_logprobs: 3 }, 'invalid_value', 'top_logprobs', /needs 'logprobs'/],
      [{ tool_choice: 'required' }, 'invalid_value', 'tool_choice', /needs 'tools'/],
      [{ tools: [tool], tool_choice: { type: 'function', function: { name: 'g' } } }, 'invalid_value', 'tool_choice.function.name', /'g' is not one of the tools/],
      [{ tools: [tool, tool] }, 'invalid_value', 'tools[1]', /used twice/],
      [{ tools: [{ type: 'function' }] }, 'missing_required_parameter', 'tools[0].function', /tools\[0\]\.function/],
      [{ parallel_tool_calls: false }, 'invalid_value', 'parallel_tool_calls', /only allowed when 'tools'/],
      [{ response_format: { type: 'json_schema' } }, 'missing_required_parameter', 'response_format.json_schema', /json_schema/],
      [
        { tools: [tool], tool_choice: { type: 'allowed_tools', allowed_tools: { mode: 'auto', tools: [{ type: 'function', function: { name: 'zz' } }] } } },
        'invalid_value',
        'tool_choice.allowed_tools.tools[0].name',
        /'zz'/,
      ],
    ];
    for (const [extra, code, param, message] of cases) {
      const err = await expectError(await post({ model: MODEL, messages: user, ...extra }), 400, code, param);
      assert.match(err.message, message);
    }
    assert.equal(e.up.requests.length, 0);
  });

  test('models: unknown, of another type, not JSON, NUL, wrong content type, too large', async () => {
    const nf = await expectError(await post({ model: 'nope', messages: user }), 404, 'model_not_found', 'model');
    assert.match(nf.message, /gpt-test/, 'names the models that exist');
    await expectError(await post({ model: 'embed-test', messages: user }), 404, 'model_not_found', 'model');
    await expectError(await post('{"model":'), 400, 'invalid_json');
    await expectError(await post({ model: MODEL, messages: [{ role: 'user', content: 'a\u0000b' }] }), 400, 'validation_error');
    await expectError(await e.call('POST', '/v1/chat/completions', undefined, { 'content-type': 'text/plain' }), 415, 'unsupported_media_type');
    await expectError(await post({ model: MODEL, messages: [{ role: 'user', content: 'x'.repeat(17 * 1024 * 1024) }] }), 413, 'payload_too_large');
    // a known path with a wrong method: 405 with Allow, not 404
    const wrongMethod = await e.call('GET', '/v1/chat/completions');
    assert.equal(wrongMethod.headers.get('allow'), 'POST');
    await expectError(wrongMethod, 405, 'method_not_allowed');
    assert.equal(e.up.requests.length, 0);
  });

  test('an engine that generates (not an upstream speaking Chat Completions) refuses what it cannot do, naming it', async () => {
    const cases: Array<[Record<string, unknown>, string, string, RegExp]> = [
      [{ n: 2 }, 'unsupported_parameter', 'n', /one choice per request/],
      [{ logprobs: true }, 'unsupported_parameter', 'logprobs', /'logprobs' is not supported/],
      [{ logit_bias: { '50256': -100 } }, 'unsupported_parameter', 'logit_bias', /logit_bias/],
      [{ modalities: ['text', 'audio'] }, 'unsupported_parameter', 'modalities', /Audio output/],
      [{ audio: { voice: 'alloy', format: 'mp3' } }, 'unsupported_parameter', 'audio', /Audio output/],
      [{ web_search_options: {} }, 'unsupported_parameter', 'web_search_options', /Web search/],
      [{ moderation: { model: 'omni-moderation-latest' } }, 'unsupported_parameter', 'moderation', /Moderation/],
      [{ functions: [{ name: 'f' }] }, 'unsupported_parameter', 'functions', /deprecated.*tools/],
      [{ tools: [{ type: 'custom', custom: { name: 'c' } }] }, 'unsupported_parameter', 'tools[0].type', /custom tool/],
      [
        { messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }] }] },
        'unsupported_parameter',
        'messages[0].content[0].type',
        /input_audio/,
      ],
      [{ messages: [{ role: 'function', name: 'f', content: 'x' }] }, 'unsupported_parameter', 'messages[0].role', /function' role is deprecated/],
      [{ messages: [{ role: 'tool', tool_call_id: 'call_9', content: 'x' }] }, 'invalid_value', 'messages[0].tool_call_id', /preceding message with 'tool_calls'/],
      [
        {
          messages: [
            { role: 'user', content: 'x' },
            { role: 'assistant', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
            { role: 'user', content: 'y' },
          ],
        },
        'invalid_value',
        'messages[1].tool_calls',
        /did not have response messages: call_1/,
      ],
    ];
    for (const [extra, code, param, message] of cases) {
      const err = await expectError(await post({ model: VIA_RESPONSES, messages: user, ...extra }), 400, code, param);
      assert.match(err.message, message);
    }
    assert.equal(e.up.requests.length, 0, 'nothing was generated');
    // the same requests are forwarded to an upstream that speaks Chat Completions: it decides
    e.up.script({ text: 'ok' });
    const r = await post({ model: MODEL, messages: user, n: 2, logit_bias: { '50256': -100 } });
    assert.equal(r.status, 200, await r.text());
    assert.equal(e.last().n, 2);
  });
});

describe('chat completions: upstream failures', () => {
  let e: ChatEnv;
  before(async () => {
    e = await setupChat({ env: {}, upstreamKeyEnv: 'CHAT_TEST_UPSTREAM_KEY' });
  });
  after(() => e.close());
  const post = (body: Record<string, unknown>) => e.call('POST', '/v1/chat/completions', { model: MODEL, messages: user, ...body });

  test('a refusal of the request keeps the upstream message and OpenAI code (400); credentials problems are 502, rate limits 429, an unreachable upstream 502', async () => {
    e.up.script({ status: 400, errorBody: { error: { message: "Invalid value for 'seed'.", type: 'invalid_request_error', param: 'seed', code: 'invalid_value' } } });
    const a = await expectError(await post({}), 400, 'invalid_value');
    assert.match(a.message, /Invalid value for 'seed'/);
    e.up.script({ status: 401, errorBody: { error: { message: 'Incorrect API key provided: sk-upst****' } } });
    const b = await expectError(await post({}), 502);
    assert.ok(!b.message.includes('sk-upst'), 'the upstream body is not shown for a credentials problem');
    e.up.script({ status: 429, errorMessage: 'slow down', headers: { 'retry-after': '3' } });
    const c = await expectError(await post({}), 429, 'rate_limit_exceeded');
    assert.match(c.message, /slow down/);
    e.up.script({ status: 500, errorMessage: 'boom' });
    await expectError(await post({}), 502);
    await expectError(await e.call('POST', '/v1/chat/completions', { model: 'down', messages: user }), 502, 'upstream_unavailable');
    await expectError(await e.call('POST', '/v1/chat/completions', { model: 'down', messages: user, stream: true }), 502, 'upstream_unavailable');
  });

  test('an upstream that never answers: 504 after timeout_ms, streaming or not', async () => {
    e.up.script({ hang: true }, { hang: true });
    await expectError(await e.call('POST', '/v1/chat/completions', { model: 'slow', messages: user }), 504, 'upstream_timeout');
    await expectError(await e.call('POST', '/v1/chat/completions', { model: 'slow', messages: user, stream: true }), 504, 'upstream_timeout');
  });

  test('failing mid-stream: the chunks sent so far, then an error object, no [DONE]; the SDK raises it; what was sent is charged', async () => {
    const row0 = (await e.usage('alice')).find((x) => x.operation === 'chat.completions');
    const before = row0?.output_tokens ?? 0;
    e.up.script({ text: 'partial answer that breaks', chunks: 5, breakAfter: 3 });
    const { chunks, done, errors } = await readChatStream(await post({ stream: true }));
    assert.equal(done, false);
    assert.ok(chunks.length >= 1);
    assert.equal(errors.length, 1);
    assert.equal(errors[0].code, 'engine_error');
    assert.equal(errors[0].type, 'server_error');
    assert.match(
      errors[0].message,
      /broke mid-stream \(the upstream closed the connection before the answer was complete\)/,
      'said in words, not the HTTP client jargon (UND_ERR_SOCKET)',
    );
    const row1 = (await e.usage('alice')).find((x) => x.operation === 'chat.completions')!;
    assert.equal(row1.requests, (row0?.requests ?? 0) + 1, 'charged once');
    assert.ok(row1.output_tokens > before, 'for what was sent');

    e.up.script({
      raw: [
        'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"upstream-model","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}\n\n',
        'data: {"error":{"message":"The server had an error while processing your request.","type":"server_error","code":"server_error"}}\n\n',
      ],
    });
    const s = await e.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], stream: true });
    let text = '';
    const err = await (async () => {
      try {
        for await (const c of s) text += c.choices[0]?.delta?.content ?? '';
      } catch (x) {
        return x as Error;
      }
    })();
    assert.equal(text, 'Hel');
    assert.ok(err, 'the SDK raised the stream error');
    assert.match(err!.message, /The server had an error while processing your request/);
    const after = (await e.usage('alice')).find((x) => x.operation === 'chat.completions')!.output_tokens;
    assert.ok(after > before, 'output that reached the client is charged');
  });

  test('a client that leaves mid-stream stops the upstream generation and is charged what it was sent', async () => {
    const before = (await e.usage('alice')).find((x) => x.operation === 'chat.completions')?.requests ?? 0;
    e.up.script({ text: Array.from({ length: 40 }, (_, i) => `piece${i} `), delayMs: 50 });
    const ac = new AbortController();
    const res = await fetch(`${e.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: user, stream: true }),
      signal: ac.signal,
    });
    const reader = res.body!.getReader();
    let got = '';
    while (!got.includes('piece2')) got += new TextDecoder().decode((await reader.read()).value);
    ac.abort();
    const rec = e.up.requests[e.up.requests.length - 1]!;
    await rec.closed;
    assert.equal(rec.aborted, true, 'the upstream request was closed before its answer ended');
    // the record is written once the abort reached the service
    const row = await waitFor(
      async () => {
        const r = (await e.usage('alice')).find((x) => x.operation === 'chat.completions');
        return r && r.requests > before ? r : undefined;
      },
      { what: 'the usage record' },
    );
    assert.equal(row.requests, before + 1, 'charged (an estimate: the upstream never sent its usage)');

    // a JSON answer the client stops waiting for: the upstream is stopped too
    e.up.script({ headerDelayMs: 2000 });
    const ac2 = new AbortController();
    const pending = fetch(`${e.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: user }),
      signal: ac2.signal,
    }).catch(() => undefined);
    const [r2] = (await e.up.waitForRequests(e.up.requests.length + 1)).slice(-1);
    ac2.abort();
    await pending;
    await r2!.closed;
    assert.equal(r2!.aborted, true);
  });

  test('an unreadable answer is a 502, not a crash', async () => {
    e.up.script({ raw: ['data: {not json}\n\n'] });
    const a = await expectError(await post({ stream: true }), 502);
    assert.match(a.message, /unreadable/);
    e.up.script({ headers: { 'content-type': 'application/json' }, raw: ['{"choices": '] });
    const b = await expectError(await post({}), 502);
    assert.match(b.message, /unreadable/);
  });
});
