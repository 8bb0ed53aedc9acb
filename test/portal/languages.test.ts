/**
 * The portal and the query APIs answer every refusal in the caller's language (Accept-Language: English by
 * default, Simplified Chinese for zh), the specific messages with their parameters (the active-key limit's number,
 * the organization, the scope) as much as the codes' defaults. test/platform/language.test.ts walks the tables
 * whole; this file sends the requests that reach them, through the routes and the hooks in front of them.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { LightMyRequestResponse } from 'fastify';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { INFER, MGMT, assertOk, caller, type Caller } from './util.js';

const ZH = { 'accept-language': 'zh-CN,zh;q=0.9,en;q=0.5' };
const EN = { 'accept-language': 'en-US,en;q=0.9' };

describe("portal and query API errors in the caller's language", () => {
  let t: TestApp;
  let call: Caller;
  let alice: string;
  let member: string;
  let usageOnly: string;
  let inferenceKey: string;
  before(async () => {
    t = await buildTestApp({ db: 'pglite' });
    call = caller(t);
    alice = await t.token('alice');
    member = await t.token('mallory', { acme: 'member' });
    usageOnly = assertOk(await call('POST', MGMT, alice, { name: 'usage only', scopes: ['usage:read'] })).api_key;
    inferenceKey = await t.inferenceKey('alice');
  });
  after(() => t.close());

  /** the same request in English (no header and en-US give the same) and in Chinese: status, code and both messages */
  async function both(
    send: (headers: Record<string, string>) => Promise<LightMyRequestResponse>,
    status: number,
    code: number,
    en: string | RegExp,
    zh: string | RegExp,
  ): Promise<{ en: string; zh: string }> {
    const answers = { none: await send({}), en: await send(EN), zh: await send(ZH) };
    for (const [lang, res] of Object.entries(answers)) {
      assert.equal(res.statusCode, status, `${lang}: ${res.body}`);
      assert.equal(res.json().meta.code, code, `${lang}: ${res.body}`);
    }
    const [none, inEn, inZh] = [answers.none, answers.en, answers.zh].map((r) => r.json().meta.message as string);
    assert.equal(none, inEn, 'English is the default');
    if (typeof en === 'string') assert.equal(inEn, en);
    else assert.match(inEn, en);
    if (typeof zh === 'string') assert.equal(inZh, zh);
    else assert.match(inZh, zh);
    assert.match(inZh, /[\u4e00-\u9fff]{2}/, `Chinese: ${inZh}`);
    return { en: inEn, zh: inZh };
  }

  test('the errors the specification names: unauthorized, the authorization format, permission denied, api_key_id is required', async () => {
    await both((h) => call('GET', MGMT, undefined, undefined, h), 401, 40100, 'unauthorized', '未授权');
    await both(
      (h) => call('GET', MGMT, undefined, undefined, { ...h, authorization: 'Basic abc' }),
      401,
      40101,
      'unauthorized: invalid authorization format',
      '未授权：Authorization 格式无效',
    );
    await both((h) => call('GET', MGMT, 'not.a.jwt', undefined, h), 401, 40102, 'unauthorized: invalid token', '未授权：令牌无效');
    await both(
      (h) => call('POST', MGMT, member, { name: 'org key', org_id: 'acme' }, h),
      403,
      40300,
      'permission denied: creating an organization-level key requires an administrator of that organization',
      '权限不足：只有该组织的管理员才能创建组织级密钥',
    );
    for (const action of ['revoke', 'restore']) {
      await both((h) => call('POST', `${MGMT}/${action}`, alice, {}, h), 400, 40001, 'api_key_id is required', '必须提供 api_key_id');
    }
    await both((h) => call('GET', '/v1/portal/query/usage', 'mk-' + 'A'.repeat(38), undefined, h), 401, 40103, 'invalid API key format', 'API 密钥格式无效');
  });

  test('the active-key limit says its number in both languages', async () => {
    const u = await t.token('limited');
    for (let i = 0; i < 10; i++) assertOk(await call('POST', INFER, u, { name: `k${i}` }));
    const m = await both(
      (h) => call('POST', INFER, u, { name: 'k10' }, h),
      409,
      40900,
      'active API key limit reached: at most 10 active keys per user in one organization; revoke or delete one first',
      '有效密钥数量已达上限：同一组织内每个用户最多 10 个有效密钥；请先吊销或删除一个密钥',
    );
    assert.match(m.zh, /最多 10 个/);
    const keys = assertOk(await call('GET', `${INFER}?per_page=100`, u)).list;
    assertOk(await call('POST', `${INFER}/revoke`, u, { api_key_id: keys[0].id }));
    assertOk(await call('POST', INFER, u, { name: 'k10' }));
    await both(
      (h) => call('POST', `${INFER}/restore`, u, { api_key_id: keys[0].id }, h),
      409,
      40900,
      'active API key limit reached: at most 10 active keys per user in one organization',
      '有效密钥数量已达上限：同一组织内每个用户最多 10 个有效密钥',
    );
  });

  test('key management: a key not found, a state that forbids the change, fields that cannot change, an organization not administered', async () => {
    const k = assertOk(await call('POST', MGMT, alice, { name: 'states' }));
    await both((h) => call('POST', `${MGMT}/restore`, alice, { api_key_id: k.id }, h), 409, 40901, 'only revoked keys can be restored', '只能恢复已吊销的密钥');
    await both((h) => call('DELETE', `${MGMT}/mkey_nothing`, alice, undefined, h), 404, 40401, 'API key not found', '未找到 API 密钥');
    await both(
      (h) => call('PUT', `${MGMT}/${k.id}`, alice, { name: 'x', scopes: [] }, h),
      400,
      40000,
      'only name and description can be changed (got: scopes)',
      '只能修改 name 和 description（收到：scopes）',
    );
    await both((h) => call('PUT', `${MGMT}/${k.id}`, alice, {}, h), 400, 40000, 'give name and/or description to change', '请提供要修改的 name 和/或 description');
    await both(
      (h) => call('GET', `${MGMT}?org_id=acme`, member, undefined, h),
      403,
      40300,
      "permission denied: the keys of organization 'acme' are listed to its current administrators only",
      "权限不足：组织 'acme' 的密钥只向其现任管理员列出",
    );
    await both(
      (h) => call('POST', MGMT, alice, { name: 'past', expires_at: 1 }, h),
      400,
      40002,
      'expires_at must be 0 (never) or a Unix timestamp later than now',
      'expires_at 必须为 0（永不过期）或晚于当前时间的 Unix 时间戳',
    );
    await t.services.managementKeys.setDisabled(k.id, true);
    await both(
      (h) => call('POST', `${MGMT}/revoke`, alice, { api_key_id: k.id }, h),
      409,
      40901,
      'this key was disabled by the operator; it cannot be revoked or restored (delete it instead)',
      '此密钥已被运维人员停用，不能吊销或恢复（可以删除它）',
    );
  });

  test('the query APIs: the wrong kind of key, a missing scope, another organization, a time range backwards', async () => {
    await both(
      (h) => call('GET', '/v1/portal/query/balance', inferenceKey, undefined, h),
      401,
      40104,
      'unauthorized: an inference key cannot call the query APIs; use a Management API Key (mk-...)',
      '未授权：推理密钥不能调用查询 API，请使用管理 API 密钥（mk-...）',
    );
    await both(
      (h) => call('GET', '/v1/portal/query/balance', usageOnly, undefined, h),
      403,
      40301,
      'permission denied: this key lacks the balance:read scope',
      '权限不足：此密钥缺少 balance:read 作用域',
    );
    await both(
      (h) => call('GET', '/v1/portal/query/usage?org_id=acme', usageOnly, undefined, h),
      403,
      40300,
      'permission denied: this key belongs to another organization',
      '权限不足：此密钥属于其他组织',
    );
    await both(
      (h) => call('GET', '/v1/portal/query/usage?org_id=acme', member, undefined, h),
      403,
      40300,
      'permission denied: only an administrator of the organization can query it',
      '权限不足：只有该组织的管理员才能查询',
    );
    await both(
      (h) => call('GET', '/v1/portal/query/usage?start_time=200&end_time=100', usageOnly, undefined, h),
      400,
      40000,
      'start_time must be before end_time',
      'start_time 必须早于 end_time',
    );
  });

  test('the HTTP layer under the portal: unknown routes, wrong methods, bodies that are not JSON, NUL characters, nesting too deep', async () => {
    await both((h) => call('GET', '/v1/portal/nothing-here', alice, undefined, h), 404, 40400, 'no route GET /v1/portal/nothing-here', '没有此路由：GET /v1/portal/nothing-here');
    await both(
      (h) => call('PATCH', MGMT, alice, { name: 'x' }, h),
      405,
      40500,
      'method PATCH is not allowed on /v1/portal/management/api-keys; allowed: GET, HEAD, POST',
      '/v1/portal/management/api-keys 不允许使用 PATCH 方法；允许的方法：GET, HEAD, POST',
    );
    await both((h) => call('POST', MGMT, alice, '{"name":', { ...h, 'content-type': 'application/json' }), 400, 40005, 'request body is not valid JSON', '请求体不是有效的 JSON');
    await both(
      (h) => call('POST', MGMT, alice, 'name=x', { ...h, 'content-type': 'text/plain' }),
      415,
      41500,
      'unsupported content type: text/plain; send application/json',
      '不支持的内容类型：text/plain；请发送 application/json',
    );
    await both(
      (h) => call('POST', MGMT, alice, '{"name":"a\\u0000b"}', { ...h, 'content-type': 'application/json' }),
      400,
      40000,
      'request body must not contain NUL characters (\\u0000)',
      '请求体不能包含 NUL 字符（\\u0000）',
    );
    await both((h) => call('GET', `${MGMT}/a%00b`, alice, undefined, h), 400, 40000, 'the URL must not contain NUL characters (%00)', 'URL 不能包含 NUL 字符（%00）');
    let deep: unknown = 1;
    for (let i = 0; i < 70; i++) deep = [deep];
    await both(
      (h) => call('POST', MGMT, alice, { name: 'deep', description: deep }, h),
      400,
      40000,
      /^'description(\[0\])+' is nested too deeply: objects and arrays may nest at most 64 levels\.$/,
      /^'description(\[0\])+' 嵌套过深：对象和数组最多只能嵌套 64 层。$/,
    );
  });

  test('length limits report what they count: characters (code points), an emoji being one, in both languages', async () => {
    const m = await both(
      (h) => call('POST', MGMT, alice, { name: '😀'.repeat(101) }, h),
      400,
      40000,
      "Invalid 'name': string too long. Expected a string with maximum length 100, but got a string with length 101 instead.",
      "'name' 无效：字符串过长。最多 100 个字符，实际为 101 个字符。",
    );
    assert.doesNotMatch(m.en, /202/, 'not UTF-16 units');
    await both(
      (h) => call('POST', MGMT, alice, { name: 'd', description: '𝄞'.repeat(501) }, h),
      400,
      40000,
      "Invalid 'description': string too long. Expected a string with maximum length 500, but got a string with length 501 instead.",
      "'description' 无效：字符串过长。最多 500 个字符，实际为 501 个字符。",
    );
    await both(
      (h) => call('POST', MGMT, alice, { name: 's', scopes: ['🔑'.repeat(51)] }, h),
      400,
      40000,
      "Invalid 'scopes[0]': string too long. Expected a string with maximum length 50, but got a string with length 51 instead.",
      "'scopes[0]' 无效：字符串过长。最多 50 个字符，实际为 51 个字符。",
    );
    // at the limit, the same characters are accepted
    assert.equal(assertOk(await call('POST', MGMT, alice, { name: '😀'.repeat(100) })).name, '😀'.repeat(100));
  });
});
