/**
 * GET /v1/admin/health refuses bad query input with a 400 in the admin envelope (naming the parameter, in English
 * and Chinese); a model nobody serves is an empty list, not an error.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { parseModelConfig } from '../../src/models/config.js';
import { callers, type Callers } from './helpers.js';

describe('GET /v1/admin/health: bad input', () => {
  let t: TestApp;
  let c: Callers;
  before(async () => {
    const yaml = `
models:
  - name: m1
    provider: openai-compatible
    base_url: http://127.0.0.1:9/v1
`;
    t = await buildTestApp({ models: parseModelConfig(yaml).models });
    c = await callers(t);
  });
  after(() => t.close());
  const get = (query: string, headers: Record<string, string> = {}) => t.app.inject({ method: 'GET', url: `/v1/admin/health${query}`, headers: { ...c.operator, ...headers } });

  test('unknown, empty or over-long parameters are 400 validation_error naming the parameter', async () => {
    const cases: Array<[string, RegExp]> = [
      ['?foo=1', /foo/],
      ['?model=', /model/],
      [`?model=${'x'.repeat(201)}`, /model/],
      ['?model=m1&model=m2', /model/],
    ];
    for (const [q, names] of cases) {
      const res = await get(q);
      assert.equal(res.statusCode, 400, `${q}: ${res.body}`);
      const body = res.json();
      assert.equal(body.meta.error, 'validation_error');
      assert.notEqual(body.meta.code, 0);
      assert.match(body.meta.message, names, `${q}: ${body.meta.message}`);
      assert.equal(typeof body.meta.request_id, 'string');
      assert.equal(body.data, null);
    }
    const zh = await get('?foo=1', { 'accept-language': 'zh-CN' });
    assert.equal(zh.statusCode, 400);
    assert.match(zh.json().meta.message, /[\u4e00-\u9fff]/, zh.json().meta.message);
  });

  test('a model nobody serves: 200 with no deployment (the instances are still listed)', async () => {
    const res = await get('?model=nothing');
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().data.deployments, []);
    assert.equal(res.json().data.instances.length, 1);
    const m1 = await get('?model=m1');
    assert.deepEqual(
      m1.json().data.deployments.map((d: any) => d.model),
      ['m1'],
    );
  });
});
