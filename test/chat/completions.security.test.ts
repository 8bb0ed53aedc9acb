/**
 * POST /v1/chat/completions behind the same gate as the Responses API: inference keys in every state, the
 * `chat` scope (which `responses` does not grant) and `model:` scopes, budgets, rate limits, usage that belongs
 * to the caller alone, and upstream credentials that never reach a client.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { testDatabases } from '../helpers/app.js';
import { awayFromMinuteEdge } from '../helpers/minute-window.js';
import { EMBED, MODEL, expectError, setupChat, type ChatEnv } from './helpers.js';

const UPSTREAM_KEY = 'sk-upstream-very-secret-4242';
process.env.CHAT_SEC_UPSTREAM_KEY = UPSTREAM_KEY;

const body = { model: MODEL, messages: [{ role: 'user', content: 'hi' }] };

for (const db of testDatabases()) {
  describe(`chat completions: keys, scopes, usage (${db})`, () => {
    let e: ChatEnv;
    before(async () => {
      e = await setupChat({ db, upstream: { apiKey: UPSTREAM_KEY }, upstreamKeyEnv: 'CHAT_SEC_UPSTREAM_KEY' });
    });
    after(() => e.close());

    const chat = (key: string | undefined, b: unknown = body) =>
      fetch(`${e.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
        body: JSON.stringify(b),
      });
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

    test('credentials: none, malformed, a Management API Key, revoked, disabled, expired, deleted: 401 before the upstream is called', async () => {
      const n = e.up.requests.length;
      await expectError(await chat(undefined), 401, 'unauthorized');
      await expectError(await chat('sk-not-a-key'), 401, 'invalid_format');
      const mk = await portal('alice', 'POST', '/management/api-keys', { name: 'mgmt' });
      await expectError(await chat(((await mk.json()) as any).data.api_key), 401, 'invalid_api_key');

      const revoked = await keyRecord('alice');
      assert.equal((await chat(revoked.api_key)).status, 200);
      await portal('alice', 'POST', '/api-keys/revoke', { api_key_id: revoked.id });
      await expectError(await chat(revoked.api_key), 401, 'api_key_revoked');

      const disabled = await keyRecord('alice');
      await e.t.services.inferenceKeys.setDisabled(disabled.id, true);
      await expectError(await chat(disabled.api_key), 401, 'api_key_disabled');

      const expired = await keyRecord('alice');
      const row = await e.t.core.db.db
        .updateTable('api_keys')
        .set({ expires_at: Math.floor(Date.now() / 1000) - 10 })
        .where('id', '=', expired.id)
        .returning('digest')
        .executeTakeFirstOrThrow();
      e.t.services.verifier.invalidateDigest(row.digest);
      await expectError(await chat(expired.api_key), 401, 'api_key_expired');

      const deleted = await keyRecord('alice');
      await portal('alice', 'DELETE', `/api-keys/${deleted.id}`);
      await expectError(await chat(deleted.api_key), 401, 'invalid_api_key');
      assert.equal(e.up.requests.length, n + 1, 'only the one valid call reached the upstream');
    });

    test('scopes: `chat` opens chat completions; `responses`, `embeddings` or `audio` alone do not; `model:` scopes limit the models', async () => {
      const chatOnly = await keyRecord('alice', ['chat']);
      assert.equal((await chat(chatOnly.api_key)).status, 200);
      const embedReq = { model: EMBED, input: 'x' };
      const embedAnswer = await fetch(`${e.url}/v1/embeddings`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${chatOnly.api_key}` },
        body: JSON.stringify(embedReq),
      });
      await expectError(embedAnswer, 403, 'insufficient_scope');

      for (const scopes of [['responses'], ['embeddings'], ['audio'], ['responses', 'audio']]) {
        const k = await keyRecord('alice', scopes);
        const err = await expectError(await chat(k.api_key), 403, 'insufficient_scope');
        assert.match(err.message, /"chat" scope/);
      }
      const both = await keyRecord('alice', ['responses', 'chat']);
      assert.equal((await chat(both.api_key)).status, 200);

      const modelScoped = await keyRecord('alice', ['chat', `model:${MODEL}`]);
      assert.equal((await chat(modelScoped.api_key)).status, 200);
      const other = await expectError(await chat(modelScoped.api_key, { ...body, model: 'via-responses' }), 403, 'insufficient_scope', 'model');
      assert.match(other.message, /via-responses/);
      // a key naming only models (no endpoint scope) may call every endpoint
      const modelsOnly = await keyRecord('alice', [`model:${MODEL}`]);
      assert.equal((await chat(modelsOnly.api_key)).status, 200);

      // the scope values the portal offers for inference keys include the new ones
      const me = ((await (await portal('alice', 'GET', '/me')).json()) as any).data;
      for (const s of ['responses', 'chat', 'embeddings', 'audio']) assert.ok(me.api_keys.scopes.includes(s), s);
    });

    test("usage belongs to the caller: bob's chat is in bob's ledger only, alice's in hers; nothing is kept to fetch", async () => {
      const bob = await keyRecord('bob');
      e.up.script({ text: 'for bob', usage: { prompt_tokens: 111, completion_tokens: 1 } });
      assert.equal((await chat(bob.api_key)).status, 200);
      const bobRows = (await e.usage('bob')).filter((r) => r.operation === 'chat.completions');
      assert.equal(bobRows.length, 1);
      assert.equal(bobRows[0]!.input_tokens, 111);
      assert.ok(!(await e.usage('alice')).some((r) => r.input_tokens === 111), "not in alice's usage");
      assert.deepEqual(await e.usage('carol'), []);
      // Chat completions are not stored: there is nothing to retrieve, for anyone
      await expectError(await fetch(`${e.url}/v1/chat/completions/chatcmpl-1`, { headers: { authorization: `Bearer ${bob.api_key}` } }), 404, 'not_found');
    });

    test('the upstream credential never reaches a client, even when the upstream echoes it', async () => {
      e.up.script({ status: 400, errorMessage: `Invalid request for key ${UPSTREAM_KEY} (Bearer ${UPSTREAM_KEY})` });
      const err = await expectError(await chat(e.key), 400);
      assert.ok(!err.message.includes(UPSTREAM_KEY), err.message);
      assert.match(err.message, /\*\*\*/);
      e.up.script({ text: 'x', breakAfter: 1 });
      const res = await chat(e.key, { ...body, stream: true });
      assert.ok(!(await res.text()).includes(UPSTREAM_KEY));
      assert.equal(e.up.requests[e.up.requests.length - 1]!.headers.authorization, `Bearer ${UPSTREAM_KEY}`, 'the upstream got its key');
      assert.notEqual(e.up.requests[e.up.requests.length - 1]!.headers.authorization, `Bearer ${e.key}`, "the client's Portico key is not forwarded");
    });
  });
}

describe('chat completions: budgets and rate limits apply', () => {
  let e: ChatEnv;
  before(async () => {
    // PGlite in DATA_DIR: usage goes through the journal, as in production
    e = await setupChat({
      env: { BILLING_ENABLED: 'true', PORTICO_DB: '' },
      upstream: { defaultReply: { text: 'ok', usage: { prompt_tokens: 300_000, completion_tokens: 100_000 } } },
    });
  });
  after(() => e.close());

  const balance = async (user: string) => {
    const res = await fetch(`${e.url}/v1/portal/query/balance`, { headers: { authorization: `Bearer ${await e.t.token(user)}` } });
    const { billing_enabled, ...rest } = ((await res.json()) as any).data;
    assert.equal(billing_enabled, true);
    return rest;
  };

  test('no credits: 429 insufficient_quota before the upstream is called; credits are spent at the model price, then refused', async () => {
    const key = await e.t.inferenceKey('payer');
    // max_tokens 250,000 at 2 credits per million: each request reserves a little over 0.5 credits at admission
    const paid = { ...body, max_tokens: 250_000 };
    const chat = () =>
      fetch(`${e.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: JSON.stringify(paid) });
    const n = e.up.requests.length;
    await expectError(await chat(), 429, 'insufficient_quota');
    assert.equal(e.up.requests.length, n);
    // 300,000 input tokens at 1 credit per million + 100,000 output at 2: 0.5 credits a request
    await e.t.services.usage.grant('payer', 'default', 1.5);
    assert.equal((await chat()).status, 200);
    assert.deepEqual(await balance('payer'), { granted: 1.5, used: 0.5, balance: 1, currency: 'credits' });
    // streamed: charged the same (from the upstream's usage, though the client did not ask for it)
    const s = await fetch(`${e.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ ...paid, stream: true }),
    });
    assert.equal(s.status, 200);
    await s.text();
    assert.deepEqual(await balance('payer'), { granted: 1.5, used: 1, balance: 0.5, currency: 'credits' });
    // 0.5 left, a little less than the worst case: refused, saying the reservation
    const refused = await expectError(await chat(), 429, 'insufficient_quota');
    assert.match(refused.message, /may cost up to 0\.5000\d+ credits/);
  });

  test('per-key rate limits: requests per minute, and the tokens of chat completions count towards tokens per minute', async () => {
    await e.t.services.usage.grant('limited', 'default', 100);
    const rec = await (
      await fetch(`${e.url}/v1/portal/api-keys`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${await e.t.token('limited')}` },
        body: JSON.stringify({ name: 'rl' }),
      })
    ).json();
    const { id, api_key } = (rec as any).data;
    await e.t.services.inferenceKeys.setLimits(id, 2, null);
    const chat = () =>
      fetch(`${e.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${api_key}` }, body: JSON.stringify(body) });
    await awayFromMinuteEdge(3); // the three requests count in one fixed minute
    assert.equal((await chat()).status, 200);
    assert.equal((await chat()).status, 200);
    const res = await chat();
    assert.ok(Number(res.headers.get('retry-after')) >= 1);
    await expectError(res, 429, 'rate_limit_exceeded');

    const tk = await (
      await fetch(`${e.url}/v1/portal/api-keys`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${await e.t.token('limited')}` },
        body: JSON.stringify({ name: 'tpm' }),
      })
    ).json();
    await e.t.services.inferenceKeys.setLimits((tk as any).data.id, null, 1000);
    const chatT = () =>
      fetch(`${e.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${(tk as any).data.api_key}` },
        body: JSON.stringify({ ...body, max_tokens: 100 }),
      });
    // the first request is admitted (108 tokens reserved) and uses 400,000 tokens: the next is over the minute's 1000
    await awayFromMinuteEdge(3);
    assert.equal((await chatT()).status, 200);
    await expectError(await chatT(), 429, 'rate_limit_exceeded');
  });
});
