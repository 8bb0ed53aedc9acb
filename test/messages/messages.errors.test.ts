/**
 * POST /v1/messages refusals in Anthropic's error shape, with the statuses Anthropic's SDK turns into its typed
 * errors: no key, bad key, unknown model, missing and mistyped parameters, unknown fields, what Portico does not
 * map (named, never dropped), engine failures before output and in the middle of a stream (an `error` event).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic, { APIError } from '@anthropic-ai/sdk';
import { waitFor } from '../helpers/wait.js';
import { MODEL, expectAnthropicError, readAnthropicStream, setupMessages, type MessagesEnv } from './helpers.js';

const hi = [{ role: 'user' as const, content: 'hi' }];

describe('messages: errors in Anthropic shape', () => {
  let e: MessagesEnv;
  before(async () => {
    e = await setupMessages();
  });
  after(() => e.close());

  const post = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${e.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': e.key, ...headers }, body: JSON.stringify(body) });

  /** the SDK's error for a create, asserted to be of `cls` with Anthropic's `type` */
  const sdkError = async (cls: new (...a: any[]) => APIError, status: number, type: string, body: Record<string, unknown>, client = e.anthropic) => {
    const err = await client.messages.create(body as any).then(
      () => assert.fail('expected a refusal'),
      (x: unknown) => x,
    );
    assert.ok(err instanceof cls, `expected ${cls.name}, got ${(err as Error).constructor.name}: ${(err as Error).message}`);
    assert.equal(err.status, status);
    assert.equal(err.type, type);
    assert.equal((err.error as any).type, 'error');
    return err;
  };

  test('no key, a bad key: 401 authentication_error (AuthenticationError)', async () => {
    await expectAnthropicError(await post({ model: MODEL, max_tokens: 5, messages: hi }, { 'x-api-key': '' }), 401, 'authentication_error');
    const none = await fetch(`${e.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, max_tokens: 5, messages: hi }),
    });
    await expectAnthropicError(none, 401, 'authentication_error');
    await sdkError(Anthropic.AuthenticationError, 401, 'authentication_error', { model: MODEL, max_tokens: 5, messages: hi }, e.clientFor({ apiKey: 'sk-not-a-key' }));
    await sdkError(Anthropic.AuthenticationError, 401, 'authentication_error', { model: MODEL, max_tokens: 5, messages: hi }, e.clientFor({ authToken: 'sk-not-a-key' }));
    assert.equal(e.up.requests.length, 0, 'nothing reached the upstream');
  });

  test('unknown model: 404 not_found_error (NotFoundError)', async () => {
    const err = await sdkError(Anthropic.NotFoundError, 404, 'not_found_error', { model: 'claude-nope', max_tokens: 5, messages: hi });
    assert.match(err.message, /claude-nope/);
  });

  test('missing max_tokens, mistyped fields, unknown fields: 400 invalid_request_error (BadRequestError) naming them', async () => {
    let err = await sdkError(Anthropic.BadRequestError, 400, 'invalid_request_error', { model: MODEL, messages: hi });
    assert.match(err.message, /max_tokens/);
    err = await sdkError(Anthropic.BadRequestError, 400, 'invalid_request_error', { model: MODEL, max_tokens: '5', messages: hi });
    assert.match(err.message, /max_tokens/);
    err = await sdkError(Anthropic.BadRequestError, 400, 'invalid_request_error', { model: MODEL, max_tokens: 5, messages: hi, temperature: 'hot' });
    assert.match(err.message, /temperature/);
    err = await sdkError(Anthropic.BadRequestError, 400, 'invalid_request_error', { model: MODEL, max_tokens: 5, messages: hi, frobnicate: true });
    assert.match(err.message, /frobnicate/);
    err = await sdkError(Anthropic.BadRequestError, 400, 'invalid_request_error', { model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: 'x', extra: 1 }] });
    assert.match(err.message, /extra/);
    err = await sdkError(Anthropic.BadRequestError, 400, 'invalid_request_error', {
      model: MODEL,
      max_tokens: 5,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'x', foo: 1 }] }],
    });
    assert.match(err.message, /foo/);
    err = await sdkError(Anthropic.BadRequestError, 400, 'invalid_request_error', { model: MODEL, max_tokens: 0, messages: hi });
    assert.match(err.message, /max_tokens/);
    err = await sdkError(Anthropic.BadRequestError, 400, 'invalid_request_error', { model: MODEL, max_tokens: 5, messages: [] });
    assert.match(err.message, /messages/);
    // not JSON at all
    await expectAnthropicError(
      await fetch(`${e.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': e.key }, body: '{"model":' }),
      400,
      'invalid_request_error',
    );
    assert.equal(e.up.requests.length, 0);
  });

  test('what Portico does not map is refused naming it, never dropped', async () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ top_k: 5 }, /top_k/],
      [{ speed: 'fast' }, /speed/],
      [{ output_config: { effort: 'max' } }, /output_config\.effort/],
      [{ tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, /web_search_20250305/],
      [{ messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'url', url: 'https://x/y.pdf' } }] }] }, /document/],
      [{ messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'file', file_id: 'file_1' } }] }] }, /file/],
      [{ messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/tiff', data: 'AA==' } }] }] }, /media_type/],
      [{ messages: [{ role: 'user', content: [{ type: 'text', text: 'x', citations: [{ type: 'char_location' }] }] }] }, /[Cc]itations/],
      [
        {
          messages: [
            { role: 'user', content: 'hi' },
            { role: 'assistant', content: 'The answer is' },
          ],
        },
        /final assistant message/,
      ],
      [{ messages: [{ role: 'assistant', content: [{ type: 'redacted_thinking', data: 'abc' }] }, ...hi] }, /redacted_thinking/],
    ];
    for (const [extra, re] of cases) {
      const err = await sdkError(Anthropic.BadRequestError, 400, 'invalid_request_error', { model: MODEL, max_tokens: 5, messages: hi, ...extra });
      assert.match(err.message, re, JSON.stringify(extra));
    }
    assert.equal(e.up.requests.length, 0);
  });

  test('conversation rules: every tool_use answered by a tool_result, tool_choice naming a tool, thinking within max_tokens', async () => {
    const tools = [{ name: 'f', input_schema: { type: 'object' } }];
    const use = { role: 'assistant', content: [{ type: 'tool_use', id: 'tu_1', name: 'f', input: {} }] };
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ tools, messages: [...hi, use, { role: 'user', content: 'no result' }] }, /tu_1/],
      [{ tools, messages: [...hi, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'tu_9', content: 'x' }] }] }, /tu_9/],
      [{ tools, tool_choice: { type: 'tool', name: 'g' } }, /tool_choice\.name/],
      [{ tool_choice: { type: 'any' } }, /needs 'tools'/],
      [{ tools: [{ name: 'f' }] }, /input_schema/],
      [{ tools: [...tools, ...tools] }, /twice/],
      [{ max_tokens: 2000, thinking: { type: 'enabled', budget_tokens: 2000 } }, /budget_tokens/],
      [{ max_tokens: 5000, thinking: { type: 'enabled' } }, /budget_tokens/],
      [{ messages: [{ role: 'assistant', content: [{ type: 'image', source: { type: 'url', url: 'https://x/y.png' } }] }, ...hi] }, /assistant/],
    ];
    for (const [extra, re] of cases) {
      const err = await sdkError(Anthropic.BadRequestError, 400, 'invalid_request_error', { model: MODEL, max_tokens: 5, messages: hi, ...extra });
      assert.match(err.message, re, JSON.stringify(extra));
    }
    assert.equal(e.up.requests.length, 0);
  });

  test('engine failures: an upstream refusal keeps its status class, a failure before output is api_error, an upstream 429 a rate_limit_error', async () => {
    e.up.script({ status: 500, errorMessage: 'boom' });
    await sdkError(Anthropic.InternalServerError, 502, 'api_error', { model: MODEL, max_tokens: 5, messages: hi });
    e.up.script({ status: 429, errorMessage: 'slow down', headers: { 'retry-after': '3' } });
    const err = await sdkError(Anthropic.RateLimitError, 429, 'rate_limit_error', { model: MODEL, max_tokens: 5, messages: hi });
    assert.equal(err.headers?.get('retry-after'), '3');
    e.up.script({ status: 400, errorMessage: 'the upstream does not like it' });
    await sdkError(Anthropic.BadRequestError, 400, 'invalid_request_error', { model: MODEL, max_tokens: 5, messages: hi });
    // a stream refused before its first event is a plain HTTP error too
    e.up.script({ status: 500, errorMessage: 'boom' });
    await expectAnthropicError(await post({ model: MODEL, max_tokens: 5, stream: true, messages: hi }), 502, 'api_error');
    // an upstream that cannot be reached
    await sdkError(Anthropic.InternalServerError, 502, 'api_error', { model: 'down', max_tokens: 5, messages: hi });
  });

  test('a failure in the middle of a stream: an `error` event ends it, the SDK raises it; what was produced is charged', async () => {
    const before = (await e.usage('alice')).find((x) => x.operation === 'anthropic.messages' && x.model === MODEL)?.requests ?? 0;
    e.up.script({ text: ['one ', 'two ', 'three ', 'four'], breakAfter: 2 });
    const res = await post({ model: MODEL, max_tokens: 50, stream: true, messages: hi });
    const events = await readAnthropicStream(res);
    const last = events[events.length - 1];
    assert.equal(last.type, 'error');
    assert.deepEqual(Object.keys(last.error).sort(), ['message', 'type']);
    assert.equal(last.error.type, 'api_error');
    assert.ok(!events.some((x) => x.type === 'message_stop'));

    e.up.script({ text: ['one ', 'two ', 'three ', 'four'], breakAfter: 2 });
    const stream = e.anthropic.messages.stream({ model: MODEL, max_tokens: 50, messages: hi });
    const err = await stream.finalMessage().then(
      () => assert.fail('expected the stream to fail'),
      (x: unknown) => x,
    );
    assert.ok(err instanceof Anthropic.APIError, String(err));
    assert.equal((err as APIError).type, 'api_error');
    const after = (await e.usage('alice')).find((x) => x.operation === 'anthropic.messages' && x.model === MODEL)?.requests ?? 0;
    assert.equal(after - before, 2, 'both broken streams were charged what they produced');
  });

  test('a client that leaves mid-stream stops the upstream generation and is charged what it was sent', async () => {
    const before = (await e.usage('alice')).find((x) => x.operation === 'anthropic.messages')?.requests ?? 0;
    e.up.script({ text: Array.from({ length: 40 }, (_, i) => `piece${i} `), delayMs: 50 });
    const ac = new AbortController();
    const res = await fetch(`${e.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': e.key, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, max_tokens: 500, messages: hi, stream: true }),
      signal: ac.signal,
    });
    const reader = res.body!.getReader();
    let got = '';
    while (!got.includes('piece2')) got += new TextDecoder().decode((await reader.read()).value);
    ac.abort();
    const rec = e.up.requests[e.up.requests.length - 1]!;
    await rec.closed;
    assert.equal(rec.aborted, true, 'the upstream request was closed before its answer ended');
    const row = await waitFor(
      async () => {
        const r = (await e.usage('alice')).find((x) => x.operation === 'anthropic.messages');
        return r && r.requests > before ? r : undefined;
      },
      { what: 'the usage record' },
    );
    assert.equal(row.requests, before + 1, 'charged (an estimate: the upstream never sent its usage)');
  });

  test('a wrong method or path under /v1/messages is refused, and the Chat Completions routes keep the OpenAI shape', async () => {
    const get = await fetch(`${e.url}/v1/messages`, { headers: { authorization: `Bearer ${e.key}` } });
    assert.equal(get.status, 405);
    assert.equal(get.headers.get('allow'), 'POST');
    const chat = await fetch(`${e.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${e.key}` },
      body: JSON.stringify({ model: MODEL, messages: hi, frobnicate: 1, max_tokens: 'x' }),
    });
    assert.equal(chat.status, 400);
    const body = (await chat.json()) as any;
    assert.deepEqual(Object.keys(body), ['error']);
    assert.ok('code' in body.error && 'param' in body.error);
  });
});
