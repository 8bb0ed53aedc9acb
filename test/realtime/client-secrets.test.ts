/**
 * Client secrets of the Realtime API (POST /v1/realtime/client_secrets, `ek_...`): minted from a key with the
 * session a browser may open, given as the `openai-insecure-api-key.` subprotocol (or a Bearer on /v1/realtime),
 * refused everywhere else; they expire, stop with their key (revoked, disabled, deleted), cannot be forged or
 * tampered with, and cannot mint another. The sealing itself (ClientSecrets) is tested with a clock of its own.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ClientSecrets } from '../../src/portal/keys/client-secrets.js';
import { AppError } from '../../src/platform/errors.js';
import { KEY_SUBPROTOCOL } from '../../src/platform/http/auth.js';
import { RawSession, assertError, setupRealtime, type RtEnv, portal as portalCall, keyRecord as newKey } from './util.js';
import { waitFor } from '../helpers/wait.js';
import { WebSocket } from 'ws';

const refusedWith = (code: string) => (e: unknown) => e instanceof AppError && e.code === code;

describe('ClientSecrets: sealing, expiry against a given clock, forgery', () => {
  const T = Date.UTC(2026, 0, 1);
  const secrets = new ClientSecrets('pepper-0123456789abcdef0123456789abcdef');

  test('opens what it minted until its expiry (exclusive), to the second', async () => {
    const { value, expiresAt } = await secrets.mint('digest-1', { session: { model: 'gpt-realtime' } }, 10, T);
    assert.match(value, /^ek_/);
    assert.equal(expiresAt, T / 1000 + 10);
    assert.ok(!value.includes('digest-1'), 'the digest is sealed, not readable');
    const opened = await secrets.open(value, T + 9_999);
    assert.deepEqual(opened, { digest: 'digest-1', payload: { session: { model: 'gpt-realtime' } }, expiresAt: T / 1000 + 10 });
    await assert.rejects(secrets.open(value, T + 10_000), refusedWith('client_secret_expired'));
    await assert.rejects(secrets.open(value, T + 3_600_000), refusedWith('client_secret_expired'));
  });

  test('a secret of another pepper, a tampered one, garbage and API keys are invalid_api_key', async () => {
    const { value } = await secrets.mint('digest-1', {}, 600, T);
    const foreign = await new ClientSecrets('another-pepper-0123456789abcdef012345678').mint('digest-1', {}, 600, T);
    await assert.rejects(secrets.open(foreign.value, T), refusedWith('invalid_api_key'));
    // one character changed in each of the JWE's parts
    const parts = value.slice(3).split('.');
    for (let i = 0; i < parts.length; i++) {
      if (!parts[i]) continue;
      const p = [...parts];
      const c = p[i]![5] === 'A' ? 'B' : 'A';
      p[i] = p[i]!.slice(0, 5) + c + p[i]!.slice(6);
      await assert.rejects(secrets.open('ek_' + p.join('.'), T), refusedWith('invalid_api_key'), `part ${i}`);
    }
    for (const bad of ['ek_', 'ek_garbage', 'ek_a.b.c.d.e', 'sk-abc', value.slice(3), 'ek_' + 'A'.repeat(70_000)]) {
      await assert.rejects(secrets.open(bad, T), refusedWith('invalid_api_key'), bad.slice(0, 20));
    }
  });
});

describe('realtime client secrets (pglite)', () => {
  let e: RtEnv;
  const portal = (user: string, method: string, path: string, body?: unknown) => portalCall(e, user, method, path, body);
  const keyRecord = (user = 'alice', scopes?: string[]) => newKey(e, user, scopes);
  const mint = (key: string, body: unknown = {}) =>
    fetch(`${e.url}/v1/realtime/client_secrets`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const secretOf = async (key: string, body: unknown = {}) => {
    const r = await mint(key, body);
    assert.equal(r.status, 200, await r.clone().text());
    return (await r.json()) as any;
  };
  const withSecret = (secret: string, query?: string) => RawSession.open(e, { key: null, query, protocols: ['realtime', KEY_SUBPROTOCOL + secret] });
  const refusal = async (s: RawSession) => {
    const err: any = await s.opened.then(
      () => undefined,
      (x) => x,
    );
    assert.ok(err?.status, 'the upgrade was refused');
    return { status: err.status as number, error: JSON.parse(err.body).error };
  };

  before(async () => {
    e = await setupRealtime();
  });
  after(() => e.close());

  test("minted in OpenAI's shape; the session opened with it is the one configured, given as the subprotocol", async () => {
    const body = await secretOf(e.key, {
      expires_after: { anchor: 'created_at', seconds: 120 },
      session: { type: 'realtime', instructions: 'Talk like a pirate.', audio: { output: { voice: 'echo' } } },
    });
    assert.match(body.value, /^ek_/);
    const now = Date.now() / 1000;
    assert.ok(Math.abs(body.expires_at - (now + 120)) < 5, `expires_at ${body.expires_at}`);
    assert.equal(body.session.object, 'realtime.session');
    assert.equal(body.session.type, 'realtime');
    assert.equal(body.session.model, 'gpt-realtime');
    assert.equal(body.session.instructions, 'Talk like a pirate.');
    assert.equal(body.session.audio.output.voice, 'echo');
    assert.match(body.session.id, /^sess_/);
    // the default life is 600 s
    const plain = await secretOf(e.key);
    assert.ok(Math.abs(plain.expires_at - (now + 600)) < 5);

    const s = withSecret(body.value);
    await s.opened;
    assert.equal(s.ws.protocol, 'realtime', 'the server answers the realtime subprotocol');
    const created = (await s.next('session.created')).session;
    assert.equal(created.instructions, 'Talk like a pirate.');
    assert.equal(created.audio.output.voice, 'echo');
    assert.equal(created.model, 'gpt-realtime');
    // it works: a response on the key's behalf
    e.up.script({ text: 'Arr.' });
    s.send({ type: 'session.update', session: { output_modalities: ['text'] } });
    await s.next('session.updated');
    s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi.' }] } });
    s.send({ type: 'response.create' });
    assert.equal((await s.next('response.done')).response.status, 'completed');
    s.close();
    // the secret opens more than one session until it expires; as a Bearer on /v1/realtime too (a server-side client)
    const again = RawSession.open(e, { key: body.value });
    await again.opened;
    assert.equal((await again.next('session.created')).session.instructions, 'Talk like a pirate.');
    again.close();
  });

  test("a secret's model and type hold: a transcription secret opens a transcription session; another ?model= is refused", async () => {
    const t = await secretOf(e.key, { session: { type: 'transcription', audio: { input: { transcription: { model: 'whisper-1', language: 'en' } } } } });
    assert.equal(t.session.type, 'transcription');
    assert.equal(t.session.object, 'realtime.transcription_session');
    const s = withSecret(t.value);
    await s.opened;
    const created = (await s.next('session.created')).session;
    assert.equal(created.type, 'transcription');
    assert.deepEqual(created.audio.input.transcription, { model: 'whisper-1', language: 'en' });
    s.close();

    const m = await secretOf(e.key, { session: { model: 'gpt-realtime-mini' } });
    assert.equal(m.session.model, 'gpt-realtime-mini');
    const ok = withSecret(m.value);
    await ok.opened;
    assert.equal((await ok.next('session.created')).session.model, 'gpt-realtime-mini');
    ok.close();
    const other = withSecret(m.value, 'model=gpt-realtime');
    await other.opened;
    const closed = await other.closed;
    assertError(
      other.events.find((x) => x.type === 'error'),
      'validation_error',
      'model',
    );
    assert.equal(closed.code, 1008);
  });

  test('a client secret is refused as a Bearer on every other route (401, it opens realtime sessions only), and cannot mint another', async () => {
    const { value } = await secretOf(e.key);
    const h = { authorization: `Bearer ${value}`, 'content-type': 'application/json' };
    const calls: Array<[string, string, unknown?]> = [
      ['GET', '/v1/models'],
      ['POST', '/v1/chat/completions', { model: 'answerer', messages: [{ role: 'user', content: 'hi' }] }],
      ['POST', '/v1/responses', { model: 'answerer', input: 'hi' }],
      ['POST', '/v1/embeddings', { model: 'answerer', input: 'hi' }],
      ['POST', '/v1/audio/speech', { model: 'tts-1', voice: 'alloy', input: 'hi' }],
      ['POST', '/v1/realtime/client_secrets', {}],
    ];
    const n = e.up.requests.length;
    for (const [method, path, body] of calls) {
      const r = await fetch(`${e.url}${path}`, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
      assert.equal(r.status, 401, `${method} ${path}`);
      const err = ((await r.json()) as any).error;
      assert.equal(err.code, 'invalid_api_key', `${method} ${path}`);
      assert.match(err.message, /client secret .* opens a realtime session only/, `${method} ${path}`);
      assert.ok(!err.message.includes(value));
    }
    // the WebSocket mode of the Responses API is no browser socket either
    const ws = await new Promise<number>((resolve) => {
      const sock = new WebSocket(`${e.url.replace('http', 'ws')}/v1/responses`, { headers: { authorization: `Bearer ${value}` } });
      sock.once('unexpected-response', (_q, res) => resolve(res.statusCode ?? 0));
      sock.once('open', () => resolve(101));
      sock.once('error', () => {});
    });
    assert.equal(ws, 401);
    assert.equal(e.up.requests.length, n, 'nothing reached the text model');
  });

  test('expired: a secret past its expires_at is refused at the upgrade (401 client_secret_expired)', async () => {
    const key = await keyRecord();
    // minted as the server mints it, a minute ago, for 10 s (no sleep: the clock is given)
    const sealer = new ClientSecrets(e.t.config.keyPepper);
    const digest = e.t.services.verifier.digestOf(key.api_key);
    const old = await sealer.mint(digest, { session: { type: 'realtime', model: 'gpt-realtime' } }, 10, Date.now() - 60_000);
    const r = await refusal(withSecret(old.value));
    assert.equal(r.status, 401);
    assert.equal(r.error.code, 'client_secret_expired');
    // the same minted now opens a session: only its age refused it
    const fresh = await sealer.mint(digest, { session: { type: 'realtime', model: 'gpt-realtime' } }, 10);
    const s = withSecret(fresh.value);
    await s.opened;
    await s.next('session.created');
    s.close();
  });

  test('a secret stops working with its key: revoked, disabled, deleted', async () => {
    const revoke = async (id: string) => assert.equal((await portal('alice', 'POST', '/api-keys/revoke', { api_key_id: id })).status, 200);
    const disable = (id: string) => e.t.services.inferenceKeys.setDisabled(id, true);
    const remove = async (id: string) => assert.equal((await portal('alice', 'DELETE', `/api-keys/${id}`)).status, 200);
    for (const [how, end, code] of [
      ['revoked', revoke, 'api_key_revoked'],
      ['disabled', disable, 'api_key_disabled'],
      ['deleted', remove, 'invalid_api_key'],
    ] as const) {
      const k = await keyRecord();
      const { value } = await secretOf(k.api_key);
      const s = withSecret(value);
      await s.opened;
      await s.next('session.created');
      s.close();
      await end(k.id);
      const r = await waitFor(
        async () => {
          const x = withSecret(value);
          const res = await x.opened.then(
            () => (x.close(), undefined),
            (err) => err,
          );
          return res;
        },
        { what: `the secret of a ${how} key refused` },
      );
      assert.equal(r.status, 401, how);
      assert.equal(JSON.parse(r.body).error.code, code, how);
    }
  });

  test('a tampered or foreign secret is 401 invalid_api_key at the upgrade', async () => {
    const { value } = await secretOf(e.key);
    const i = 40;
    const tampered = value.slice(0, i) + (value[i] === 'A' ? 'B' : 'A') + value.slice(i + 1);
    const foreign = (await new ClientSecrets('someone-elses-pepper-0123456789abcdef0123').mint(e.t.services.verifier.digestOf(e.key), {}, 600)).value;
    for (const bad of [tampered, foreign, 'ek_nothing', 'ek_']) {
      const r = await refusal(withSecret(bad));
      assert.equal(r.status, 401, bad.slice(0, 12));
      assert.equal(r.error.code, 'invalid_api_key');
      if (bad.length > 20) assert.ok(!JSON.stringify(r.error).includes(bad.slice(3, 40)), 'the secret is not echoed');
    }
  });

  test('bad bodies are 400 with the field; a key without the realtime scope cannot mint', async () => {
    const cases: Array<[unknown, number, string | undefined]> = [
      [{ expires_after: { seconds: 9 } }, 400, undefined],
      [{ expires_after: { seconds: 7201 } }, 400, undefined],
      [{ expires_after: { seconds: 10.5 } }, 400, undefined],
      [{ expires_after: { seconds: 'ten' } }, 400, undefined],
      [{ expires_after: { anchor: 'now', seconds: 60 } }, 400, undefined],
      [{ expires_after: { seconds: 60, extra: 1 } }, 400, undefined],
      [{ colour: 'blue' }, 400, undefined],
      [{ session: 'realtime' }, 400, undefined],
      [{ session: { type: 'chat' } }, 400, 'session.type'],
      [{ session: { model: 5 } }, 400, 'session.model'],
      [{ session: { colour: 'blue' } }, 400, 'session.colour'],
      [{ session: { audio: { output: { voice: 'nobody' } } } }, 400, 'session.audio.output.voice'],
      [{ session: { tool_choice: { type: 'function', name: 'ghost' } } }, 400, 'session.tool_choice.name'],
      [{ session: { audio: { input: { format: { type: 'audio/mp3' } } } } }, 400, 'session.audio.input.format.type'],
      [{ session: { audio: { input: { transcription: { model: 'no-such-recognizer' } } } } }, 404, undefined],
      [{ session: { model: 'no-such-model' } }, 404, undefined],
      [{ session: { model: 'answerer' } }, 404, undefined],
    ];
    for (const [body, status, param] of cases) {
      const r = await mint(e.key, body);
      const text = await r.text();
      assert.equal(r.status, status, `${JSON.stringify(body)}: ${text}`);
      const err = JSON.parse(text).error;
      assert.equal(typeof err.message, 'string');
      if (param) assert.equal(err.param, param, JSON.stringify(body));
      if (status === 404) assert.equal(err.code, 'model_not_found');
    }
    const r = await fetch(`${e.url}/v1/realtime/client_secrets`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e.key}`, 'content-type': 'application/json' },
      body: '{not json',
    });
    assert.equal(r.status, 400);
    const chatOnly = await keyRecord('alice', ['chat']);
    const denied = await mint(chatOnly.api_key, {});
    assert.equal(denied.status, 403);
    assert.equal(((await denied.json()) as any).error.code, 'insufficient_scope');
    const limited = await keyRecord('alice', ['realtime', 'model:gpt-realtime-mini']);
    const other = await mint(limited.api_key, {});
    assert.equal(other.status, 403, 'the default model gpt-realtime is not one of its models');
    assert.equal((await mint(limited.api_key, { session: { model: 'gpt-realtime-mini' } })).status, 200);
    const none = await fetch(`${e.url}/v1/realtime/client_secrets`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.equal(none.status, 401);
  });
});
