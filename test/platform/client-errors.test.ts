// Errors Node's HTTP parser meets before there is a request (issue 22 §7, "A 431 has an empty body"): headers over
// the limit, bytes that are not HTTP, a request that does not arrive in time. Each is answered in the OpenAI error
// shape, with a content-length that is right and `connection: close`, on the test app and on `portico serve`.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { pgliteTemplate } from '../helpers/db-template.js';

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Sends `raw` on a new connection and gives what the server answered once it closed the connection. */
function exchange(url: string, raw: string): Promise<Answer> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const sock = net.connect(Number(port), hostname, () => sock.write(raw));
    const chunks: Buffer[] = [];
    sock.on('data', (d) => chunks.push(d));
    sock.on('error', () => {}); // a reset after the answer: what came is what counts
    sock.on('close', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const end = text.indexOf('\r\n\r\n');
      if (end < 0) return reject(new Error(`no complete head in ${JSON.stringify(text.slice(0, 300))}`));
      const [statusLine = '', ...lines] = text.slice(0, end).split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of lines) {
        const i = l.indexOf(':');
        headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
      }
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body: text.slice(end + 4) });
    });
  });
}

/** The OpenAI error shape, its code, a content-length that is the body's, and the connection closed. */
function assertOpenAIError(a: Answer, status: number, code: string) {
  assert.equal(a.status, status, JSON.stringify(a));
  assert.equal(a.headers['connection'], 'close');
  assert.match(a.headers['content-type'] ?? '', /^application\/json/);
  assert.equal(Number(a.headers['content-length']), Buffer.byteLength(a.body));
  const parsed = JSON.parse(a.body) as { error: Record<string, unknown> };
  assert.deepEqual(Object.keys(parsed), ['error']);
  assert.deepEqual(Object.keys(parsed.error).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(parsed.error.code, code);
  assert.equal(parsed.error.type, 'invalid_request_error');
  assert.equal(parsed.error.param, null);
  assert.ok(typeof parsed.error.message === 'string' && parsed.error.message.length > 0);
}

const OVERSIZED = `GET /v1/models HTTP/1.1\r\nhost: x\r\nx-filler: ${'a'.repeat(20_000)}\r\n\r\n`;
const MALFORMED = 'THIS IS NOT HTTP\r\n\r\n';

describe('client errors before a request: the OpenAI error shape', () => {
  let t: TestApp & { url?: string };
  before(async () => {
    t = await buildTestApp({ listen: true, models: [], env: { HEADERS_TIMEOUT_MS: '1000', REQUEST_TIMEOUT_MS: '2000' } });
  });
  after(() => t.close());

  test('headers over the limit: 431 request_header_fields_too_large with a JSON body', async () => {
    assertOpenAIError(await exchange(t.url!, OVERSIZED), 431, 'request_header_fields_too_large');
  });

  test('a request line that is not HTTP: 400 malformed_request with a JSON body', async () => {
    assertOpenAIError(await exchange(t.url!, MALFORMED), 400, 'malformed_request');
    // a bad header line too
    assertOpenAIError(await exchange(t.url!, 'GET / HTTP/1.1\r\nhost: x\r\nbad header\r\n\r\n'), 400, 'malformed_request');
  });

  test('headers that never end: 408 request_timeout with a JSON body once HEADERS_TIMEOUT_MS is past', async () => {
    assertOpenAIError(await exchange(t.url!, 'GET /v1/models HTTP/1.1\r\nhost: x\r\n'), 408, 'request_timeout');
  });

  test('on a kept-alive connection, after a complete answer: that answer, then the 400, each whole', async () => {
    const { hostname, port } = new URL(t.url!);
    const text = await new Promise<string>((resolve) => {
      const sock = net.connect(Number(port), hostname, () => sock.write('GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n'));
      let got = '';
      let sent = false;
      sock.on('data', (d) => {
        got += d.toString('utf8');
        // the first answer is whole (its JSON body ended): now bytes that are not HTTP on the same connection
        if (!sent && /\r\n\r\n\{.*\}$/s.test(got)) {
          sent = true;
          sock.write('NOT HTTP\r\n\r\n');
        }
      });
      sock.on('error', () => {});
      sock.on('close', () => resolve(got));
    });
    const heads = text.match(/HTTP\/1\.1 \d{3}/g) ?? [];
    assert.deepEqual(heads, ['HTTP/1.1 200', 'HTTP/1.1 400'], text);
    assert.match(text, /"code":"malformed_request"/);
  });
});

describe('client errors before a request on `portico serve`', () => {
  let dir: string;
  let child: ReturnType<typeof spawn>;
  let url: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'portico-client-errors-'));
    child = spawn(process.execPath, ['dist/src/cli/main.js', 'serve'], {
      env: { ...process.env, DATA_DIR: dir, PORT: '0', HOST: '127.0.0.1', PORTICO_DB: 'memory', LOG_LEVEL: 'info', PORTICO_PGLITE_TEMPLATE: await pgliteTemplate() },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    url = await new Promise<string>((resolve, reject) => {
      let buf = '';
      child.stdout!.on('data', (d) => {
        buf += d;
        const m = /Portico listening on (http:\/\/[^\s,]+)/.exec(buf);
        if (m) resolve(m[1]!);
      });
      child.once('exit', (code) => reject(new Error(`serve exited (${code}): ${buf}`)));
    });
  });
  after(async () => {
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
    rmSync(dir, { recursive: true, force: true });
  });

  test('431 and 400 come with a JSON body in the OpenAI shape and connection: close', async () => {
    assertOpenAIError(await exchange(url, OVERSIZED), 431, 'request_header_fields_too_large');
    assertOpenAIError(await exchange(url, MALFORMED), 400, 'malformed_request');
  });
});
