/**
 * POST /v1/embeddings behind the same gate as every {base_url} endpoint: key states, the `embeddings` scope and
 * `model:` scopes, usage that belongs to the caller alone, budgets and rate limits, and an upstream credential
 * that never reaches a client.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { testDatabases } from '../helpers/app.js';
import { awayFromMinuteEdge } from '../helpers/minute-window.js';
import { EMBED, expectError, setupChat, type ChatEnv } from '../chat/helpers.js';

const UPSTREAM_KEY = 'sk-embed-upstream-secret-777';
process.env.EMBED_SEC_UPSTREAM_KEY = UPSTREAM_KEY;
const body = { model: EMBED, input: 'hello world', encoding_format: 'float' };

for (const db of testDatabases()) {
  describe(`embeddings: keys, scopes, usage (${db})`, () => {
    let e: ChatEnv;
    before(async () => {
      e = await setupChat({ db });
    });
    after(() => e.close());

    const embed = (key: string | undefined, b: unknown = body) =>
      fetch(`${e.url}/v1/embeddings`, {
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
    const keyRecord = async (user: string, scopes?: string[]) =>
      ((await (await portal(user, 'POST', '/api-keys', { name: 'k', ...(scopes ? { scopes } : {}) })).json()) as any).data as { id: string; api_key: string };

    test('credentials: none, malformed, a Management API Key, revoked, disabled, expired, deleted: 401, the upstream not called', async () => {
      const n = e.up.requests.length;
      await expectError(await embed(undefined), 401, 'unauthorized');
      await expectError(await embed('sk-broken'), 401, 'invalid_format');
      const mk = ((await (await portal('alice', 'POST', '/management/api-keys', { name: 'm' })).json()) as any).data.api_key;
      await expectError(await embed(mk), 401, 'invalid_api_key');
      const revoked = await keyRecord('alice');
      await portal('alice', 'POST', '/api-keys/revoke', { api_key_id: revoked.id });
      await expectError(await embed(revoked.api_key), 401, 'api_key_revoked');
      const disabled = await keyRecord('alice');
      await e.t.services.inferenceKeys.setDisabled(disabled.id, true);
      await expectError(await embed(disabled.api_key), 401, 'api_key_disabled');
      const expired = await keyRecord('alice');
      const row = await e.t.core.db.db
        .updateTable('api_keys')
        .set({ expires_at: Math.floor(Date.now() / 1000) - 10 })
        .where('id', '=', expired.id)
        .returning('digest')
        .executeTakeFirstOrThrow();
      e.t.services.verifier.invalidateDigest(row.digest);
      await expectError(await embed(expired.api_key), 401, 'api_key_expired');
      const deleted = await keyRecord('alice');
      await portal('alice', 'DELETE', `/api-keys/${deleted.id}`);
      await expectError(await embed(deleted.api_key), 401, 'invalid_api_key');
      assert.equal(e.up.requests.length, n);
    });

    test('scopes: `embeddings` opens it, `chat` / `responses` / `audio` alone do not; `model:` scopes limit the models', async () => {
      assert.equal((await embed((await keyRecord('alice', ['embeddings'])).api_key)).status, 200);
      for (const scopes of [['chat'], ['responses'], ['audio']]) {
        const err = await expectError(await embed((await keyRecord('alice', scopes)).api_key), 403, 'insufficient_scope');
        assert.match(err.message, /"embeddings" scope/);
      }
      const other = await keyRecord('alice', ['embeddings', 'model:gpt-test']);
      await expectError(await embed(other.api_key), 403, 'insufficient_scope', 'model');
      const listed = ((await (await fetch(`${e.url}/v1/models`, { headers: { authorization: `Bearer ${other.api_key}` } })).json()) as any).data.map((m: any) => m.id);
      assert.deepEqual(listed, ['gpt-test']);
    });

    test("usage belongs to the caller: bob's embeddings are in bob's ledger only", async () => {
      const bob = await keyRecord('bob');
      assert.equal((await embed(bob.api_key, { ...body, input: ['a'.repeat(400)] })).status, 200);
      const rows = (await e.usage('bob')).filter((r) => r.operation === 'embeddings');
      assert.equal(rows.length, 1);
      assert.equal(rows[0]!.input_tokens, 100);
      assert.ok(!(await e.usage('alice')).some((r) => r.operation === 'embeddings' && r.input_tokens === 100));
      assert.deepEqual(await e.usage('carol'), []);
    });
  });
}

describe('embeddings: budgets, rate limits, upstream credentials', () => {
  let e: ChatEnv;
  before(async () => {
    e = await setupChat({ env: { BILLING_ENABLED: 'true', PORTICO_DB: '' }, upstream: { apiKey: UPSTREAM_KEY }, upstreamKeyEnv: 'EMBED_SEC_UPSTREAM_KEY' });
  });
  after(() => e.close());

  test('no credits: 429 insufficient_quota and the upstream is not called; a grant is spent at the model price', async () => {
    const key = await e.t.inferenceKey('payer');
    const embed = (input: string) =>
      fetch(`${e.url}/v1/embeddings`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify({ model: EMBED, input }),
      });
    const n = e.up.requests.length;
    await expectError(await embed('x'), 429, 'insufficient_quota');
    assert.equal(e.up.requests.length, n);
    await e.t.services.usage.grant('payer', 'default', 1);
    // 'x' x 2,000,000 is 500,000 tokens at 1 credit per million: 0.5 credits
    assert.equal((await embed('x'.repeat(2_000_000))).status, 200);
    const bal = ((await (await fetch(`${e.url}/v1/portal/query/balance`, { headers: { authorization: `Bearer ${await e.t.token('payer')}` } })).json()) as any).data;
    assert.deepEqual(bal, { granted: 1, used: 0.5, balance: 0.5, currency: 'credits', billing_enabled: true });
  });

  test('requests per minute apply; the upstream key is used upstream and never shown', async () => {
    await e.t.services.usage.grant('limited', 'default', 100);
    const rec = (
      (await (
        await fetch(`${e.url}/v1/portal/api-keys`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${await e.t.token('limited')}` },
          body: JSON.stringify({ name: 'rl' }),
        })
      ).json()) as any
    ).data;
    await e.t.services.inferenceKeys.setLimits(rec.id, 1, null);
    const embed = () =>
      fetch(`${e.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${rec.api_key}` }, body: JSON.stringify(body) });
    await awayFromMinuteEdge(3); // the two requests count in one fixed minute
    assert.equal((await embed()).status, 200);
    assert.equal(e.up.requests[e.up.requests.length - 1]!.headers.authorization, `Bearer ${UPSTREAM_KEY}`);
    await expectError(await embed(), 429, 'rate_limit_exceeded');

    await e.t.services.usage.grant('alice', 'default', 100);
    e.up.script({ status: 400, errorMessage: `bad input for ${UPSTREAM_KEY}` });
    const err = await expectError(
      await fetch(`${e.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${e.key}` }, body: JSON.stringify(body) }),
      400,
    );
    assert.ok(!err.message.includes(UPSTREAM_KEY));
  });
});
