/**
 * GET /v1/admin/health is an operator's: 401 without credentials, 403 for a member, an organization's admin and a
 * management key without the admin scope (on both databases: on PostgreSQL the view asks the other instances over
 * the change feed, and a refused caller must not make it ask). The reason of an open breaker is the upstream's
 * failure as the engines redact it: the upstream's key never shows.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { parseModelConfig } from '../../src/models/config.js';
import { ASK_CHANNEL } from '../../src/admin/health.js';
import { callers, type Callers } from './helpers.js';

const UPSTREAM_KEY = 'sk-upstream-health-secret-0123456789';

for (const db of testDatabases()) {
  describe(`GET /v1/admin/health: only operators (${db})`, () => {
    let up: ScriptedUpstream;
    let t: TestApp & { url?: string };
    let c: Callers;
    const asks: unknown[] = [];
    before(async () => {
      up = await startScriptedUpstream();
      process.env.HEALTH_TEST_UPSTREAM_KEY = UPSTREAM_KEY;
      const yaml = `
models:
  - name: keyed
    id: keyed-a
    provider: openai-compatible
    base_url: ${up.url}
    api_key_env: HEALTH_TEST_UPSTREAM_KEY
    retries: 0
    breaker: { failures: 1, cooldown_ms: 60000 }
    fallbacks: [other]
  - name: other
    provider: openai-compatible
    base_url: ${up.url}
`;
      t = await buildTestApp({ db, listen: true, models: parseModelConfig(yaml).models });
      c = await callers(t);
      t.core.feed.subscribe(ASK_CHANNEL, (m) => asks.push(m));
    });
    after(async () => {
      await t.close();
      await up.close();
      delete process.env.HEALTH_TEST_UPSTREAM_KEY;
    });
    const get = (headers: Record<string, string>) => t.app.inject({ method: 'GET', url: '/v1/admin/health', headers });

    test('401 without credentials, 403 for a member, an org admin and a key without the admin scope; 200 for an operator', async () => {
      const none = await get({});
      assert.equal(none.statusCode, 401);
      assert.equal(none.json().meta.error, 'unauthorized');
      assert.equal(none.json().data, null);
      for (const [who, h] of [
        ['member', c.member],
        ['org admin', c.orgAdmin],
      ] as const) {
        const res = await get(h);
        assert.equal(res.statusCode, 403, `${who}: ${res.body}`);
        assert.equal(res.json().meta.error, 'permission_denied');
        assert.equal(res.json().data, null);
      }
      const plain = await get(c.plainKey);
      assert.equal(plain.statusCode, 403);
      assert.equal(plain.json().meta.error, 'insufficient_scope');
      assert.equal((await get({ authorization: 'Basic abc' })).statusCode, 401);
      assert.equal(asks.length, 0, 'no refused caller made the instances publish anything');
      const op = await get(c.operator);
      assert.equal(op.statusCode, 200, op.body);
      if (t.core.feed.kind === 'local') assert.equal(asks.length, 0, 'one process: nobody to ask');
      else assert.equal(asks.length, 1, 'the operator asked the others once');
    });

    test("an open breaker's reason never carries the upstream's key", async () => {
      // the upstream says the key back in its error (some do)
      up.script({ status: 500, errorMessage: `invalid key ${UPSTREAM_KEY} for this project` });
      const key = await t.inferenceKey('alice');
      const r = await fetch(`${t.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'keyed', messages: [{ role: 'user', content: 'hi' }] }),
      });
      assert.equal(r.status, 200, 'the fallback answered');
      const res = await get(c.operator);
      const d = res.json().data.deployments.find((x: any) => x.deployment === 'keyed-a');
      assert.equal(d.state, 'open');
      assert.match(d.reason, /invalid key/);
      assert.doesNotMatch(res.body, /sk-upstream-health-secret/);
    });
  });
}
