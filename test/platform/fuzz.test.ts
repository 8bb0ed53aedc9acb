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

const FIELDS = [
  'model',
  'input',
  'name',
  'description',
  'expires_at',
  'scopes',
  'org_id',
  'api_key_id',
  'tools',
  'tool_choice',
  'text',
  'stop',
  'stream',
  'background',
  'store',
  'previous_response_id',
  'metadata',
  'voice',
  'response_format',
  'speed',
  'temperature',
  'max_output_tokens',
  'reasoning',
  'truncation',
  'instructions',
  '__proto__',
  'constructor',
];

function value(r: () => number, depth = 0): unknown {
  const pick = Math.floor(r() * 16);
  switch (pick) {
    case 0:
      return null;
    case 1:
      return r() < 0.5;
    case 2:
      return Math.floor(r() * 2 ** 53) * (r() < 0.5 ? -1 : 1);
    case 3:
      return r() * 1e308 * (r() < 0.5 ? -1 : 1);
    case 4:
      return '';
    case 5:
      return 'x'.repeat(Math.floor(r() * 6000));
    case 6:
      return '\u202e\ud83d\ude00\u0301 Ω ' + String.fromCharCode(Math.floor(r() * 0xd7ff));
    case 7:
      return 'gpt-test';
    case 8:
      return 'alloy';
    case 9:
      return [];
    case 10:
      return depth > 3 ? 'deep' : Array.from({ length: Math.floor(r() * 4) }, () => value(r, depth + 1));
    case 11:
      return depth > 3 ? {} : object(r, depth + 1);
    case 12:
      return { type: 'function', name: 'f', parameters: depth > 3 ? {} : object(r, depth + 1) };
    case 13:
      return [{ role: 'user', content: depth > 3 ? 'x' : value(r, depth + 1) }];
    case 14:
      return 0.5;
    default:
      return 'sk-' + 'A'.repeat(38);
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
/** a query-string value: cut, with lone surrogates (which cannot be URI-encoded) replaced */
const q = (v: unknown, max: number) =>
  encodeURIComponent(
    text(v)
      .slice(0, max)
      .replace(/[\ud800-\udfff]/g, '?'),
  );

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
    t = await buildTestApp({
      models: [
        { name: 'gpt-test', provider: 'openai-compatible', base_url: up.url, type: 'text' },
        { name: 'gen-test', provider: 'openai-compatible', base_url: up.url, type: 'text', api: 'responses' },
        { name: 'embed-test', provider: 'openai-compatible', base_url: up.url, type: 'embeddings' },
      ],
    });
    const jwt = await t.token('fuzzer', { acme: 'admin' });
    auth.portal = `Bearer ${jwt}`;
    auth.api = `Bearer ${await t.inferenceKey('fuzzer')}`;
    const mk = await t.app.inject({ method: 'POST', url: '/v1/portal/management/api-keys', headers: { authorization: auth.portal }, payload: { name: 'fuzz' } });
    auth.query = `Bearer ${mk.json().data.api_key}`;
    // the admin API, as an operator (its routes then run, not only its gate)
    await t.core.operators.add('fuzz-operator', 'cli', 'test');
    auth.admin = `Bearer ${await t.token('fuzz-operator')}`;
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
        const url =
          route.path.replace(/\{[^}]+\}/g, () => odd[Math.floor(r() * odd.length)]) +
          (r() < 0.5 ? `?page=${q(value(r), 500)}&per_page=${q(value(r), 50)}&stream=${q(value(r), 50)}&limit=${q(value(r), 50)}&order=${q(value(r), 50)}` : '');
        const group = route.path.startsWith('/v1/portal/query') ? 'query' : route.path.startsWith('/v1/portal') ? 'portal' : route.path.startsWith('/v1/admin') ? 'admin' : 'api';
        const headers: Record<string, string> = {
          authorization:
            r() < 0.9
              ? auth[group]
              : text(value(r))
                  .replace(/[^\x20-\x7e]/g, '?')
                  .slice(0, 200),
        };
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
          if (url.startsWith('/v1/portal') || url.startsWith('/v1/admin')) {
            assert.equal(typeof e.meta?.code, 'number', where);
            assert.notEqual(e.meta.code, 0, where);
            assert.equal(typeof e.meta.request_id, 'string', where);
          } else if (route.path.startsWith('/v1/messages') && res.statusCode !== 405) {
            // Anthropic's wire answers in Anthropic's shape (a wrong method is no route's: OpenAI's)
            assert.equal(e.type, 'error', where);
            assert.equal(typeof e.error?.message, 'string', where);
            assert.equal(typeof e.error?.type, 'string', where);
            assert.equal(typeof e.request_id, 'string', where);
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

  test('valid requests with one field replaced by anything: a 2xx or a clear 4xx, never a 5xx', async () => {
    const r = rng(Number(process.env.FUZZ_SEED ?? 7));
    const bases: Array<{ url: string; auth: string; body: Record<string, unknown> }> = [
      {
        url: '/v1/responses',
        auth: auth.api,
        body: {
          model: 'gpt-test',
          input: [{ role: 'user', content: [{ type: 'input_text', text: 'hi' }] }],
          instructions: 'be brief',
          tools: [{ type: 'function', name: 'f', parameters: { type: 'object', properties: { a: { type: 'string' } } } }],
          tool_choice: 'auto',
          text: { format: { type: 'json_schema', name: 'x', schema: { type: 'object' } } },
          max_output_tokens: 50,
          stop: ['END'],
          metadata: { k: 'v' },
          store: false,
        },
      },
      { url: '/v1/audio/speech', auth: auth.api, body: { model: 'tts-1', input: 'Short.', voice: 'alloy', response_format: 'pcm', speed: 1 } },
      ...['gpt-test', 'gen-test'].map((model) => ({
        url: '/v1/chat/completions',
        auth: auth.api,
        body: {
          model,
          messages: [
            { role: 'system', content: 'be brief' },
            { role: 'user', content: [{ type: 'text', text: 'hi' }] },
            { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
            { role: 'tool', tool_call_id: 'call_1', content: 'ok' },
          ],
          tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'string' } } } } }],
          tool_choice: 'auto',
          response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } },
          max_completion_tokens: 50,
          stop: ['END'],
          stream: false,
          temperature: 0.5,
        },
      })),
      ...['gpt-test', 'gen-test'].map((model) => ({
        url: '/v1/messages',
        auth: auth.api,
        body: {
          model,
          max_tokens: 50,
          system: [{ type: 'text', text: 'be brief' }],
          messages: [
            { role: 'user', content: [{ type: 'text', text: 'hi' }] },
            { role: 'assistant', content: [{ type: 'tool_use', id: 'tu_1', name: 'f', input: { a: 'x' } }] },
            { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'tu_1', content: 'ok' }] },
          ],
          tools: [{ name: 'f', input_schema: { type: 'object', properties: { a: { type: 'string' } } } }],
          tool_choice: { type: 'auto' },
          thinking: { type: 'enabled', budget_tokens: 1024 },
          stop_sequences: ['END'],
          temperature: 0.5,
        },
      })),
      { url: '/v1/embeddings', auth: auth.api, body: { model: 'embed-test', input: ['a', 'b'], encoding_format: 'base64', dimensions: 4 } },
      { url: '/v1/portal/api-keys', auth: auth.portal, body: { name: 'n', description: 'd', expires_at: 0, scopes: ['responses'], org_id: 'default' } },
      { url: '/v1/portal/management/api-keys/revoke', auth: auth.portal, body: { api_key_id: 'mkey_none' } },
    ];
    const paths = (o: unknown, prefix: string[] = []): string[][] => {
      if (!o || typeof o !== 'object') return [prefix];
      const out: string[][] = prefix.length ? [prefix] : [];
      for (const [k, v] of Object.entries(o)) out.push(...paths(v, [...prefix, k]));
      return out;
    };
    let n = 0;
    for (const base of bases) {
      const all = paths(base.body);
      for (let i = 0; i < Number(process.env.FUZZ_ROUNDS ?? 12) * 2; i++) {
        const b = structuredClone(base.body);
        const path = all[Math.floor(r() * all.length)];
        let at: any = b;
        for (const k of path.slice(0, -1)) at = at[k];
        if (r() < 0.15) delete at[path[path.length - 1]];
        else at[path[path.length - 1]] = value(r);
        const res = await t.app.inject({ method: 'POST', url: base.url, headers: { authorization: base.auth, 'content-type': 'application/json' }, payload: JSON.stringify(b) });
        n++;
        const where = `${base.url} with ${path.join('.')} = ${JSON.stringify(at[path[path.length - 1]])?.slice(0, 100)} -> ${res.statusCode}: ${res.body.slice(0, 300)}`;
        assert.ok(res.statusCode < 500, where);
        if (res.statusCode >= 400) {
          const e = res.json();
          assert.ok(base.url.startsWith('/v1/portal') ? e.meta?.code > 0 : typeof e.error?.message === 'string', where);
        }
      }
    }
    assert.ok(n >= 168);
  });
});
