// Shutdown (issue 9, §6): `portico serve` with a stream on an upstream that hangs. SIGTERM: past the grace period
// the stream gets a final error event before it closes, what was generated is charged (a usage row), and the
// process exits within the grace period plus its margin. A second SIGTERM exits at once. A client that asks for
// `Connection: close` has its connection closed after a streamed answer.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { waitFor } from '../helpers/wait.js';
import { pgliteTemplate } from '../helpers/db-template.js';
import { signToken } from '../../src/platform/auth/jwt.js';
import { createCore } from '../../src/compose/core.js';
import { loadConfig } from '../../src/platform/config.js';
import { setup } from '../responses/util.js';

const CLI = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const SECRET = 'shutdown-test-secret-0123456789abcdef0123456789';
const dirs: string[] = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

interface Served {
  proc: ChildProcess;
  url: string;
  key: string;
  dataDir: string;
  out: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>;
}

async function serve(up: ScriptedUpstream, graceMs: number): Promise<Served> {
  const dataDir = mkdtempSync(join(tmpdir(), 'portico-shutdown-'));
  dirs.push(dataDir);
  const config = join(dataDir, 'models.yaml');
  writeFileSync(config, JSON.stringify({ models: [{ name: 'hang', provider: 'openai-compatible', base_url: up.url, type: 'text' }] }));
  // output piped, as the test driver of the issue had it
  const proc = spawn(process.execPath, [CLI, 'serve'], {
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      DATA_DIR: dataDir,
      PORT: '0',
      LOG_LEVEL: 'info',
      JWT_SECRET: SECRET,
      PORTICO_CONFIG: config,
      SHUTDOWN_GRACE_MS: String(graceMs),
      PORTICO_PGLITE_TEMPLATE: await pgliteTemplate(),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((r) => proc.once('exit', (code, signal) => r({ code, signal, at: Date.now() })));
  const url = await new Promise<string>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`server did not start: ${out}`)), 60_000);
    const check = () => {
      const m = /Portico listening on (http:\/\/[^\s"]+?)[ "]/.exec(out);
      if (m) {
        clearTimeout(t);
        resolve(m[1]!);
      }
    };
    proc.stdout!.on('data', check);
    void exited.then(({ code }) => reject(new Error(`server exited ${code}: ${out}`)));
  });
  const jwt = await signToken(new TextEncoder().encode(SECRET), { userId: 'alice', ttlSeconds: 600 });
  const res = await fetch(url + '/v1/portal/api-keys', { method: 'POST', headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' }, body: '{"name":"k"}' });
  assert.equal(res.status, 200);
  const key = (await res.json()).data.api_key as string;
  return { proc, url, key, dataDir, out: () => out, exited };
}

/** starts a stream on the hanging upstream and returns its text so far (a live view) once two deltas arrived */
async function hangingStream(s: Served) {
  const res = await fetch(s.url + '/v1/responses', {
    method: 'POST',
    headers: { authorization: `Bearer ${s.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'hang', input: 'hi', stream: true }),
  });
  assert.equal(res.status, 200);
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  const state = { text: '', ended: false, error: undefined as unknown };
  const done = (async () => {
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        state.text += dec.decode(value);
      }
      state.ended = true;
    } catch (e) {
      state.error = e;
    }
  })();
  const t0 = Date.now();
  while ((state.text.match(/response\.output_text\.delta/g) ?? []).length < 2) {
    if (Date.now() - t0 > 10_000) throw new Error(`no deltas: ${state.text}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return { state, done };
}

test('SIGTERM past the grace period: a final error event, the usage charged, exit within the grace period', async () => {
  const up = await startScriptedUpstream();
  const graceMs = 1500;
  const s = await serve(up, graceMs);
  try {
    // a stream whose upstream sends two pieces (after the role chunk) and then hangs for ever
    up.script({ text: ['Hello', ' there', ' never'], hangAfter: 3 });
    const { state, done } = await hangingStream(s);
    const t0 = Date.now();
    s.proc.kill('SIGTERM');
    const exit = await s.exited;
    const took = exit.at - t0;
    await done;
    assert.ok(took < graceMs + 5000, `exited ${took} ms after SIGTERM (grace ${graceMs} ms)`);
    assert.ok(took >= graceMs - 100, `the stream had its grace period (${took} ms)`);
    assert.equal(exit.code, 0, s.out().slice(-2000));
    assert.match(state.text, /event: error\ndata: \{[^\n]*"code":"service_unavailable"[^\n]*shutting down/, state.text.slice(-600));
    // it ends as any failure after output does: response.failed after the error event (then the stream's end)
    assert.match(state.text, /event: error\n[^\n]*\n\nevent: response\.failed\ndata: \{[^\n]*"status":"failed"/, state.text.slice(-1200));
    assert.ok(state.ended, `the stream ended cleanly after its error event: ${String(state.error)}`);
    const id = /"type":"response\.created"[^\n]*?"id":"(resp_[^"]+)"/.exec(state.text)?.[1];
    assert.ok(id, 'the response id of response.created');
    // what was generated is charged: the usage row (shipped from the journal if the database was closing)
    const core = await createCore(loadConfig({ DATA_DIR: s.dataDir, JWT_SECRET: SECRET, LOG_LEVEL: 'silent', DATABASE_URL: '', PORTICO_DB: '' }), { role: 'serve', models: [] });
    try {
      const rows = await core.db.db.selectFrom('usage_records').selectAll().where('model', '=', 'hang').execute();
      assert.equal(rows.length, 1, JSON.stringify(rows));
      assert.ok(rows[0]!.output_tokens >= 1 && rows[0]!.input_tokens >= 1, JSON.stringify(rows[0]));
      // and stored, as failed: GET /v1/responses/{id} of the id response.created gave finds it
      const stored = await core.db.db.selectFrom('responses').selectAll().where('id', '=', id!).execute();
      assert.equal(stored.length, 1, `the stopped response is stored (${id})`);
      assert.match(JSON.stringify(stored[0]), /"failed"/);
    } finally {
      await core.close();
    }
    assert.match(s.out(), /streams still running at the end of the shutdown grace period/);
  } finally {
    s.proc.kill('SIGKILL');
    await up.close();
  }
});

test('a second SIGTERM exits at once, a long grace period or not', async () => {
  const up = await startScriptedUpstream();
  const s = await serve(up, 60_000);
  try {
    up.script({ text: ['Hello', ' there', ' never'], hangAfter: 3 });
    const { done } = await hangingStream(s);
    s.proc.kill('SIGTERM');
    // the first signal was taken (its log line), not a guess at how long that takes
    await waitFor(() => /shutting down/.test(s.out()), { what: 'the shutdown to start' });
    assert.equal(s.proc.exitCode, null, 'still draining after the first SIGTERM');
    const t0 = Date.now();
    s.proc.kill('SIGTERM');
    const exit = await s.exited;
    // "at once" against the clock the server itself uses: far inside its 60 s grace period (a busy machine's slack)
    assert.ok(exit.at - t0 < 20_000, `exited ${exit.at - t0} ms after the second SIGTERM (grace 60 s)`);
    assert.equal(exit.code, 1);
    await done;
  } finally {
    s.proc.kill('SIGKILL');
    await up.close();
  }
});

test('Connection: close asked by the client is honoured on a streamed answer', async () => {
  const env = await setup('pglite');
  try {
    const { hostname, port } = new URL(env.url);
    const body = JSON.stringify({ model: 'gpt-test', input: 'hi', stream: true });
    const sock = net.connect(Number(port), hostname);
    let data = '';
    sock.on('data', (d) => (data += d));
    const closed = new Promise<number>((r) => sock.on('close', () => r(Date.now())));
    sock.write(
      `POST /v1/responses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${env.key}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    const t0 = Date.now();
    const at = await Promise.race([closed, new Promise<number>((r) => setTimeout(() => r(-1), 5000))]);
    assert.ok(at > 0, `the server kept the connection open: ${data.slice(0, 300)}`);
    assert.ok(at - t0 < 5000);
    assert.match(data, /^HTTP\/1\.1 200/);
    assert.match(data, /\r\nconnection: close\r\n/i);
    assert.match(data, /response\.completed/);
    sock.destroy();
  } finally {
    await env.close();
  }
});
