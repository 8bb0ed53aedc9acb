/**
 * Issue 22 §4: money and token limits hold under concurrency. Each request that generates reserves its worst case
 * at admission (src/api/admission.ts) in the balance and the TPM window, settles it with its real usage, and is
 * stopped when its output passes what it reserved. The attacks these tests replay: one request of 3,000 output
 * tokens on a 1-credit balance (charged 300.3 credits before), 30 concurrent streams on a small balance (ended at
 * -98), and 40 concurrent requests under a TPM limit of 100 (2,120 tokens went through).
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { buildTestApp, TEST_PG_URL, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { awayFromMinuteEdge } from '../helpers/minute-window.js';
import { dropInstallationKeys } from '../helpers/redis-keys.js';
import { testRedisPrefix, testRedisUrl } from '../helpers/services.js';
import { eventually } from './util.js';
import type { UsageScope } from '../../src/portal/usage/store.js';

const REDIS_URL = testRedisUrl();
const pgOff = process.env.PORTICO_TEST_PG === 'off';
const run = randomBytes(4).toString('hex');

/** a charge is whole micro-credits: a balance may end below zero by at most one settlement's rounding */
const ROUNDING = 1e-6;

/** 3,000 pieces of output, one token each, whatever max_output_tokens / max_tokens said */
const FLOOD = { text: Array.from({ length: 3000 }, () => 'x '), usage: { prompt_tokens: 3, completion_tokens: 3000 } };

/** the events of an SSE body: [event type or '', parsed data] */
function sse(body: string): Array<[string, any]> {
  const out: Array<[string, any]> = [];
  for (const block of body.split('\n\n')) {
    const data = block
      .split('\n')
      .filter((l) => l.startsWith('data: '))
      .map((l) => l.slice(6))
      .join('\n');
    if (!data || data === '[DONE]') continue;
    const ev = /^event: (.*)$/m.exec(block)?.[1] ?? '';
    out.push([ev, JSON.parse(data)]);
  }
  return out;
}

describe('one instance (PGlite): a request cannot spend more than is left', () => {
  let t: TestApp;
  let up: ScriptedUpstream;
  before(async () => {
    up = await startScriptedUpstream({ record: false, defaultReply: { text: 'ok', usage: { prompt_tokens: 3, completion_tokens: 2 } } });
    t = await buildTestApp({
      env: { BILLING_ENABLED: 'true', PORTICO_DB: '' },
      // 0.1 credit a token: 3,003 tokens were 300.3 credits
      models: [{ name: 'paid', provider: 'openai-compatible', base_url: up.url, type: 'text', pricing: { input_per_million: 100_000, output_per_million: 100_000 } }],
    });
  });
  after(async () => {
    await t?.close();
    await up?.close();
  });

  const post = (key: string, url: string, payload: Record<string, unknown>) => t.app.inject({ method: 'POST', url, headers: { authorization: `Bearer ${key}` }, payload });
  const ledger = async (user: string) => {
    await t.services.usage.flush();
    return t.services.usage.balance({ orgId: 'default', userId: user });
  };

  test('(a) 3,000 output tokens on 1 credit: refused when it names no maximum, stopped at its reservation when the upstream ignores it', async () => {
    const user = `flood-${run}`;
    const key = await t.inferenceKey(user);
    await t.services.usage.grant(user, 'default', 1);

    // no max_output_tokens: the default (RESERVE_OUTPUT_TOKENS 4096) at 0.1 credit is far more than 1 credit
    up.script(FLOOD);
    const refused = await post(key, '/v1/responses', { model: 'paid', input: 'hi', stream: true });
    assert.equal(refused.statusCode, 429, refused.body);
    assert.equal(refused.json().error.code, 'insufficient_quota');
    assert.match(refused.json().error.message, /may cost up to 410\.4 credits .*1 credits left .*max_output_tokens/);
    assert.deepEqual(await ledger(user), { granted: 1, used: 0, balance: 1, currency: 'credits' });
    up.reset();

    // max_output_tokens 2 (1 credit reserved: 8 input tokens estimated + 2), an upstream that sends 3,000: the
    // stream stops at the reservation, incomplete as at the token cap
    up.script(FLOOD);
    const res = await post(key, '/v1/responses', { model: 'paid', input: 'hi', stream: true, max_output_tokens: 2 });
    assert.equal(res.statusCode, 200, res.body);
    const events = sse(res.body);
    const last = events[events.length - 1]!;
    assert.equal(last[0], 'response.incomplete');
    assert.equal(last[1].response.status, 'incomplete');
    assert.deepEqual(last[1].response.incomplete_details, { reason: 'max_output_tokens' });
    assert.ok(events.filter(([e]) => e === 'response.output_text.delta').length <= 2);
    // its usage is the estimate of what was shown (the upstream's count never came)
    assert.equal(last[1].response.usage.input_tokens, 8);
    assert.ok(last[1].response.usage.output_tokens <= 2);
    const after1 = await ledger(user);
    assert.ok(after1.balance >= -ROUNDING, `balance ${after1.balance}`);
    assert.ok(after1.used > 0 && after1.used <= 1, `charged ${after1.used}`);
  });

  test('(a) the same in Chat Completions (finish_reason length) and as one JSON answer (charged at most the reservation)', async () => {
    const user = `flood-chat-${run}`;
    const key = await t.inferenceKey(user);
    await t.services.usage.grant(user, 'default', 3);

    up.script(FLOOD);
    const res = await post(key, '/v1/chat/completions', {
      model: 'paid',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      max_tokens: 2,
      stream_options: { include_usage: true },
    });
    assert.equal(res.statusCode, 200, res.body);
    const chunks = sse(res.body).map(([, d]) => d);
    const finish = chunks.flatMap((c) => c.choices ?? []).filter((c: any) => c.finish_reason != null);
    assert.deepEqual(
      finish.map((c: any) => c.finish_reason),
      ['length'],
    );
    assert.ok(chunks[chunks.length - 1].usage, 'the usage chunk the client asked for');
    const content = chunks.flatMap((c) => c.choices ?? []).filter((c: any) => c.delta?.content).length;
    assert.ok(content <= 2, `${content} pieces sent`);

    // one JSON answer cannot be stopped midway: it is charged its reservation at most
    up.script(FLOOD);
    const whole = await post(key, '/v1/responses', { model: 'paid', input: 'hi', max_output_tokens: 2 });
    assert.equal(whole.statusCode, 200, whole.body);
    // the whole answer came at once, past the reservation: not shown, charged its input
    assert.equal(whole.json().status, 'incomplete');
    assert.deepEqual(whole.json().incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(whole.json().usage.output_tokens, 0);
    const l = await ledger(user);
    assert.ok(l.balance >= -ROUNDING, `balance ${l.balance}`);
    assert.ok(l.used <= 2, `charged ${l.used}: at most 1 credit a request`);
  });

  test('(d) settling releases the unused reservation: a small request after a big one is admitted; while it is held it is not', async () => {
    const user = `settle-${run}`;
    const key = await t.inferenceKey(user);
    const scope: UsageScope = { orgId: 'default', userId: user };
    await t.services.usage.grant(user, 'default', 2);
    // reserves all 2 credits (8 + 12 tokens), charged 0.5
    const big = await post(key, '/v1/responses', { model: 'paid', input: 'hi', max_output_tokens: 12 });
    assert.equal(big.statusCode, 200, big.body);
    // 1.5 left: the small request (1 credit reserved) is admitted only if the big one gave back what it did not use
    assert.equal((await post(key, '/v1/responses', { model: 'paid', input: 'hi', max_output_tokens: 2 })).statusCode, 200);
    assert.deepEqual(await ledger(user), { granted: 2, used: 1, balance: 1, currency: 'credits' });
    // a request in flight holding 0.5 (as another instance's would): the 1-credit request does not fit
    const id = await t.core.budget.reserve({ userId: user, orgId: 'default' }, 500_000, 60_000, { input: 0, output: 0 });
    assert.ok(id);
    const held = await post(key, '/v1/responses', { model: 'paid', input: 'hi', max_output_tokens: 2 });
    assert.equal(held.statusCode, 429);
    assert.match(held.json().error.message, /0\.5 credits left/);
    t.core.budget.release({ userId: user, orgId: 'default' }, id!);
    await eventually(async () => (await post(key, '/v1/responses', { model: 'paid', input: 'hi', max_output_tokens: 2 })).statusCode === 200);
    await t.core.budget.idle();
    assert.equal(await t.core.budget.balance(scope), 500_000);
  });

  test('(e) the reservation of a request that never settled (its process crashed) expires', async () => {
    const user = `crash-${run}`;
    const key = await t.inferenceKey(user);
    await t.services.usage.grant(user, 'default', 1);
    // held for 300 ms and never settled nor released
    assert.ok(await t.core.budget.reserve({ userId: user, orgId: 'default' }, 900_000, 300, { input: 0, output: 0 }));
    assert.equal((await post(key, '/v1/responses', { model: 'paid', input: 'hi', max_output_tokens: 2 })).statusCode, 429);
    await eventually(async () => (await post(key, '/v1/responses', { model: 'paid', input: 'hi', max_output_tokens: 2 })).statusCode === 200, 5000);
    assert.deepEqual(await ledger(user), { granted: 1, used: 0.5, balance: 0.5, currency: 'credits' });
  });

  test('a background response reserves when it runs: one whose worst case does not fit fails with insufficient_quota, uncharged', async () => {
    const user = `bg-${run}`;
    const key = await t.inferenceKey(user);
    await t.services.usage.grant(user, 'default', 1);
    // created (something is left), then refused by its reservation where it runs (4,096 output tokens by default)
    const created = await post(key, '/v1/responses', { model: 'paid', input: 'hi', background: true });
    assert.equal(created.statusCode, 200, created.body);
    const id = created.json().id as string;
    const done = await eventually(async () => {
      const r = await t.app.inject({ method: 'GET', url: `/v1/responses/${id}`, headers: { authorization: `Bearer ${key}` } });
      const o = r.json();
      return o.status === 'queued' || o.status === 'in_progress' ? undefined : o;
    }, 5000);
    assert.equal(done.status, 'failed');
    assert.equal(done.error.code, 'insufficient_quota');
    assert.deepEqual(await ledger(user), { granted: 1, used: 0, balance: 1, currency: 'credits' });
    // one that fits runs
    const fits = await post(key, '/v1/responses', { model: 'paid', input: 'hi', background: true, max_output_tokens: 2 });
    const id2 = fits.json().id as string;
    const ok = await eventually(async () => {
      const o = (await t.app.inject({ method: 'GET', url: `/v1/responses/${id2}`, headers: { authorization: `Bearer ${key}` } })).json();
      return o.status === 'queued' || o.status === 'in_progress' ? undefined : o;
    }, 5000);
    assert.equal(ok.status, 'completed');
  });

  test('a request refused by its reservation, or failed before output, holds nothing afterwards', async () => {
    const user = `fail-${run}`;
    const key = await t.inferenceKey(user);
    await t.services.usage.grant(user, 'default', 1);
    up.script({ status: 400, errorMessage: 'refused upstream' });
    const failed = await post(key, '/v1/responses', { model: 'paid', input: 'hi', max_output_tokens: 2 });
    assert.equal(failed.statusCode, 400, failed.body);
    assert.equal((await post(key, '/v1/responses', { model: 'paid', input: 'hi', max_output_tokens: 20 })).statusCode, 429);
    assert.equal((await post(key, '/v1/responses', { model: 'paid', input: 'hi', max_output_tokens: 2 })).statusCode, 200);
  });
});

describe('two instances on one PostgreSQL and one Redis', { skip: pgOff && 'PORTICO_TEST_PG=off' }, () => {
  let a: TestApp;
  let b: TestApp;
  let up: ScriptedUpstream;
  const schema = `t_reserve_${run}`;
  // one installation (one schema): one prefix of its own, its keys removed after
  const prefix = testRedisPrefix('reserve');
  before(async () => {
    up = await startScriptedUpstream({ record: false, defaultReply: { text: 'ok', usage: { prompt_tokens: 3, completion_tokens: 5 } } });
    const opts = {
      db: 'postgres' as const,
      dbSchema: schema,
      env: { BILLING_ENABLED: 'true', REDIS_URL, REDIS_PREFIX: prefix },
      // 0.01 credit a token
      models: [
        { name: 'paid', provider: 'openai-compatible' as const, base_url: up.url, type: 'text' as const, pricing: { input_per_million: 10_000, output_per_million: 10_000 } },
      ],
    };
    a = await buildTestApp(opts);
    b = await buildTestApp(opts);
  });
  after(async () => {
    await a?.close();
    await b?.close();
    await dropInstallationKeys(REDIS_URL, prefix);
    await up?.close();
    const c = new pg.Client({ connectionString: TEST_PG_URL });
    await c.connect();
    await c.query(`drop schema if exists ${schema} cascade`);
    await c.end();
  });

  test('(b) 30 concurrent streams on 1 credit across two instances: the balance ends at or above zero, every admitted request charged once', async () => {
    const user = `streams-${run}`;
    const scope: UsageScope = { orgId: 'default', userId: user };
    const keys = [await a.inferenceKey(user), await b.inferenceKey(user)];
    await a.services.usage.grant(user, 'default', 1);
    // every upstream answer floods (3,000 pieces); each request reserves 8 + 20 tokens = 0.28 credits
    up.defaultReply = FLOOD;
    try {
      const answers = await Promise.all(
        Array.from({ length: 30 }, (_, i) =>
          (i % 2 ? a : b).app.inject({
            method: 'POST',
            url: i % 3 ? '/v1/responses' : '/v1/chat/completions',
            headers: { authorization: `Bearer ${keys[i % 2]}` },
            payload:
              i % 3
                ? { model: 'paid', input: 'hi', stream: true, max_output_tokens: 20 }
                : { model: 'paid', messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 20 },
          }),
        ),
      );
      const served = answers.filter((r) => r.statusCode === 200).length;
      assert.ok(served >= 3, `${served} served`);
      for (const r of answers) if (r.statusCode !== 200) assert.equal(r.json().error.code, 'insufficient_quota', r.body);
      await a.services.usage.flush();
      await b.services.usage.flush();
      await a.core.budget.idle();
      await b.core.budget.idle();
      const ledger = await a.services.usage.balance(scope);
      assert.ok(ledger.balance >= -ROUNDING, `balance ${ledger.balance}`);
      // exactly one record per served request, and both running balances equal the ledger
      const from = Math.floor(Date.now() / 1000) - 3600;
      const usage = await a.services.usage.usage(scope, from, from + 7200, []);
      assert.equal(usage.total.requests, served);
      assert.equal(usage.total.cost, ledger.used);
      const micros = Math.round(ledger.balance * 1e6);
      assert.equal(await a.core.budget.balance(scope), micros);
      assert.equal(await b.core.budget.balance(scope), micros);
    } finally {
      up.defaultReply = { text: 'ok', usage: { prompt_tokens: 3, completion_tokens: 5 } };
    }
  });

  test('(c) TPM 100, 40 concurrent requests over two instances: at most 100 tokens go through in the minute', async () => {
    const user = `tpm-${run}`;
    await a.services.usage.grant(user, 'default', 1000);
    const keyId = async (t: TestApp) => {
      const res = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${await t.token(user)}` }, payload: { name: 'tpm' } });
      return res.json().data as { id: string; api_key: string };
    };
    const k = await keyId(a);
    await a.services.inferenceKeys.setLimits(k.id, null, 100);
    await awayFromMinuteEdge(10);
    // each reserves 8 + 5 = 13 tokens and uses 8 (3 + 5)
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        (i % 2 ? a : b).app.inject({
          method: 'POST',
          url: '/v1/responses',
          headers: { authorization: `Bearer ${k.api_key}` },
          payload: { model: 'paid', input: 'hi', max_output_tokens: 5 },
        }),
      ),
    );
    const ok = answers.filter((r) => r.statusCode === 200);
    const tokens = ok.reduce((n, r) => n + r.json().usage.total_tokens, 0);
    assert.ok(ok.length >= 7, `${ok.length} served`);
    assert.ok(tokens <= 100, `${tokens} tokens went through`);
    for (const r of answers) if (r.statusCode !== 200) assert.equal(r.json().error.code, 'rate_limit_exceeded', r.body);
    // what was reserved and not used went back: the window holds the real tokens
    const refused = answers.find((r) => r.statusCode === 429);
    if (refused) assert.match(refused.json().error.message, /may use up to 13 tokens/);
  });
});
