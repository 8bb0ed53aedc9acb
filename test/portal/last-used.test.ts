import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { awayFromMinuteEdge } from '../helpers/minute-window.js';
import { MGMT, assertOk, caller, eventually, sleep, type Caller } from './util.js';

// last_used_at records a use: a request that was refused (scope, rate limit, budget) is not one. The write is
// off the request's path, so each "not written" is checked after a served request of another key was written.

describe('last_used_at moves only when a request is served', () => {
  let t: TestApp;
  let up: ScriptedUpstream;
  let call: Caller;
  before(async () => {
    up = await startScriptedUpstream({ record: false, defaultReply: { text: 'ok', usage: { prompt_tokens: 3, completion_tokens: 2 } } });
    t = await buildTestApp({
      env: { BILLING_ENABLED: 'true', RATE_LIMIT_RPM: '1' },
      models: [{ name: 'paid', provider: 'openai-compatible', base_url: up.url, type: 'text', pricing: { input_per_million: 100_000, output_per_million: 100_000 } }],
    });
    call = caller(t);
  });
  after(async () => {
    await t.close();
    await up.close();
  });

  const lastUsed = async (id: string) => Number((await t.services.db.db.selectFrom('api_keys').select('last_used_at').where('id', '=', id).executeTakeFirstOrThrow()).last_used_at);
  const idOf = async (key: string) => (await t.runtime.verifier.verify(key, 'inference')).keyId;
  // max_output_tokens: each request reserves 1 credit at admission
  const respond = (key: string) => call('POST', '/v1/responses', key, { model: 'paid', input: 'hi', max_output_tokens: 2 });

  test('refused by scope, rate limit or budget: last_used_at stays 0; served: it is set', async () => {
    await t.services.usage.grant('served', 'default', 10);
    await t.services.usage.grant('scoped', 'default', 10);
    await t.services.usage.grant('limited', 'default', 10);
    // a key limited to audio, on /v1/responses: 403
    const scoped = await t.inferenceKey('scoped', { scopes: ['audio'] });
    assert.equal((await respond(scoped)).json().error.code, 'insufficient_scope');
    // a key whose minute is used up (RATE_LIMIT_RPM=1, the one request counted directly): 429
    const limited = await t.inferenceKey('limited');
    await awayFromMinuteEdge(3); // the check and the request count in one fixed minute
    await t.runtime.limiter.check(await t.runtime.verifier.verify(limited, 'inference'));
    assert.equal((await respond(limited)).json().error.code, 'rate_limit_exceeded');
    // a key without credits (BILLING_ENABLED): 429 insufficient_quota
    const broke = await t.inferenceKey('broke');
    assert.equal((await respond(broke)).json().error.code, 'insufficient_quota');
    // a Management API Key without the scope of the query API it calls: 403
    const alice = await t.token('alice');
    const mk = assertOk(await call('POST', MGMT, alice, { name: 'balance only', scopes: ['balance:read'] }));
    const refusedMk = assertOk(await call('POST', MGMT, alice, { name: 'usage only', scopes: ['usage:read'] }));
    assert.equal((await call('GET', '/v1/portal/query/balance', refusedMk.api_key)).statusCode, 403);

    // a served request of another key is written...
    const served = await t.inferenceKey('served');
    assert.equal((await respond(served)).statusCode, 200);
    const servedId = await idOf(served);
    await eventually(async () => (await lastUsed(servedId)) > 0);
    assertOk(await call('GET', '/v1/portal/query/balance', mk.api_key));
    await eventually(async () => (await lastUsed(mk.id)) > 0);
    // a short pause proving a negative (the writes above came after the refusals, so these had their chance)
    await sleep(50);
    // ...while the refused ones never were
    for (const k of [scoped, limited, broke]) assert.equal(await lastUsed(await idOf(k)), 0);
    assert.equal(await lastUsed(refusedMk.id), 0);
  });
});
