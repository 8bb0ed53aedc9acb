/**
 * Who may open a realtime session: the key at the upgrade (none, bad, without the `realtime` scope, limited to
 * other models), the key in a browser's `openai-insecure-api-key.` subprotocol on /v1/realtime only (never on
 * another route, never two keys), a key revoked while its session is open (the session is closed within
 * REALTIME_VERIFY_MS), and no key or client secret in the log, in an error message or in a usage row.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { WebSocket } from 'ws';
import { KEY_SUBPROTOCOL } from '../../src/platform/http/auth.js';
import { RawSession, assertError, setupRealtime, type RtEnv, portal as portalCall, keyRecord as newKey } from './util.js';
import { waitFor } from '../helpers/wait.js';

describe('realtime security (pglite)', () => {
  let e: RtEnv;
  const log: string[] = [];
  /** every answer and event a client got, to check no secret is echoed */
  const seen: string[] = [];
  const secrets: string[] = [];
  const portal = (user: string, method: string, path: string, body?: unknown) => portalCall(e, user, method, path, body);
  const keyRecord = async (user = 'alice', scopes?: string[]) => {
    const k = await newKey(e, user, scopes);
    secrets.push(k.api_key);
    return k;
  };
  const refusal = async (s: RawSession) => {
    const err: any = await s.opened.then(
      () => undefined,
      (x) => x,
    );
    assert.ok(err?.status, `the upgrade was refused: ${JSON.stringify(s.events)}`);
    seen.push(err.body);
    return { status: err.status as number, error: JSON.parse(err.body).error };
  };
  /** a session refused after the upgrade: its error event and close */
  const closedWithError = async (s: RawSession) => {
    await s.opened;
    const closed = await s.closed;
    seen.push(JSON.stringify(s.events));
    return { closed, error: s.events.find((x) => x.type === 'error') };
  };

  before(async () => {
    const sink = new Writable({ write: (chunk, _e, cb) => (log.push(chunk.toString()), cb()) });
    e = await setupRealtime({ env: { REALTIME_VERIFY_MS: '100', LOG_LEVEL: 'trace' }, logDestination: sink });
    secrets.push(e.key);
  });
  after(() => e.close());

  test('at the upgrade: no key, a bad key, a management key are 401; a key without the realtime scope is 403', async () => {
    const none = await refusal(RawSession.open(e, { key: null }));
    assert.equal(none.status, 401);
    assert.equal(none.error.code, 'unauthorized');
    for (const bad of ['sk-not-a-real-key', 'sk-' + 'a'.repeat(48), 'garbage']) {
      const r = await refusal(RawSession.open(e, { key: bad }));
      assert.equal(r.status, 401, bad);
    }
    const malformed = await refusal(RawSession.open(e, { key: null, headers: { authorization: 'Basic abc' } }));
    assert.equal(malformed.status, 401);
    const mk = ((await (await portal('alice', 'POST', '/management/api-keys', { name: 'mgmt' })).json()) as any).data.api_key;
    secrets.push(mk);
    assert.equal((await refusal(RawSession.open(e, { key: mk }))).status, 401);
    for (const scopes of [['chat'], ['responses', 'audio']]) {
      const k = await keyRecord('alice', scopes);
      const r = await refusal(RawSession.open(e, { key: k.api_key }));
      assert.equal(r.status, 403, scopes.join());
      assert.equal(r.error.code, 'insufficient_scope');
      assert.match(r.error.message, /"realtime" scope/);
    }
    // the SDK's socket is refused the same way
    const chatOnly = await keyRecord('alice', ['chat']);
    await assert.rejects(e.open({ key: chatOnly.api_key }), /upgrade refused: 403/);
    const ok = await keyRecord('alice', ['realtime']);
    const s = RawSession.open(e, { key: ok.api_key });
    await s.opened;
    await s.next('session.created');
    s.close();
  });

  test('a key limited to other models: refused for gpt-realtime; one limited to the realtime model cannot reach a text model it may not use', async () => {
    const other = await keyRecord('alice', ['realtime', 'model:gpt-realtime-mini']);
    const r = await closedWithError(RawSession.open(e, { key: other.api_key }));
    assertError(r.error, 'insufficient_scope', 'model');
    assert.match(r.error.error.message, /gpt-realtime/);
    assert.equal(r.closed.code, 1008);
    // the model it names opens; its answers come from the first text model, which it may not use
    const s = RawSession.open(e, { key: other.api_key, query: 'model=gpt-realtime-mini' });
    await s.opened;
    await s.next('session.created');
    const n = e.up.requests.length;
    s.send({ type: 'session.update', session: { output_modalities: ['text'] } });
    s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi.' }] } });
    s.send({ type: 'response.create' });
    const done = (await s.next('response.done')).response;
    assert.equal(done.status, 'failed');
    assert.equal(done.status_details.error.code, 'insufficient_scope');
    assert.equal(e.up.requests.length, n, 'the text model was not called');
    s.close();
  });

  test('the key as the openai-insecure-api-key. subprotocol opens a session, answered with the realtime subprotocol', async () => {
    const k = await keyRecord();
    for (const protocols of [
      ['realtime', KEY_SUBPROTOCOL + k.api_key],
      [KEY_SUBPROTOCOL + k.api_key, 'realtime'],
    ]) {
      const s = RawSession.open(e, { key: null, protocols });
      await s.opened;
      assert.equal(s.ws.protocol, 'realtime', `the server answers 'realtime', never the key (offered: ${protocols.map((p) => p.slice(0, 12)).join()})`);
      await s.next('session.created');
      s.close();
    }
    // two keys are refused: a header and a subprotocol, or two subprotocols
    const k2 = await keyRecord();
    const both = await refusal(RawSession.open(e, { key: k2.api_key, protocols: ['realtime', KEY_SUBPROTOCOL + k.api_key] }));
    assert.equal(both.status, 401);
    assert.equal(both.error.code, 'invalid_authorization_format');
    assert.match(both.error.message, /send the key once/);
    const same = await refusal(RawSession.open(e, { key: k.api_key, protocols: ['realtime', KEY_SUBPROTOCOL + k.api_key] }));
    assert.equal(same.status, 401, 'a header beside the subprotocol is refused even with the same key');
    const two = await refusal(RawSession.open(e, { key: null, protocols: ['realtime', KEY_SUBPROTOCOL + k.api_key, KEY_SUBPROTOCOL + k2.api_key] }));
    assert.equal(two.status, 401);
    const empty = await refusal(RawSession.open(e, { key: null, protocols: ['realtime', KEY_SUBPROTOCOL] }));
    assert.equal(empty.status, 401);
  });

  test('the subprotocol key opens nothing else: the Responses WebSocket mode, chat completions, models', async () => {
    const k = await keyRecord();
    const status = await new Promise<number>((resolve) => {
      const ws = new WebSocket(`${e.url.replace('http', 'ws')}/v1/responses`, ['realtime', KEY_SUBPROTOCOL + k.api_key]);
      ws.once('unexpected-response', (_q, res) => {
        res.on('data', (c: Buffer) => seen.push(c.toString()));
        resolve(res.statusCode ?? 0);
      });
      ws.once('open', () => (ws.close(), resolve(101)));
      ws.once('error', () => {});
    });
    assert.equal(status, 401);
    const h = { 'sec-websocket-protocol': `realtime, ${KEY_SUBPROTOCOL}${k.api_key}`, 'content-type': 'application/json' };
    const n = e.up.requests.length;
    const chat = await fetch(`${e.url}/v1/chat/completions`, {
      method: 'POST',
      headers: h,
      body: JSON.stringify({ model: 'answerer', messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(chat.status, 401);
    seen.push(await chat.text());
    const models = await fetch(`${e.url}/v1/models`, { headers: h });
    assert.equal(models.status, 401);
    const mint = await fetch(`${e.url}/v1/realtime/client_secrets`, { method: 'POST', headers: h, body: '{}' });
    assert.equal(mint.status, 401, 'client secrets are minted with the key in Authorization only');
    assert.equal(e.up.requests.length, n);
  });

  test('a key revoked, disabled or deleted while its session is open: the session is closed with an error event within REALTIME_VERIFY_MS', async () => {
    const cases = [
      ['revoked', async (id: string) => assert.equal((await portal('alice', 'POST', '/api-keys/revoke', { api_key_id: id })).status, 200), 'api_key_revoked'],
      ['disabled', (id: string) => e.t.services.inferenceKeys.setDisabled(id, true), 'api_key_disabled'],
      ['deleted', async (id: string) => assert.equal((await portal('alice', 'DELETE', `/api-keys/${id}`)).status, 200), 'invalid_api_key'],
    ] as const;
    for (const [how, end, code] of cases) {
      const k = await keyRecord();
      const s = RawSession.open(e, { key: k.api_key });
      await s.opened;
      await s.next('session.created');
      await end(k.id);
      const closed = await s.closed;
      seen.push(JSON.stringify(s.events));
      assertError(
        s.events.find((x) => x.type === 'error'),
        code,
        null,
      );
      assert.equal(s.events.find((x) => x.type === 'error').error.type, 'authentication_error', how);
      assert.equal(closed.code, 1008, how);
    }
    // a session opened with a client secret ends with its key too
    const k = await keyRecord();
    const minted = await fetch(`${e.url}/v1/realtime/client_secrets`, {
      method: 'POST',
      headers: { authorization: `Bearer ${k.api_key}`, 'content-type': 'application/json' },
      body: '{}',
    });
    const secret = ((await minted.json()) as any).value as string;
    secrets.push(secret);
    const s = RawSession.open(e, { key: null, protocols: ['realtime', KEY_SUBPROTOCOL + secret] });
    await s.opened;
    await s.next('session.created');
    await portal('alice', 'POST', '/api-keys/revoke', { api_key_id: k.id });
    const closed = await s.closed;
    assertError(
      s.events.find((x) => x.type === 'error'),
      'api_key_revoked',
      null,
    );
    assert.equal(closed.code, 1008);
    seen.push(JSON.stringify(s.events));
  });

  test('no key and no client secret in the log, in an error or in a usage row', async () => {
    // a session opened with a client secret that makes a response (a usage row), and a refused one
    const k = await keyRecord();
    const minted = await fetch(`${e.url}/v1/realtime/client_secrets`, {
      method: 'POST',
      headers: { authorization: `Bearer ${k.api_key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ session: { instructions: 'Be brief.' } }),
    });
    const secret = ((await minted.json()) as any).value as string;
    secrets.push(secret);
    const s = RawSession.open(e, { key: null, protocols: ['realtime', KEY_SUBPROTOCOL + secret] });
    await s.opened;
    await s.next('session.created');
    e.up.script({ text: 'Sure.' });
    s.send({ type: 'session.update', session: { output_modalities: ['text'] } });
    s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi.' }] } });
    s.send({ type: 'response.create' });
    assert.equal((await s.next('response.done')).response.status, 'completed');
    s.send('not json');
    await s.next('error');
    s.close();
    await s.closed;
    seen.push(JSON.stringify(s.events));
    const tampered = secret.slice(0, -5) + 'AAAAA';
    seen.push(JSON.stringify(await refusal(RawSession.open(e, { key: null, protocols: ['realtime', KEY_SUBPROTOCOL + tampered] }))));
    secrets.push(tampered);
    // the log has lines of this test (its response), so the check below reads a log that was written
    await waitFor(() => log.some((l) => l.includes('realtime turn')), { what: 'the turn logged' });
    const rows = await waitFor(
      async () => {
        const r = await e.t.core.db.db.selectFrom('usage_records').selectAll().execute();
        return r.length > 0 ? r : undefined;
      },
      { what: 'usage rows' },
    );
    const all = { log: log.join('\n'), seen: seen.join('\n'), rows: JSON.stringify(rows) };
    assert.ok(all.log.length > 1000 && all.seen.length > 100);
    for (const secret of secrets) {
      // the whole secret and its distinctive part (a key's random part, a client secret's sealed part)
      const parts = [secret, secret.slice(-24)];
      for (const p of parts) for (const [where, text] of Object.entries(all)) assert.ok(!text.includes(p), `a secret (${secret.slice(0, 6)}...) in the ${where}`);
    }
  });
});
