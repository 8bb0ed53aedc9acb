/**
 * Rate limits apply per turn, and only per turn: each response of a realtime session counts as a request against the
 * key's rpm (refused past it with an error event, the session going on), while the session's periodic key check
 * (every REALTIME_VERIFY_MS) counts nothing.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { setupRealtime, type RtEnv } from './util.js';
import { waitFor } from '../helpers/wait.js';
import { awayFromMinuteEdge } from '../helpers/minute-window.js';

describe('realtime: rate limits per turn (pglite)', () => {
  let e: RtEnv;
  before(async () => {
    e = await setupRealtime({ env: { RATE_LIMIT_RPM: '3', REALTIME_VERIFY_MS: '50' } });
  });
  after(() => e.close());

  test("the session's key checks count nothing; each response counts one request, and the one past the rpm is refused", async () => {
    // the upgrade and the three responses count in one fixed minute: not near its end (a window that turns between
    // them starts the count again, and the third would pass)
    await awayFromMinuteEdge(15);
    const s = await e.open();
    await s.next('session.created');
    s.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'], audio: { input: { turn_detection: null } } } });
    await s.next('session.updated');
    // the key is checked again every 50 ms: a second of it is 20 checks, none of them a request
    const before = e.t.services.verifier.hits + e.t.services.verifier.misses;
    await waitFor(() => e.t.services.verifier.hits + e.t.services.verifier.misses >= before + 10, { what: 'ten checks of the key' });
    // the upgrade was one request of the minute: two responses pass, the third is refused
    for (let i = 0; i < 2; i++) {
      e.up.script({ text: `answer ${i}` });
      s.send({ type: 'response.create', response: { conversation: 'none', input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'hi' }] }] } });
      assert.equal((await s.next('response.done')).response.status, 'completed');
    }
    s.send({ type: 'response.create', event_id: 'evt_third' });
    const err = await s.next('error');
    assert.equal(err.error.code, 'rate_limit_exceeded');
    assert.equal(err.error.event_id, 'evt_third');
    assert.equal(s.closedWith, undefined, 'the session goes on');
    s.close();
  });
});

describe('realtime: a transcription session is admitted per turn (pglite)', () => {
  let e: RtEnv;
  before(async () => {
    e = await setupRealtime({ env: { RATE_LIMIT_RPM: '3' } });
  });
  after(() => e.close());

  test('past the rpm, a turn is not transcribed: its transcription fails with rate_limit_exceeded, the session goes on', async () => {
    const { WebSocket } = await import('ws');
    const { speak, silence } = await import('./util.js');
    const words = await speak(e, 'Good morning.');
    const sock = new WebSocket(`${e.url.replace('http', 'ws')}/v1/realtime?intent=transcription`, { headers: { Authorization: `Bearer ${e.key}` } });
    const got: any[] = [];
    sock.on('message', (d) => got.push(JSON.parse(d.toString())));
    await new Promise((r) => sock.once('open', r));
    await waitFor(() => got.some((x) => x.type === 'session.created'), { what: 'session.created' });
    sock.send(JSON.stringify({ type: 'session.update', session: { type: 'transcription', audio: { input: { turn_detection: null } } } }));
    // the speech made above and the upgrade were two requests; the first turn is the third, the next one past the rpm
    for (let i = 0; i < 2; i++) {
      sock.send(JSON.stringify({ type: 'input_audio_buffer.append', audio: Buffer.concat([words, silence(0.2)]).toString('base64') }));
      sock.send(JSON.stringify({ type: 'input_audio_buffer.commit' }));
    }
    await waitFor(() => got.some((x) => x.type === 'conversation.item.input_audio_transcription.completed'), { what: 'the first transcript', timeoutMs: 60_000 });
    const failed = await waitFor(() => got.find((x) => x.type === 'conversation.item.input_audio_transcription.failed'), { what: 'the refused turn', timeoutMs: 60_000 });
    assert.equal(failed.error.code, 'rate_limit_exceeded');
    assert.equal(got.filter((x) => x.type === 'conversation.item.input_audio_transcription.completed').length, 1);
    assert.equal(sock.readyState, WebSocket.OPEN);
    sock.close();
  });
});
