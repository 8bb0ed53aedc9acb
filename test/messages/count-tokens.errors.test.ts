/**
 * POST /v1/messages/count_tokens refusals, in Anthropic's error shape through the SDK's typed errors: keys, the
 * scope, an unknown model, missing and mistyped parameters, unknown fields (max_tokens is not one of its fields),
 * and what Portico does not map.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic, { APIError } from '@anthropic-ai/sdk';
import { MODEL, expectAnthropicError, setupMessages, type MessagesEnv } from './helpers.js';

const hi = [{ role: 'user' as const, content: 'hi' }];

describe('count_tokens: errors in Anthropic shape', () => {
  let e: MessagesEnv;
  before(async () => {
    e = await setupMessages();
  });
  after(() => e.close());

  const refused = async (cls: new (...a: any[]) => APIError, status: number, type: string, body: Record<string, unknown>, client = e.anthropic) => {
    const err = await client.messages.countTokens(body as any).then(
      () => assert.fail('expected a refusal'),
      (x: unknown) => x,
    );
    assert.ok(err instanceof cls, `expected ${cls.name}, got ${String(err)}`);
    assert.equal(err.status, status);
    assert.equal(err.type, type);
    return err;
  };

  test('no key, a bad key: 401; a key without the scope: 403', async () => {
    const none = await fetch(`${e.url}/v1/messages/count_tokens`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: hi }),
    });
    await expectAnthropicError(none, 401, 'authentication_error');
    await refused(Anthropic.AuthenticationError, 401, 'authentication_error', { model: MODEL, messages: hi }, e.clientFor({ apiKey: 'sk-nope' }));
    const res = await fetch(`${e.url}/v1/portal/api-keys`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${await e.t.token('alice')}` },
      body: JSON.stringify({ name: 'chat only', scopes: ['chat'] }),
    });
    const chatOnly = ((await res.json()) as any).data.api_key as string;
    await refused(Anthropic.PermissionDeniedError, 403, 'permission_error', { model: MODEL, messages: hi }, e.clientFor({ apiKey: chatOnly }));
  });

  test('unknown model: 404; missing, mistyped and unknown fields: 400 naming them; what is not mapped: 400 naming it', async () => {
    assert.match((await refused(Anthropic.NotFoundError, 404, 'not_found_error', { model: 'nope', messages: hi })).message, /nope/);
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ model: MODEL }, /messages/],
      [{ messages: hi }, /model/],
      [{ model: MODEL, messages: 'hi' }, /messages/],
      [{ model: MODEL, messages: hi, max_tokens: 5 }, /max_tokens/],
      [{ model: MODEL, messages: hi, system: 5 }, /system/],
      [{ model: MODEL, messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' } }] }] }, /document/],
      [{ model: MODEL, messages: hi, tools: [{ type: 'bash_20250124', name: 'bash' }] }, /bash_20250124/],
      [{ model: MODEL, messages: hi, thinking: { type: 'enabled' } }, /budget_tokens/],
    ];
    for (const [body, re] of cases) {
      const err = await refused(Anthropic.BadRequestError, 400, 'invalid_request_error', body);
      assert.match(err.message, re, JSON.stringify(body));
    }
    assert.equal(e.up.requests.length, 0);
  });
});
