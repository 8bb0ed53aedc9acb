/**
 * POST /v1/messages behind the {base_url} gate: the inference key in `x-api-key` (as Anthropic's SDK sends it) or
 * in `Authorization: Bearer`, `x-api-key` read on Anthropic's routes only, the `anthropic-messages` scope (which
 * no other family's scope opens, and which opens no other family), `model:` scopes, keys in every state, usage
 * that belongs to the caller, budgets (a reservation at admission) and rate limits, in Anthropic's error shape.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { expectError } from '../chat/helpers.js';
import { MODEL, VIA_RESPONSES, expectAnthropicError, setupMessages, type MessagesEnv } from './helpers.js';

const body = { model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] };

describe('messages: keys, scopes, usage', () => {
  let e: MessagesEnv;
  before(async () => {
    e = await setupMessages();
  });
  after(() => e.close());

  const portal = async (user: string, method: string, path: string, payload?: unknown) =>
    fetch(`${e.url}/v1/portal${path}`, {
      method,
      headers: { authorization: `Bearer ${await e.t.token(user)}`, ...(payload ? { 'content-type': 'application/json' } : {}) },
      body: payload ? JSON.stringify(payload) : undefined,
    });
  const keyRecord = async (user: string, scopes?: string[]) => {
    const res = await portal(user, 'POST', '/api-keys', { name: 'k', ...(scopes ? { scopes } : {}) });
    assert.equal(res.status, 200);
    return ((await res.json()) as any).data as { id: string; api_key: string };
  };
  const messages = (headers: Record<string, string>, b: unknown = body) =>
    fetch(`${e.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(b) });
  const chat = (headers: Record<string, string>) =>
    fetch(`${e.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: MODEL, messages: body.messages }),
    });

  test('the key in x-api-key or as a bearer token (the SDK with apiKey and with authToken); both headers must name the same key', async () => {
    assert.equal((await e.anthropic.messages.create(body as any)).type, 'message');
    assert.equal((await e.clientFor({ authToken: e.key }).messages.create(body as any)).type, 'message');
    assert.equal((await messages({ 'x-api-key': e.key, authorization: `Bearer ${e.key}` })).status, 200);
    const other = await keyRecord('alice');
    const n = e.up.requests.length;
    const err = await expectAnthropicError(await messages({ 'x-api-key': e.key, authorization: `Bearer ${other.api_key}` }), 401, 'authentication_error');
    assert.match(err.message, /different keys/);
    await expectAnthropicError(await messages({ 'x-api-key': e.key, authorization: 'Basic abc' }), 401, 'authentication_error');
    await expectAnthropicError(await messages({ 'x-api-key': 'sk-not-a-key' }), 401, 'authentication_error');
    await expectAnthropicError(await messages({ 'x-api-key': e.key.slice(0, -1) + (e.key.endsWith('a') ? 'b' : 'a') }), 401, 'authentication_error');
    assert.equal(e.up.requests.length, n, 'no refused request reached the upstream');
  });

  test('x-api-key opens no other route: Chat Completions and the model list still need Authorization', async () => {
    await expectError(await chat({ 'x-api-key': e.key }), 401, 'unauthorized');
    const models = await fetch(`${e.url}/v1/models`, { headers: { 'x-api-key': e.key } });
    assert.equal(models.status, 401);
    assert.equal((await chat({ authorization: `Bearer ${e.key}` })).status, 200);
  });

  test('keys in every state: revoked, disabled, a Management API Key: 401 authentication_error', async () => {
    const revoked = await keyRecord('alice');
    assert.equal((await messages({ 'x-api-key': revoked.api_key })).status, 200);
    await portal('alice', 'POST', '/api-keys/revoke', { api_key_id: revoked.id });
    assert.match((await expectAnthropicError(await messages({ 'x-api-key': revoked.api_key }), 401, 'authentication_error')).message, /revoked/);
    const disabled = await keyRecord('alice');
    await e.t.services.inferenceKeys.setDisabled(disabled.id, true);
    assert.match((await expectAnthropicError(await messages({ 'x-api-key': disabled.api_key }), 401, 'authentication_error')).message, /disabled/);
    const mk = await portal('alice', 'POST', '/management/api-keys', { name: 'mgmt' });
    await expectAnthropicError(await messages({ 'x-api-key': ((await mk.json()) as any).data.api_key }), 401, 'authentication_error');
  });

  test('scopes: anthropic-messages opens /v1/messages and count_tokens only; chat or responses alone do not open it; model: scopes limit the models', async () => {
    const own = await keyRecord('alice', ['anthropic-messages']);
    assert.equal((await messages({ 'x-api-key': own.api_key })).status, 200);
    const count = await fetch(`${e.url}/v1/messages/count_tokens`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': own.api_key },
      body: JSON.stringify({ model: MODEL, messages: body.messages }),
    });
    assert.equal(count.status, 200);
    await expectError(await chat({ authorization: `Bearer ${own.api_key}` }), 403, 'insufficient_scope');

    for (const scopes of [['chat'], ['responses'], ['chat', 'responses', 'embeddings', 'audio']]) {
      const k = await keyRecord('alice', scopes);
      const err = await e
        .clientFor({ apiKey: k.api_key })
        .messages.create(body as any)
        .then(
          () => assert.fail('expected 403'),
          (x: unknown) => x,
        );
      assert.ok(err instanceof Anthropic.PermissionDeniedError, String(err));
      assert.equal(err.type, 'permission_error');
      assert.match(err.message, /anthropic-messages/);
    }
    const modelScoped = await keyRecord('alice', ['anthropic-messages', `model:${MODEL}`]);
    assert.equal((await messages({ 'x-api-key': modelScoped.api_key })).status, 200);
    const other = await expectAnthropicError(await messages({ 'x-api-key': modelScoped.api_key }, { ...body, model: VIA_RESPONSES }), 403, 'permission_error');
    assert.match(other.message, new RegExp(VIA_RESPONSES));

    // the portal offers the scope for inference keys
    const me = ((await (await portal('alice', 'GET', '/me')).json()) as any).data;
    assert.ok(me.api_keys.scopes.includes('anthropic-messages'));
  });

  test("usage belongs to the caller: bob's message is in bob's ledger only", async () => {
    const bob = await keyRecord('bob');
    e.up.script({ text: 'for bob', usage: { prompt_tokens: 222, completion_tokens: 1 } });
    assert.equal((await messages({ 'x-api-key': bob.api_key })).status, 200);
    const rows = (await e.usage('bob')).filter((r) => r.operation === 'anthropic.messages');
    assert.equal(rows.length, 1);
    assert.equal(rows[0]!.input_tokens, 222);
    assert.ok(!(await e.usage('alice')).some((r) => r.input_tokens === 222));
  });
});

describe('messages: budgets apply (a reservation at admission)', () => {
  let e: MessagesEnv;
  before(async () => {
    e = await setupMessages({
      env: { BILLING_ENABLED: 'true', PORTICO_DB: '' },
      upstream: { defaultReply: { text: 'ok', usage: { prompt_tokens: 300_000, completion_tokens: 100_000 } } },
    });
  });
  after(() => e.close());

  test('no credits: 429 rate_limit_error before the upstream is called; credits are spent at the model price (JSON and stream)', async () => {
    const key = await e.t.inferenceKey('payer');
    const client = e.clientFor({ apiKey: key });
    const paid = { ...body, max_tokens: 250_000 };
    const n = e.up.requests.length;
    const err = await client.messages.create(paid as any).then(
      () => assert.fail('expected 429'),
      (x: unknown) => x,
    );
    assert.ok(err instanceof Anthropic.RateLimitError, String(err));
    assert.equal(err.type, 'rate_limit_error');
    assert.equal(e.up.requests.length, n);
    await e.t.services.usage.grant('payer', 'default', 1.5);
    assert.equal((await client.messages.create(paid as any)).type, 'message');
    await client.messages.stream(paid as any).finalMessage();
    const res = await fetch(`${e.url}/v1/portal/query/balance`, { headers: { authorization: `Bearer ${await e.t.token('payer')}` } });
    const bal = ((await res.json()) as any).data;
    assert.equal(bal.used, 1, '0.5 credits a message: 300,000 input tokens at 1 per million, 100,000 output at 2');
  });
});
