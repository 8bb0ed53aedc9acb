import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { AppError, ERRORS, localizedMessage, pickLanguage } from '../../src/platform/errors.js';

describe('Accept-Language picking', () => {
  test('the best of our languages by q value; English by default', () => {
    const cases: Array<[string | undefined, string]> = [
      [undefined, 'en'],
      ['', 'en'],
      ['zh-CN', 'zh'],
      ['zh', 'zh'],
      ['ZH-cn', 'zh'],
      ['zh-Hans-CN', 'zh'],
      ['zh-TW', 'zh'],
      ['en-US', 'en'],
      ['fr-FR', 'en'],
      ['fr-FR, zh;q=0.8, en;q=0.5', 'zh'],
      ['en;q=0.9, zh;q=0.8', 'en'],
      ['zh;q=0.2, en;q=0.8', 'en'],
      ['en;q=0.1, zh-CN', 'zh'],
      ['*', 'en'],
      ['de, *;q=0.5', 'en'],
      // q=0 means "not acceptable"
      ['zh;q=0', 'en'],
      ['zh-CN;q=0.000, de', 'en'],
      ['en;q=0, zh;q=0', 'en'],
      [' zh-CN ; q=1 , en ; q=0.5', 'zh'],
      ['garbage;;;,,', 'en'],
    ];
    for (const [h, want] of cases) assert.equal(pickLanguage(h), want, `Accept-Language: ${h}`);
  });

  test('localized messages: the table default is translated, a specific message is kept', () => {
    const e = new AppError('invalid_format');
    assert.equal(localizedMessage(e, 'zh-CN'), 'API 密钥格式无效');
    assert.equal(localizedMessage(e, 'en'), ERRORS.invalid_format.message);
    assert.equal(localizedMessage(e, undefined), 'invalid API key format');
    const custom = new AppError('invalid_format', 'special text');
    assert.equal(localizedMessage(custom, 'zh-CN'), 'special text');
    // codes without translations stay English
    assert.equal(localizedMessage(new AppError('permission_denied'), 'zh-CN'), 'permission denied');
    for (const code of ['api_key_revoked', 'api_key_expired', 'api_key_disabled', 'invalid_api_key'] as const) {
      const zh = localizedMessage(new AppError(code), 'zh-CN');
      assert.notEqual(zh, ERRORS[code].message);
      assert.match(zh, /[\u4e00-\u9fff]/);
    }
  });

  test('the error table: unique non-zero portal codes that match the HTTP status', () => {
    const seen = new Set<number>();
    for (const [name, e] of Object.entries(ERRORS)) {
      assert.ok(e.portal > 0, name);
      assert.equal(Math.floor(e.portal / 100), e.status, `${name}: portal code ${e.portal} vs status ${e.status}`);
      assert.ok(!seen.has(e.portal), `duplicate portal code ${e.portal}`);
      seen.add(e.portal);
    }
    assert.equal(ERRORS.unauthorized.message, 'unauthorized');
    assert.equal(ERRORS.invalid_authorization_format.message, 'unauthorized: invalid authorization format');
    assert.equal(ERRORS.api_key_id_required.message, 'api_key_id is required');
    assert.equal(ERRORS.permission_denied.message, 'permission denied');
  });
});
