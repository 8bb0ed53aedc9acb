/**
 * Requests the client abandons (docs/operations.md, "Logs" and "Metrics"): each leaves exactly one request line
 * (status 499, `outcome: "client_closed"`), one count in the HTTP and per-model series, and its usage record under
 * the same request id, whatever the endpoint and whenever the client left: before the first byte of the answer,
 * mid-stream, or while its body was still coming. A request that was answered and whose connection closed after
 * is logged once, with its own status.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import http from 'node:http';
import { Writable } from 'node:stream';
import { once } from 'node:events';
import { metricValue } from '../helpers/metrics.js';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { startScriptedAudioUpstream, tone, type ScriptedAudioUpstream } from '../helpers/scripted-audio-upstream.js';
import type { ModelSpec } from '../../src/models/config.js';
import type { FeatureModule } from '../../src/platform/module.js';
import { clientGone } from '../../src/platform/http/client-gone.js';
import { SseWriter } from '../../src/platform/http/sse.js';
import { openWs } from '../responses/ws-util.js';
import { waitFor } from '../helpers/wait.js';

type Line = Record<string, unknown>;

/** A point where a request waits until the test lets it go (a key check or a database read that takes its time). */
function holdPoint() {
  const h = { reached: undefined as unknown as () => void, release: undefined as unknown as () => void, over: undefined as unknown as () => void };
  const reached = new Promise<void>((r) => (h.reached = r));
  const released = new Promise<void>((r) => (h.release = r));
  const over = new Promise<void>((r) => (h.over = r));
  return { ...h, reachedP: reached, releasedP: released, overP: over };
}

/**
 * Two routes that wait where the test says: /test/held in its preHandler (before the handler starts), and
 * /test/late in its handler, before it looks for the client (as a service that prepares a request first does).
 */
function heldRoutes() {
  const before = { ...holdPoint(), ran: false };
  const inside = { ...holdPoint(), gone: undefined as boolean | undefined, sseClosed: undefined as boolean | undefined };
  const module: FeatureModule = {
    name: 'held',
    routes: {
      root: (app) => {
        app.post(
          '/test/held',
          {
            preHandler: async () => {
              before.reached();
              await before.releasedP;
            },
            onError: async () => before.over(),
          },
          async () => {
            before.ran = true;
            before.over();
            return { ok: true };
          },
        );
        app.post('/test/late', async (req, reply) => {
          inside.reached();
          await inside.releasedP;
          const gone = clientGone(reply);
          const sse = new SseWriter(req, reply);
          inside.gone = gone.signal.aborted;
          inside.sseClosed = sse.closed.aborted;
          gone.release();
          inside.over();
          throw new Error('client disconnected');
        });
      },
    },
  };
  return { before, inside, module };
}

describe('requests the client abandons: one line, one count, their usage', () => {
  let up: ScriptedUpstream;
  let audio: ScriptedAudioUpstream;
  let t: TestApp & { url?: string };
  let key: string;
  const held = heldRoutes();
  const raw: string[] = [];
  const lines = () => raw.map((l) => JSON.parse(l) as Line);
  const requestLines = (reqId: string) => lines().filter((l) => l.reqId === reqId && l.msg === 'request');
  /** waits for the request line of `reqId`, and checks there is exactly one */
  const lineOf = async (reqId: string): Promise<Line> => {
    const found = await waitFor(() => (requestLines(reqId).length ? requestLines(reqId) : undefined), { what: `the request line of ${reqId}` });
    assert.equal(found.length, 1, `one request line for ${reqId}: ${JSON.stringify(found)}`);
    return found[0]!;
  };
  const usageOf = async (reqId: string) => {
    await t.core.usage.flush();
    return t.core.db.db.selectFrom('usage_records').selectAll().where('request_id', '=', reqId).execute();
  };
  /** the server's side of the connection of the request `reqId`, once the server has read its headers */
  const serverSocketOf = (reqId: string) =>
    new Promise<net.Socket>((resolve) => {
      const onRequest = (req: http.IncomingMessage) => {
        if (req.headers['x-request-id'] !== reqId) return;
        t.app.server.off('request', onRequest);
        resolve(req.socket);
      };
      t.app.server.on('request', onRequest);
    });
  const scrape = () => t.runtime.scrape();
  const counts = async (route: string, model: string) => {
    const m = await scrape();
    return {
      http499: metricValue(m, 'portico_http_requests_total', { method: 'POST', route, status: '499' }) ?? 0,
      model: metricValue(m, 'portico_model_requests_total', { model, deployment: model }) ?? 0,
      closed: metricValue(m, 'portico_model_client_closed_total', { model, deployment: model }) ?? 0,
    };
  };

  before(async () => {
    up = await startScriptedUpstream();
    audio = await startScriptedAudioUpstream();
    const models = [
      { name: 'm1', provider: 'openai-compatible', base_url: up.url, type: 'text', retries: 0 },
      { name: 'emb', provider: 'openai-compatible', base_url: up.url, type: 'embeddings' },
      { name: 'tts', provider: 'openai-compatible', base_url: audio.baseUrl, type: 'speech' },
      { name: 'stt', provider: 'openai-compatible', base_url: audio.baseUrl, type: 'transcription' },
    ] as ModelSpec[];
    const sink = new Writable({ write: (c, _e, cb) => (raw.push(...c.toString().split('\n').filter(Boolean)), cb()) });
    t = await buildTestApp({ models, listen: true, logDestination: sink, env: { LOG_LEVEL: 'info' }, runtime: { extraModules: [held.module] } });
    key = await t.inferenceKey('alice');
  });
  after(async () => {
    await t?.close();
    await up?.close();
    await audio?.close();
  });

  /** starts a request the test will abandon; `abort` closes the client's connection */
  const start = (path: string, body: unknown, reqId: string) => {
    const ac = new AbortController();
    const res = fetch(`${t.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-request-id': reqId },
      body: JSON.stringify(body),
      signal: ac.signal,
    });
    res.catch(() => {});
    return { res, abort: () => ac.abort() };
  };

  /** reads the answer's body until `enough` says so (the client saw the first part of the stream) */
  const readUntil = async (res: Response, enough: (text: string) => boolean) => {
    const reader = res.body!.getReader();
    let text = '';
    while (!enough(text)) {
      const r = await reader.read();
      if (r.done) throw new Error(`the answer ended before the test left: ${text}`);
      text += Buffer.from(r.value).toString('utf8');
    }
    return text;
  };

  const assertClosed = (l: Line, route: string, model?: string) => {
    assert.equal(l.status, 499, JSON.stringify(l));
    assert.equal(l.outcome, 'client_closed');
    assert.equal(l.route, route);
    assert.equal(l.level, 30, 'a client that leaves is not a server problem: info');
    assert.equal(l.error, undefined, 'leaving is not an error code the client got');
    if (model !== undefined) {
      assert.equal(l.model, model);
      assert.equal(l.deployment, model);
      assert.equal(typeof l.key_id, 'string');
    }
  };

  test('/v1/responses mid-stream: 499, counted once, the tokens of its usage record in the line', async () => {
    const c0 = await counts('/v1/responses', 'm1');
    up.script({ text: Array.from({ length: 40 }, (_, i) => `piece${i} `), delayMs: 40, usage: false });
    const r = start('/v1/responses', { model: 'm1', input: 'hi', stream: true, store: false }, 'cc-resp-stream');
    await readUntil(await r.res, (s) => s.includes('piece2'));
    r.abort();
    const l = await lineOf('cc-resp-stream');
    assertClosed(l, '/v1/responses', 'm1');
    const usage = await waitFor(async () => ((await usageOf('cc-resp-stream')).length ? usageOf('cc-resp-stream') : undefined), { what: 'the usage record' });
    assert.equal(usage.length, 1, 'charged once');
    assert.ok(usage[0]!.output_tokens > 0, 'what the client was sent is charged');
    assert.equal(l.tokens_out, usage[0]!.output_tokens, 'the line says what was charged');
    assert.equal(l.tokens_in, usage[0]!.input_tokens);
    const c1 = await counts('/v1/responses', 'm1');
    assert.equal(c1.http499, c0.http499 + 1);
    assert.equal(c1.model, c0.model + 1);
    assert.equal(c1.closed, c0.closed + 1);
  });

  test('/v1/responses before the first byte, streamed and not', async () => {
    for (const stream of [true, false]) {
      const id = `cc-resp-early-${stream}`;
      const n = up.requests.length;
      up.script({ hang: true });
      const r = start('/v1/responses', { model: 'm1', input: 'hi', stream, store: false }, id);
      const [rec] = (await up.waitForRequests(n + 1)).slice(-1);
      r.abort();
      assertClosed(await lineOf(id), '/v1/responses', 'm1');
      await rec!.closed;
      assert.equal(rec!.aborted, true, 'the upstream call is stopped');
    }
  });

  test('/v1/chat/completions mid-stream and before its JSON answer', async () => {
    const c0 = await counts('/v1/chat/completions', 'm1');
    up.script({ text: Array.from({ length: 40 }, (_, i) => `piece${i} `), delayMs: 40 });
    const s = start('/v1/chat/completions', { model: 'm1', messages: [{ role: 'user', content: 'hi' }], stream: true }, 'cc-chat-stream');
    await readUntil(await s.res, (x) => x.includes('piece2'));
    s.abort();
    const l = await lineOf('cc-chat-stream');
    assertClosed(l, '/v1/chat/completions', 'm1');
    const usage = await waitFor(async () => ((await usageOf('cc-chat-stream')).length ? usageOf('cc-chat-stream') : undefined), { what: 'the usage record' });
    assert.equal(l.tokens_out, usage[0]!.output_tokens);

    const n = up.requests.length;
    up.script({ hang: true });
    const j = start('/v1/chat/completions', { model: 'm1', messages: [{ role: 'user', content: 'hi' }] }, 'cc-chat-json');
    await up.waitForRequests(n + 1);
    j.abort();
    assertClosed(await lineOf('cc-chat-json'), '/v1/chat/completions', 'm1');
    const c1 = await counts('/v1/chat/completions', 'm1');
    assert.equal(c1.http499, c0.http499 + 2);
    assert.equal(c1.model, c0.model + 2);
    assert.equal(c1.closed, c0.closed + 2);
  });

  test('/v1/embeddings before its answer', async () => {
    const c0 = await counts('/v1/embeddings', 'emb');
    const n = up.requests.length;
    up.script({ hang: true });
    const r = start('/v1/embeddings', { model: 'emb', input: 'one two' }, 'cc-emb');
    await up.waitForRequests(n + 1);
    r.abort();
    assertClosed(await lineOf('cc-emb'), '/v1/embeddings', 'emb');
    const c1 = await counts('/v1/embeddings', 'emb');
    assert.equal(c1.http499, c0.http499 + 1);
    assert.equal(c1.closed, c0.closed + 1);
  });

  test('/v1/audio/speech mid-stream: 499 with the characters its usage record charges', async () => {
    const c0 = await counts('/v1/audio/speech', 'tts');
    audio.script({ type: 'pcm', samples: tone(0.2), chunkSizes: [4800], intervalMs: 20, endless: true });
    const r = start('/v1/audio/speech', { model: 'tts', input: 'Hello there, this goes on.', voice: 'alloy', response_format: 'pcm' }, 'cc-speech');
    const res = await r.res;
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    await reader.read();
    r.abort();
    const l = await lineOf('cc-speech');
    assertClosed(l, '/v1/audio/speech', 'tts');
    const usage = await waitFor(async () => ((await usageOf('cc-speech')).length ? usageOf('cc-speech') : undefined), { what: 'the usage record' });
    assert.equal(l.characters, usage[0]!.characters);
    assert.equal(l.characters, 'Hello there, this goes on.'.length);
    const c1 = await counts('/v1/audio/speech', 'tts');
    assert.equal(c1.http499, c0.http499 + 1);
    assert.equal(c1.closed, c0.closed + 1);
  });

  test('/v1/audio/transcriptions before its answer', async () => {
    const n = audio.requests.length;
    audio.script({ type: 'hang' });
    const form = new FormData();
    form.append('model', 'stt');
    form.append('file', new Blob([Buffer.alloc(3200)], { type: 'audio/wav' }), 'a.wav');
    const ac = new AbortController();
    fetch(`${t.url}/v1/audio/transcriptions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'x-request-id': 'cc-stt' },
      body: form,
      signal: ac.signal,
    }).catch(() => {});
    await audio.waitForRequests(n + 1);
    ac.abort();
    assertClosed(await lineOf('cc-stt'), '/v1/audio/transcriptions', 'stt');
  });

  test('a client that leaves while sending its body: one 499 line, no model', async () => {
    const body = JSON.stringify({ model: 'm1', input: 'x'.repeat(1000) });
    const seen = serverSocketOf('cc-body');
    const sock = net.connect(Number(new URL(t.url!).port), '127.0.0.1');
    await new Promise((r) => sock.once('connect', r));
    sock.write(
      `POST /v1/responses HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nx-request-id: cc-body\r\n\r\n${body.slice(0, 100)}`,
    );
    // the server has the request (its headers) and is reading its body
    await seen;
    sock.destroy();
    const l = await lineOf('cc-body');
    assert.equal(l.status, 499);
    assert.equal(l.outcome, 'client_closed');
    assert.equal(l.model, undefined, 'the request never reached a model');
  });

  test('a client that leaves before the handler starts: its line at once, and the handler never runs', async () => {
    const ac = new AbortController();
    fetch(`${t.url}/test/held`, { method: 'POST', headers: { 'x-request-id': 'cc-held' }, signal: ac.signal }).catch(() => {});
    await held.before.reachedP;
    ac.abort();
    const l = await lineOf('cc-held');
    assert.equal(l.status, 499);
    assert.equal(l.outcome, 'client_closed');
    assert.equal(l.route, '/test/held');
    held.before.release();
    await held.before.overP;
    assert.equal(held.before.ran, false, 'nothing is run for a client that is gone');
    assert.equal(requestLines('cc-held').length, 1);
  });

  test('a client that left while its handler prepared: the work is stopped as it starts, the line written after the handler', async () => {
    const socket = serverSocketOf('cc-late');
    const ac = new AbortController();
    fetch(`${t.url}/test/late`, { method: 'POST', headers: { 'x-request-id': 'cc-late' }, signal: ac.signal }).catch(() => {});
    await held.inside.reachedP;
    const closed = once(await socket, 'close');
    ac.abort();
    // the close reached the server (the response's close listeners ran before this one): the request waits for its handler
    await closed;
    assert.equal(requestLines('cc-late').length, 0, 'not written while its handler runs');
    held.inside.release();
    await held.inside.overP;
    assert.equal(held.inside.gone, true, 'clientGone made after the close is aborted at once');
    assert.equal(held.inside.sseClosed, true, 'and so is an SseWriter');
    const l = await lineOf('cc-late');
    assert.equal(l.status, 499);
    assert.equal(l.outcome, 'client_closed');
  });

  test('WebSocket mode: the turn in flight and the turns waiting behind it each get one 499 line when the client closes', async () => {
    const m0 = await scrape();
    const ws499 = metricValue(m0, 'portico_http_requests_total', { method: 'WS', route: '/v1/responses', status: '499' }) ?? 0;
    up.script({ text: Array.from({ length: 40 }, (_, i) => `piece${i} `), delayMs: 40, usage: false });
    const c = await openWs(t.url!, key);
    c.create({ model: 'm1', input: 'first', store: false });
    c.create({ model: 'm1', input: 'second', store: false });
    c.create({ model: 'm1', input: 'third', store: false });
    for (let f = await c.next(); !(f.type === 'response.output_text.delta' && String(f.delta).includes('piece1')); f = await c.next());
    c.ws.terminate();
    const turnLines = () => lines().filter((l) => l.msg === 'websocket turn');
    const closedLine = await waitFor(() => lines().find((l) => l.msg === 'websocket closed'), { what: 'the websocket closed line' });
    const connection = String(closedLine.reqId);
    const mine = await waitFor(
      () => {
        const found = turnLines().filter((l) => l.reqId === connection);
        return found.length >= 3 ? found : undefined;
      },
      { what: 'three turn lines' },
    );
    // (the waiting turns are written as the socket closes, the one in flight once it has stopped)
    assert.deepEqual(
      mine.map((l) => [l.turn, l.status, l.outcome]).sort(),
      [1, 2, 3].map((n) => [`${connection}:${n}`, 499, 'client_closed']),
    );
    assert.equal(closedLine.turns, 3);
    // the turn in flight is charged what it was sent, under the id its line names
    const usage = await waitFor(async () => ((await usageOf(`${connection}:1`)).length ? usageOf(`${connection}:1`) : undefined), { what: 'the usage record' });
    assert.ok(usage[0]!.output_tokens > 0);
    assert.equal((await usageOf(`${connection}:2`)).length, 0, 'a turn that never ran is not charged');
    assert.equal(requestLines(connection).length, 0, 'the upgrade request itself is not a request line (its connection has its own)');
    const m1 = await scrape();
    assert.equal(metricValue(m1, 'portico_http_requests_total', { method: 'WS', route: '/v1/responses', status: '499' }), ws499 + 3);
  });

  test('a request answered before its connection closed is logged once, with its status', async () => {
    up.script({ text: 'done' });
    const serverSockets: net.Socket[] = [];
    const onConnection = (s: net.Socket) => serverSockets.push(s);
    t.app.server.on('connection', onConnection);
    const agent = new http.Agent({ keepAlive: true });
    let clientPort = 0;
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request(
        `${t.url}/v1/responses`,
        { method: 'POST', agent, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-request-id': 'cc-done' } },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode!));
        },
      );
      req.on('socket', (sock) => sock.on('connect', () => (clientPort = sock.localPort!)));
      req.on('error', reject);
      req.end(JSON.stringify({ model: 'm1', input: 'hi', store: false }));
    });
    assert.equal(status, 200);
    await lineOf('cc-done');
    t.app.server.off('connection', onConnection);
    const serverSide = serverSockets.find((s) => s.remotePort === clientPort);
    assert.ok(serverSide, 'the server side of the connection');
    const closed = once(serverSide, 'close');
    agent.destroy();
    await closed;
    // a turn of the event loop for anything the close set off
    await new Promise((r) => setImmediate(r));
    const found = requestLines('cc-done');
    assert.equal(found.length, 1, JSON.stringify(found));
    assert.equal(found[0]!.status, 200);
    assert.equal(found[0]!.outcome, undefined);
  });
});

describe('a request whose client left and whose work does not stop', () => {
  test('is written all the same once the wait for its work is over, and once only', async () => {
    const held = heldRoutes();
    const raw: string[] = [];
    const sink = new Writable({ write: (c, _e, cb) => (raw.push(...c.toString().split('\n').filter(Boolean)), cb()) });
    const t = await buildTestApp({ listen: true, logDestination: sink, env: { LOG_LEVEL: 'info' }, runtime: { extraModules: [held.module], clientClosedWaitMs: 200 } });
    try {
      const lines = () => raw.map((l) => JSON.parse(l) as Line).filter((l) => l.reqId === 'cc-stuck' && l.msg === 'request');
      const ac = new AbortController();
      fetch(`${t.url}/test/late`, { method: 'POST', headers: { 'x-request-id': 'cc-stuck' }, signal: ac.signal }).catch(() => {});
      await held.inside.reachedP;
      ac.abort();
      // its handler is still held: the line comes when the wait is over
      const l = await waitFor(() => lines()[0], { what: 'the line of the stuck request' });
      assert.equal(l.status, 499);
      assert.equal(l.outcome, 'client_closed');
      held.inside.release();
      await held.inside.overP;
      await new Promise((r) => setImmediate(r));
      assert.equal(lines().length, 1);
    } finally {
      await t.close();
    }
  });
});
