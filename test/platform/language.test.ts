import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { AppError, ERRORS, MESSAGES, localizedMessage, msg, pickLanguage, type MessageKey } from '../../src/platform/errors.js';

// compiled to dist/test: the sources are two levels up
const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '../../../src');

/** Simplified Chinese, not an English text copied over: at least two Han characters, and not the English text */
function assertChinese(zh: string, en: string, what: string) {
  assert.ok((zh.match(/[\u4e00-\u9fff]/g) ?? []).length >= 2, `${what}: no Chinese in ${JSON.stringify(zh)}`);
  assert.notEqual(zh, en, what);
  // no traditional forms of the characters these messages use
  assert.doesNotMatch(zh, /[權號錯誤請無過與鑰組織員檢驗數額時間證連務達應為創刪設資訊個來這]/, `${what}: traditional characters in ${JSON.stringify(zh)}`);
}

const placeholders = (s: string) => [...s.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!).sort();

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
    // a bare string is English only (the {base_url} features' own messages): it is not replaced by the code's default
    const custom = new AppError('invalid_format', 'special text');
    assert.equal(localizedMessage(custom, 'zh-CN'), 'special text');
    assert.equal(localizedMessage(new AppError('permission_denied'), 'zh-CN'), '权限不足');
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

  test('every code of the error table has its message in English and in Simplified Chinese', () => {
    for (const [code, e] of Object.entries(ERRORS)) {
      const err = new AppError(code as keyof typeof ERRORS);
      assert.equal(localizedMessage(err, undefined), e.message, code);
      assert.equal(localizedMessage(err, 'en-US'), e.message, code);
      assert.equal(localizedMessage(err, 'zh-CN,zh;q=0.9'), e.zh, code);
      assertChinese(e.zh, e.message, code);
    }
  });

  test('every message of the message table has both texts with the same parameters, filled in each language', () => {
    const keys = Object.keys(MESSAGES) as MessageKey[];
    assert.ok(keys.length > 50, 'the table is walked whole');
    for (const key of keys) {
      const m: { en: string; zh: string } = MESSAGES[key];
      assert.deepEqual(placeholders(m.zh), placeholders(m.en), `${key}: the same parameters in both languages`);
      // each parameter gets a value of its own (and one given per language), then nothing is left unfilled
      const names = placeholders(m.en);
      const values = Object.fromEntries(names.map((n, i) => [n, i % 2 ? { en: `EN-${n}`, zh: `ZH-${n}` } : `v-${n}-${i}`]));
      const filled = (msg as (k: MessageKey, p?: object) => { en: string; zh: string })(key, values);
      for (const [n, v] of Object.entries(values)) {
        assert.ok(filled.en.includes(typeof v === 'string' ? v : v.en), `${key}: {${n}} in English`);
        assert.ok(filled.zh.includes(typeof v === 'string' ? v : v.zh), `${key}: {${n}} in Chinese`);
      }
      assert.doesNotMatch(filled.en, /\{\w+\}/, key);
      assert.doesNotMatch(filled.zh, /\{\w+\}/, key);
      if (key !== 'request_refused') assertChinese(m.zh, m.en, key);
      // as an error, each language is answered its text
      const err = new AppError('validation_error', filled);
      assert.equal(err.message, filled.en);
      assert.equal(localizedMessage(err, 'en'), filled.en);
      assert.equal(localizedMessage(err, 'zh-CN'), filled.zh);
    }
    // the one message that carries a text we do not author still says in Chinese what happened
    assert.match(MESSAGES.request_refused.zh, /^请求被拒绝：/);
    // a value is put in as it is, even when it looks like a parameter
    assert.deepEqual(msg('no_route', { method: 'GET', path: '/{method}' }), { en: 'no route GET /{method}', zh: '没有此路由：GET /{method}' });
  });

  test('where the portal, the query APIs, the web back end, the {base_url} gate and the layers under them raise an error, its message comes from the tables', () => {
    // every `new AppError(code, message, ...)` in these folders gives no message (the code's own), msg(...) (or a
    // choice between such), a parameter typed Texts, or a message built in both languages (`localized`); an
    // English-only string fails here
    const roots = ['portal', 'web', 'platform', 'compose/http.ts', 'api/scopes.ts'].map((r) => join(SRC, r));
    const walk = (p: string): string[] => (statSync(p).isDirectory() ? readdirSync(p).flatMap((f) => walk(join(p, f))) : p.endsWith('.ts') && !p.endsWith('.d.ts') ? [p] : []);
    const files = roots.flatMap(walk);
    assert.ok(files.length > 50, `${files.length} files`);
    const bad: string[] = [];
    let seen = 0;
    for (const file of files) {
      const sf = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
      const typedTexts = (id: ts.Identifier): boolean => {
        for (let n: ts.Node | undefined = id.parent; n; n = n.parent) {
          if (ts.isFunctionLike(n)) {
            const p = n.parameters.find((x) => ts.isIdentifier(x.name) && x.name.text === id.text);
            if (p) return p.type?.getText(sf) === 'Texts';
          }
        }
        return false;
      };
      const keyed = (e: ts.Expression): boolean =>
        (ts.isIdentifier(e) && (e.text === 'undefined' || typedTexts(e))) ||
        (ts.isCallExpression(e) && ts.isIdentifier(e.expression) && e.expression.text === 'msg') ||
        (ts.isConditionalExpression(e) && keyed(e.whenTrue) && keyed(e.whenFalse)) ||
        (ts.isParenthesizedExpression(e) && keyed(e.expression));
      const visit = (n: ts.Node) => {
        if (ts.isNewExpression(n) && ts.isIdentifier(n.expression) && n.expression.text === 'AppError') {
          seen++;
          const [, message, , extra] = n.arguments ?? [];
          const bilingual = extra !== undefined && ts.isObjectLiteralExpression(extra) && extra.properties.some((p) => p.name?.getText(sf) === 'localized');
          if (message !== undefined && !keyed(message) && !bilingual) {
            const { line } = sf.getLineAndCharacterOfPosition(n.getStart(sf));
            bad.push(`${relative(SRC, file)}:${line + 1}: ${n.getText(sf).slice(0, 120)}`);
          }
        }
        ts.forEachChild(n, visit);
      };
      visit(sf);
    }
    assert.ok(seen > 40, `${seen} errors raised`);
    assert.deepEqual(bad, [], 'messages that are not in the tables (give them both texts in MESSAGES, src/platform/errors.ts)');
  });
});
