import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { parseModelConfig } from '../../src/models/config.js';
import { callers, type Callers } from './helpers.js';

const yaml = (url: string) => `
models:
  - { name: m-ok, provider: openai-compatible, base_url: ${url}, retries: 0, pricing: { input_per_million: 1000000, output_per_million: 2000000 } }
  - { name: m-bad, provider: openai-compatible, base_url: ${url}, retries: 0 }
`;

for (const db of testDatabases()) {
  describe(`admin API: the request log in GET /requests, /requests.csv, /requests/{id} (${db})`, () => {
    let up: ScriptedUpstream;
    let t: TestApp & { url?: string };
    let who: Callers;
    let key: string;
    let mike: string;
    const ids: Record<string, string> = {};
    const get = (url: string) => t.app.inject({ method: 'GET', url, headers: who.operator });
    const call = (k: string, url: string, payload: object, id: string) =>
      t.app.inject({ method: 'POST', url, headers: { authorization: `Bearer ${k}`, 'x-request-id': id }, payload });

    before(async () => {
      up = await startScriptedUpstream();
      t = await buildTestApp({ db, models: parseModelConfig(yaml(up.url)).models });
      who = await callers(t);
      key = await t.inferenceKey('alice');
      mike = await t.inferenceKey('mike');
      // a success, a refusal (unknown model), an upstream 502, a streamed answer, a stored response
      up.script({ text: 'hello there', usage: { prompt_tokens: 3, completion_tokens: 2 } });
      assert.equal((await call(key, '/v1/chat/completions', { model: 'm-ok', messages: [{ role: 'user', content: 'hi' }] }, (ids.ok = 'req_test_ok_1'))).statusCode, 200);
      assert.equal((await call(key, '/v1/chat/completions', { model: 'nope', messages: [{ role: 'user', content: 'hi' }] }, (ids.missing = 'req_test_missing_1'))).statusCode, 404);
      up.script({ status: 502, errorMessage: 'bad gateway upstream' });
      const bad = await call(mike, '/v1/chat/completions', { model: 'm-bad', messages: [{ role: 'user', content: 'hi' }] }, (ids.bad = 'req_test_bad_1'));
      assert.ok(bad.statusCode >= 500, bad.body);
      ids.badStatus = String(bad.statusCode);
      up.script({ text: 'a streamed answer', chunks: 4, delayMs: 5 });
      const streamed = await call(key, '/v1/chat/completions', { model: 'm-ok', stream: true, messages: [{ role: 'user', content: 'hi' }] }, (ids.stream = 'req_test_stream_1'));
      assert.equal(streamed.statusCode, 200);
      // a refusal by the gate once the key is known (its scopes do not include chat)
      const embedOnly = await t.inferenceKey('alice', { scopes: ['embeddings'] });
      const scoped = await call(embedOnly, '/v1/chat/completions', { model: 'm-ok', messages: [{ role: 'user', content: 'hi' }] }, (ids.scope = 'req_test_scope_1'));
      assert.equal(scoped.statusCode, 403);
      up.script({ text: 'stored answer' });
      const stored = await call(key, '/v1/responses', { model: 'm-ok', input: 'keep this "question", please' }, (ids.stored = 'req_test_stored_1'));
      assert.equal(stored.statusCode, 200, stored.body);
      ids.responseId = stored.json().id;
    });
    after(async () => {
      await t.close();
      await up.close();
    });

    const row = async (id: string) => {
      const list = (await get(`/v1/admin/requests?request_id=${id}`)).json().data.list;
      assert.equal(list.length, 1, `one row of ${id}`);
      return list[0];
    };

    test('a success, a refusal, an upstream failure and a stream: status, error, deployment, latency, ttft, charge', async () => {
      const ok = await row(ids.ok);
      assert.equal(ok.status, 200);
      assert.equal(ok.error, null);
      assert.equal(ok.model, 'm-ok');
      assert.equal(typeof ok.deployment, 'string');
      assert.equal(ok.operation, 'chat.completions', "the ledger's operation");
      assert.equal(ok.route, '/v1/chat/completions');
      assert.equal(ok.user_id, 'alice');
      assert.ok(ok.latency_ms > 0);
      assert.deepEqual([ok.input_tokens, ok.output_tokens], [3, 2]);
      assert.equal(ok.cost, 7, 'the ledger charge: 3 in x 1 + 2 out x 2');
      assert.equal(ok.response_id, null);

      const missing = await row(ids.missing);
      assert.equal(missing.status, 404);
      assert.equal(missing.error.code, 'model_not_found');
      assert.match(missing.error.message, /nope/);
      assert.equal(missing.model, null);
      assert.equal(missing.cost, 0);
      assert.ok(missing.latency_ms > 0);

      const bad = await row(ids.bad);
      assert.equal(bad.status, Number(ids.badStatus));
      assert.equal(bad.user_id, 'mike');
      assert.equal(bad.model, 'm-bad');
      assert.equal(typeof bad.deployment, 'string');
      assert.ok(bad.error && bad.error.code.length > 0, JSON.stringify(bad));
      assert.ok(bad.latency_ms > 0);

      const scoped = await row(ids.scope);
      assert.equal(scoped.status, 403);
      assert.equal(scoped.error.code, 'insufficient_scope');
      assert.equal(scoped.user_id, 'alice');

      const s = await row(ids.stream);
      assert.equal(s.status, 200);
      assert.equal(s.error, null);
      assert.ok(s.ttft_ms !== null && s.ttft_ms > 0 && s.ttft_ms <= s.latency_ms, JSON.stringify(s));
      assert.ok(s.latency_ms > 0);
    });

    test('every filter narrows: user, key, org, model, deployment, status, time, q; paging', async () => {
      const all = (await get('/v1/admin/requests')).json().data;
      assert.equal(all.total, 6);
      const reqIds = (q: string) =>
        get(`/v1/admin/requests?${q}`).then((r) =>
          r
            .json()
            .data.list.map((x: any) => x.request_id)
            .sort(),
        );
      assert.deepEqual(await reqIds('user_id=mike'), [ids.bad]);
      const mikeKey = (await row(ids.bad)).key_id;
      assert.deepEqual(await reqIds(`key_id=${mikeKey}`), [ids.bad]);
      assert.equal((await reqIds('org_id=default')).length, 6);
      assert.deepEqual(await reqIds('org_id=acme'), []);
      assert.deepEqual(await reqIds('model=m-bad'), [ids.bad]);
      const dep = (await row(ids.bad)).deployment;
      assert.deepEqual(await reqIds(`deployment=${encodeURIComponent(dep)}`), [ids.bad]);
      assert.deepEqual(await reqIds('status=error'), [ids.bad, ids.missing, ids.scope].sort());
      assert.deepEqual(await reqIds('status=ok'), [ids.ok, ids.stored, ids.stream].sort());
      assert.deepEqual(await reqIds('status=404'), [ids.missing]);
      assert.deepEqual(await reqIds('q=req_test_st'), [ids.stored, ids.stream].sort());
      assert.deepEqual(await reqIds('q=req_test_%25'), [], 'a LIKE wildcard in q matches itself');
      const future = Math.floor(Date.now() / 1000) + 3600;
      assert.deepEqual(await reqIds(`start_time=${future}&end_time=${future + 10}`), []);
      const p1 = (await get('/v1/admin/requests?per_page=2')).json().data;
      const p3 = (await get('/v1/admin/requests?per_page=4&page=2')).json().data;
      assert.equal(p1.list.length, 2);
      assert.equal(p3.list.length, 2);
      assert.equal(p1.total, 6);
      // newest first
      const times = all.list.map((r: any) => r.created_at);
      assert.deepEqual(
        times,
        [...times].sort((a: number, b: number) => b - a),
      );
    });

    test('one request: a stored response shows its input and output; one without shows response null', async () => {
      const one = (await get(`/v1/admin/requests/${ids.stored}`)).json().data;
      assert.equal(one.request.request_id, ids.stored);
      assert.equal(one.request.response_id, ids.responseId);
      assert.equal(one.response.id, ids.responseId);
      assert.match(JSON.stringify(one.response.input), /keep this/);
      assert.match(JSON.stringify(one.response.output), /stored answer/);
      assert.ok(one.timings.total_ms > 0);
      assert.ok(one.timings.received_at_ms > Date.now() - 600_000);
      assert.ok(one.timings.engine_ms !== null && one.timings.engine_ms >= 0);
      const plain = (await get(`/v1/admin/requests/${ids.ok}`)).json().data;
      assert.equal(plain.response, null);
      const s = (await get(`/v1/admin/requests/${ids.stream}`)).json().data;
      assert.ok(s.timings.first_output_ms > 0);
    });

    test('CSV: the same columns, the error, cells escaped', async () => {
      const res = await get('/v1/admin/requests.csv?status=error');
      assert.equal(res.statusCode, 200);
      assert.match(String(res.headers['content-type']), /text\/csv/);
      const lines = res.body.trimEnd().split('\r\n');
      assert.equal(
        lines[0],
        'created_at,request_id,user_id,org_id,key_id,model,deployment,operation,route,status,error_code,error_message,latency_ms,ttft_ms,input_tokens,output_tokens,cached_tokens,cache_write_tokens,characters,audio_seconds,output_audio_seconds,cost,response_id',
      );
      assert.equal(lines.length, 4);
      const missing = lines.find((l) => l.includes(ids.missing))!;
      assert.ok(missing.includes(',404,model_not_found,'), missing);
      // a message with a comma or quote is quoted, its quotes doubled
      const msg = (await row(ids.missing)).error.message as string;
      if (/[",]/.test(msg)) assert.ok(missing.includes(`"${msg.replace(/"/g, '""')}"`), missing);
    });
  });
}
