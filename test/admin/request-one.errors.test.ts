import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { callers, use, type Callers } from './helpers.js';

describe('admin API: GET /requests/{request_id} and the requests filters: refusals, and a request known from the ledger alone', () => {
  let t: TestApp;
  let who: Callers;
  before(async () => {
    t = await buildTestApp({ models: [] });
    who = await callers(t);
  });
  after(() => t.close());
  const get = (url: string, lang?: string) => t.app.inject({ method: 'GET', url, headers: { ...who.operator, ...(lang ? { 'accept-language': lang } : {}) } });

  test('an unknown request id: 404 not_found in the envelope, English and Chinese', async () => {
    const res = await get('/v1/admin/requests/req_nobody');
    assert.equal(res.statusCode, 404);
    assert.equal(res.json().meta.error, 'not_found');
    assert.match(res.json().meta.message, /req_nobody/);
    assert.match((await get('/v1/admin/requests/req_nobody', 'zh')).json().meta.message, /请求日志/);
    assert.equal((await get(`/v1/admin/requests/${'r'.repeat(201)}`)).statusCode >= 400, true);
  });

  test('bad filters: 400 (status, q, time order, page size)', async () => {
    for (const q of ['status=fine', 'status=99', 'status=600', 'q=', `q=${'x'.repeat(201)}`, 'start_time=10&end_time=5', 'per_page=0', 'what=1']) {
      const res = await get(`/v1/admin/requests?${q}`);
      assert.equal(res.statusCode, 400, `${q}: ${res.body}`);
      assert.equal(res.json().meta.error, 'validation_error');
    }
    assert.equal((await get('/v1/admin/requests.csv?status=nope')).statusCode, 400);
  });

  test('a request the ledger charged without a log row (before the log, a WebSocket turn): listed once, status 200, its records summed', async () => {
    await use(t, { keyId: 'key_a', userId: 'ann' }, { requestId: 'req_ledger_only', cost: 0.25, input: 4, output: 1 });
    await use(t, { keyId: 'key_a', userId: 'ann' }, { requestId: 'req_ledger_only', cost: 0.5, input: 0, output: 0 });
    const list = (await get('/v1/admin/requests?q=req_ledger')).json().data;
    assert.equal(list.total, 1);
    const r = list.list[0];
    assert.equal(r.status, 200);
    assert.equal(r.cost, 0.75);
    assert.equal(r.input_tokens, 4);
    assert.equal(r.latency_ms, null);
    assert.equal((await get('/v1/admin/requests?q=req_ledger&status=error')).json().data.total, 0);
    const one = (await get('/v1/admin/requests/req_ledger_only')).json().data;
    assert.equal(one.request.request_id, 'req_ledger_only');
    assert.equal(one.response, null);
    assert.equal(one.timings.total_ms, null);
  });
});
