/**
 * Every client mistake of the Realtime API (a pipeline session on Portico's engines) is an `error` event in
 * OpenAI's shape ({type: 'error', event_id, error: {type, code, message, param, event_id}}) and the session stays
 * open and keeps working; what the session cannot be (an unknown model) is an error event and a 1008 close. The
 * limits: idleness, the longest session, the sessions a key and the server may hold (429 at the upgrade), a slow
 * reader, and the text engine failing in the middle of a response.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { WebSocket } from 'ws';
import { TEXT_MODEL, RawSession, append, assertError, setupRealtime, silence, withSlowAdmission, type RtEnv, type Session } from './util.js';
import { quietFor, waitFor } from '../helpers/wait.js';
import { startRealtimeUpstream, type RealtimeUpstream } from '../helpers/realtime-upstream.js';

/** the next error event, checked against OpenAI's shape */
async function expectError(s: Session | RawSession, code: string, param?: string | null, eventId?: string | null) {
  const e = await s.next('error');
  assertError(e, code, param);
  assert.match(e.event_id, /^event_/);
  assert.equal(typeof e.error.type, 'string');
  assert.ok('param' in e.error && 'event_id' in e.error, JSON.stringify(e));
  if (eventId !== undefined) assert.equal(e.error.event_id, eventId);
  return e;
}

/** the session still answers (a session.update is answered with session.updated) and was not closed */
async function stillWorks(s: Session | RawSession) {
  s.send({ type: 'session.update', session: {} });
  const u = await s.next('session.updated');
  assert.equal(s.closedWith, undefined, 'the session is still open');
  return u.session;
}

describe('realtime errors: client mistakes are error events and the session goes on (pglite)', () => {
  let e: RtEnv;
  before(async () => {
    e = await setupRealtime({ env: { REALTIME_MAX_BUFFER_SECONDS: '2' } });
  });
  after(() => e.close());

  test('frames that are no event: not JSON, JSON that is no object, a binary frame, an unknown or missing type', async () => {
    const s = await e.open();
    await s.next('session.created');
    s.rt.socket.send('this is not json {');
    await expectError(s, 'invalid_json', null, null);
    for (const raw of ['[1,2,3]', '"session.update"', '42', 'null']) {
      s.rt.socket.send(raw);
      await expectError(s, 'invalid_event', 'type');
    }
    s.rt.socket.send(Buffer.from([1, 2, 3, 4]), { binary: true });
    const bin = await expectError(s, 'invalid_event', null);
    assert.match(bin.error.message, /Binary frames/);
    s.send({ type: 'session.explode', event_id: 'evt_client_1' });
    const unknown = await expectError(s, 'invalid_value', 'type', 'evt_client_1');
    assert.match(unknown.error.message, /session\.explode/);
    s.send({ event_id: 'evt_client_2' });
    await expectError(s, 'invalid_value', 'type', 'evt_client_2');
    s.send({ type: 'output_audio_buffer.clear' });
    await expectError(s, 'unsupported_event', 'type');
    await stillWorks(s);
    s.close();
  });

  test('input_audio_buffer: audio not a string, not base64; a commit too short; a buffer past REALTIME_MAX_BUFFER_SECONDS', async () => {
    const s = await e.open();
    await s.next('session.created');
    s.send({ type: 'session.update', session: { audio: { input: { turn_detection: null } } } });
    await s.next('session.updated');
    for (const audio of [123, null, ['AAAA'], { b64: 'AAAA' }]) {
      s.send({ type: 'input_audio_buffer.append', audio });
      await expectError(s, 'invalid_type', 'audio');
    }
    s.send({ type: 'input_audio_buffer.append' });
    await expectError(s, 'invalid_type', 'audio');
    for (const audio of ['not base64!', 'AAAAA', 'AA==AA', '\u00e9\u00e9\u00e9\u00e9']) {
      s.send({ type: 'input_audio_buffer.append', audio });
      await expectError(s, 'invalid_value', 'audio');
    }
    s.send({ type: 'input_audio_buffer.commit' });
    const empty = await expectError(s, 'input_audio_buffer_commit_empty', null);
    assert.match(empty.error.message, /0\.00ms/);
    append(s, silence(0.05));
    s.send({ type: 'input_audio_buffer.commit' });
    const short = await expectError(s, 'input_audio_buffer_commit_empty');
    assert.match(short.error.message, /50\.00ms/);
    // the short audio is still there: 1.5 s more is 1.55 s, under the 2 s bound; 1 s more is over it
    append(s, silence(1.5), 500);
    s.send({ type: 'input_audio_buffer.append', audio: silence(1).toString('base64') });
    const full = await expectError(s, 'input_audio_buffer_full', 'audio');
    assert.match(full.error.message, /2 seconds/);
    // what the buffer held is kept and commits
    s.send({ type: 'input_audio_buffer.commit' });
    await s.next('input_audio_buffer.committed');
    const item = (await s.next('conversation.item.added')).item;
    s.send({ type: 'conversation.item.retrieve', item_id: item.id });
    const kept = (await s.next('conversation.item.retrieved')).item;
    assert.equal(Buffer.from(kept.content[0].audio, 'base64').length, silence(1.55).length);
    await stillWorks(s);
    s.close();
  });

  test('responses: cancel with none active, a second response.create while one is active, a cancel naming another response', async () => {
    const s = await e.open();
    await s.next('session.created');
    s.send({ type: 'session.update', session: { output_modalities: ['text'], audio: { input: { turn_detection: null } } } });
    await s.next('session.updated');
    s.send({ type: 'response.cancel' });
    await expectError(s, 'response_cancel_not_active', 'response_id');
    // the model writes slowly: the response is still active when the next events come
    e.up.script({ text: 'One two three four five six seven eight.', chunks: 8, delayMs: 300 });
    s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Count.' }] } });
    await s.next('conversation.item.done');
    s.send({ type: 'response.create' });
    const created = (await s.next('response.created')).response;
    s.send({ type: 'response.create', event_id: 'evt_twice' });
    const twice = await expectError(s, 'conversation_already_has_active_response', undefined, 'evt_twice');
    assert.ok(twice.error.message.includes(created.id), twice.error.message);
    s.send({ type: 'response.cancel', response_id: 'resp_not_this_one' });
    await expectError(s, 'response_cancel_not_active', 'response_id');
    s.send({ type: 'response.cancel', response_id: created.id });
    const done = (await s.next('response.done')).response;
    assert.equal(done.id, created.id);
    assert.equal(done.status, 'cancelled');
    assert.deepEqual(done.status_details, { type: 'cancelled', reason: 'client_cancelled' });
    s.send({ type: 'response.cancel' });
    await expectError(s, 'response_cancel_not_active', 'response_id');
    // and a response after it is made
    e.up.script({ text: 'Done.' });
    s.send({ type: 'response.create' });
    const next = (await s.next('response.done')).response;
    assert.equal(next.status, 'completed');
    s.close();
  });

  test('items: retrieve, delete and truncate of an unknown id; truncating a user item, another content_index, past the audio', async () => {
    const s = await e.open();
    await s.next('session.created');
    s.send({ type: 'session.update', session: { audio: { input: { turn_detection: null } } } });
    await s.next('session.updated');
    for (const type of ['conversation.item.retrieve', 'conversation.item.delete', 'conversation.item.truncate']) {
      s.send({ type, item_id: 'item_nope', content_index: 0, audio_end_ms: 0 });
      const err = await expectError(s, 'item_not_found', 'item_id');
      assert.match(err.error.message, /item_nope/);
      s.send({ type, item_id: 42, content_index: 0, audio_end_ms: 0 });
      await expectError(s, 'invalid_type', 'item_id');
    }
    s.send({ type: 'conversation.item.create', item: { id: 'user_1', type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hello.' }] } });
    await s.next('conversation.item.done');
    s.send({ type: 'conversation.item.truncate', item_id: 'user_1', content_index: 0, audio_end_ms: 0 });
    await expectError(s, 'invalid_value', 'item_id');
    // a spoken answer: an assistant item with audio
    e.up.script({ text: 'Hello there.' });
    s.send({ type: 'response.create' });
    const done = (await s.next('response.done')).response;
    assert.equal(done.status, 'completed');
    const said = done.output[0];
    const spokenMs = (s.events.filter((x) => x.type === 'response.output_audio.delta').reduce((n, x) => n + Buffer.from(x.delta, 'base64').length, 0) / 48000) * 1000;
    assert.ok(spokenMs > 100, `${spokenMs} ms spoken`);
    s.send({ type: 'conversation.item.truncate', item_id: said.id, content_index: 1, audio_end_ms: 10 });
    await expectError(s, 'invalid_value', 'content_index');
    for (const bad of [-1, 1.5, '100', null]) {
      s.send({ type: 'conversation.item.truncate', item_id: said.id, content_index: 0, audio_end_ms: bad });
      await expectError(s, 'invalid_value', 'audio_end_ms');
    }
    s.send({ type: 'conversation.item.truncate', item_id: said.id, content_index: 0, audio_end_ms: Math.ceil(spokenMs) + 1000 });
    const past = await expectError(s, 'invalid_value', 'audio_end_ms');
    assert.match(past.error.message, /shorter than/);
    // the item is untouched, and a truncate inside the audio is done
    s.send({ type: 'conversation.item.retrieve', item_id: said.id });
    assert.equal((await s.next('conversation.item.retrieved')).item.content[0].transcript, 'Hello there.');
    s.send({ type: 'conversation.item.truncate', item_id: said.id, content_index: 0, audio_end_ms: 0 });
    assert.equal((await s.next('conversation.item.truncated')).audio_end_ms, 0);
    // the voice cannot change once the assistant has spoken
    s.send({ type: 'session.update', session: { audio: { output: { voice: 'echo' } } } });
    await expectError(s, 'cannot_update_voice', 'session.audio.output.voice');
    s.send({ type: 'session.update', session: { audio: { output: { voice: 'alloy' } } } });
    assert.equal((await s.next('session.updated')).session.audio.output.voice, 'alloy', 'the same voice again is no change');
    s.close();
  });

  test('conversation.item.create: bad items are refused one by one, and nothing is added', async () => {
    const s = await e.open();
    await s.next('session.created');
    const msg = (extra: Record<string, unknown>) => ({ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'x' }], ...extra });
    const cases: Array<[unknown, string, string | null]> = [
      ['not an item', 'invalid_type', 'item'],
      [undefined, 'invalid_type', 'item'],
      [{ type: 'bogus' }, 'invalid_value', 'item.type'],
      [msg({ role: 'robot' }), 'invalid_value', 'item.role'],
      [msg({ role: undefined }), 'invalid_value', 'item.role'],
      [msg({ content: [] }), 'invalid_value', 'item.content'],
      [msg({ content: 'hello' }), 'invalid_value', 'item.content'],
      [msg({ content: [{ type: 'output_text', text: 'x' }] }), 'invalid_value', 'item.content[0].type'],
      [msg({ role: 'assistant', content: [{ type: 'input_text', text: 'x' }] }), 'invalid_value', 'item.content[0].type'],
      [msg({ role: 'system', content: [{ type: 'input_audio', transcript: 'x' }] }), 'invalid_value', 'item.content[0].type'],
      [msg({ content: [{ type: 'input_text', text: 'x' }, 'text'] }), 'invalid_value', 'item.content[1].type'],
      [msg({ content: [{ type: 'input_text', text: 5 }] }), 'invalid_type', 'item.content[0].text'],
      [msg({ content: [{ type: 'input_text' }] }), 'invalid_type', 'item.content[0].text'],
      [msg({ content: [{ type: 'input_audio' }] }), 'invalid_value', 'item.content[0]'],
      [msg({ content: [{ type: 'input_audio', audio: 'not base64!' }] }), 'invalid_value', 'item.content[0].audio'],
      [msg({ id: 'has spaces' }), 'invalid_value', 'item.id'],
      [msg({ id: 'x'.repeat(65) }), 'invalid_value', 'item.id'],
      [{ type: 'function_call_output', output: '{}' }, 'invalid_type', 'item.call_id'],
      [{ type: 'function_call_output', call_id: 'call_1' }, 'invalid_type', 'item.output'],
      [{ type: 'function_call', call_id: 'call_1', arguments: '{}' }, 'invalid_type', 'item.name'],
    ];
    for (const [item, code, param] of cases) {
      s.send({ type: 'conversation.item.create', item });
      await expectError(s, code, param);
    }
    s.send({ type: 'conversation.item.create', previous_item_id: 'item_unknown', item: msg({}) });
    await expectError(s, 'item_not_found', 'previous_item_id');
    assert.ok(!s.types().includes('conversation.item.added'), 'no bad item was added');
    s.send({ type: 'conversation.item.create', item: msg({ id: 'mine_1' }) });
    assert.equal((await s.next('conversation.item.added')).item.id, 'mine_1');
    s.send({ type: 'conversation.item.create', item: msg({ id: 'mine_1' }) });
    await expectError(s, 'item_id_taken', 'item.id');
    // the conversation holds the one good item: a response reads it alone
    e.up.script({ text: 'Ok.' });
    s.send({ type: 'session.update', session: { output_modalities: ['text'] } });
    await s.next('session.updated');
    s.send({ type: 'response.create' });
    assert.equal((await s.next('response.done')).response.status, 'completed');
    const sent = e.up.requests.at(-1)!.body as any;
    assert.deepEqual(
      sent.messages.filter((m: any) => m.role !== 'system'),
      [{ role: 'user', content: 'x' }],
    );
    s.close();
  });

  test('session.update: every bad field is refused with its param, and the session keeps what it had', async () => {
    const s = await e.open();
    const before = (await s.next('session.created')).session;
    const cases: Array<[unknown, string, string]> = [
      ['not an object', 'invalid_type', 'session'],
      [{ colour: 'blue' }, 'unknown_parameter', 'session.colour'],
      [{ audio: { input: { volume: 3 } } }, 'unknown_parameter', 'session.audio.input.volume'],
      [{ audio: { output: { voice: 'nobody' } } }, 'invalid_value', 'session.audio.output.voice'],
      [{ audio: { output: { voice: 7 } } }, 'invalid_value', 'session.audio.output.voice'],
      [{ audio: { input: { format: { type: 'audio/mp3' } } } }, 'invalid_value', 'session.audio.input.format.type'],
      [{ audio: { input: { format: { type: 'audio/pcm', rate: 16000 } } } }, 'invalid_value', 'session.audio.input.format.rate'],
      [{ audio: { output: { format: { type: 'audio/pcmu', rate: 24000 } } } }, 'invalid_value', 'session.audio.output.format.rate'],
      [{ audio: { output: { format: 'pcm16' } } }, 'invalid_type', 'session.audio.output.format'],
      [{ audio: { output: { speed: 3 } } }, 'invalid_value', 'session.audio.output.speed'],
      [{ audio: { input: { turn_detection: { type: 'magic' } } } }, 'invalid_value', 'session.audio.input.turn_detection.type'],
      [{ audio: { input: { turn_detection: { type: 'server_vad', threshold: 2 } } } }, 'invalid_value', 'session.audio.input.turn_detection.threshold'],
      [{ audio: { input: { turn_detection: { type: 'server_vad', silence_duration_ms: -1 } } } }, 'invalid_value', 'session.audio.input.turn_detection.silence_duration_ms'],
      [{ audio: { input: { turn_detection: { type: 'server_vad', prefix_padding_ms: 1.5 } } } }, 'invalid_type', 'session.audio.input.turn_detection.prefix_padding_ms'],
      [{ audio: { input: { turn_detection: { type: 'server_vad', idle_timeout_ms: 100 } } } }, 'invalid_value', 'session.audio.input.turn_detection.idle_timeout_ms'],
      [{ audio: { input: { turn_detection: { type: 'server_vad', create_response: 'yes' } } } }, 'invalid_type', 'session.audio.input.turn_detection.create_response'],
      [{ audio: { input: { turn_detection: { type: 'server_vad', eagerness: 'high' } } } }, 'invalid_value', 'session.audio.input.turn_detection.eagerness'],
      [{ audio: { input: { turn_detection: { type: 'server_vad', window: 3 } } } }, 'unknown_parameter', 'session.audio.input.turn_detection.window'],
      [{ audio: { input: { noise_reduction: { type: 'studio' } } } }, 'invalid_value', 'session.audio.input.noise_reduction.type'],
      [{ audio: { input: { transcription: { model: 'whisper-1', language: 'English' } } } }, 'invalid_value', 'session.audio.input.transcription.language'],
      [{ audio: { input: { transcription: {} } } }, 'invalid_type', 'session.audio.input.transcription.model'],
      [{ tools: 'get_weather' }, 'invalid_type', 'session.tools'],
      [{ tools: [{ type: 'mcp', server_label: 'x' }] }, 'invalid_value', 'session.tools[0].type'],
      [{ tools: [{ type: 'function', name: 'bad name!' }] }, 'invalid_value', 'session.tools[0].name'],
      [{ tools: [{ type: 'function' }] }, 'invalid_type', 'session.tools[0].name'],
      [
        {
          tools: [
            { type: 'function', name: 'a' },
            { type: 'function', name: 'a' },
          ],
        },
        'invalid_value',
        'session.tools[1].name',
      ],
      [{ tools: [{ type: 'function', name: 'a', strict: true }] }, 'unknown_parameter', 'session.tools[0].strict'],
      [{ tool_choice: { type: 'function', name: 'not_a_tool' } }, 'invalid_value', 'session.tool_choice.name'],
      [{ tools: [{ type: 'function', name: 'a' }], tool_choice: { type: 'function', name: 'b' } }, 'invalid_value', 'session.tool_choice.name'],
      [{ tool_choice: 'sometimes' }, 'invalid_value', 'session.tool_choice'],
      [{ model: 'gpt-realtime-mini' }, 'invalid_value', 'session.model'],
      [{ type: 'transcription' }, 'invalid_value', 'session.type'],
      [{ type: 'chat' }, 'invalid_value', 'session.type'],
      [{ instructions: 5 }, 'invalid_type', 'session.instructions'],
      [{ output_modalities: ['audio', 'text'] }, 'invalid_value', 'session.output_modalities'],
      [{ output_modalities: ['video'] }, 'invalid_value', 'session.output_modalities'],
      [{ temperature: 5 }, 'invalid_value', 'session.temperature'],
      [{ max_output_tokens: 0 }, 'invalid_value', 'session.max_output_tokens'],
      [{ max_output_tokens: 'lots' }, 'invalid_type', 'session.max_output_tokens'],
      [{ include: ['everything'] }, 'invalid_value', 'session.include'],
      [{ prompt: { id: 'pmpt_1' } }, 'unsupported_parameter', 'session.prompt'],
    ];
    for (const [session, code, param] of cases) {
      s.send({ type: 'session.update', session });
      await expectError(s, code, param);
    }
    // a transcription model that does not exist, and a model that is no transcription model (a speech model)
    for (const model of ['no-such-recognizer', 'tts-1', TEXT_MODEL]) {
      s.send({ type: 'session.update', session: { audio: { input: { transcription: { model } } } } });
      const err = await expectError(s, 'model_not_found');
      assert.ok(err.error.message.length > 0);
    }
    assert.ok(!s.types().includes('session.updated'), 'no bad update was answered with session.updated');
    const after = await stillWorks(s);
    assert.deepEqual({ ...after, expires_at: 0 }, { ...before, expires_at: 0 }, 'the refused updates changed nothing');
    s.close();
  });

  test('response.create: bad parameters are refused and no response starts', async () => {
    const s = await e.open();
    await s.next('session.created');
    const n = e.up.requests.length;
    const cases: Array<[unknown, string, string]> = [
      ['now', 'invalid_type', 'response'],
      [{ colour: 'blue' }, 'unknown_parameter', 'response.colour'],
      [{ conversation: 'other' }, 'invalid_value', 'response.conversation'],
      [{ instructions: 5 }, 'invalid_type', 'response.instructions'],
      [{ output_modalities: ['smell'] }, 'invalid_value', 'response.output_modalities'],
      [{ tools: {} }, 'invalid_type', 'response.tools'],
      [{ tool_choice: { type: 'function', name: 'ghost' } }, 'invalid_value', 'response.tool_choice.name'],
      [{ max_output_tokens: 0 }, 'invalid_value', 'response.max_output_tokens'],
      [{ max_output_tokens: 100_000 }, 'invalid_value', 'response.max_output_tokens'],
      [{ temperature: 3 }, 'invalid_type', 'response.temperature'],
      [{ audio: 'loud' }, 'invalid_type', 'response.audio.output'],
      [{ audio: { output: { voice: 'nobody' } } }, 'invalid_value', 'session.audio.output.voice'],
      [{ metadata: { n: 5 } }, 'invalid_value', 'response.metadata'],
      [{ metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) }, 'invalid_value', 'response.metadata'],
      [{ input: 'hello' }, 'invalid_type', 'response.input'],
      [{ input: [{ type: 'item_reference', id: 'item_missing' }] }, 'item_not_found', 'response.input[].id'],
      [{ input: [{ type: 'message', role: 'robot', content: [] }] }, 'invalid_value', 'item.role'],
    ];
    for (const [response, code, param] of cases) {
      s.send({ type: 'response.create', response });
      await expectError(s, code, param);
    }
    assert.ok(!s.types().includes('response.created'), 'no response started');
    assert.equal(e.up.requests.length, n, 'the text model was not called');
    await stillWorks(s);
    s.close();
  });

  test('a transcription session refuses what only a conversation does (responses, items, truncation)', async () => {
    const s = RawSession.open(e, { query: 'intent=transcription' });
    await s.opened;
    assert.equal((await s.next('session.created')).session.type, 'transcription');
    for (const ev of [
      { type: 'response.create' },
      { type: 'response.cancel' },
      { type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'x' }] } },
      { type: 'conversation.item.truncate', item_id: 'x', content_index: 0, audio_end_ms: 0 },
    ]) {
      s.send(ev);
      const err = await expectError(s, 'invalid_value', 'type');
      assert.match(err.error.message, /transcription session/);
    }
    s.send({ type: 'session.update', session: { type: 'realtime' } });
    await expectError(s, 'invalid_value', 'session.type');
    s.send({ type: 'session.update', session: { audio: { input: { transcription: { model: 'no-such-recognizer' } } } } });
    await expectError(s, 'model_not_found');
    s.send({ type: 'session.update', session: { type: 'transcription' } });
    assert.equal((await s.next('session.updated')).session.type, 'transcription');
    s.close();
  });

  test('?model= a model that is not a realtime one: an error event model_not_found, then a 1008 close', async () => {
    for (const model of ['no-such-model', TEXT_MODEL, 'whisper-1']) {
      const s = RawSession.open(e, { query: `model=${model}` });
      await s.opened;
      const closed = await s.closed;
      const err = s.events.find((x) => x.type === 'error');
      assertError(err, 'model_not_found');
      assert.ok(!s.events.some((x) => x.type === 'session.created'));
      assert.equal(closed.code, 1008);
    }
    // the SDK's client sees the same
    const s = await e.open({ model: 'no-such-model' });
    assertError(await s.next('error'), 'model_not_found');
    await waitFor(() => s.closedWith, { what: 'the close' });
    assert.equal(s.closedWith!.code, 1008);
  });

  test('the text engine failing mid-response: response.done failed with its error, an error event, and the session goes on', async () => {
    const s = await e.open();
    await s.next('session.created');
    s.send({ type: 'session.update', session: { output_modalities: ['text'], audio: { input: { turn_detection: null } } } });
    await s.next('session.updated');
    s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi.' }] } });
    await s.next('conversation.item.done');
    // the stream breaks after two pieces; then the upstream answers 500
    e.up.script({ text: 'Partial answer that never ends properly.', chunks: 6, breakAfter: 2 }, { status: 500, errorMessage: 'upstream exploded' });
    for (let i = 0; i < 2; i++) {
      s.send({ type: 'response.create', event_id: `evt_fail_${i}` });
      const events = await s.until('response.done');
      const err = events.find((x) => x.type === 'error');
      assert.ok(err, `an error event: ${JSON.stringify(s.types(events))}`);
      assert.equal(err.error.event_id, `evt_fail_${i}`);
      const done = events.at(-1).response;
      assert.equal(done.status, 'failed');
      assert.equal(done.status_details.type, 'failed');
      assert.equal(typeof done.status_details.error.code, 'string');
      assert.equal(typeof done.status_details.error.message, 'string');
      assert.equal(done.status_details.error.code, err.error.code);
      for (const item of done.output) assert.equal(item.status, 'incomplete');
    }
    assert.equal(s.closedWith, undefined);
    e.up.script({ text: 'Now it works.' });
    s.send({ type: 'response.create' });
    const ok = (await s.next('response.done')).response;
    assert.equal(ok.status, 'completed');
    assert.equal(ok.output[0].content[0].text, 'Now it works.');
    s.close();
  });
});

describe('realtime limits: an idle session, the longest session (pglite)', () => {
  let e: RtEnv;
  before(async () => {
    e = await setupRealtime({ env: { REALTIME_IDLE_MS: '600', REALTIME_MAX_SESSION_MS: '2500' } });
  });
  after(() => e.close());

  test('REALTIME_IDLE_MS: a session without an event is closed with session_idle_timeout', async () => {
    const s = await e.open();
    await s.next('session.created');
    const err = await s.next('error');
    assertError(err, 'session_idle_timeout', null);
    await waitFor(() => s.closedWith, { what: 'the close' });
    assert.equal(s.closedWith!.code, 1000);
    assert.ok(!s.types().includes('session.updated'));
  });

  test("REALTIME_IDLE_MS counts the client's time, not a stall of the server's own: an event waiting behind a stalled event loop keeps the session", async () => {
    const s = await e.open();
    await s.next('session.created');
    s.send({ type: 'input_audio_buffer.clear' });
    // this process (server and client alike) is held up for more than REALTIME_IDLE_MS, as on a busy machine: the
    // event waits unread while the idle clock's time passes, and its timer comes before the socket is read
    const until = Date.now() + 1500;
    while (Date.now() < until) {
      /* a stalled event loop */
    }
    await waitFor(() => s.closedWith || s.events.some((x) => x.type === 'input_audio_buffer.cleared'), { what: 'the answer or a close' });
    assert.ok(!s.events.some((x) => x.type === 'error'), JSON.stringify(s.events.find((x) => x.type === 'error')));
    assert.ok(s.types().includes('input_audio_buffer.cleared'));
    assert.equal(s.closedWith, undefined);
    s.close();
  });

  test('REALTIME_MAX_SESSION_MS: a busy session is closed at its age with session_expired', async () => {
    const s = await e.open();
    const created = (await s.next('session.created')).session;
    assert.ok(created.expires_at <= Math.ceil(Date.now() / 1000) + 3);
    // events keep it from being idle
    const keep = setInterval(() => s.closedWith || s.send({ type: 'input_audio_buffer.clear' }), 150);
    try {
      const err = await s.next('error');
      assertError(err, 'session_expired', null);
      await waitFor(() => s.closedWith, { what: 'the close' });
      assert.equal(s.closedWith!.code, 1000);
      assert.ok(s.types().filter((t) => t === 'input_audio_buffer.cleared').length > 3, 'the session was in use until it expired');
    } finally {
      clearInterval(keep);
    }
  });
});

describe('realtime limits: the idle clock starts again when a response ends (pglite)', () => {
  let e: RtEnv;
  before(async () => {
    e = await setupRealtime({ env: { REALTIME_IDLE_MS: '600' } });
  });
  after(() => e.close());

  test('a response longer than REALTIME_IDLE_MS: the session is not closed as idle the moment it ends', async () => {
    const s = await e.open();
    await s.next('session.created');
    s.send({ type: 'session.update', session: { output_modalities: ['text'], audio: { input: { turn_detection: null } } } });
    await s.next('session.updated');
    // the model writes for about 1.2 s, twice the idle bound
    e.up.script({ text: 'One two three four.', chunks: 4, delayMs: 300 });
    s.send({ type: 'response.create' });
    assert.equal((await s.next('response.done')).response.status, 'completed');
    // a negative check: the client has a moment to answer (a short bounded wait, half the bound, a tick's 150 ms twice)
    await quietFor(300);
    assert.equal(s.closedWith, undefined, 'the session is still open after its response');
    assert.ok(!s.events.some((x) => x.type === 'error'), JSON.stringify(s.events.find((x) => x.type === 'error')));
    s.close();
  });

  test("a response's admission that takes longer than REALTIME_IDLE_MS (the server's time) is not idleness", async () => {
    const s = await e.open();
    await s.next('session.created');
    s.send({ type: 'session.update', session: { output_modalities: ['text'], audio: { input: { turn_detection: null } } } });
    await s.next('session.updated');
    // the next admission (the key verified again, its rate limit and budget: a slow database, a remote limiter)
    // is held for twice the idle bound
    const held = await withSlowAdmission(e, 1_200, async () => {
      e.up.script({ text: 'Admitted late.' });
      s.send({ type: 'response.create' });
      assert.equal((await s.next('response.done')).response.status, 'completed');
    });
    assert.ok(held >= 1, 'the admission did not verify the key');
    assert.equal(s.closedWith, undefined, 'closed as idle while its response was being admitted');
    assert.ok(!s.events.some((x) => x.type === 'error'), JSON.stringify(s.events.find((x) => x.type === 'error')));
    s.close();
  });
});

describe('realtime limits: sessions per key and per server, a slow reader (pglite)', () => {
  let e: RtEnv;
  const BUFFERED = 64 * 1024;
  before(async () => {
    e = await setupRealtime({
      env: { REALTIME_MAX_SESSIONS_PER_KEY: '2', REALTIME_MAX_SESSIONS: '3', REALTIME_MAX_BUFFERED_BYTES: String(BUFFERED), REALTIME_IDLE_MS: '3000' },
    });
  });
  after(() => e.close());

  test("a plain GET /v1/realtime is 426; past a key's sessions and past the server's, 429 session_limit_reached; a closed session frees its place", async (t) => {
    const plain = await fetch(`${e.url}/v1/realtime`, { headers: { authorization: `Bearer ${e.key}` } });
    assert.equal(plain.status, 426);
    assert.equal(plain.headers.get('upgrade'), 'websocket');
    assert.equal(((await plain.json()) as any).error.code, 'upgrade_required');
    // a session refused after the upgrade (an unknown model) gives its place back
    for (let i = 0; i < 3; i++) {
      const bad = RawSession.open(e, { query: 'model=no-such-model' });
      await bad.opened;
      assert.equal((await bad.closed).code, 1008);
    }
    // the other keys first (their records take a while on a busy machine; the sessions below must not wait idle)
    const bobKey = await e.t.inferenceKey('bob');
    const carolKey = await e.t.inferenceKey('carol');
    // the open sessions stay in use (REALTIME_IDLE_MS is 3 s here): what the checks below take is not idleness
    const inUse: Session[] = [];
    const keep = setInterval(() => inUse.forEach((x) => x.closedWith || x.send({ type: 'input_audio_buffer.clear' })), 250);
    t.after(() => clearInterval(keep));
    // neither those nor a plain GET hold a place: the key still opens two sessions
    const a = await e.open();
    const b = await e.open();
    await a.next('session.created');
    await b.next('session.created');
    inUse.push(a, b);
    // the SDK's socket: 'unexpected-response' with 429
    await assert.rejects(e.open(), /upgrade refused: 429/);
    const raw = RawSession.open(e);
    const err: any = await raw.opened.catch((x) => x);
    assert.equal(err.status, 429);
    const body = JSON.parse(err.body);
    assert.equal(body.error.code, 'session_limit_reached');
    assert.match(body.error.message, /REALTIME_MAX_SESSIONS_PER_KEY/);
    // another key opens one, the server's third; then the server is full for every key
    const c = await e.open({ key: bobKey });
    await c.next('session.created');
    inUse.push(c);
    const full: any = await RawSession.open(e, { key: carolKey }).opened.catch((x) => x);
    assert.equal(full?.status, 429, 'the server is full');
    assert.match(JSON.parse(full.body).error.message, /REALTIME_MAX_SESSIONS\)/);
    // a closed session frees its place
    a.close();
    await waitFor(() => a.closedWith, { what: 'the close' });
    const d = await waitFor(
      async () => {
        try {
          return await e.open();
        } catch {
          return undefined;
        }
      },
      { what: 'a place freed' },
    );
    await d.next('session.created');
    clearInterval(keep);
    for (const x of [b, c, d]) x.close();
    await waitFor(() => [b, c, d].every((x) => x.closedWith), { what: 'the closes' });
  });

  test('a slow reader: the response waits (bounded output) and goes on when the client reads again', async () => {
    await waitFor(async () => (await fetch(`${e.url}/v1/models`, { headers: { authorization: `Bearer ${e.key}` } })).ok);
    const s = RawSession.open(e);
    await s.opened;
    await s.next('session.created');
    s.send({ type: 'session.update', session: { output_modalities: ['text'], audio: { input: { turn_detection: null } } } });
    await s.next('session.updated');
    // 40000 events (about 7 MB, a short text in tiny pieces): more than the kernel's socket buffers hold
    e.up.script({ text: Array.from({ length: 40_000 }, () => 'a') });
    const server = () => [...e.t.app.websocketServer.clients].find((c) => c.readyState === WebSocket.OPEN);
    const sock = (s.ws as any)._socket as import('node:net').Socket;
    sock.pause();
    s.send({ type: 'response.create' });
    // the server's queue towards the client passes the bound once the kernel's buffers are full; then it waits
    await waitFor(() => (server()?.bufferedAmount ?? 0) > BUFFERED, { what: 'the output to back up', timeoutMs: 30_000 });
    let most = 0;
    for (let i = 0; i < 20; i++) {
      most = Math.max(most, server()?.bufferedAmount ?? 0);
      // a negative check: the queue does not grow while the client reads nothing (a short bounded wait)
      await quietFor(20);
    }
    assert.ok(most < BUFFERED + 1024, `the server waits for its reader: ${most} bytes queued`);
    assert.equal(s.closedWith, undefined);
    sock.resume();
    const done = (await s.next('response.done', 60_000)).response;
    assert.equal(done.status, 'completed');
    const text = s.events
      .filter((x) => x.type === 'response.output_text.delta')
      .map((x) => x.delta)
      .join('');
    assert.equal(text, 'a'.repeat(40_000), 'every piece arrived');
    assert.equal(s.closedWith, undefined);
    s.close();
  });

  test('a client that never reads is closed (slow_consumer): one that asks and never reads, one that stops reading during a response', async () => {
    const serverSide = () => [...e.t.app.websocketServer.clients];
    const openCount = () => serverSide().filter((c) => c.readyState === WebSocket.OPEN).length;
    // asks for a 2 s item again and again (128 KB each) and reads none of it
    const s = RawSession.open(e);
    await s.opened;
    await s.next('session.created');
    s.send({ type: 'session.update', session: { audio: { input: { turn_detection: null } } } });
    await s.next('session.updated');
    append(s as never, silence(2), 500);
    s.send({ type: 'input_audio_buffer.commit' });
    const id = (await s.next('input_audio_buffer.committed')).item_id;
    await s.next('conversation.item.done');
    const sock = (s.ws as any)._socket as import('node:net').Socket;
    sock.pause();
    for (let i = 0; i < 300; i++) s.send({ type: 'conversation.item.retrieve', item_id: id });
    // the server closes its side (its close frame waits behind what the client did not read)
    await waitFor(() => openCount() === 0, { what: 'the server to close the session', timeoutMs: 30_000 });
    sock.resume();
    const closed = await s.closed;
    assert.equal(closed.code, 1008);
    assert.equal(closed.reason, 'slow_consumer');
    const err = s.events.find((x) => x.type === 'error');
    assertError(err, 'slow_consumer', null);
    assert.ok(s.events.filter((x) => x.type === 'conversation.item.retrieved').length < 300, 'the server stopped before answering everything');

    // stops reading during a long answer: the response waits, then the session is closed after REALTIME_IDLE_MS
    const r = RawSession.open(e);
    await r.opened;
    await r.next('session.created');
    r.send({ type: 'session.update', session: { output_modalities: ['text'], audio: { input: { turn_detection: null } } } });
    await r.next('session.updated');
    e.up.script({ text: Array.from({ length: 8000 }, () => 'y'.repeat(999) + ' ') });
    const rs = (r.ws as any)._socket as import('node:net').Socket;
    rs.pause();
    r.send({ type: 'response.create' });
    await waitFor(() => openCount() === 0, { what: 'the server to close the stalled session', timeoutMs: 30_000 });
    rs.resume();
    const rc = await r.closed;
    assert.equal(rc.code, 1008);
    assert.equal(rc.reason, 'slow_consumer');
    assert.ok(!r.events.some((x) => x.type === 'response.done' && x.response.status === 'completed'));
  });
});

const RELAY_BUFFERED = 512 * 1024;
describe('realtime limits: a forwarded session whose client stops reading (pglite)', () => {
  let e: RtEnv;
  let up: RealtimeUpstream;
  before(async () => {
    up = await startRealtimeUpstream();
    e = await setupRealtime({
      textModel: false,
      warmEngines: false,
      models: [{ name: 'rt-up', provider: 'openai-compatible', type: 'realtime', base_url: up.url, upstream_model: 'gpt-realtime-2025' } as never],
      // 512 KiB: the relay waits each time its reader is that far behind, and the kernel's buffers (tens of MB here)
      // fill in fewer waits than at 64 KiB (~11 s of waits)
      env: { REALTIME_MAX_BUFFERED_BYTES: String(RELAY_BUFFERED), REALTIME_IDLE_MS: '1500' },
    });
  });
  after(async () => {
    await e.close();
    await up.close();
  });

  test('the relay waits for a slow reader (bounded), and closes one that reads nothing for REALTIME_IDLE_MS (slow_consumer)', async () => {
    // an answer longer than any socket buffers: 20,000 deltas of 100 ms of audio (~130 MB of events) that the upstream
    // makes as they are taken. With 2000 (13 MB) the kernel's buffers could take the whole answer (this machine's
    // tcp_rmem reaches 32 MB): nothing waited in the relay, and the session ended idle after its response.done
    up.configure({ audioDeltas: 20_000 });
    // this session's own server-side socket (an earlier test's may still be closing: its bufferedAmount is 0)
    const before = new Set(e.t.app.websocketServer.clients);
    const s = RawSession.open(e, { query: 'model=rt-up' });
    await s.opened;
    await s.next('session.created');
    const mine = [...e.t.app.websocketServer.clients].filter((c) => !before.has(c));
    assert.equal(mine.length, 1, 'one new server-side socket');
    const c = mine[0]!;
    const sock = (s.ws as any)._socket as import('node:net').Socket;
    sock.pause();
    s.send({ type: 'response.create' });
    // the client keeps writing while it reads nothing (its events are not idleness): what closes it must be the
    // relay's wait, not REALTIME_IDLE_MS counted from its last event while a loaded machine delays response.created
    const writing = setInterval(() => s.send({ type: 'input_audio_buffer.clear' }), 250);
    let most = 0;
    await waitFor(
      () => {
        most = Math.max(most, c.bufferedAmount);
        return c.readyState !== WebSocket.OPEN;
      },
      { what: 'the server to close the session', timeoutMs: 30_000, everyMs: 5 },
    );
    clearInterval(writing);
    sock.resume();
    const closed = await s.closed;
    assert.equal(closed.reason, 'slow_consumer', `closed by ${JSON.stringify(s.events.at(-1))}`);
    assert.equal(closed.code, 1008);
    assert.ok(most > 0 && most < RELAY_BUFFERED + 16 * 1024, `the relay waited for its reader: at most ${most} bytes queued`);
    assertError(
      s.events.find((x) => x.type === 'error'),
      'slow_consumer',
    );
    // the upstream is still making its ~130 MB answer when the relay closes it: on a loaded machine it takes a while to
    // see the close (a bound that catches a relay that never closes it, not a speed)
    await waitFor(() => up.connections.at(-1)?.closed !== undefined, { what: 'the upstream connection closed too', timeoutMs: 30_000 });
  });
});
