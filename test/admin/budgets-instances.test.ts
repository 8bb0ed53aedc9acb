import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { buildTestApp, TEST_PG_URL, type TestApp } from '../helpers/app.js';
import { waitFor } from '../helpers/wait.js';
import { bearer, use } from './helpers.js';

const pgOff = process.env.PORTICO_TEST_PG === 'off';

describe('a budget set on one instance holds on the other (PostgreSQL, the change feed)', { skip: pgOff }, () => {
  const schema = `t_${randomBytes(6).toString('hex')}`;
  let a: TestApp;
  let b: TestApp;
  before(async () => {
    a = await buildTestApp({ db: 'postgres', dbSchema: schema });
    b = await buildTestApp({ db: 'postgres', dbSchema: schema });
  });
  after(async () => {
    await a?.close();
    await b?.close();
    const c = new pg.Client({ connectionString: TEST_PG_URL });
    await c.connect();
    await c.query(`drop schema if exists ${schema} cascade`);
    await c.end();
  });

  test('set on A, refused on B; removed on A, served on B', async () => {
    await a.core.operators.add('olga', 'cli', 'test');
    const made = await b.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: bearer(await b.token('kim')), payload: { name: 'k' } });
    const key = made.json().data;
    const models = () => b.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(key.api_key) });
    // B has read the budgets (none) before A sets one
    assert.equal((await models()).statusCode, 200);
    await use(b, { keyId: key.id, userId: 'kim' }, { cost: 1 });
    const set = await a.app.inject({
      method: 'POST',
      url: '/v1/admin/budgets',
      headers: bearer(await a.token('olga')),
      payload: { scope: 'user', target: 'kim', period: 'daily', limit: 1 },
    });
    assert.equal(set.statusCode, 200, set.body);
    await waitFor(async () => (await models()).statusCode === 429, { what: 'B to refuse under the budget A set' });
    assert.equal((await models()).json().error.code, 'budget_exceeded');
    await a.app.inject({ method: 'DELETE', url: `/v1/admin/budgets/${set.json().data.id}`, headers: bearer(await a.token('olga')) });
    await waitFor(async () => (await models()).statusCode === 200, { what: 'B to serve once A removed the budget' });
  });
});
