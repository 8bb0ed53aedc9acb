/**
 * Spoken answers and who may have them: a stored spoken answer is its owner's alone (retrieve, replay, chaining);
 * speaking is part of the response the key asked for (no audio scope, no model:tts-1 scope), an audio-only key
 * gets no response; a spent balance refuses before anything is spoken, and the speech is charged to the payer.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { MODEL, expectError, type Env } from './util.js';
import { setupAudio, spokenParts } from './audio-util.js';

const body = (extra: Record<string, unknown> = {}) => ({ model: MODEL, input: 'Talk.', modalities: ['text', 'audio'], audio: { format: 'mp3' }, ...extra });

describe('spoken answers: ownership and scopes', () => {
  let e: Env;
  before(async () => {
    e = await setupAudio();
  });
  after(() => e.close());

  const as = (key: string, method: string, path: string, b?: unknown) =>
    fetch(e.url + path, { method, headers: { authorization: `Bearer ${key}`, ...(b ? { 'content-type': 'application/json' } : {}) }, body: b ? JSON.stringify(b) : undefined });

  test("another user gets 404 on a spoken answer: retrieve, stream replay, input items, chaining; its audio is never in bob's answers", async () => {
    e.up.script({ text: 'A private spoken answer.' });
    const r = (await (await e.call('POST', '/v1/responses', body({ background: false }))).json()) as any;
    const secret = spokenParts(r).audio.data;
    const bob = await e.t.inferenceKey('bob');
    await expectError(await as(bob, 'GET', `/v1/responses/${r.id}`), 404, 'response_not_found');
    await expectError(await as(bob, 'GET', `/v1/responses/${r.id}?stream=true`), 404, 'response_not_found');
    await expectError(await as(bob, 'GET', `/v1/responses/${r.id}/input_items`), 404, 'response_not_found');
    const n = e.up.requests.length;
    const chained = await as(bob, 'POST', '/v1/responses', body({ previous_response_id: r.id }));
    const err = await expectError(chained, 404, 'previous_response_not_found');
    assert.ok(!JSON.stringify(err).includes(secret.slice(0, 32)));
    assert.equal(e.up.requests.length, n, 'nothing was generated for bob');
  });

  test('speaking needs no audio scope and no model:tts-1 scope; an audio-only key gets no response', async () => {
    const responsesOnly = await e.t.inferenceKey('alice', { scopes: ['responses', `model:${MODEL}`] });
    e.up.script({ text: 'Scoped and spoken.' });
    const res = await as(responsesOnly, 'POST', '/v1/responses', body());
    assert.equal(res.status, 200);
    assert.ok(spokenParts(await res.json()).audio.data.length > 0);
    // the same key may not call the speech endpoint itself
    await expectError(await as(responsesOnly, 'POST', '/v1/audio/speech', { model: 'tts-1', voice: 'alloy', input: 'x' }), 403, 'insufficient_scope');
    const audioOnly = await e.t.inferenceKey('alice', { scopes: ['audio'] });
    await expectError(await as(audioOnly, 'POST', '/v1/responses', body()), 403, 'insufficient_scope');
    const ttsOnly = await e.t.inferenceKey('alice', { scopes: ['model:tts-1'] });
    await expectError(await as(ttsOnly, 'POST', '/v1/responses', body()), 403, 'insufficient_scope');
  });
});

describe('spoken answers: budgets', () => {
  let e: Env;
  before(async () => {
    e = await setupAudio('pglite', [{ name: 'tts-1', provider: 'flite', type: 'speech', pricing: { per_character: 0.01 } } as never], { BILLING_ENABLED: 'true' });
  });
  after(() => e.close());

  const balance = async (user: string) => {
    const res = await e.t.app.inject({ method: 'GET', url: '/v1/portal/query/balance', headers: { authorization: `Bearer ${await e.t.token(user)}` } });
    assert.equal(res.statusCode, 200, res.body);
    return res.json().data;
  };

  test('a spent balance refuses the request before the model or the voice run; a spoken answer is charged for its speech', async () => {
    const carol = await e.t.inferenceKey('carol');
    const post = (b: unknown) =>
      fetch(e.url + '/v1/responses', { method: 'POST', headers: { authorization: `Bearer ${carol}`, 'content-type': 'application/json' }, body: JSON.stringify(b) });
    const n = e.up.requests.length;
    await expectError(await post(body()), 429, 'insufficient_quota');
    assert.equal(e.up.requests.length, n);
    await e.t.services.usage.grant('carol', 'default', 5);
    const text = 'Twenty characters!!.';
    e.up.script({ text });
    const r = (await (await post(body())).json()) as any;
    assert.equal(spokenParts(r).audio.transcript, text);
    const b = await balance('carol');
    assert.ok(Math.abs(b.used - text.length * 0.01) < 1e-9, `used ${b.used}: the speech of ${text.length} characters at 0.01 (the text model is free)`);
    assert.ok(Math.abs(b.balance - (5 - text.length * 0.01)) < 1e-9);
  });
});
