// An upstream that echoes the credentials it received in every error it can give (before the answer, mid-stream,
// on text and audio) must never get them to a client, a stored response or a log line: every form Portico sends
// (the key raw and as Bearer, a base_url's user and password, the Basic header's base64) is replaced by ***.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import type { ModelSpec } from '../../src/models/config.js';
import { upstreamSecrets, redactSecrets } from '../../src/engines/shared/redact.js';

const KEY = 'sk-upstream-SECRET-key-0123456789';
const USER = 'svc-user';
const PASS = 'p@ss:w0rd/secret';
const basic = Buffer.from(`${USER}:${PASS}`).toString('base64');
const FORMS = [KEY, PASS, encodeURIComponent(PASS), basic, basic.replace(/=+$/, ''), Buffer.from(`${USER}:${PASS}`).toString('base64url')];

let mode = 'status:400';

/** Answers every request with its own credentials in the error text, the way `mode` says. */
function echoingUpstream(): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const auth = req.headers.authorization ?? '';
      const decoded = auth.startsWith('Basic ') ? Buffer.from(auth.slice(6), 'base64').toString() : '';
      const echo = `you sent "${auth}" (decoded ${decoded}; raw ${auth.replace(/^Bearer /, '')}; url-encoded ${encodeURIComponent(decoded.split(':').slice(1).join(':'))})`;
      const [kind, arg] = mode.split(':');
      if (kind === 'status') {
        res.writeHead(Number(arg), { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: `bad request: ${echo}`, type: 'invalid_request_error', param: null, code: null } }));
        return;
      }
      if (kind === 'text') {
        res.writeHead(Number(arg), { 'content-type': 'text/plain' });
        res.end(`plain failure ${echo}`);
        return;
      }
      // mid-stream: one text chunk, then an error event carrying the echo
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const chunk = {
        id: 'c1',
        object: 'chat.completion.chunk',
        created: 1,
        model: 'm',
        choices: [{ index: 0, delta: { role: 'assistant', content: 'Hel' }, finish_reason: null }],
      };
      res.write(`data: ${JSON.stringify(chunk)}\n\n`);
      res.end(`data: ${JSON.stringify({ error: { message: `upstream exploded: ${echo}`, type: 'server_error', code: 'boom' } })}\n\n`);
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as AddressInfo).port;
      resolve({ url: `http://127.0.0.1:${port}`, close: () => new Promise((r) => (server.closeAllConnections(), server.close(() => r()))) });
    }),
  );
}

function assertClean(text: string, where: string) {
  for (const f of FORMS) assert.ok(!text.includes(f), `${where} leaks ${JSON.stringify(f)}: ${text.slice(0, 600)}`);
}

describe('upstream credentials never reach a client, a stored response or a log', () => {
  let up: { url: string; close(): Promise<void> };
  let t: TestApp & { url?: string };
  let key: string;
  const logs: string[] = [];

  before(async () => {
    up = await echoingUpstream();
    const userinfo = `${encodeURIComponent(USER)}:${encodeURIComponent(PASS)}`;
    const models = [
      { name: 'keyed', provider: 'openai-compatible', base_url: `${up.url}/v1`, api_key_env: 'ECHO_KEY', type: 'text' },
      { name: 'basic', provider: 'openai-compatible', base_url: `${up.url.replace('//', `//${userinfo}@`)}/v1`, type: 'text' },
      { name: 'keyed-speech', provider: 'openai-compatible', base_url: `${up.url}/v1`, api_key_env: 'ECHO_KEY', type: 'speech' },
      { name: 'basic-stt', provider: 'openai-compatible', base_url: `${up.url.replace('//', `//${userinfo}@`)}/v1`, type: 'transcription' },
    ] as ModelSpec[];
    process.env.ECHO_KEY = KEY;
    const sink = new Writable({ write: (c, _e, cb) => (logs.push(c.toString()), cb()) });
    t = await buildTestApp({ models, listen: true, logDestination: sink, env: { LOG_LEVEL: 'info' } });
    key = await t.inferenceKey('alice');
  });
  after(async () => {
    delete process.env.ECHO_KEY;
    await t?.close();
    await up?.close();
  });

  const post = async (path: string, body: unknown) => {
    const r = await fetch(`${t.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: r.status, text: await r.text() };
  };

  test('the redaction covers every form of both kinds of credential', () => {
    const secrets = upstreamSecrets(`http://${encodeURIComponent(USER)}:${encodeURIComponent(PASS)}@h/v1`, KEY);
    const text = FORMS.join(' | ') + ` Bearer ${KEY} Basic ${basic}`;
    const out = redactSecrets(text, secrets);
    assertClean(out, 'redacted text');
    assert.match(out, /\*\*\*/);
    assert.equal(redactSecrets('nothing secret here', secrets), 'nothing secret here');
  });

  for (const model of ['keyed', 'basic']) {
    for (const m of ['status:400', 'status:404', 'status:422', 'status:429', 'status:500', 'text:502', 'midstream']) {
      test(`${model}, upstream ${m}: the error, stored or streamed, carries no credential`, async () => {
        mode = m;
        const plain = await post('/v1/responses', { model, input: 'hi', store: true });
        assert.ok(plain.status >= 400 || /"failed"|"error"/.test(plain.text), `${plain.status} ${plain.text.slice(0, 200)}`);
        assertClean(plain.text, `${model} ${m} JSON`);
        const stream = await post('/v1/responses', { model, input: 'hi', stream: true, store: true });
        assertClean(stream.text, `${model} ${m} stream`);
        const id = /"id":"(resp_[0-9a-f]+)"/.exec(stream.text)?.[1];
        if (id) {
          const stored = await fetch(`${t.url}/v1/responses/${id}`, { headers: { authorization: `Bearer ${key}` } });
          assertClean(await stored.text(), `${model} ${m} stored`);
        }
      });
    }
  }

  test('audio: speech and transcription errors carry no credential', async () => {
    for (const m of ['status:400', 'status:500', 'text:502']) {
      mode = m;
      const speech = await post('/v1/audio/speech', { model: 'keyed-speech', input: 'hello', voice: 'alloy' });
      assert.ok(speech.status >= 400);
      assertClean(speech.text, `speech ${m}`);
      const fd = new FormData();
      fd.append('model', 'basic-stt');
      fd.append('file', new Blob([new Uint8Array(Buffer.alloc(2000))]), 'a.wav');
      const r = await fetch(`${t.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: fd });
      const text = await r.text();
      assert.ok(r.status >= 400);
      assertClean(text, `transcription ${m}`);
    }
  });

  test('and nothing in the log lines', () => {
    assert.ok(logs.length > 10);
    assertClean(logs.join('\n'), 'log');
  });
});
