import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';

/**
 * Bad input of every kind, on every route the OpenAPI document lists: the answer is never a 5xx, and every
 * error is in the route group's error shape. Inputs come from a seeded generator, so a failure reproduces.
 */
function rng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FIELDS = ['model', 'input', 'name', 'description', 'expires_at', 'scopes', 'org_id', 'api_key_id', 'tools', 'tool_choice', 'text', 'stop', 'stream', 'background', 'store', 'previous_response_id', 'metadata', 'voice', 'response_format', 'speed', 'temperature', 'max_output_tokens', 'reasoning', 'truncation', 'instructions', '__proto__', 'constructor'];

function value(r: () => number, depth = 0): unknown {
  const pick = Math.floor(r() * 16);
  switch (pick) {
    case 0: return null;
    case 1: return r() < 0.5;
    case 2: return Math.floor(r() * 2 ** 53) * (r() < 0.5 ? -1 : 1);
    case 3: return r() * 1e308 * (r() < 0.5 ? -1 : 1);
    case 4: return '';
    case 5: return 'x'.repeat(Math.floor(r() * 6000));
    case 6: return '\u202e\ud83d\ude00\u0301 Ω ' + String.fromCharCode(Math.floor(r() * 0xd7ff));
    case 7: return 'gpt-test';
    case 8: return 'alloy';
    case 9: return [];
    case 10: return depth > 3 ? 'deep' : Array.from({ length: Math.floor(r() * 4) }, () => value(r, depth + 1));
    case 11: return depth > 3 ? {} : object(r, depth + 1);
    case 12: return { type: 'function', name: 'f', parameters: depth > 3 ? {} : object(r, depth + 1) };
    case 13: return [{ role: 'user', content: depth > 3 ? 'x' : value(r, depth + 1) }];
    case 14: return 0.5;
    default: return 'sk-' + 'A'.repeat(38);
  }
}

function object(r: () => number, depth = 0): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  const n = Math.floor(r() * 6);
  // defineProperty, so that "__proto__" becomes a key of the JSON text rather than the object's prototype
  for (let i = 0; i < n; i++) Object.defineProperty(o, FIELDS[Math.floor(r() * FIELDS.length)], { value: value(r, depth), enumerable: true, writable: true, configurable: true });
  return o;
}

/** any generated value as text for a query string or header */
const text = (v: unknown) => (typeof v === 'string' ? v : (JSON.stringify(v) ?? 'undefined'));

function body(r: () => number): { payload: string; contentType: string } {
  const k = Math.floor(r() * 10);
  if (k === 0) return { payload: '{"unterminated": ', contentType: 'application/json' };
  if (k === 1) return { payload: '[1,2,3]', contentType: 'application/json' };
  if (k === 2) return { payload: 'plain words', contentType: 'text/plain' };
  if (k === 3) return { payload: '"just a string"', contentType: 'application/json' };
  if (k === 4) return { payload: '{"a":' + '['.repeat(2000) + ']'.repeat(2000) + '}', contentType: 'application/json' };
  if (k === 5) return { payload: '--x\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n--x--\r\n', contentType: 'multipart/form-data; boundary=x' };
  if (k === 6) return { payload: '--broken', contentType: 'multipart/form-data; boundary=zz' };
  return { payload: JSON.stringify(object(r)), contentType: 'application/json' };
}

describe('no input breaks any route', () => {
  let t: TestApp;
  let up: ScriptedUpstream;
  const auth: Record<string, string> = {};
  before(async () => {
    up = await startScriptedUpstream({ record: false });
    t = await buildTestApp({ models: [{ name: 'gpt-test', provider: 'openai-compatible', base_url: up.url, type: 'text' }] });
    const jwt = await t.token('fuzzer', { acme: 'admin' });
    auth.portal = `Bearer ${jwt}`;
    auth.api = `Bearer ${await t.inferenceKey('fuzzer')}`;
    const mk = await t.app.inject({ method: 'POST', url: '/v1/portal/management/api-keys', headers: { authorization: auth.portal }, payload: { name: 'fuzz' } });
    auth.query = `Bearer ${mk.json().data.api_key}`;
  });
  after(async () => {
    await t.close();
    await up.close();
  });

  test('random bodies, parameters and headers on every documented route: never a 5xx, errors in the right shape', async () => {
    const doc = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json();
    const routes: Array<{ method: string; path: string }> = [];
    for (const [path, ops] of Object.entries<Record<string, unknown>>(doc.paths)) {
      for (const method of Object.keys(ops)) if (['get', 'post', 'put', 'delete'].includes(method)) routes.push({ method: method.toUpperCase(), path });
    }
    assert.ok(routes.length >= 20, `routes found: ${routes.length}`);
    const r = rng(Number(process.env.FUZZ_SEED ?? 20261122));
    const odd = ['', '%00', '..%2F..%2Fetc', 'x'.repeat(300), '%F0%9F%98%80', 'resp_' + 'f'.repeat(32), '-1', '1e99'];
    let calls = 0;
    for (const route of routes) {
      for (let i = 0; i < Number(process.env.FUZZ_ROUNDS ?? 12); i++) {
        const url = route.path.replace(/\{[^}]+\}/g, () => odd[Math.floor(r() * odd.length)]) + (r() < 0.5 ? `?page=${encodeURIComponent(text(value(r)).slice(0, 500))}&per_page=${encodeURIComponent(text(value(r)).slice(0, 50))}&stream=${encodeURIComponent(text(value(r)).slice(0, 50))}&limit=${encodeURIComponent(text(value(r)).slice(0, 50))}&order=${encodeURIComponent(text(value(r)).slice(0, 50))}` : '');
        const group = route.path.startsWith('/v1/portal/query') ? 'query' : route.path.startsWith('/v1/portal') ? 'portal' : 'api';
        const headers: Record<string, string> = { authorization: r() < 0.9 ? auth[group] : text(value(r)).replace(/[^\x20-\x7e]/g, '?').slice(0, 200) };
        if (r() < 0.3) headers['accept-language'] = 'zh-CN,en;q=0.5';
        const withBody = route.method !== 'GET' && route.method !== 'DELETE';
        const b = withBody ? body(r) : undefined;
        if (b) headers['content-type'] = b.contentType;
        const res = await t.app.inject({ method: route.method as any, url, headers, payload: b?.payload });
        calls++;
        const where = `${route.method} ${url.slice(0, 120)} -> ${res.statusCode}: ${res.body.slice(0, 300)}`;
        assert.ok(res.statusCode < 500 || res.statusCode === 502 || res.statusCode === 503, where);
        if (res.statusCode >= 400) {
          const e = res.json();
          if (url.startsWith('/v1/portal')) {
            assert.equal(typeof e.meta?.code, 'number', where);
            assert.notEqual(e.meta.code, 0, where);
            assert.equal(typeof e.meta.request_id, 'string', where);
          } else {
            assert.equal(typeof e.error?.message, 'string', where);
            assert.equal(typeof e.error?.type, 'string', where);
            assert.ok('param' in e.error && 'code' in e.error, where);
          }
        }
      }
    }
    assert.ok(calls >= 240);
    // and the service still works afterwards
    const ok = await t.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: auth.api } });
    assert.equal(ok.statusCode, 200);
  });
});
