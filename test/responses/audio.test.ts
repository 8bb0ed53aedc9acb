/**
 * Spoken answers on POST /v1/responses (modalities ["text", "audio"]) on a scripted upstream: the output_audio
 * part after the text, spoken by Portico's voices, decoded by ffmpeg and measured; streamed sentence by sentence
 * while the model is still writing; stored, chained and charged as speech.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { testDatabases } from '../helpers/app.js';
import { MODEL, checkFraming, eventually, readSse, types, type Env } from './util.js';
import { assertPlausibleDuration, joinedAudio, probeBase64, readEvents, setupAudio, sharedGatedApp, spokenParts, type GatedUpstream } from './audio-util.js';
import { flacTotalSamples } from '../../src/codec/flac.js';

const SAY = 'Hello there. This is a spoken answer. And here is a third sentence.';
const audioBody = (extra: Record<string, unknown> = {}) => ({ model: MODEL, input: 'Talk to me.', modalities: ['text', 'audio'], ...extra });

/**
 * One app on PGlite for the JSON tests, the streaming tests (the gated model) and the stored ones: none of them
 * depends on what another left (each scripts its own answers, reads its own responses, counts the usage of a user of
 * its own), and an app with the built-in voices warmed costs seconds to build (PostgreSQL keeps an app of its own).
 * tts-1 is priced here (the usage test checks the price of the spoken characters).
 */
const withApp = sharedGatedApp((gated) => [
  { name: 'tts-1', provider: 'flite', type: 'speech', pricing: { per_character: 0.001 } } as never,
  { name: 'gated', provider: 'openai-compatible', base_url: gated, type: 'text' } as never,
]);

describe('spoken answers: JSON (pglite)', () => {
  let e: Env;
  before(async () => {
    ({ e } = await withApp());
  });

  test('the message carries the text, then an output_audio part whose audio says it (wav: 24 kHz 16-bit mono, lengths filled in)', async () => {
    e.up.script({ text: SAY, chunks: 4 });
    const r: any = await e.client.responses.create(audioBody({ audio: { voice: 'alloy', format: 'wav' } }) as never);
    assert.equal(r.status, 'completed');
    assert.equal(r.output_text, SAY);
    const { text, audio } = spokenParts(r);
    assert.equal(text.text, SAY);
    assert.equal(audio.transcript, SAY, 'the transcript is the text that was spoken');
    const bytes = Buffer.from(audio.data, 'base64');
    assert.equal(bytes.toString('ascii', 0, 4), 'RIFF');
    assert.equal(bytes.readUInt32LE(4), bytes.length - 8, 'the RIFF length is the real one (not the streamed 0xFFFFFFFF)');
    assert.equal(bytes.readUInt32LE(40), bytes.length - 44, 'the data length is the real one');
    const p = await probeBase64(audio.data, 'wav');
    assert.equal(p.codec, 'pcm_s16le');
    assert.equal(p.sampleRate, 24000);
    assert.equal(p.channels, 1);
    await assertPlausibleDuration(e, p.duration, SAY);
    // the model was asked for text as usual: nothing about audio goes upstream
    assert.equal(e.last().modalities, undefined);
    assert.equal(e.last().audio, undefined);
  });

  test('every format decodes as what it says, with the same length; defaults are mp3 and alloy', async () => {
    const expected: Record<string, { codec: string; rate: number }> = {
      mp3: { codec: 'mp3', rate: 24000 },
      opus: { codec: 'opus', rate: 48000 },
      flac: { codec: 'flac', rate: 24000 },
      aac: { codec: 'aac', rate: 24000 },
      pcm16: { codec: 'pcm_s16le', rate: 24000 },
    };
    const line = 'The weather is fine today.';
    const durations: number[] = [];
    for (const [format, want] of Object.entries(expected)) {
      e.up.script({ text: line });
      const r: any = await e.client.responses.create(audioBody({ audio: { voice: 'echo', format } }) as never);
      const p = await probeBase64(spokenParts(r).audio.data, format);
      assert.equal(p.codec, want.codec, format);
      assert.equal(p.sampleRate, want.rate, format);
      durations.push(p.duration);
      await assertPlausibleDuration(e, p.duration, line, 'echo');
    }
    assert.ok(Math.max(...durations) - Math.min(...durations) < 0.5, `durations agree across formats: ${durations.join(', ')}`);
    // no audio object: mp3 in the default voice (alloy), the same audio as asking for it
    e.up.script({ text: line }, { text: line });
    const d: any = await e.client.responses.create(audioBody() as never);
    const a: any = await e.client.responses.create(audioBody({ audio: { voice: 'alloy', format: 'mp3' } }) as never);
    assert.equal((await probeBase64(spokenParts(d).audio.data, 'mp3')).codec, 'mp3');
    assert.equal(spokenParts(d).audio.data, spokenParts(a).audio.data);
  });

  test('the voice is the one asked for: another voice gives other audio; any order of modalities; ["audio"] alone is both', async () => {
    e.up.script({ text: 'Good morning.' }, { text: 'Good morning.' }, { text: 'Good morning.' });
    const alloy: any = await e.client.responses.create(audioBody({ modalities: ['audio', 'text'], audio: { voice: 'alloy', format: 'pcm16' } }) as never);
    const onyx: any = await e.client.responses.create(audioBody({ audio: { voice: 'onyx', format: 'pcm16' } }) as never);
    assert.notEqual(spokenParts(alloy).audio.data, spokenParts(onyx).audio.data);
    const only: any = await e.client.responses.create(audioBody({ modalities: ['audio'], audio: { voice: 'ash', format: 'flac' } }) as never);
    assert.equal(only.output_text, 'Good morning.');
    assert.equal(spokenParts(only).audio.transcript, 'Good morning.');
    // text only, and no modalities: no spoken part
    e.up.script({ text: 'Plain.' }, { text: 'Plain.' });
    for (const m of [['text'], undefined]) {
      const r: any = await e.client.responses.create({ model: MODEL, input: 'x', ...(m ? { modalities: m } : {}) } as never);
      assert.deepEqual(
        r.output[0].content.map((c: any) => c.type),
        ['output_text'],
      );
    }
  });

  test('text with nothing a voice can say: the spoken part is empty (no audio passed off as speech), the transcript is the text', async () => {
    e.up.script({ text: '...' });
    const r: any = await e.client.responses.create(audioBody({ audio: { format: 'mp3' } }) as never);
    assert.equal(r.status, 'completed');
    const { audio } = spokenParts(r);
    assert.equal(audio.data, '');
    assert.equal(audio.transcript, '...');
  });

  test('a message then a function call: the message is spoken, the call is not; usage counts the spoken characters as speech', async () => {
    e.up.script({ text: 'Let me check the weather.', toolCalls: [{ name: 'get_weather', arguments: '{"city":"Paris"}' }] });
    const r: any = await e.client.responses.create(
      audioBody({
        tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } }],
        audio: { format: 'opus' },
      }) as never,
    );
    assert.deepEqual(
      r.output.map((o: any) => o.type),
      ['message', 'function_call'],
    );
    assert.equal(r.output[1].arguments, '{"city":"Paris"}');
    const p = await probeBase64(spokenParts({ output: [r.output[0]] }).audio.data, 'opus');
    await assertPlausibleDuration(e, p.duration, 'Let me check the weather.');
  });

  test('usage: a speech record for the spoken characters (tts-1, its price) beside the responses record', async () => {
    const carolKey = await e.t.inferenceKey('carol');
    const carol = new OpenAI({ apiKey: carolKey, baseURL: e.url + '/v1', maxRetries: 0 });
    e.up.script({ text: SAY, usage: { prompt_tokens: 12, completion_tokens: 9 } });
    await carol.responses.create(audioBody({ audio: { format: 'mp3' } }) as never);
    e.up.script({ text: 'Not spoken.', usage: { prompt_tokens: 5, completion_tokens: 3 } });
    await carol.responses.create({ model: MODEL, input: 'x' });
    const jwt = await e.t.token('carol');
    const res = await e.t.app.inject({ method: 'GET', url: '/v1/portal/query/usage?group_by=model,operation', headers: { authorization: `Bearer ${jwt}` } });
    assert.equal(res.statusCode, 200, res.body);
    const rows = res.json().data.list as any[];
    const speech = rows.find((x: any) => x.operation === 'speech');
    const text = rows.find((x: any) => x.operation === 'responses');
    assert.ok(speech && text, JSON.stringify(rows));
    assert.equal(speech.model, 'tts-1');
    assert.equal(speech.characters, SAY.length, 'the characters the voice was given');
    assert.equal(speech.requests, 1, 'only the spoken answer is speech');
    assert.ok(Math.abs(speech.cost - SAY.length * 0.001) < 1e-9, `cost ${speech.cost}`);
    assert.equal(text.model, MODEL);
    assert.equal(text.requests, 2);
    assert.equal(text.input_tokens, 17);
  });
});

describe('spoken answers: streaming (pglite)', () => {
  let e: Env;
  let g: GatedUpstream;
  before(async () => {
    ({ e, g } = await withApp());
  });

  test('audio streams sentence by sentence while the model still writes; the joined deltas decode; the final object carries the whole part', async () => {
    // the model writes its first sentence and a half, then waits: the rest comes only once the client has audio
    // (or after 30 s, which fails the test): the first audio cannot wait for the whole text
    let openedBy: string | undefined;
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const timer = setTimeout(() => {
      openedBy ??= 'timeout';
      open();
    }, 30_000);
    g.script(['Hello there. ', 'This is a spoken '], gate, ['answer. ', 'And here is a third sentence.']);
    const res = await e.call('POST', '/v1/responses', { ...audioBody({ model: 'gated', audio: { voice: 'nova', format: 'mp3' } }), stream: true });
    const events = await readEvents(res, (ev) => {
      if (ev.type === 'response.audio.delta' && !openedBy) {
        openedBy = 'audio';
        open();
      }
    });
    clearTimeout(timer);
    assert.equal(openedBy, 'audio', 'the first audio came while the model was still writing');
    events.forEach((x, i) => assert.equal(x.sequence_number, i));
    const t = types(events);
    const firstAudio = t.indexOf('response.audio.delta');
    const afterGate = events.findIndex((x) => x.type === 'response.output_text.delta' && x.delta === 'answer. ');
    assert.ok(firstAudio > 0 && firstAudio < afterGate, `the first audio (event ${firstAudio}) comes before the rest of the text (event ${afterGate})`);
    // the spoken part: added after the text part, closed after the audio, before the message
    const added = events.find((x) => x.type === 'response.content_part.added' && x.content_index === 1);
    assert.deepEqual(added.part, { type: 'output_audio', data: '', transcript: '' });
    assert.deepEqual(t.slice(-5), ['response.audio.done', 'response.audio.transcript.done', 'response.content_part.done', 'response.output_item.done', 'response.completed']);
    assert.ok(t.indexOf('response.output_text.done') < t.indexOf('response.audio.done'));
    const msgId = events.find((x) => x.type === 'response.output_item.added').item.id;
    for (const x of events.filter((y) => y.type.startsWith('response.audio'))) {
      assert.equal(x.item_id, msgId);
      assert.equal(x.output_index, 0);
      assert.equal(x.content_index, 1);
    }
    // transcript deltas say the text, whole sentences at a time, and add up to it
    const transcript = events.filter((x) => x.type === 'response.audio.transcript.delta').map((x) => x.delta);
    assert.ok(transcript.length >= 3, `${transcript.length} transcript pieces`);
    assert.equal(transcript.join(''), SAY);
    assert.equal(events.find((x) => x.type === 'response.audio.transcript.done').transcript, SAY);
    // the pieces join into one decodable mp3 of the right length
    const joined = joinedAudio(events);
    assert.ok(events.filter((x) => x.type === 'response.audio.delta').length >= 3, 'several audio pieces');
    const p = await probeBase64(joined, 'mp3');
    assert.equal(p.codec, 'mp3');
    await assertPlausibleDuration(e, p.duration, SAY, 'nova');
    const done = events[events.length - 1].response;
    const { audio } = spokenParts(done);
    assert.equal(audio.data, joined, 'response.completed carries the whole audio');
    assert.equal(audio.transcript, SAY);
    assert.deepEqual(events.find((x) => x.type === 'response.content_part.done' && x.content_index === 1).part, audio);
    assert.deepEqual(events.find((x) => x.type === 'response.output_item.done').item, done.output[0]);
  });

  test('text that ends no sentence for a long while is spoken before it ends (cut at a break, past 240 characters)', async () => {
    let openedBy: string | undefined;
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const timer = setTimeout(() => {
      openedBy ??= 'timeout';
      open();
    }, 30_000);
    const runOn = Array.from({ length: 40 }, (_, i) => `item ${i} and`).join(' ');
    assert.ok(runOn.length > 300);
    g.script([runOn + ' '], gate, ['the end.']);
    const events = await readEvents(await e.call('POST', '/v1/responses', { ...audioBody({ model: 'gated', audio: { voice: 'alloy', format: 'pcm16' } }), stream: true }), (ev) => {
      if (ev.type === 'response.audio.delta' && !openedBy) {
        openedBy = 'audio';
        open();
      }
    });
    clearTimeout(timer);
    assert.equal(openedBy, 'audio', 'audio came before the sentence ended');
    const pieces = events.filter((x) => x.type === 'response.audio.transcript.delta').map((x) => x.delta);
    assert.ok(pieces[0].length <= 240 && pieces[0].endsWith(' '), `cut after a word: ${JSON.stringify(pieces[0])}`);
    assert.equal(pieces.join(''), runOn + ' the end.');
  });

  test('the SDK stream helper takes every event; its final response has the spoken part', async () => {
    e.up.script({ text: ['One sentence here. ', 'Another one there.'], delayMs: 100 });
    const s = e.client.responses.stream(audioBody({ audio: { voice: 'coral', format: 'wav' } }) as never);
    let pieces = 0;
    let seen = '';
    s.on('event', (ev: any) => {
      if (ev.type === 'response.audio.delta') pieces++;
      if (ev.type === 'response.audio.transcript.delta') seen += ev.delta;
    });
    const r: any = await s.finalResponse();
    assert.equal(r.status, 'completed');
    assert.ok(pieces > 0);
    assert.equal(seen, 'One sentence here. Another one there.');
    const { audio } = spokenParts(r, true);
    const p = await probeBase64(audio.data, 'wav');
    await assertPlausibleDuration(e, p.duration, 'One sentence here. Another one there.', 'coral');
  });

  test('a WAV stream: the pieces join into a file ffmpeg reads (streamed header), the final data has the real lengths', async () => {
    e.up.script({ text: ['Short one. ', 'Second.'], delayMs: 50 });
    const events = checkFraming(await readSse(await e.call('POST', '/v1/responses', { ...audioBody({ audio: { format: 'wav' } }), stream: true })));
    const joined = Buffer.from(joinedAudio(events), 'base64');
    assert.equal(joined.readUInt32LE(40), 0xffffffff, 'streamed WAV: the length is unknown when it starts');
    const p = await probeBase64(joined.toString('base64'), 'wav');
    const final = Buffer.from(spokenParts(events[events.length - 1].response).audio.data, 'base64');
    assert.equal(final.length, joined.length);
    assert.equal(final.readUInt32LE(40), final.length - 44);
    assert.ok(final.subarray(44).equals(joined.subarray(44)), 'the same samples');
    assert.ok(Math.abs((await probeBase64(final.toString('base64'), 'wav')).duration - p.duration) < 0.01);
  });

  test('a FLAC stream: the pieces say no length (streamed), the final data has STREAMINFO total samples, what the audio decodes to', async () => {
    e.up.script({ text: ['Short one. ', 'Second.'], delayMs: 50 });
    const events = checkFraming(await readSse(await e.call('POST', '/v1/responses', { ...audioBody({ audio: { format: 'flac' } }), stream: true })));
    const joined = Buffer.from(joinedAudio(events), 'base64');
    assert.equal(flacTotalSamples(joined), 0, 'streamed FLAC: the length is unknown when it starts');
    const final = Buffer.from(spokenParts(events[events.length - 1].response).audio.data, 'base64');
    assert.equal(final.length, joined.length);
    const samples = Math.round((await probeBase64(final.toString('base64'), 'flac')).duration * 24000);
    assert.ok(samples > 24000 * 0.5, `${samples} samples`);
    assert.equal(flacTotalSamples(final), samples, 'the real count of samples');
    assert.ok(final.subarray(42).equals(joined.subarray(42)), 'the same frames');
  });
});

for (const db of testDatabases()) {
  describe(`spoken answers: stored, chained, background (${db})`, () => {
    let e: Env;
    let bob: OpenAI;
    before(async () => {
      e = db === 'pglite' ? (await withApp()).e : await setupAudio(db);
      bob = new OpenAI({ apiKey: await e.t.inferenceKey('bob'), baseURL: e.url + '/v1', maxRetries: 0 });
    });
    after(async () => {
      if (db !== 'pglite') await e.close();
    });

    test('GET returns the audio; chaining gives the model the transcript (as text), never the audio; input_items work', async () => {
      e.up.script({ text: 'My answer is yes.' });
      const r1: any = await e.client.responses.create(audioBody({ input: 'Will it rain?', audio: { format: 'flac' } }) as never);
      const got: any = await e.client.responses.retrieve(r1.id);
      assert.deepEqual(got.output, r1.output, 'the stored object keeps the spoken part');
      assert.equal((await probeBase64(spokenParts(got).audio.data, 'flac')).codec, 'flac');
      // another user cannot read it
      await assert.rejects(bob.responses.retrieve(r1.id), (err: any) => err.status === 404);
      e.up.script({ text: 'You asked about rain.' });
      const r2: any = await e.client.responses.create(audioBody({ previous_response_id: r1.id, input: 'What did I ask?', audio: { format: 'mp3' } }) as never);
      const sent = e.last();
      assert.deepEqual(sent.messages, [
        { role: 'user', content: 'Will it rain?' },
        { role: 'assistant', content: 'My answer is yes.' },
        { role: 'user', content: 'What did I ask?' },
      ]);
      assert.ok(!JSON.stringify(sent).includes(spokenParts(r1).audio.data.slice(0, 40)), 'no audio upstream');
      const items = await e.client.responses.inputItems.list(r2.id);
      assert.equal(items.data.length, 1);
      assert.equal((items.data[0] as any).content[0].text, 'What did I ask?');
      // without storage: the client sends the spoken message back; the model reads its text once
      e.up.script({ text: 'Fine.' });
      await e.client.responses.create({ model: MODEL, store: false, input: [...(r1.output as any[]), { role: 'user', content: 'And now?' }] } as never);
      assert.deepEqual(e.last().messages[0], { role: 'assistant', content: 'My answer is yes.' });
      // a spoken part alone (no text part) is read as its transcript
      e.up.script({ text: 'Ok.' });
      await e.client.responses.create({
        model: MODEL,
        input: [
          { role: 'assistant', content: [{ type: 'output_audio', data: 'AAAA', transcript: 'I said this.' }] },
          { role: 'user', content: 'Go on.' },
        ],
      } as never);
      assert.deepEqual(e.last().messages[0], { role: 'assistant', content: 'I said this.' });
    });

    test('background: the replay carries the audio events; the stored object the whole part', async () => {
      e.up.script({ text: ['First sentence. ', 'Second sentence.'], delayMs: 100 });
      const q: any = await e.client.responses.create(audioBody({ background: true, audio: { format: 'opus' } }) as never);
      const r: any = await eventually(async () => {
        const x: any = await e.client.responses.retrieve(q.id);
        return x.status === 'completed' ? x : undefined;
      }, 15_000);
      const events = checkFraming(await readSse(await e.call('GET', `/v1/responses/${q.id}?stream=true`)));
      const joined = joinedAudio(events);
      assert.equal(spokenParts(r).audio.data, joined);
      const p = await probeBase64(joined, 'opus');
      await assertPlausibleDuration(e, p.duration, 'First sentence. Second sentence.');
    });
  });
}
