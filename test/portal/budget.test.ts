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
        // PGlite in DATA_DIR (not in memory): usage records go through the journal, as in production
        env: { BILLING_ENABLED: 'true', ...(db === 'pglite' ? { PORTICO_DB: '' } : {}) },
        // 5 tokens a request at 100,000 credits per million tokens = 0.5 credits a request; each reserves its
        // worst case at admission: 'hi' estimated at 8 input tokens + max_output_tokens 2 = 1 credit
        models: [{ name: 'paid', provider: 'openai-compatible', base_url: up.url, type: 'text', pricing: { input_per_million: 100_000, output_per_million: 100_000 } }],
      });
    });
    after(async () => {
      await t.close();
      await up.close();
    });

    const respond = (key: string) =>
      t.app.inject({ method: 'POST', url: '/v1/responses', headers: { authorization: `Bearer ${key}` }, payload: { model: 'paid', input: 'hi', max_output_tokens: 2 } });
    const balance = async (user: string, org?: string) => {
      const res = await t.app.inject({
        method: 'GET',
        url: `/v1/portal/query/balance${org ? `?org_id=${org}` : ''}`,
        headers: { authorization: `Bearer ${await t.token(user, org ? { [org]: 'admin' } : {})}` },
      });
      assert.equal(res.statusCode, 200, res.body);
      // billing on: the page shows this balance (a spent one refuses requests)
      const { billing_enabled, ...rest } = res.json().data;
      assert.equal(billing_enabled, true);
      return rest;
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
      await t.services.usage.grant('payer', 'default', 1.5);
      assert.equal((await respond(key)).statusCode, 200);
      assert.deepEqual(await balance('payer'), { granted: 1.5, used: 0.5, balance: 1, currency: 'credits' });
      // 1 credit left, 1 reserved: admitted
      assert.equal((await respond(key)).statusCode, 200);
      assert.deepEqual(await balance('payer'), { granted: 1.5, used: 1, balance: 0.5, currency: 'credits' });
      // 0.5 left, less than the request's worst case: refused, saying the reservation
      const refused = await respond(key);
      assert.equal(refused.statusCode, 429);
      assert.equal(refused.json().error.code, 'insufficient_quota');
      assert.match(refused.json().error.message, /may cost up to 1 credits .*0\.5 credits left .*max_output_tokens/);
      // a refused request is not charged
      assert.equal((await balance('payer')).used, 1);
      // more credits: served again at once
      await t.services.usage.grant('payer', 'default', 0.5);
      assert.equal((await respond(key)).statusCode, 200);
      assert.equal((await balance('payer')).balance, 0.5);
    });

    test("an organization key spends the organization's credits, not its creator's", async () => {
      const admin = await t.token('olga', { acme: 'admin' });
      const created = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${admin}` }, payload: { name: 'org', org_id: 'acme' } });
      const orgKey = created.json().data.api_key as string;
      await t.services.usage.grant('olga', 'default', 10); // personal credits do not pay for org work
      assert.equal((await respond(orgKey)).statusCode, 429);
      await t.services.usage.grant('', 'acme', 1);
      assert.equal((await respond(orgKey)).statusCode, 200);
      assert.deepEqual(await balance('olga', 'acme'), { granted: 1, used: 0.5, balance: 0.5, currency: 'credits' });
      assert.equal((await balance('olga')).used, 0);
    });

    /** counts the budget's ledger reads (balance queries) from now on */
    const countReads = () => {
      const store = (t.services.usage as unknown as { store: { balance: (...a: unknown[]) => Promise<unknown> } }).store;
      const balance = store.balance;
      let n = 0;
      store.balance = function (this: unknown, ...a: unknown[]) {
        n++;
        return balance.apply(this, a);
      };
      return {
        get n() {
          return n;
        },
        restore: () => (store.balance = balance),
      };
    };

    test('300 requests one after another read the ledger once; every charge is seen by the next request', async () => {
      const key = await t.inferenceKey('steady');
      await t.services.usage.grant('steady', 'default', 150.75);
      const reads = countReads();
      try {
        for (let i = 0; i < 300; i++) assert.equal((await respond(key)).statusCode, 200);
        assert.equal(reads.n, 1, 'one ledger read, when the payer was first seen');
        // 300 x 0.5 credits spent of 150.75: 0.75 left, less than a request's worst case (1): refused, never below zero
        const refused = await respond(key);
        assert.equal(refused.statusCode, 429);
        assert.match(refused.json().error.message, /may cost up to 1 credits .*your balance has 0\.75 credits left/);
        assert.equal(reads.n, 1);
      } finally {
        reads.restore();
      }
      assert.deepEqual(await balance('steady'), { granted: 150.75, used: 150, balance: 0.75, currency: 'credits' });
    });

    test("concurrent requests of varying cost: the running balance equals the ledger's, to the micro-credit", async () => {
      const keys = [await t.inferenceKey('busy'), await t.inferenceKey('busy'), await t.inferenceKey('busy')];
      await t.services.usage.grant('busy', 'default', 1_000_000);
      // 3..62 prompt tokens and 1..17 completion tokens at 100,000 credits per million: odd amounts
      for (let i = 0; i < 60; i++) up.script({ text: 'ok', usage: { prompt_tokens: 3 + ((i * 13) % 60), completion_tokens: 1 + ((i * 7) % 17) } });
      const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => respond(keys[i % 3]!)));
      assert.deepEqual(
        answers.map((a) => a.statusCode),
        Array(60).fill(200),
      );
      await t.services.usage.flush();
      await t.core.budget.idle();
      const ledger = await t.services.usage.balance({ orgId: 'default', userId: 'busy' });
      const running = await t.core.budget.balance({ orgId: 'default', userId: 'busy' });
      assert.equal(running, Math.round(ledger.balance * 1e6));
      assert.ok(ledger.used > 0 && ledger.used < 1_000_000);
    });
  });
}
