/**
 * The WebSocket mode and who may use it: the key is checked at the upgrade (a plain HTTP 401/403/429 there, never
 * an open socket), and again for every turn (revocation, scopes, rate limits, budgets); another user's responses
 * stay out of reach; upgrade requests that do not end in an upgrade do not leave sockets open; keys never appear
 * in frames or logs.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { Writable } from 'node:stream';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import type { ModelSpec } from '../../src/models/config.js';
import { awayFromMinuteEdge } from '../helpers/minute-window.js';
import { MODEL, type Env } from './util.js';
import { errorOf, finalOf, openWs, refusedUpgrade } from './ws-util.js';

/** creates an inference key and gives its id and secret */
async function makeKey(t: TestApp, user: string, body: Record<string, unknown> = {}) {
  const res = await t.app.inject({
    method: 'POST',
    url: '/v1/portal/api-keys',
    headers: { authorization: `Bearer ${await t.token(user)}` },
    payload: { name: 'ws key', ...body },
  });
  assert.equal(res.statusCode, 200, res.body);
  return { id: res.json().data.id as string, key: res.json().data.api_key as string };
}

/**
 * A raw HTTP/1.1 upgrade request on a TCP socket: the status line, and whether the server closed the socket by
 * itself afterwards (an upgrade request's socket is outside the HTTP server's timeouts: left open, it would stay).
 */
async function rawUpgrade(url: string, request: string, waitMs = 2000): Promise<{ head: string; closedByServer: boolean }> {
  const { hostname, port } = new URL(url);
  const s = net.connect(Number(port), hostname);
  let head = '';
  s.on('data', (d) => (head += d.toString('latin1')));
  s.on('error', () => {});
  s.write(request);
  const closedByServer = await new Promise<boolean>((resolve) => {
    const t = setTimeout(() => resolve(false), waitMs);
    s.on('close', () => {
      clearTimeout(t);
      resolve(true);
    });
  });
  s.destroy();
  return { head, closedByServer };
}

const upgradeHeaders = (path: string, extra = '') =>
  `GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n${extra}\r\n`;

describe('WebSocket mode: authentication and authorization', () => {
  let e: Env;
  const lines: string[] = [];
  before(async () => {
    const sink = new Writable({
      write(chunk, _enc, cb) {
        lines.push(chunk.toString());
        cb();
      },
    });
    // the same models as setup(), with the log kept
    const up = await startScriptedUpstream();
    const models = [{ name: MODEL, provider: 'openai-compatible', base_url: up.url, upstream_model: 'upstream-model', type: 'text' } as ModelSpec];
    const t = await buildTestApp({ listen: true, models, logDestination: sink, env: { LOG_LEVEL: 'debug' } });
    const key = await t.inferenceKey('alice');
    e = {
      t,
      url: t.url!,
      up,
      key,
      client: undefined as never,
      call: (method, path, body) =>
        fetch(t.url + path, {
          method,
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: body === undefined ? undefined : JSON.stringify(body),
        }),
      last: () => up.requests.at(-1)!.body,
      close: async () => {
        await t.close();
        await up.close();
      },
    };
  });
  after(() => e.close());

  for (const [what, headers, code] of [
    ['no Authorization header', {}, 'unauthorized'],
    ['not a Bearer token', { authorization: 'Basic abc' }, 'invalid_authorization_format'],
    ['a malformed key', { authorization: 'Bearer sk-nope' }, 'invalid_format'],
    ['an unknown key of the right shape', { authorization: 'Bearer sk-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA000000' }, undefined],
  ] as const) {
    test(`the upgrade with ${what} is refused with a plain HTTP 401 in the OpenAI shape`, async () => {
      const r = await refusedUpgrade(e.url, headers as Record<string, string>);
      assert.equal(r.status, 401);
      assert.equal(r.body.error.type, 'authentication_error');
      if (code) assert.equal(r.body.error.code, code);
      assert.ok(r.headers['x-request-id']);
    });
  }

  test('the socket of a refused upgrade is closed by the server', async () => {
    const r = await rawUpgrade(e.url, upgradeHeaders('/v1/responses', 'Authorization: Bearer sk-nope\r\n'));
    assert.match(r.head, /^HTTP\/1.1 401 /);
    assert.equal(r.closedByServer, true);
  });

  test("a key without the 'responses' scope is refused at the upgrade (403); a key limited to other models gets 403 per turn", async () => {
    const audio = await makeKey(e.t, 'scoped', { scopes: ['audio'] });
    const r = await refusedUpgrade(e.url, { authorization: `Bearer ${audio.key}` });
    assert.equal(r.status, 403);
    assert.equal(r.body.error.code, 'insufficient_scope');
    const other = await makeKey(e.t, 'scoped', { scopes: ['responses', 'model:another'] });
    const c = await openWs(e.url, other.key);
    errorOf(await c.turn({ model: MODEL, input: 'x' }), 403, 'insufficient_scope', 'model');
    await c.close();
  });

  test('a key revoked while its socket is open: the next turn is refused (401), then the connection is closed (1008)', async () => {
    const k = await makeKey(e.t, 'revoker');
    const c = await openWs(e.url, k.key);
    finalOf(await c.turn({ model: MODEL, store: false, input: 'before' }));
    const res = await e.t.app.inject({
      method: 'POST',
      url: '/v1/portal/api-keys/revoke',
      headers: { authorization: `Bearer ${await e.t.token('revoker')}` },
      payload: { api_key_id: k.id },
    });
    assert.equal(res.statusCode, 200, res.body);
    errorOf(await c.turn({ model: MODEL, store: false, input: 'after' }), 401, 'api_key_revoked');
    assert.equal((await c.closed).code, 1008);
  });

  test("another user's stored response is previous_response_not_found over the socket, as over HTTP (no existence oracle)", async () => {
    const mine = await (await e.call('POST', '/v1/responses', { model: MODEL, input: 'alice only' })).json();
    assert.equal(mine.status, 'completed');
    const bob = await makeKey(e.t, 'bob');
    const c = await openWs(e.url, bob.key);
    const err = errorOf(await c.turn({ model: MODEL, input: 'peek', previous_response_id: mine.id }), 404, 'previous_response_not_found');
    errorOf(await c.turn({ model: MODEL, input: 'peek', previous_response_id: 'resp_0000' }), 404, 'previous_response_not_found');
    assert.doesNotMatch(JSON.stringify(err), /alice only/);
    assert.equal(e.up.requests.at(-1)!.body.messages.length, 1, 'nothing of the other conversation reached the model');
    await c.close();
  });

  test('query parameters are refused at the upgrade (400), as on every route', async () => {
    const r = await refusedUpgrade(e.url, { authorization: `Bearer ${e.key}` }, '/v1/responses?model=x');
    assert.equal(r.status, 400);
    assert.equal(r.body.error.code, 'unknown_parameter');
  });

  test('the OpenAPI document describes the upgrade on GET /v1/responses and the compact route with its schemas', async () => {
    const doc = (await e.t.app.inject({ method: 'GET', url: '/openapi.json' })).json();
    const get = doc.paths['/v1/responses'].get;
    assert.match(get.description, /WebSocket/);
    assert.match(get.description, /response\.create/);
    assert.ok(get.responses['101'], 'the 101 Switching Protocols answer');
    assert.deepEqual(get.security, [{ apiKey: [] }]);
    const post = doc.paths['/v1/responses/compact'].post;
    const body = post.requestBody.content['application/json'].schema;
    assert.deepEqual(body.required, ['model']);
    assert.deepEqual(Object.keys(body.properties).sort(), ['input', 'instructions', 'model', 'previous_response_id', 'prompt_cache_key', 'prompt_cache_retention', 'service_tier']);
    assert.equal(body.additionalProperties, false);
    const ok = post.responses['200'].content['application/json'].schema;
    assert.deepEqual(ok.required, ['id', 'object', 'created_at', 'output', 'usage']);
    assert.ok(post.responses['4XX'], 'errors in the OpenAI shape');
  });

  test('a plain GET /v1/responses (no upgrade) is 426 with Upgrade: websocket', async () => {
    const res = await e.call('GET', '/v1/responses');
    assert.equal(res.status, 426);
    assert.equal(res.headers.get('upgrade'), 'websocket');
    const body = await res.json();
    assert.equal(body.error.code, 'upgrade_required');
    assert.match(body.error.message, /WebSocket/);
  });

  test('upgrade requests elsewhere (another route, an unknown path, a POST) are answered and their sockets closed', async () => {
    const auth = `Authorization: Bearer ${e.key}\r\n`;
    // a route without a WebSocket handler accepts the upgrade and closes the WebSocket at once (a close frame:
    // the closing handshake, which ws bounds to 30 s for a peer that never answers it)
    const models = await rawUpgrade(e.url, upgradeHeaders('/v1/models', auth), 300);
    assert.match(models.head, /^HTTP\/1.1 101 /);
    assert.equal(models.head.split('\r\n\r\n')[1]?.charCodeAt(0), 0x88, 'a close frame follows the upgrade');
    for (const [req, status] of [
      [upgradeHeaders('/v1/nowhere', auth), /^HTTP\/1.1 404 /],
      [upgradeHeaders('/nowhere', ''), /^HTTP\/1.1 404 /],
      [upgradeHeaders('/v1/responses', auth).replace(/^GET/, 'POST'), /^HTTP\/1.1 4\d\d /],
    ] as const) {
      const r = await rawUpgrade(e.url, req);
      assert.match(r.head, status, r.head.slice(0, 200));
      assert.equal(r.closedByServer, true, `left open: ${req.split('\r\n')[0]}`);
    }
  });

  test('keys appear in no frame and no log line', async () => {
    const k = await makeKey(e.t, 'quiet');
    const c = await openWs(e.url, k.key);
    finalOf(await c.turn({ model: MODEL, store: false, input: 'hello' }));
    errorOf(await c.turn({ model: MODEL, store: false, input: 'x', nope: 1 }), 400);
    await c.close();
    await refusedUpgrade(e.url, { authorization: `Bearer ${k.key.slice(0, -2)}xx` });
    const secret = k.key.slice(3, 35);
    assert.ok(!JSON.stringify(c.frames).includes(secret));
    assert.ok(lines.length > 0 && lines.some((l) => l.includes('websocket turn')) && lines.some((l) => l.includes('websocket closed')));
    assert.ok(!lines.some((l) => l.includes(secret)), 'the key is not logged');
  });
});

describe('WebSocket mode: rate limits and budgets count every turn', () => {
  let up: ScriptedUpstream;
  let t: TestApp & { url?: string };
  before(async () => {
    up = await startScriptedUpstream({ record: false, defaultReply: { text: 'ok', usage: { prompt_tokens: 3, completion_tokens: 2 } } });
    t = await buildTestApp({
      listen: true,
      env: { RATE_LIMIT_RPM: '4', BILLING_ENABLED: 'true' },
      // 5 tokens a turn at 100,000 credits per million tokens = 0.5 credits a turn
      models: [{ name: 'paid', provider: 'openai-compatible', base_url: up.url, type: 'text', pricing: { input_per_million: 100_000, output_per_million: 100_000 } } as ModelSpec],
    });
  });
  after(async () => {
    await t.close();
    await up.close();
  });

  test('no credits: the upgrade itself is refused (429 insufficient_quota)', async () => {
    const key = await t.inferenceKey('broke');
    const r = await refusedUpgrade(t.url!, { authorization: `Bearer ${key}` });
    assert.equal(r.status, 429);
    assert.equal(r.body.error.code, 'insufficient_quota');
  });

  test('credits for one turn: the next turn is refused with insufficient_quota, and the socket stays open', async () => {
    const key = await t.inferenceKey('payer');
    // each turn reserves 1 credit at admission (9 input tokens estimated + max_output_tokens 1) and is charged 0.5
    await t.services.usage.grant('payer', 'default', 1);
    const c = await openWs(t.url!, key);
    finalOf(await c.turn({ model: 'paid', store: false, input: 'one', max_output_tokens: 1 }));
    errorOf(await c.turn({ model: 'paid', store: false, input: 'two', max_output_tokens: 1 }), 429, 'insufficient_quota');
    await t.services.usage.grant('payer', 'default', 0.5);
    finalOf(await c.turn({ model: 'paid', store: false, input: 'six', max_output_tokens: 1 }));
    await c.close();
  });

  test('requests per minute: the upgrade is one request and each turn one more; over the limit a turn gets 429 rate_limit_exceeded', async () => {
    const key = await t.inferenceKey('busy');
    // (each turn reserves its worst case, 4,096 output tokens by default: about 410 credits)
    await t.services.usage.grant('busy', 'default', 10_000);
    await awayFromMinuteEdge(3); // the upgrade and the turns count in one fixed minute
    const c = await openWs(t.url!, key);
    for (let i = 0; i < 3; i++) finalOf(await c.turn({ model: 'paid', store: false, input: `turn ${i}` }));
    const err = errorOf(await c.turn({ model: 'paid', store: false, input: 'one too many' }), 429, 'rate_limit_exceeded');
    assert.match(err.message, /rate limit/i);
    assert.equal(c.closeInfo, undefined, 'the connection stays open');
    await c.close();
  });
});
