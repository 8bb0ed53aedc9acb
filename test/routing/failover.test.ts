/**
 * Failover bounded by the deployment's timeouts (src/models/router, src/engines/shared/http.ts): a
 * host whose connects hang (a black hole: no answer, no refusal) holds a request no longer than `first_byte_ms`
 * before the next deployment answers, and `connect_ms` fires on time. Before, the router awaited the abandoned
 * call, which the HTTP client settled only at its own 10 s connect timeout, and undici's coarse timers fired a
 * 300 ms connect timeout after ~1 s.
 *
 * Times are compared with the timeout plus 100 ms plus the longest event-loop stall seen meanwhile (the slack a
 * busy machine takes from any timer), never with a fixed figure alone.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { timed, waitFor } from '../helpers/wait.js';
import OpenAI from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { startBlackHole, type BlackHole } from '../helpers/black-hole.js';
import { parseModelConfig } from '../../src/models/config.js';

describe('failover bounded by the timeouts: a host whose connects hang', () => {
  let hole: BlackHole;
  let live: ScriptedUpstream;
  let t: TestApp & { url?: string };
  let key: string;
  let client: OpenAI;
  const post = (path: string, body: Record<string, unknown>) =>
    fetch(t.url + path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });

  before(async () => {
    hole = await startBlackHole();
    live = await startScriptedUpstream();
    const yaml = `
models:
  - name: hole-first
    retries: 1
    deployments:
      - { id: hf-hole, provider: openai-compatible, base_url: ${hole.url}, weight: 1, timeouts: { first_byte_ms: 1500 } }
      - { id: hf-live, provider: openai-compatible, base_url: ${live.url}, weight: 0 }
  - name: hole-embed
    type: embeddings
    retries: 1
    deployments:
      - { id: he-hole, provider: openai-compatible, base_url: ${hole.url}, weight: 1, timeouts: { first_byte_ms: 800 } }
      - { id: he-live, provider: openai-compatible, base_url: ${live.url}, weight: 0 }
  - { name: live, id: live-1, provider: openai-compatible, base_url: ${live.url} }
  - { name: live-embed, id: live-e, type: embeddings, provider: openai-compatible, base_url: ${live.url} }
  - { name: hole-only, id: ho-hole, provider: openai-compatible, base_url: ${hole.url}, timeout_ms: 1000, retries: 0 }
  - { name: connect-300, id: c3-hole, provider: openai-compatible, base_url: ${hole.url}, retries: 0, timeouts: { connect_ms: 300, first_byte_ms: 20000 } }
  - { name: connect-2000, id: c2-hole, provider: openai-compatible, base_url: ${hole.url}, retries: 0, timeouts: { connect_ms: 2000, first_byte_ms: 20000 } }
`;
    t = await buildTestApp({ listen: true, models: parseModelConfig(yaml).models });
    key = await t.inferenceKey('alice');
    client = new OpenAI({ apiKey: key, baseURL: t.url + '/v1', maxRetries: 0 });
    // every path taken once before anything is timed: the first request of each does one-time work (code
    // compiled, the key read), which is not what the timeouts bound
    for (let i = 0; i < 2; i++) {
      await client.responses.create({ model: 'live', input: 'hi' });
      await (await post('/v1/responses', { model: 'live', input: 'hi', stream: true })).text();
      await client.chat.completions.create({ model: 'live', messages: [{ role: 'user', content: 'hi' }] });
      await client.embeddings.create({ model: 'live-embed', input: 'hi' });
    }
  });
  after(async () => {
    await t.close();
    await live.close();
    await hole.close();
  });

  test('a hanging connect fails over within first_byte_ms + 100 ms: Responses, streaming, Chat Completions, embeddings', async () => {
    const cases: Array<[string, number, () => Promise<unknown>]> = [
      ['responses', 1500, () => client.responses.create({ model: 'hole-first', input: 'hi' })],
      [
        'responses stream',
        1500,
        async () => {
          const res = await post('/v1/responses', { model: 'hole-first', input: 'hi', stream: true });
          assert.equal(res.status, 200);
          assert.match(await res.text(), /response\.completed/);
        },
      ],
      ['chat', 1500, () => client.chat.completions.create({ model: 'hole-first', messages: [{ role: 'user', content: 'hi' }] })],
      ['embeddings', 800, () => client.embeddings.create({ model: 'hole-embed', input: 'hi' })],
    ];
    for (const [what, firstByteMs, call] of cases) {
      live.reset();
      const t0 = performance.now();
      const r = await timed(call);
      assert.equal(live.requests.length, 1, `${what}: the live deployment answered`);
      // the failover is the moment the next deployment is called (what follows is that deployment's answer)
      const ms = live.requests[0]!.at - t0;
      assert.ok(ms >= firstByteMs - 5, `${what}: the hanging deployment was waited for (${ms.toFixed(0)} ms)`);
      assert.ok(ms <= firstByteMs + 100 + r.stallMs, `${what}: failed over after ${ms.toFixed(0)} ms, over ${firstByteMs} + 100 ms (+ ${r.stallMs.toFixed(0)} ms of stalls)`);
    }
  });

  test('the only deployment: its connect is bounded by timeout_ms (no connect_ms set), a 504 that says so on time', async () => {
    const r = await timed(() => post('/v1/responses', { model: 'hole-only', input: 'hi' }));
    const res = r.value;
    assert.equal(res.status, 504);
    const body = (await res.json()) as { error: { message: string; code: string } };
    assert.match(body.error.message, /within 1000 ms/);
    assert.ok(r.ms <= 1000 + 100 + r.stallMs, `answered after ${r.ms.toFixed(0)} ms`);
  });

  test('connect_ms fires within +100 ms (300 ms and 2000 ms)', async () => {
    for (const [model, ms] of [
      ['connect-300', 300],
      ['connect-2000', 2000],
    ] as const) {
      const r = await timed(() => post('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }] }));
      assert.equal(r.value.status, 504, model);
      const body = (await r.value.json()) as { error: { message: string } };
      assert.match(body.error.message, new RegExp(`connection within ${ms} ms`), model);
      assert.ok(r.ms >= ms - 5, `${model}: not before its time (${r.ms.toFixed(0)} ms)`);
      assert.ok(r.ms <= ms + 100 + r.stallMs, `${model}: fired after ${r.ms.toFixed(0)} ms (+ ${r.stallMs.toFixed(0)} ms of stalls)`);
    }
  });

  test('a client that gives up during a hanging connect: the try ends at once, not when the connect would time out', async () => {
    const ctl = new AbortController();
    const started = fetch(t.url + '/v1/chat/completions', {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'connect-2000', messages: [{ role: 'user', content: 'hi' }] }),
      signal: ctl.signal,
    }).catch((e: Error) => e);
    const inflight = () => t.runtime.router.health.peek('c2-hole')?.inflight;
    const until = async (want: number) => {
      await waitFor(() => inflight() === want, { what: `${want} try in flight`, timeoutMs: 5000, everyMs: 5 });
      return inflight();
    };
    assert.equal(await until(1), 1, 'the try is under way');
    const r = await timed(async () => {
      ctl.abort();
      return until(0);
    });
    assert.equal(r.value, 0);
    assert.ok(r.ms < 500 + r.stallMs, `the try ended ${r.ms.toFixed(0)} ms after the client left (its connect_ms is 2000)`);
    assert.ok((await started) instanceof Error);
  });
});
