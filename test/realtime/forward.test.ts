/**
 * A realtime model forwarded to an upstream realtime server (a scripted one answering like OpenAI's), through the
 * official SDK's realtime client: events both ways unchanged, the upstream's own key and model name, usage per
 * response; and every way the upstream can fail (refuses, hangs at connect, never says session.created, garbage,
 * resets mid-response) is an error event and a close, never a hang or a crash.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startRealtimeUpstream, type RealtimeUpstream } from '../helpers/realtime-upstream.js';
import { setupRealtime, withSlowAdmission, type RtEnv } from './util.js';
import { usageRows } from '../helpers/usage.js';
import { waitFor } from '../helpers/wait.js';
import { parseModelConfig } from '../../src/models/config.js';

const UP_KEY = 'sk-upstream-realtime-secret-123';

describe('realtime: forwarded to an upstream realtime server (pglite)', () => {
  let e: RtEnv;
  let up: RealtimeUpstream;
  before(async () => {
    up = await startRealtimeUpstream({ requireKey: UP_KEY });
    // the providers read api_key_env from the process's environment
    process.env.RT_UP_KEY = UP_KEY;
    const entry = (name: string, extra: Record<string, unknown> = {}) =>
      ({
        name,
        provider: 'openai-compatible',
        type: 'realtime',
        base_url: up.url,
        api_key_env: 'RT_UP_KEY',
        upstream_model: 'gpt-realtime-2025',
        pricing: { input_per_million: 1_000_000, output_per_million: 2_000_000 },
        ...extra,
      }) as never;
    e = await setupRealtime({
      textModel: false,
      warmEngines: false,
      models: [
        entry('rt-up'),
        entry('rt-quick', { timeouts: { connect_ms: 400, first_byte_ms: 400 } }),
        // two deployments, the first down: a session goes to the one that opens
        ...parseModelConfig(`
models:
  - name: rt-failover
    type: realtime
    deployments:
      - provider: openai-compatible
        base_url: http://127.0.0.1:9/v1
      - provider: openai-compatible
        base_url: ${up.url}
        api_key_env: RT_UP_KEY
`).models,
      ],
    });
  });
  after(async () => {
    await e.close();
    await up.close();
  });

  test('events go both ways unchanged; the upstream gets its own key and model; each response is charged from its usage', async () => {
    up.configure({
      requireKey: UP_KEY,
      audioDeltas: 4,
      usage: {
        total_tokens: 30,
        input_tokens: 10,
        output_tokens: 20,
        input_token_details: { text_tokens: 10, audio_tokens: 0, cached_tokens: 0 },
        output_token_details: { text_tokens: 5, audio_tokens: 15 },
      },
    });
    const before = up.connections.length;
    const s = await e.open({ model: 'rt-up' });
    const created = await s.next('session.created');
    assert.equal(created.session.model, 'gpt-realtime-2025', "the upstream's session, as it sent it");
    const c = up.connections[before]!;
    assert.equal(c.authorization, `Bearer ${UP_KEY}`);
    assert.equal(c.model, 'gpt-realtime-2025');
    s.send({ type: 'session.update', session: { type: 'realtime', instructions: 'Be brief.' } });
    assert.equal((await s.next('session.updated')).session.instructions, 'Be brief.');
    s.send({ type: 'input_audio_buffer.append', audio: Buffer.alloc(9600).toString('base64') });
    s.send({ type: 'input_audio_buffer.commit' });
    await s.next('input_audio_buffer.committed');
    s.send({ type: 'response.create' });
    const events = await s.until('response.done');
    assert.equal(events.filter((x) => x.type === 'response.output_audio.delta').length, 4);
    assert.equal(events.at(-1).response.status, 'completed');
    assert.deepEqual(
      c.received.map((x: any) => x.type),
      ['session.update', 'input_audio_buffer.append', 'input_audio_buffer.commit', 'response.create'],
    );
    const rows = await waitFor(
      async () => {
        const r = await usageRows(e.t, 'rt-up');
        return r.length ? r : undefined;
      },
      { what: 'the usage record' },
    );
    assert.equal(rows[0]!.operation, 'realtime');
    assert.equal(rows[0]!.input_tokens, 10);
    assert.equal(rows[0]!.output_tokens, 20);
    assert.ok(Math.abs(rows[0]!.cost - (10 * 1 + 20 * 2)) < 0.001, `${rows[0]!.cost}`);
    s.close();
    await waitFor(() => c.closed !== undefined, { what: 'the upstream link closed with the session' });
  });

  const failsWith = async (model: string, code: string, message: RegExp) => {
    const s = await e.open({ model });
    const err = await s.next('error');
    assert.equal(err.error.code, code, JSON.stringify(err));
    assert.match(err.error.message, message);
    assert.ok(!JSON.stringify(err).includes(UP_KEY), 'the upstream key is never told');
    assert.ok(!JSON.stringify(err).includes(e.key), "nor the client's");
    await waitFor(() => s.closedWith !== undefined, { what: 'the close' });
    return { err, close: s.closedWith! };
  };

  test('the upstream refuses the upgrade (503): an error event and a close', async () => {
    up.configure({ requireKey: UP_KEY, refuse: { status: 503 } });
    const { close } = await failsWith('rt-up', 'engine_error', /503/);
    assert.equal(close.code, 1011);
  });

  test("the upstream refuses our key (401): a server error saying so, not the client's own 401", async () => {
    up.configure({ requireKey: 'another-key' });
    await failsWith('rt-up', 'engine_error', /credentials/);
  });

  test('the upstream hangs at connect: an error once connect_ms has passed', async () => {
    up.configure({ hangUpgrade: true });
    await failsWith('rt-quick', 'upstream_timeout', /400 ms/);
  });

  test('the upstream never says session.created: an error once first_byte_ms has passed', async () => {
    up.configure({ requireKey: UP_KEY, silent: true });
    await failsWith('rt-quick', 'upstream_timeout', /400 ms/);
  });

  test('the upstream sends garbage: an error and a close', async () => {
    up.configure({ requireKey: UP_KEY, garbage: 'text' });
    await failsWith('rt-up', 'engine_error', /JSON/);
  });

  test('the upstream resets mid-response: the client hears why, and the session closes', async () => {
    up.configure({ requireKey: UP_KEY, resetAfterDeltas: 2, audioDeltas: 5 });
    const s = await e.open({ model: 'rt-up' });
    await s.next('session.created');
    s.send({ type: 'response.create' });
    await s.next('response.output_audio.delta');
    const err = await s.next('error');
    assert.equal(err.error.code, 'engine_error');
    assert.match(err.error.message, /broke/);
    await waitFor(() => s.closedWith !== undefined, { what: 'the close' });
    assert.equal(s.closedWith!.code, 1011);
  });

  test('several deployments: a session opens on the first one that answers', async () => {
    up.configure({ requireKey: UP_KEY });
    const before = up.connections.length;
    const s = await e.open({ model: 'rt-failover' });
    await s.next('session.created').catch((err) => {
      throw new Error(`${err.message}: ${JSON.stringify(s.events)}`);
    });
    assert.equal(up.connections.length, before + 1);
    s.send({ type: 'response.create' });
    assert.equal((await s.next('response.done')).response.status, 'completed');
    s.close();
  });

  test("a response's admission longer than REALTIME_IDLE_MS (the server's time) is not idleness", async () => {
    up.configure({ requireKey: UP_KEY });
    const quick = await setupRealtime({
      textModel: false,
      warmEngines: false,
      env: { REALTIME_IDLE_MS: '600' },
      models: [{ name: 'rt-up', provider: 'openai-compatible', type: 'realtime', base_url: up.url, api_key_env: 'RT_UP_KEY', upstream_model: 'gpt-realtime-2025' } as never],
    });
    try {
      const s = await quick.open({ model: 'rt-up' });
      await s.next('session.created');
      // the response's admission (the key verified again, its limits) is held for twice the idle bound
      const held = await withSlowAdmission(quick, 1_200, async () => {
        s.send({ type: 'response.create' });
        assert.equal((await s.next('response.done')).response.status, 'completed');
      });
      assert.ok(held >= 1, 'the admission did not verify the key');
      assert.equal(s.closedWith, undefined, 'closed as idle while its response was being admitted');
      s.close();
    } finally {
      await quick.close();
    }
  });

  test('nothing listens at the upstream address: an error event, not a hang', async () => {
    const dead = await setupRealtime({
      textModel: false,
      warmEngines: false,
      models: [{ name: 'rt-dead', provider: 'openai-compatible', type: 'realtime', base_url: 'http://127.0.0.1:9/v1' } as never],
    });
    try {
      const s = await dead.open({ model: 'rt-dead' });
      const err = await s.next('error');
      assert.equal(err.error.code, 'upstream_unavailable');
      await waitFor(() => s.closedWith !== undefined, { what: 'the close' });
    } finally {
      await dead.close();
    }
  });
});
