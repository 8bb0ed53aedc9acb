import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';

for (const db of testDatabases()) {
  describe(`budgets with BILLING_ENABLED (${db})`, () => {
    let t: TestApp;
    let up: ScriptedUpstream;
    before(async () => {
      up = await startScriptedUpstream({ record: false, defaultReply: { text: 'ok', usage: { prompt_tokens: 3, completion_tokens: 2 } } });
      t = await buildTestApp({
        db,
        env: { BILLING_ENABLED: 'true' },
        // 5 tokens a request at 100,000 credits per million tokens = 0.5 credits a request
        models: [{ name: 'paid', provider: 'openai-compatible', base_url: up.url, type: 'text', pricing: { input_per_million: 100_000, output_per_million: 100_000 } }],
      });
    });
    after(async () => {
      await t.close();
      await up.close();
    });

    const respond = (key: string) =>
      t.app.inject({ method: 'POST', url: '/v1/responses', headers: { authorization: `Bearer ${key}` }, payload: { model: 'paid', input: 'hi' } });
    const balance = async (user: string, org?: string) => {
      const res = await t.app.inject({ method: 'GET', url: `/v1/portal/query/balance${org ? `?org_id=${org}` : ''}`, headers: { authorization: `Bearer ${await t.token(user, org ? { [org]: 'admin' } : {})}` } });
      assert.equal(res.statusCode, 200, res.body);
      return res.json().data;
    };

    test('no credits: 429 insufficient_quota in the OpenAI shape, and nothing is charged', async () => {
      const key = await t.inferenceKey('broke');
      const res = await respond(key);
      assert.equal(res.statusCode, 429);
      const err = res.json().error;
      assert.equal(err.code, 'insufficient_quota');
      assert.equal(err.type, 'insufficient_quota');
      assert.match(err.message, /quota/);
      assert.deepEqual(await balance('broke'), { granted: 0, used: 0, balance: 0, currency: 'credits' });
    });

    test('granted credits are spent request by request, then refused; the balance reflects every charge', async () => {
      const key = await t.inferenceKey('payer');
      await t.services.usage.grant('payer', 'default', 1);
      assert.equal((await respond(key)).statusCode, 200);
      assert.deepEqual(await balance('payer'), { granted: 1, used: 0.5, balance: 0.5, currency: 'credits' });
      assert.equal((await respond(key)).statusCode, 200);
      assert.deepEqual(await balance('payer'), { granted: 1, used: 1, balance: 0, currency: 'credits' });
      const refused = await respond(key);
      assert.equal(refused.statusCode, 429);
      assert.equal(refused.json().error.code, 'insufficient_quota');
      // a refused request is not charged
      assert.equal((await balance('payer')).used, 1);
      // more credits: served again (the cached balance is not trusted past its short freshness window)
      await t.services.usage.grant('payer', 'default', 0.5);
      await new Promise((r) => setTimeout(r, 1100));
      assert.equal((await respond(key)).statusCode, 200);
      assert.equal((await balance('payer')).balance, 0);
    });

    test("an organization key spends the organization's credits, not its creator's", async () => {
      const admin = await t.token('olga', { acme: 'admin' });
      const created = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${admin}` }, payload: { name: 'org', org_id: 'acme' } });
      const orgKey = created.json().data.api_key as string;
      await t.services.usage.grant('olga', 'default', 10); // personal credits do not pay for org work
      assert.equal((await respond(orgKey)).statusCode, 429);
      await t.services.usage.grant('', 'acme', 0.5);
      await new Promise((r) => setTimeout(r, 1100));
      assert.equal((await respond(orgKey)).statusCode, 200);
      assert.deepEqual(await balance('olga', 'acme'), { granted: 0.5, used: 0.5, balance: 0, currency: 'credits' });
      assert.equal((await balance('olga')).used, 0);
    });
  });
}
