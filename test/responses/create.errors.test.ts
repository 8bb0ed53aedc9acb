/** POST /v1/responses refusals (OpenAI error shape with param), authentication, scopes and truncation. */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { MODEL, expectError, setup, type Env } from './util.js';

describe('responses validation', () => {
  let e: Env;
  before(async () => {
    e = await setup('pglite');
  });
  after(() => e.close());

  const post = (body: unknown, headers?: Record<string, string>) => e.call('POST', '/v1/responses', body, headers);

  test('each refused request is a 400 naming the parameter, and never reaches the upstream', async () => {
    const cases: Array<[string, unknown, string | null, string?]> = [
      ['missing model', { input: 'x' }, 'model'],
      ['missing input', { model: MODEL }, 'input'],
      ['input null', { model: MODEL, input: null }, 'input'],
      ['empty input array', { model: MODEL, input: [] }, 'input'],
      ['content missing', { model: MODEL, input: [{ role: 'user' }] }, 'input[0].content'],
      [
        'content null',
        {
          model: MODEL,
          input: [
            { role: 'user', content: 'a' },
            { role: 'user', content: null },
          ],
        },
        'input[1].content',
      ],
      [
        'tool_calls in a message',
        { model: MODEL, input: [{ role: 'assistant', content: '', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] }] },
        'input[0].tool_calls',
      ],
      ['tool_call_id in a message', { model: MODEL, input: [{ role: 'user', content: 'x', tool_call_id: 'c' }] }, 'input[0].tool_call_id'],
      ['role tool', { model: MODEL, input: [{ role: 'tool', content: 'x' }] }, 'input[0].role'],
      ['the former messages parameter', { model: MODEL, messages: [{ role: 'user', content: 'x' }] }, 'messages', 'unsupported_parameter'],
      ['messages next to input', { model: MODEL, input: 'x', messages: [] }, 'messages', 'unsupported_parameter'],
      ['a non-function tool', { model: MODEL, input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0].type'],
      [
        'tool_choice naming an unknown tool',
        { model: MODEL, input: 'x', tools: [{ type: 'function', name: 'f', parameters: { type: 'object' } }], tool_choice: { type: 'function', name: 'g' } },
        'tool_choice.name',
      ],
      ['tool_choice required without tools', { model: MODEL, input: 'x', tool_choice: 'required' }, 'tool_choice'],
      ['an unknown top-level parameter', { model: MODEL, input: 'x', frobnicate: true }, 'frobnicate'],
      ['temperature 3', { model: MODEL, input: 'x', temperature: 3 }, 'temperature'],
      ['top_p 2', { model: MODEL, input: 'x', top_p: 2 }, 'top_p'],
      ['five stop sequences', { model: MODEL, input: 'x', stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
      ['background with store false', { model: MODEL, input: 'x', background: true, store: false }, 'store'],
      ['an unknown part type', { model: MODEL, input: [{ role: 'user', content: [{ type: 'audio', data: 'x' }] }] }, 'input[0].content[0].type'],
      ['json_schema without a name', { model: MODEL, input: 'x', text: { format: { type: 'json_schema', schema: { type: 'object' } } } }, 'text.format.name'],
    ];
    const before = e.up.requests.length;
    for (const [what, body, param, code] of cases) {
      const err = await expectError(await post(body), 400, code, param).catch((x) => {
        throw new Error(`${what}: ${x.message}`);
      });
      assert.equal(err.type, 'invalid_request_error', what);
    }
    assert.equal(e.up.requests.length, before, 'no refused request reached the upstream');
  });

  test('OpenAI parameters this server does not implement are unsupported_parameter (not unknown), whatever their value, on create and input_tokens', async () => {
    const notImplemented: Record<string, unknown> = {
      conversation: 'conv_123',
      prompt: { id: 'pmpt_123', variables: { city: 'Paris' } },
      context_management: [{ type: 'compaction', compact_threshold: 1000 }],
      moderation: { model: 'omni-moderation-latest' },
      prompt_cache_options: { mode: 'explicit' },
    };
    const before = e.up.requests.length;
    for (const [field, value] of Object.entries(notImplemented)) {
      for (const path of ['/v1/responses', '/v1/responses/input_tokens']) {
        for (const v of [value, null]) {
          const err = await expectError(await e.call('POST', path, { model: MODEL, input: 'x', [field]: v }), 400, 'unsupported_parameter', field);
          assert.match(err.message, /not supported by this server/, `${path} ${field}`);
        }
      }
    }
    // refused before the schema: the parameter is named even when the rest of the body is wrong too
    await expectError(await post({ model: MODEL, input: 'x', temperature: 'hot', conversation: 'conv_1' }), 400, 'unsupported_parameter', 'conversation');
    // the SDK's own parameter types: a BadRequestError with the code and param
    await assert.rejects(e.client.responses.create({ model: MODEL, input: 'x', conversation: 'conv_1' }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.BadRequestError);
      assert.equal(err.code, 'unsupported_parameter');
      assert.equal(err.param, 'conversation');
      return true;
    });
    // a typo is still a typo
    await expectError(await post({ model: MODEL, input: 'x', conversations: 'conv_1' }), 400, 'unknown_parameter', 'conversations');
    assert.equal(e.up.requests.length, before, 'nothing reached the upstream');
  });

  test("include: OpenAI's values are accepted (without effect); any other is a 400 invalid_value naming it and listing them", async () => {
    const before = e.up.requests.length;
    const err = await expectError(await post({ model: MODEL, input: 'x', include: ['bogus'] }), 400, 'invalid_value', 'include[0]');
    assert.match(err.message, /'bogus'.*'reasoning\.encrypted_content'.*'message\.output_text\.logprobs'/);
    await expectError(await post({ model: MODEL, input: 'x', include: ['reasoning.encrypted_content', 'file_search_call.result'] }), 400, 'invalid_value', 'include[1]');
    await expectError(await post({ model: MODEL, input: 'x', include: 'reasoning.encrypted_content' }), 400, 'invalid_type', 'include');
    await expectError(await e.call('POST', '/v1/responses/input_tokens', { model: MODEL, input: 'x', include: ['bogus'] }), 400, 'invalid_value', 'include[0]');
    assert.equal(e.up.requests.length, before, 'nothing reached the upstream');
    e.up.script({ text: 'ok' }, { text: 'ok' });
    const r = await e.client.responses.create({
      model: MODEL,
      input: 'x',
      include: ['reasoning.encrypted_content', 'message.output_text.logprobs', 'web_search_call.action.sources'],
    });
    assert.equal(r.output_text, 'ok');
    assert.equal((await post({ model: MODEL, input: 'x', include: null })).status, 200);
  });

  test('the SDK surfaces a refusal as BadRequestError with param', async () => {
    await assert.rejects(e.client.responses.create({ model: MODEL, input: 'x', temperature: 3 }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.BadRequestError);
      assert.equal(err.param, 'temperature');
      return true;
    });
  });

  test('bad JSON -> 400; a non-JSON content type -> 415', async () => {
    await expectError(await post('{"model": "gpt-test", "input": '), 400, 'invalid_json');
    const res = await fetch(e.url + '/v1/responses', { method: 'POST', headers: { authorization: `Bearer ${e.key}`, 'content-type': 'text/plain' }, body: 'hello' });
    await expectError(res, 415, 'unsupported_media_type');
  });

  test('unknown model -> 404 model_not_found naming the known models', async () => {
    const err = await expectError(await post({ model: 'nope', input: 'x' }), 404, 'model_not_found', 'model');
    assert.match(err.message, /gpt-test/);
    assert.match(err.message, /tiny-window/);
    await assert.rejects(e.client.responses.create({ model: 'nope', input: 'x' }), OpenAI.NotFoundError);
  });

  test("authentication and scopes: another model's key 403, malformed 401 invalid_format, revoked 401, none 401", async () => {
    const scoped = await e.t.inferenceKey('alice', { scopes: ['model:tiny-window'] });
    await expectError(await post({ model: MODEL, input: 'x' }, { authorization: `Bearer ${scoped}` }), 403, 'insufficient_scope');
    // the same key may use its own model
    e.up.script({ text: 'ok' });
    assert.equal((await post({ model: 'tiny-window', input: 'x' }, { authorization: `Bearer ${scoped}` })).status, 200);
    const audioOnly = await e.t.inferenceKey('alice', { scopes: ['audio'] });
    await expectError(await post({ model: MODEL, input: 'x' }, { authorization: `Bearer ${audioOnly}` }), 403, 'insufficient_scope');

    await expectError(await post({ model: MODEL, input: 'x' }, { authorization: 'Bearer sk-short' }), 401, 'invalid_format');
    await expectError(await post({ model: MODEL, input: 'x' }, { authorization: 'Basic abc' }), 401, 'invalid_authorization_format');
    const noAuth = await fetch(e.url + '/v1/responses', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, input: 'x' }) });
    await expectError(noAuth, 401);

    const jwt = await e.t.token('alice');
    const created = await e.t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${jwt}` }, payload: { name: 'to revoke' } });
    const k = created.json().data;
    e.up.script({ text: 'ok' });
    assert.equal((await post({ model: MODEL, input: 'x' }, { authorization: `Bearer ${k.api_key}` })).status, 200);
    const rv = await e.t.app.inject({ method: 'POST', url: '/v1/portal/api-keys/revoke', headers: { authorization: `Bearer ${jwt}` }, payload: { api_key_id: k.id } });
    assert.equal(rv.statusCode, 200, rv.body);
    await expectError(await post({ model: MODEL, input: 'x' }, { authorization: `Bearer ${k.api_key}` }), 401, 'api_key_revoked');
    const sdk = new OpenAI({ apiKey: k.api_key, baseURL: e.url + '/v1', maxRetries: 0 });
    await assert.rejects(sdk.responses.create({ model: MODEL, input: 'x' }), OpenAI.AuthenticationError);
  });

  describe('truncation (context_window 80)', () => {
    const long = (c: string) => c.repeat(100); // about 29 estimated tokens as a message
    const turns = [
      { role: 'user' as const, content: long('a') },
      { role: 'assistant' as const, content: long('b') },
      { role: 'user' as const, content: long('c') },
      { role: 'user' as const, content: long('d') },
    ];

    test('disabled (default) -> 400 context_length_exceeded', async () => {
      const before = e.up.requests.length;
      const err = await expectError(await post({ model: 'tiny-window', instructions: 'Be brief.', input: turns }), 400, 'context_length_exceeded', 'input');
      assert.match(err.message, /80/);
      await expectError(await post({ model: 'tiny-window', instructions: 'Be brief.', input: turns, truncation: 'disabled' }), 400, 'context_length_exceeded');
      assert.equal(e.up.requests.length, before);
    });

    test('auto -> the oldest turns are dropped, the instructions stay', async () => {
      e.up.script({ text: 'fits' });
      const r = await e.client.responses.create({ model: 'tiny-window', instructions: 'Be brief.', input: turns, truncation: 'auto' });
      assert.equal(r.status, 'completed');
      assert.equal(r.truncation, 'auto');
      const msgs = e.last().messages;
      assert.deepEqual(msgs[0], { role: 'system', content: 'Be brief.' });
      assert.ok(msgs.length < 5 && msgs.length >= 2, `some turns dropped (${msgs.length} messages)`);
      assert.deepEqual(msgs[msgs.length - 1], { role: 'user', content: long('d') });
      assert.ok(!msgs.some((m: any) => m.content === long('a')), 'the oldest turn went first');
      // the stored input items are the request's, untouched
      const items = await e.client.responses.inputItems.list(r.id, { order: 'asc' });
      assert.equal(items.data.length, 4);
    });

    test('auto but one message alone is too long -> 400', async () => {
      await expectError(await post({ model: 'tiny-window', input: long('z').repeat(4), truncation: 'auto' }), 400, 'context_length_exceeded');
    });
  });
});
