/**
 * The Realtime API on Portico's own engines, driven by the official SDK's realtime client (OpenAIRealtimeWS) over
 * a real WebSocket: a spoken question (made with Portico's own speech) in, a spoken and transcribed answer out;
 * server VAD; a tool call and its result; a barge-in that truncates; a transcription session; usage per turn.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { TEXT_MODEL, append, audioOf, setupRealtime, silence, speak, type RtEnv } from './util.js';
import { WebSocket } from 'ws';
import { usageRows } from '../helpers/usage.js';
import { stallWatch, waitFor } from '../helpers/wait.js';
import { voiceActivityStatus } from '../../src/engines/shared/vad/index.js';

describe("realtime: a pipeline of Portico's engines (pglite)", () => {
  let e: RtEnv;
  before(async () => {
    e = await setupRealtime({
      models: [
        {
          name: 'rt-priced',
          provider: 'pipeline',
          type: 'realtime',
          text: TEXT_MODEL,
          pricing: { input_per_million: 1_000_000, per_audio_second: 1, per_output_audio_second: 2 },
        } as never,
      ],
    });
  });
  after(() => e.close());

  // first in the file: this process's first session loads the voice activity detector while its client already sends
  test('events sent at once on open wait for session.created, which comes first; the detector loads without holding the event loop', async (t) => {
    // the route's first request compiles its schemas (~50-200 ms on this thread): done first, with a model that does
    // not exist (no session, no detector), so that what is measured below is the session's own open
    const warm = new WebSocket(`${e.url.replace('http', 'ws')}/v1/realtime?model=no-such-model`, { headers: { Authorization: `Bearer ${e.key}` } });
    await new Promise((r) => warm.once('close', r));
    const stalls = stallWatch();
    const sock = new WebSocket(`${e.url.replace('http', 'ws')}/v1/realtime?model=gpt-realtime`, { headers: { Authorization: `Bearer ${e.key}` } });
    const got: any[] = [];
    sock.on('message', (d) => got.push(JSON.parse(d.toString())));
    sock.on('open', () => {
      sock.send(JSON.stringify({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'hi' }] } }));
      sock.send(JSON.stringify({ type: 'conversation.item.retrieve', item_id: 'nope' }));
    });
    await waitFor(() => got.length >= 4, { what: 'four events' });
    assert.deepEqual(
      got.slice(0, 4).map((x) => x.type),
      ['session.created', 'conversation.item.added', 'conversation.item.done', 'error'],
    );
    sock.close();
    // Silero loaded for this session in its worker thread (~0.1-0.5 s there); on the main thread, the load stalled
    // the event loop about that long at once (it was one synchronous block but for the model file's read)
    const stallMs = stalls.stop();
    const vad = await voiceActivityStatus();
    t.diagnostic(`first session's open: longest event-loop stall ${stallMs.toFixed(1)} ms; Silero's load ${vad.loadMs?.toFixed(0)} ms in its worker`);
    if (vad.engine === 'silero')
      assert.ok(stallMs < vad.loadMs! / 2, `event-loop stall ${stallMs.toFixed(1)} ms while the detector loaded (${vad.loadMs?.toFixed(0)} ms in its worker)`);
  });

  test('session.created in the GA shape; session.update answers session.updated with what changed', async () => {
    const s = await e.open();
    const created = await s.next('session.created');
    const ss = created.session;
    assert.equal(ss.object, 'realtime.session');
    assert.equal(ss.type, 'realtime');
    assert.match(ss.id, /^sess_/);
    assert.equal(ss.model, 'gpt-realtime');
    assert.deepEqual(ss.output_modalities, ['audio']);
    assert.deepEqual(ss.audio.input.format, { type: 'audio/pcm', rate: 24000 });
    assert.deepEqual(ss.audio.output.format, { type: 'audio/pcm', rate: 24000 });
    assert.equal(ss.audio.output.voice, 'alloy');
    assert.equal(ss.audio.input.turn_detection.type, 'server_vad');
    assert.equal(ss.audio.input.transcription, null);
    assert.ok(ss.expires_at > Date.now() / 1000);
    s.send({
      type: 'session.update',
      session: {
        type: 'realtime',
        instructions: 'Be brief.',
        audio: {
          input: { format: { type: 'audio/pcmu' }, turn_detection: null, transcription: { model: 'whisper-1' } },
          output: { voice: 'echo', format: { type: 'audio/pcma' } },
        },
        tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: {} } }],
      },
    });
    const u = (await s.next('session.updated')).session;
    assert.equal(u.instructions, 'Be brief.');
    assert.deepEqual(u.audio.input.format, { type: 'audio/pcmu' });
    assert.deepEqual(u.audio.output.format, { type: 'audio/pcma' });
    assert.equal(u.audio.output.voice, 'echo');
    assert.equal(u.audio.input.turn_detection, null);
    assert.deepEqual(u.audio.input.transcription, { model: 'whisper-1' });
    assert.equal(u.tools[0].name, 'get_weather');
    assert.equal(u.id, ss.id);
    s.close();
  });

  test("a spoken question in (committed by the client), its transcript, and a spoken answer with its transcript out, in OpenAI's order", async () => {
    const question = await speak(e, 'What is the weather like today?');
    const answer = 'It is sunny and warm. Enjoy the day!';
    e.up.script({ text: answer, chunks: 5 });
    const s = await e.open();
    await s.next('session.created');
    s.send({ type: 'session.update', session: { type: 'realtime', audio: { input: { turn_detection: null, transcription: { model: 'whisper-1' } } } } });
    await s.next('session.updated');
    append(s, question);
    s.send({ type: 'input_audio_buffer.commit' });
    const committed = await s.next('input_audio_buffer.committed');
    assert.match(committed.item_id, /^item_/);
    const added = await s.next('conversation.item.added');
    assert.equal(added.item.id, committed.item_id);
    assert.equal(added.item.role, 'user');
    assert.equal(added.item.content[0].type, 'input_audio');
    const heard = await s.next('conversation.item.input_audio_transcription.completed');
    assert.equal(heard.item_id, committed.item_id);
    assert.ok(heard.transcript.trim().length > 0, 'the recognizer heard words');
    assert.equal(heard.usage.type, 'duration');
    assert.ok(Math.abs(heard.usage.seconds - question.length / 48000) < 0.05, `${heard.usage.seconds} s of audio`);
    s.send({ type: 'response.create' });
    const events = await s.until('response.done');
    const types = s.types(events).filter((t) => t !== 'response.output_audio.delta' && t !== 'response.output_audio_transcript.delta');
    assert.deepEqual(types, [
      'response.created',
      'rate_limits.updated',
      'response.output_item.added',
      'conversation.item.added',
      'response.content_part.added',
      'response.output_audio.done',
      'response.output_audio_transcript.done',
      'response.content_part.done',
      'response.output_item.done',
      'conversation.item.done',
      'response.done',
    ]);
    const done = events.at(-1).response;
    assert.equal(done.status, 'completed');
    assert.equal(done.object, 'realtime.response');
    const item = done.output[0];
    assert.equal(item.role, 'assistant');
    assert.equal(item.content[0].type, 'output_audio');
    assert.equal(item.content[0].transcript, answer);
    const transcript = events
      .filter((x) => x.type === 'response.output_audio_transcript.delta')
      .map((x) => x.delta)
      .join('');
    assert.equal(transcript.replace(/\s+/g, ' ').trim(), answer);
    const pcm = audioOf(events);
    const seconds = pcm.length / 48000;
    assert.ok(seconds > 1 && seconds < 8, `${seconds} s of speech for "${answer}"`);
    let loud = 0;
    for (let i = 0; i + 1 < pcm.length; i += 2) if (Math.abs(pcm.readInt16LE(i)) > 1000) loud++;
    assert.ok(loud > 2000, 'the audio is speech, not silence');
    // the text model heard the transcript as the user's message, after the session's instructions
    const sent = e.up.requests.at(-1)!.body as any;
    assert.equal(sent.messages[0].role, 'system');
    assert.equal(sent.messages.at(-1).role, 'user');
    assert.equal(sent.messages.at(-1).content, heard.transcript);
    assert.equal(done.usage.input_token_details.audio_tokens, Math.round((question.length / 48000) * 10));
    assert.ok(done.usage.output_token_details.audio_tokens > 0);
    assert.equal(done.usage.total_tokens, done.usage.input_tokens + done.usage.output_tokens);
    s.close();
  });

  test('server VAD: speech then silence is a turn (speech_started, speech_stopped, committed) and answered without response.create', async () => {
    const question = await speak(e, 'Tell me a joke please.');
    e.up.script({ text: 'Why did the chicken cross the road?' });
    const s = await e.open();
    await s.next('session.created');
    append(s, Buffer.concat([silence(0.5), question, silence(1)]));
    const started = await s.next('input_audio_buffer.speech_started');
    assert.ok(started.audio_start_ms >= 100 && started.audio_start_ms <= 700, `speech starts near 0.5 s minus the padding: ${started.audio_start_ms}`);
    const stopped = await s.next('input_audio_buffer.speech_stopped');
    assert.equal(stopped.item_id, started.item_id);
    const speechEnd = 500 + (question.length / 48000) * 1000;
    assert.ok(stopped.audio_end_ms > speechEnd - 400 && stopped.audio_end_ms < speechEnd + 900, `speech stops after ${speechEnd} ms plus the silence: ${stopped.audio_end_ms}`);
    const committed = await s.next('input_audio_buffer.committed');
    assert.equal(committed.item_id, started.item_id);
    const done = (await s.next('response.done')).response;
    assert.equal(done.status, 'completed');
    assert.equal(done.output[0].content[0].transcript, 'Why did the chicken cross the road?');
    s.close();
  });

  test('a tool call: the function_call item and its arguments, then the result as an item and the answer that uses it', async () => {
    e.up.script({ toolCalls: [{ id: 'call_w1', name: 'get_weather', arguments: ['{"city":', '"Paris"}'] }] }, { text: 'It is 21 degrees in Paris.' });
    const s = await e.open();
    await s.next('session.created');
    s.send({
      type: 'session.update',
      session: {
        type: 'realtime',
        output_modalities: ['text'],
        audio: { input: { turn_detection: null } },
        tools: [{ type: 'function', name: 'get_weather', description: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } }],
      },
    });
    await s.next('session.updated');
    s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Weather in Paris?' }] } });
    await s.next('conversation.item.done');
    s.send({ type: 'response.create' });
    const events = await s.until('response.done');
    const call = events.find((x) => x.type === 'response.function_call_arguments.done');
    assert.equal(call.name, 'get_weather');
    assert.equal(call.call_id, 'call_w1');
    assert.equal(call.arguments, '{"city":"Paris"}');
    assert.equal(
      events
        .filter((x) => x.type === 'response.function_call_arguments.delta')
        .map((x) => x.delta)
        .join(''),
      '{"city":"Paris"}',
    );
    const done = events.at(-1).response;
    assert.equal(done.output[0].type, 'function_call');
    assert.equal(done.output[0].status, 'completed');
    const req1 = e.up.requests.at(-1)!.body as any;
    assert.equal(req1.tools[0].function.name, 'get_weather');
    s.send({ type: 'conversation.item.create', item: { type: 'function_call_output', call_id: 'call_w1', output: '{"celsius":21}' } });
    await s.next('conversation.item.done');
    s.send({ type: 'response.create' });
    const second = await s.until('response.done');
    assert.equal(
      second
        .filter((x) => x.type === 'response.output_text.delta')
        .map((x) => x.delta)
        .join(''),
      'It is 21 degrees in Paris.',
    );
    assert.equal(second.find((x) => x.type === 'response.output_text.done').text, 'It is 21 degrees in Paris.');
    const req2 = e.up.requests.at(-1)!.body as any;
    const tool = req2.messages.find((m: any) => m.role === 'tool');
    assert.equal(tool.tool_call_id, 'call_w1');
    assert.equal(tool.content, '{"celsius":21}');
    assert.equal(req2.messages.find((m: any) => m.tool_calls)?.tool_calls[0].function.arguments, '{"city":"Paris"}');
    s.close();
  });

  test('barge-in: speech during the answer cancels it (turn_detected); truncating keeps only what was heard', async () => {
    const long =
      'This is the first sentence of a long answer. Here comes the second sentence of it. And a third one follows. A fourth sentence is here too. Finally the fifth sentence ends it.';
    // the model writes slowly (the answer is still being made when the user talks over it)
    e.up.script({ text: long, chunks: 10, delayMs: 500 }, { text: 'Sure.' });
    const interruption = await speak(e, 'Stop, wait a moment.');
    const s = await e.open();
    await s.next('session.created');
    s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Talk for a while.' }] } });
    await s.next('conversation.item.done');
    s.send({ type: 'response.create' });
    const first = await s.next('response.output_audio.delta');
    // the user talks over it; the client stops playing at once and says how much it played (1.2 s), as OpenAI's
    // clients do on speech_started
    append(s, interruption);
    await s.next('input_audio_buffer.speech_started');
    s.send({ type: 'conversation.item.truncate', item_id: first.item_id, content_index: 0, audio_end_ms: 1200 });
    // the rest of the user's turn (its end) comes after, as it does in real time
    append(s, silence(1));
    const cancelled = (await s.next('response.done')).response;
    assert.equal(cancelled.status, 'cancelled');
    assert.deepEqual(cancelled.status_details, { type: 'cancelled', reason: 'turn_detected' });
    assert.equal(cancelled.output[0].status, 'incomplete');
    const truncated = await s.next('conversation.item.truncated');
    assert.equal(truncated.item_id, first.item_id);
    assert.equal(truncated.audio_end_ms, 1200);
    s.send({ type: 'conversation.item.retrieve', item_id: first.item_id });
    const kept = (await s.next('conversation.item.retrieved')).item.content[0].transcript as string;
    assert.ok(kept.length < long.length / 2, `the transcript keeps what 1.2 s said: "${kept}"`);
    assert.ok(kept.length > 0 && long.startsWith(kept), kept);
    // the turn that interrupted is answered, and the text model read the truncated answer
    const next = (await s.next('response.done')).response;
    assert.equal(next.status, 'completed');
    const sent = e.up.requests.at(-1)!.body as any;
    const assistant = sent.messages.find((m: any) => m.role === 'assistant');
    assert.equal(assistant.content, kept);
    s.close();
  });

  test('a transcription session (?intent=transcription): turns are transcribed with delta and completed, no response', async () => {
    const words = await speak(e, 'Good morning everyone.');
    // the SDK's client has no intent parameter: a raw socket opens the URL as a browser would write it
    const sock = new WebSocket(`${e.front.url.replace('https', 'wss')}/v1/realtime?intent=transcription`, { ca: e.front.ca, headers: { Authorization: `Bearer ${e.key}` } });
    const got: any[] = [];
    sock.on('message', (d) => got.push(JSON.parse(d.toString())));
    await new Promise((r) => sock.once('open', r));
    await waitFor(() => got.some((x) => x.type === 'session.created'), { what: 'session.created' });
    const created = got.find((x) => x.type === 'session.created').session;
    assert.equal(created.type, 'transcription');
    assert.equal(created.object, 'realtime.transcription_session');
    assert.equal(created.audio.input.transcription.model, 'whisper-1');
    const chunk = Buffer.concat([silence(0.3), words, silence(1)]);
    for (let i = 0; i < chunk.length; i += 4800) sock.send(JSON.stringify({ type: 'input_audio_buffer.append', audio: chunk.subarray(i, i + 4800).toString('base64') }));
    await waitFor(() => got.some((x) => x.type === 'conversation.item.input_audio_transcription.completed'), { what: 'the transcript', timeoutMs: 60_000 });
    const completed = got.find((x) => x.type === 'conversation.item.input_audio_transcription.completed');
    assert.ok(completed.transcript.length > 0);
    assert.equal(
      got
        .filter((x) => x.type === 'conversation.item.input_audio_transcription.delta')
        .map((x) => x.delta)
        .join('')
        .trim(),
      completed.transcript,
    );
    assert.ok(!got.some((x) => x.type === 'response.created'), 'a transcription session makes no responses');
    sock.send(JSON.stringify({ type: 'response.create' }));
    await waitFor(() => got.some((x) => x.type === 'error'), { what: 'the error' });
    assert.equal(got.find((x) => x.type === 'error').error.param, 'type');
    sock.close();
  });

  test('usage: one ledger record per response under "realtime", priced by the model (tokens, audio seconds in and out)', async () => {
    e.up.script({ text: 'Priced answer.', usage: { prompt_tokens: 3, completion_tokens: 2 } });
    const s = await e.open({ model: 'rt-priced' });
    await s.next('session.created');
    const q = await speak(e, 'Hello.');
    s.send({ type: 'session.update', session: { type: 'realtime', audio: { input: { turn_detection: null } } } });
    await s.next('session.updated');
    append(s, q);
    s.send({ type: 'input_audio_buffer.commit' });
    s.send({ type: 'response.create' });
    const done = (await s.next('response.done')).response;
    const outSeconds = audioOf(s.events).length / 48000;
    const inSeconds = q.length / 48000;
    const rows = await usageRows(e.t, 'rt-priced');
    assert.equal(rows.length, 1);
    const r = rows[0]!;
    assert.equal(r.operation, 'realtime');
    assert.equal(r.input_tokens, 3);
    assert.equal(r.output_tokens, 2);
    // 3 input tokens at 1 credit each, the seconds heard at 1, the seconds spoken at 2
    const expected = 3 * 1 + inSeconds * 1 + outSeconds * 2;
    assert.ok(Math.abs(Number(r.cost) - expected) / expected < 0.01, `${r.cost} credits, expected ${expected}`);
    assert.equal(done.usage.input_token_details.text_tokens, 3);
    s.close();
  });

  test('/v1/models lists the built-in realtime models with their parts', async () => {
    // which voice activity detector runs (Silero here: its model is installed by npm ci) is found at start, off its path
    const rt = await waitFor(
      async () => {
        const list: any = await e.client.models.list();
        return list.data.find((m: any) => m.id === 'gpt-realtime' && m.parts?.voice_activity);
      },
      { what: 'the realtime model with its parts' },
    );
    assert.equal(rt.type, 'realtime');
    assert.deepEqual(rt.parts, { transcription: 'whisper-1', text: TEXT_MODEL, speech: 'tts-1', voice_activity: 'silero' });
    const list: any = await e.client.models.list();
    assert.ok(list.data.some((m: any) => m.id === 'gpt-4o-realtime-preview'));
  });
});
