import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { callers, use, type Callers } from './helpers.js';
import { csvCell } from '../../src/admin/service.js';

for (const db of testDatabases()) {
  describe(`admin API: usage per key and the requests of the ledger (${db})`, () => {
    let t: TestApp;
    let c: Callers;
    before(async () => {
      t = await buildTestApp({ db });
      c = await callers(t);
      await use(t, { keyId: 'key_a', userId: 'ann' }, { model: 'm1', cost: 1, input: 100, output: 10, deployment: 'd1', requestId: 'req_1', audioOut: 0.25 });
      await use(t, { keyId: 'key_a', userId: 'ann' }, { model: 'm2', cost: 2, input: 200, output: 20, deployment: 'd2', requestId: 'req_2' });
      await use(t, { keyId: 'key_b', userId: 'bob', orgId: 'acme' }, { model: 'm1', cost: 4, input: 400, output: 40, deployment: 'd1', requestId: 'req_3', audioOut: 1.5 });
      // a model name a spreadsheet would run as a formula
      await use(t, { keyId: 'key_c', userId: 'cy' }, { model: '=HYPERLINK("http://x")', cost: 0.5, requestId: 'req_4', audioOut: 0.75 });
    });
    after(() => t.close());
    const get = (url: string) => t.app.inject({ method: 'GET', url, headers: c.operator });

    test('usage per key over every user (the default), and grouped by user, org, model, deployment, day', async () => {
      const res = await get('/v1/admin/usage');
      assert.equal(res.statusCode, 200, res.body);
      const d = res.json().data;
      assert.deepEqual(d.group_by, ['key']);
      assert.deepEqual(
        d.list.map((r: any) => [r.key_id, r.requests, r.input_tokens, r.output_audio_seconds, r.cost]),
        [
          ['key_a', 2, 300, 0.25, 3],
          ['key_b', 1, 400, 1.5, 4],
          ['key_c', 1, 10, 0.75, 0.5],
        ],
      );
      assert.equal(d.total.cost, 7.5);
      // audio seconds produced: summed beside those taken in (none here)
      assert.equal(d.total.output_audio_seconds, 2.5);
      assert.equal(d.total.audio_seconds, 0);
      // a key that was never made (these records name invented ids) has no details
      assert.equal(d.list[0].key, null);
      assert.equal(d.total.requests, 4);
      const byOrg = (await get('/v1/admin/usage?group_by=org,user')).json().data.list;
      assert.deepEqual(
        byOrg.map((r: any) => [r.org_id, r.user_id, r.cost]),
        [
          ['acme', 'bob', 4],
          ['default', 'ann', 3],
          ['default', 'cy', 0.5],
        ],
      );
      const byDep = (await get('/v1/admin/usage?group_by=deployment&model=m1')).json().data.list;
      assert.deepEqual(
        byDep.map((r: any) => [r.deployment, r.requests, r.output_audio_seconds]),
        [['d1', 2, 1.75]],
      );
      const day = (await get('/v1/admin/usage?group_by=day,key&user_id=ann')).json().data.list;
      assert.equal(day.length, 1);
      assert.match(day[0].date, /^\d{4}-\d{2}-\d{2}$/);
      assert.equal(day[0].output_audio_seconds, 0.25);
      // the database agrees
      const sum = await t.core.db.db
        .selectFrom('usage_records')
        .select((eb) => eb.fn.sum<number>('cost_micros').as('c'))
        .executeTakeFirstOrThrow();
      assert.equal(Number(sum.c) / 1e6, d.total.cost);
    });

    test("a key's usage matches the owner's own query API", async () => {
      const admin = (await get('/v1/admin/usage?key_id=key_a')).json().data.total;
      assert.equal(admin.cost, 3);
      const own = await t.app.inject({
        method: 'GET',
        url: '/v1/portal/query/usage?group_by=key&key_id=key_a',
        headers: { authorization: `Bearer ${await t.token('ann')}` },
      });
      assert.equal(own.json().data.total.cost, admin.cost);
      assert.equal(own.json().data.total.requests, admin.requests);
      assert.equal(own.json().data.total.output_audio_seconds, admin.output_audio_seconds);
      assert.equal(admin.output_audio_seconds, 0.25);
    });

    test('bad usage queries are 400s', async () => {
      for (const q of ['group_by=week', 'group_by=key,', 'start_time=20&end_time=10', 'end_time=253402300800', 'nope=1']) {
        const res = await get(`/v1/admin/usage?${q}`);
        assert.equal(res.statusCode, 400, `${q}: ${res.body}`);
        assert.equal(res.json().meta.error, 'validation_error');
      }
    });

    test('requests: newest first, filtered by each field, paged', async () => {
      const all = (await get('/v1/admin/requests')).json().data;
      assert.equal(all.total, 4);
      const first = all.list.find((r: any) => r.request_id === 'req_3');
      assert.deepEqual(
        {
          user: first.user_id,
          org: first.org_id,
          key: first.key_id,
          model: first.model,
          dep: first.deployment,
          in: first.input_tokens,
          out: first.output_tokens,
          audioIn: first.audio_seconds,
          audioOut: first.output_audio_seconds,
          cost: first.cost,
        },
        { user: 'bob', org: 'acme', key: 'key_b', model: 'm1', dep: 'd1', in: 400, out: 40, audioIn: 0, audioOut: 1.5, cost: 4 },
      );
      for (const [q, ids] of [
        ['user_id=ann', ['req_2', 'req_1']],
        ['org_id=acme', ['req_3']],
        ['key_id=key_a&model=m2', ['req_2']],
        ['deployment=d1', ['req_3', 'req_1']],
        ['request_id=req_4', ['req_4']],
        ['operation=speech', []],
      ] as const) {
        const list = (await get(`/v1/admin/requests?${q}`)).json().data.list;
        assert.deepEqual(
          list.map((r: any) => r.request_id),
          ids,
          q,
        );
      }
      const p1 = (await get('/v1/admin/requests?per_page=3')).json().data;
      const p2 = (await get('/v1/admin/requests?per_page=3&page=2')).json().data;
      assert.equal(p1.list.length, 3);
      assert.equal(p2.list.length, 1);
      assert.equal(new Set([...p1.list, ...p2.list].map((r: any) => r.id)).size, 4);
      assert.equal((await get('/v1/admin/requests?per_page=500')).statusCode, 400);
      const future = Math.floor(Date.now() / 1000) + 3600;
      assert.equal((await get(`/v1/admin/requests?start_time=${future}&end_time=${future + 10}`)).json().data.total, 0);
    });

    test('the CSV export: a header and one line per record, filtered; formulas neutralized', async () => {
      const res = await get('/v1/admin/requests.csv?user_id=cy');
      assert.equal(res.statusCode, 200, res.body);
      assert.match(String(res.headers['content-type']), /^text\/csv/);
      assert.match(String(res.headers['content-disposition']), /attachment/);
      const lines = res.body.trimEnd().split('\r\n');
      assert.equal(
        lines[0],
        'created_at,request_id,user_id,org_id,key_id,model,deployment,operation,route,status,error_code,error_message,latency_ms,ttft_ms,input_tokens,output_tokens,cached_tokens,cache_write_tokens,characters,audio_seconds,output_audio_seconds,cost,response_id',
      );
      assert.equal(lines.length, 2);
      // a request known from the ledger alone: status 200, no route, error or timings
      assert.match(lines[1]!, /^\d{4}-\d{2}-\d{2}T[^,]+,req_4,cy,default,key_c,"'=HYPERLINK\(""http:\/\/x""\)",,responses,,200,,,,,10,5,0,0,0,0,0\.75,0\.5,$/);
      const all = await get('/v1/admin/requests.csv?limit=2');
      assert.equal(all.body.trimEnd().split('\r\n').length, 3);
      assert.equal((await get('/v1/admin/requests.csv?limit=0')).statusCode, 400);
      assert.equal(csvCell('-1+2'), "'-1+2");
      assert.equal(csvCell('a,b'), '"a,b"');
      assert.equal(csvCell(null), '');
    });

    test('usage per key names each key, its owner and its state, deleted keys too', async () => {
      const h = { authorization: `Bearer ${await t.token('dee')}` };
      const made = (await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: h, payload: { name: 'dee laptop' } })).json().data;
      await use(t, { keyId: made.id, userId: 'dee' }, { cost: 0.25 });
      const row = (await get(`/v1/admin/usage?key_id=${made.id}`)).json().data.list[0];
      assert.deepEqual(row.key, { name: 'dee laptop', kind: 'inference', user_id: 'dee', org_id: 'default', status: 'active' });
      await t.app.inject({ method: 'DELETE', url: `/v1/portal/api-keys/${made.id}`, headers: h });
      assert.equal((await get(`/v1/admin/usage?key_id=${made.id}`)).json().data.list[0].key.status, 'deleted');
      assert.equal((await get(`/v1/admin/usage?key_id=${made.id}&group_by=day`)).json().data.list[0].key, undefined, 'only when grouped by key');
    });
  });
}
