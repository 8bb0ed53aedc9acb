/**
 * Compaction and ownership: a compaction item opens only for the user it was made for and only on a server that
 * shares the sealing secret (KEY_PEPPER); a user cannot compact another user's chain; scopes apply; the summary is
 * never readable from the item or from what is stored.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { MODEL, expectError, setup, type Env } from './util.js';
import { errorOf, openWs } from './ws-util.js';

describe('compaction: security', () => {
  let e: Env;
  let bob: OpenAI;
  let bobKey: string;
  /** alice's window */
  let window: any[];
  before(async () => {
    e = await setup('pglite');
    bobKey = await e.t.inferenceKey('bob');
    bob = new OpenAI({ apiKey: bobKey, baseURL: e.url + '/v1', maxRetries: 0 });
    e.up.script({ text: 'ALICE-SECRET-SUMMARY: her bank is Acme.' });
    window = (await e.client.responses.compact({ model: MODEL, input: 'my bank is Acme' })).output as any[];
  });
  after(() => e.close());

  test("another user's compaction item is refused (400 invalid_encrypted_content) on /responses, /compact and the socket", async () => {
    const input = [window.at(-1), { role: 'user', content: 'what is my bank?' }];
    const asBob = (path: string, body: unknown) =>
      fetch(e.url + path, { method: 'POST', headers: { authorization: `Bearer ${bobKey}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    await expectError(await asBob('/v1/responses', { model: MODEL, input }), 400, 'invalid_encrypted_content', 'input[0].encrypted_content');
    await expectError(await asBob('/v1/responses/input_tokens', { model: MODEL, input }), 400, 'invalid_encrypted_content');
    await expectError(await asBob('/v1/responses/compact', { model: MODEL, input }), 400, 'invalid_encrypted_content');
    const c = await openWs(e.url, bobKey);
    errorOf(await c.turn({ model: MODEL, store: false, input }), 400, 'invalid_encrypted_content');
    await c.close();
    assert.ok(!e.up.requests.slice(1).some((r) => JSON.stringify(r.body).includes('ALICE-SECRET')), 'the summary never reached a model for bob');
  });

  test("a user cannot compact another user's stored chain (404, as every other operation on it)", async () => {
    e.up.script({ text: 'private answer' });
    const mine = await e.client.responses.create({ model: MODEL, input: 'alice private question' });
    const err = await bob.responses.compact({ model: MODEL, previous_response_id: mine.id }).catch((x) => x);
    assert.ok(err instanceof OpenAI.NotFoundError, String(err));
    assert.equal((err as any).code, 'previous_response_not_found');
    assert.doesNotMatch(String((err as any).message), /alice private/);
  });

  test('an item made by another server (another KEY_PEPPER) does not open there', async () => {
    const other = await setup('pglite');
    try {
      const aliceThere = new OpenAI({ apiKey: await other.t.inferenceKey('alice'), baseURL: other.url + '/v1', maxRetries: 0 });
      const err = await aliceThere.responses.create({ model: MODEL, input: [...window, { role: 'user', content: 'hi' }] }).catch((x) => x);
      assert.ok(err instanceof OpenAI.BadRequestError, String(err));
      assert.equal((err as any).code, 'invalid_encrypted_content');
    } finally {
      await other.close();
    }
  });

  test('scopes: a key without the responses scope gets 403; a key limited to other models gets 403 naming the model', async () => {
    const audioOnly = await e.t.inferenceKey('carol', { scopes: ['audio'] });
    const res = await fetch(e.url + '/v1/responses/compact', {
      method: 'POST',
      headers: { authorization: `Bearer ${audioOnly}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, input: 'x' }),
    });
    await expectError(res, 403, 'insufficient_scope');
    const otherModel = await e.t.inferenceKey('carol', { scopes: ['model:elsewhere'] });
    const res2 = await fetch(e.url + '/v1/responses/compact', {
      method: 'POST',
      headers: { authorization: `Bearer ${otherModel}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, input: 'x' }),
    });
    await expectError(res2, 403, 'insufficient_scope', 'model');
    const noKey = await fetch(e.url + '/v1/responses/compact', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    await expectError(noKey, 401, 'unauthorized');
  });

  test('the summary is not readable from the item, nor from what a stored response keeps of it', async () => {
    const sealed = window.at(-1).encrypted_content as string;
    const decoded = sealed
      .split('.')
      .map((p) => Buffer.from(p, 'base64url').toString('latin1'))
      .join('');
    assert.ok(!sealed.includes('ALICE') && !decoded.includes('ALICE') && !decoded.includes('Acme'));
    e.up.script({ text: 'ok' });
    const r = await e.client.responses.create({ model: MODEL, input: [...window, { role: 'user', content: 'next' }] });
    const stored =
      JSON.stringify(await (await e.call('GET', `/v1/responses/${r.id}/input_items`)).json()) + JSON.stringify(await (await e.call('GET', `/v1/responses/${r.id}`)).json());
    assert.ok(!stored.includes('ALICE-SECRET'), 'input_items and the response show the item sealed, as given');
    // while the model did read it
    assert.ok(JSON.stringify(e.last().messages).includes('ALICE-SECRET-SUMMARY'));
  });
});
