import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { AppError } from '../../src/platform/errors.js';

for (const db of testDatabases()) {
  describe(`the operator's disabled status holds (${db})`, () => {
    let t: TestApp;
    before(async () => {
      t = await buildTestApp({ db });
    });
    after(() => t.close());

    const call = async (method: string, url: string, user: string, payload?: unknown) =>
      t.app.inject({ method: method as any, url: `/v1/portal${url}`, headers: { authorization: `Bearer ${await t.token(user)}` }, payload: payload as any });
    const models = (key: string) => t.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${key}` } });

    test('a user cannot lift a disable with revoke then restore', async () => {
      const created = (await call('POST', '/api-keys', 'dora', { name: 'k' })).json().data;
      await t.services.inferenceKeys.setDisabled(created.id, true);
      assert.equal((await models(created.api_key)).json().error.code, 'api_key_disabled');
      const revoke = await call('POST', '/api-keys/revoke', 'dora', { api_key_id: created.id });
      assert.equal(revoke.statusCode, 409);
      assert.equal(revoke.json().meta.error, 'invalid_state');
      const restore = await call('POST', '/api-keys/restore', 'dora', { api_key_id: created.id });
      assert.equal(restore.statusCode, 409);
      assert.equal((await models(created.api_key)).statusCode, 401);
      // the operator's enable does lift it
      await t.services.inferenceKeys.setDisabled(created.id, false);
      assert.equal((await models(created.api_key)).statusCode, 200);
      // and the user may still delete a disabled key
      await t.services.inferenceKeys.setDisabled(created.id, true);
      assert.equal((await call('DELETE', `/api-keys/${created.id}`, 'dora')).statusCode, 200);
    });

    test('enable lifts a disable only: it does not revive a revoked key nor pass the active limit', async () => {
      const ids: string[] = [];
      for (let i = 0; i < 10; i++) ids.push((await call('POST', '/api-keys', 'erin', { name: `k${i}` })).json().data.id);
      await assert.rejects(t.services.inferenceKeys.setDisabled(ids[0], false), (e: AppError) => e.code === 'invalid_state');
      await call('POST', '/api-keys/revoke', 'erin', { api_key_id: ids[1] });
      await assert.rejects(t.services.inferenceKeys.setDisabled(ids[1], false), (e: AppError) => e.code === 'invalid_state');
      await t.services.inferenceKeys.setDisabled(ids[2], true);
      // the freed places are taken
      for (let i = 0; i < 2; i++) assert.equal((await call('POST', '/api-keys', 'erin', { name: `new${i}` })).statusCode, 200);
      await assert.rejects(t.services.inferenceKeys.setDisabled(ids[2], false), (e: AppError) => e.code === 'active_key_limit');
      const active = (await call('GET', '/api-keys?status=active', 'erin')).json().data.total;
      assert.equal(active, 10);
      await assert.rejects(t.services.inferenceKeys.setDisabled('key_nope', false), (e: AppError) => e.code === 'api_key_not_found');
    });

    test('query time bounds beyond the year 9999 are a 400, not a database error', async () => {
      for (const q of ['end_time=100000000000000000000', 'start_time=1e21', 'end_time=253402300800']) {
        const res = await call('GET', `/query/usage?${q}`, 'erin');
        assert.equal(res.statusCode, 400, `${q}: ${res.body}`);
      }
    });
  });
}
