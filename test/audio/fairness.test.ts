/**
 * Issue 22, §5: the embedded audio engines are shared fairly between keys, through the real route and the real
 * scheduler (src/audio/scheduler.ts). The recognizer here is a scripted pocketsphinx command line (a configured
 * `provider: pocketsphinx` model whose `binary` is a script): each decoder process it runs says when it started
 * and how much audio it got, then waits until the test lets it finish. So the order of events is the test's to
 * watch and to decide, whatever the speed of the machine:
 * - another key's short clip gets the first slot to free, not a turn after one key's long uploads (which today's
 *   FIFO of whole uploads made it wait for: 418.9 s in the issue);
 * - a key over its queued-seconds cap is refused (429 with retry-after), before anything more is queued;
 * - a request whose wait would pass AUDIO_MAX_WAIT_MS is a 503 engine_overloaded with retry-after;
 * - a client that goes away leaves the queue at once, and its decoders are stopped.
 * Speech (the embedded voices, real flite) gets the same two refusals and the same order of turns.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import OpenAI, { toFile } from 'openai';
import { NO_VOICE_WARM_UP, buildTestApp, type TestApp } from '../helpers/app.js';
import type { ModelSpec } from '../../src/models/config.js';
import { eventually, wavFile } from './helpers.js';
import { FakeDecoder, PATIENCE, alive } from './fake-decoder.js';

/** `seconds` of silence, 16 kHz mono WAV (the scripted decoder reads only its length) */
const silence = (seconds: number) => wavFile(new Int16Array(Math.round(seconds * 16000)), 16000);

async function keyOf(t: TestApp, user: string): Promise<{ key: string; id: string; openai: OpenAI }> {
  const res = await t.app.inject({
    method: 'POST',
    url: '/v1/portal/api-keys',
    headers: { authorization: `Bearer ${await t.token(user)}` },
    payload: { name: user },
  });
  assert.equal(res.statusCode, 200, res.body);
  const { api_key: key, id } = res.json().data as { api_key: string; id: string };
  return { key, id, openai: new OpenAI({ apiKey: key, baseURL: `${(t as TestApp & { url: string }).url}/v1`, maxRetries: 0, timeout: 600_000 }) };
}

/** A transcription by fetch that can be abandoned; `outcome` says when it ended and how. */
function upload(t: TestApp & { url?: string }, key: string, audio: Buffer, model: string, ended: string[], name: string) {
  const ac = new AbortController();
  const fd = new FormData();
  fd.append('file', new Blob([new Uint8Array(audio)]), 'a.wav');
  fd.append('model', model);
  const outcome = fetch(`${t.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: fd, signal: ac.signal }).then(
    async (r) => {
      ended.push(name);
      return { status: r.status, body: (await r.json()) as Record<string, any> };
    },
    (e: Error) => ({ status: 0, body: { aborted: e.name } as Record<string, any> }),
  );
  return { abort: () => ac.abort(), outcome };
}

const round = (x: number) => Math.round(x * 1000) / 1000;

const keyState = (t: TestApp, id: string) => t.runtime.audioEngines.transcriptionQueue.snapshot().keys.find((k) => k.key === id);

describe("transcription: a key's long uploads do not hold another key's short clip", () => {
  let t: TestApp & { url?: string };
  const decoder = new FakeDecoder();
  before(async () => {
    process.env.PORTICO_FAKE_DECODER_DIR = decoder.dir;
    t = await buildTestApp({
      listen: true,
      models: [decoder.spec('asr')],
      env: { AUDIO_PIECE_SECONDS: '10', AUDIO_MAX_QUEUED_SECONDS_PER_KEY: '110', AUDIO_MAX_WAIT_MS: '3600000' },
    });
  });
  after(async () => {
    decoder.close();
    await t.close();
  });

  test("turns go round the keys: B waits for one of A's pieces, not A's 120 s; A over its cap gets 429; A leaving empties its queue", async () => {
    const a = await keyOf(t, 'anna');
    const b = await keyOf(t, 'bert');
    const ended: string[] = [];
    // three uploads of 40 s: pieces of at most 10 s, the first two running at once, the rest (~104 s) waiting
    const long = [1, 2, 3].map((i) => upload(t, a.key, silence(40), 'asr', ended, `A${i}`));
    const first = await decoder.started(2);
    for (const s of first) assert.ok(s.seconds > 5 && s.seconds <= 10, `pieces, not whole uploads: ${s.seconds} s`);
    const queued = round(120 - first[0]!.seconds - first[1]!.seconds);
    await eventually(() => round(keyState(t, a.id)?.queued ?? 0) === queued, PATIENCE, "A's three uploads queued");

    // over the cap: refused at once, with when to come back; nothing of it queued
    const over = (await a.openai.audio.transcriptions.create({ file: await toFile(silence(10), 'a.wav'), model: 'asr' }).catch((e) => e)) as InstanceType<typeof OpenAI.APIError>;
    assert.ok(over instanceof OpenAI.APIError, String(over));
    assert.equal(over.status, 429);
    assert.equal(over.code, 'rate_limit_exceeded');
    assert.match((over.error as { message: string }).message, /AUDIO_MAX_QUEUED_SECONDS_PER_KEY/);
    assert.ok(Number(over.headers!.get('retry-after')) >= 1, 'retry-after');
    assert.ok(Number(over.headers!.get('retry-after-ms')) >= 1000, 'retry-after-ms');
    assert.equal(round(keyState(t, a.id)!.queued), queued);

    // B's 2-s clip
    const short = upload(t, b.key, silence(2), 'asr', ended, 'B');
    await eventually(() => keyState(t, b.id)?.queued === 2, PATIENCE, "B's clip queued");
    // the first slot to free goes to B, which holds none, before the rest of A's queue
    decoder.release(first[0]!);
    const third = (await decoder.started(3))[2]!;
    assert.equal(third.seconds, 2, "B's clip had the next turn, before the rest of A's ~104 s");
    decoder.release(third);
    const bAnswer = await short.outcome;
    assert.equal(bAnswer.status, 200, JSON.stringify(bAnswer.body));
    assert.equal(bAnswer.body.text, 'Piece2', 'the scripted decoder names the length it got');
    assert.deepEqual(ended, ['B'], 'B answered while every upload of A still waits');

    // A goes away: its queue empties at once and its running decoder is stopped
    const running = decoder.starts().filter((s) => !decoder.released(s));
    assert.ok(running.length >= 1);
    for (const u of long) u.abort();
    await eventually(() => keyState(t, a.id) === undefined, PATIENCE, "A's queue emptied");
    await eventually(() => running.every((s) => !alive(s.pid)), PATIENCE, "A's decoders stopped");
    const startsAfter = decoder.starts().length;
    assert.deepEqual(t.runtime.audioEngines.transcriptionQueue.snapshot(), { slots: 2, running: 0, speed: t.runtime.audioEngines.transcriptionQueue.speed, keys: [] });
    for (const u of long) assert.equal((await u.outcome).status, 0);
    assert.equal(decoder.starts().length, startsAfter, 'nothing of A started after it left');
  });

  test('a long upload in pieces is one transcript on the whole time line, and charged once for its length', async () => {
    const c = await keyOf(t, 'cleo');
    const ended: string[] = [];
    const before = decoder.starts().length;
    const u = upload(t, c.key, silence(25), 'asr', ended, 'C');
    for (let n = before + 1; n <= before + 3; n++) decoder.release((await decoder.started(n))[n - 1]!);
    const r = await u.outcome;
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const seconds = decoder
      .starts()
      .slice(before)
      .map((s) => s.seconds);
    assert.equal(seconds.length, 3);
    assert.ok(Math.abs(seconds.reduce((x, y) => x + y, 0) - 25) < 0.01, `pieces cover the audio: ${seconds}`);
    assert.match(r.body.text, /^Piece8 Piece8 Piece8$/, 'one segment per piece, in order');
    assert.deepEqual(r.body.usage, { type: 'duration', seconds: 25 });
    await t.services.usage.flush();
    const rows = await t.services.db.db.selectFrom('usage_records').select(['audio_seconds']).where('user_id', '=', 'cleo').execute();
    assert.deepEqual(
      rows.map((x) => Number(x.audio_seconds)),
      [25],
    );
  });
});

describe('transcription: a wait past AUDIO_MAX_WAIT_MS is a 503 with retry-after', () => {
  let t: TestApp & { url?: string };
  const decoder = new FakeDecoder();
  before(async () => {
    process.env.PORTICO_FAKE_DECODER_DIR = decoder.dir;
    t = await buildTestApp({ listen: true, models: [decoder.spec('asr')], env: { AUDIO_PIECE_SECONDS: '5', AUDIO_MAX_WAIT_MS: '10000' } });
  });
  after(async () => {
    decoder.close();
    await t.close();
  });

  test("A's second upload would wait behind A's first (~290 s of audio): 503; B's clip waits for a slot: admitted and served", async () => {
    const a = await keyOf(t, 'anna');
    const b = await keyOf(t, 'bert');
    const ended: string[] = [];
    const long = upload(t, a.key, silence(300), 'asr', ended, 'A1');
    const first = await decoder.started(2);
    const queued = round(300 - first[0]!.seconds - first[1]!.seconds);
    await eventually(() => round(keyState(t, a.id)?.queued ?? 0) === queued, PATIENCE, "A's upload queued");
    const busy = (await a.openai.audio.transcriptions.create({ file: await toFile(silence(10), 'a.wav'), model: 'asr' }).catch((e) => e)) as InstanceType<typeof OpenAI.APIError>;
    assert.ok(busy instanceof OpenAI.APIError, String(busy));
    assert.equal(busy.status, 503);
    assert.equal(busy.code, 'engine_overloaded');
    assert.equal(busy.type, 'server_error');
    assert.match((busy.error as { message: string }).message, /would wait about \d+ s for its turn, longer than the 10 s allowed \(AUDIO_MAX_WAIT_MS\)/);
    const ms = Number(busy.headers!.get('retry-after-ms'));
    assert.ok(ms >= 1000, `retry-after-ms ${ms}`);
    assert.equal(busy.headers!.get('retry-after'), String(Math.ceil(ms / 1000)));
    assert.equal(round(keyState(t, a.id)!.queued), queued, 'the refused upload queued nothing');

    const short = upload(t, b.key, silence(2), 'asr', ended, 'B');
    await eventually(() => keyState(t, b.id)?.queued === 2, PATIENCE, "B's clip admitted");
    decoder.release(first[0]!);
    const next = (await decoder.started(3))[2]!;
    assert.equal(next.seconds, 2, "B's clip had the next turn");
    decoder.release(next);
    assert.equal((await short.outcome).status, 200);
    assert.deepEqual(ended, ['B']);
    long.abort();
    await eventually(() => keyState(t, a.id) === undefined, PATIENCE, "A's queue emptied");
  });
});

describe('whisper: pieces no shorter than its 30-s window, whatever AUDIO_PIECE_SECONDS says', () => {
  let t: TestApp & { url?: string };
  const dir = mkdtempSync(join(tmpdir(), 'portico-fake-whisper-'));
  // the binding's API (initWhisper -> transcribeData), recording the seconds of audio of each call
  const binding = join(dir, 'binding.mjs');
  writeFileSync(
    binding,
    `export const seconds = [];
export async function initWhisper() {
  return {
    transcribeData(audio) {
      seconds.push(audio.byteLength / 2 / 16000);
      return { stop: async () => {}, promise: Promise.resolve({ isAborted: false, language: 'en', result: ' Part.', segments: [{ text: ' Part.', t0: 0, t1: 1000 }] }) };
    },
    async release() {},
  };
}
`,
  );
  before(async () => {
    writeFileSync(join(dir, 'model.bin'), 'ggml');
    process.env.PORTICO_WHISPER_BINDING = pathToFileURL(binding).href;
    t = await buildTestApp({
      listen: true,
      models: [{ name: 'w', provider: 'whisper', type: 'transcription', path: join(dir, 'model.bin') } as ModelSpec],
      env: { AUDIO_PIECE_SECONDS: '5' },
    });
  });
  after(async () => {
    delete process.env.PORTICO_WHISPER_BINDING;
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('50 s on whisper: two pieces of 20-30 s (not ten of 5 s, each of which would cost a whole window), joined', async () => {
    const { openai } = await keyOf(t, 'wren');
    const r = await openai.audio.transcriptions.create({ file: await toFile(silence(50), 'a.wav'), model: 'w', response_format: 'verbose_json' });
    const fake = (await import(pathToFileURL(binding).href)) as { seconds: number[] };
    assert.equal(fake.seconds.length, 2, `pieces: ${fake.seconds}`);
    for (const x of fake.seconds) assert.ok(x > 20 && x <= 30, `a piece of ${x} s`);
    assert.equal(r.text, 'Part. Part.');
    assert.deepEqual(
      r.segments!.map((s) => s.start),
      [0, Math.round(fake.seconds[0]! * 1000) / 1000],
      'the second piece on its own time',
    );
  });
});

/**
 * Speech on the real embedded voices. The other work that fills the two synthesis slots is the test's own: turns
 * taken on the same scheduler the route uses (a "hog", holding them until the test lets go), so what the requests
 * meet is decided by the test, not by how fast flite runs here.
 */
describe('speech: the same queue per key, cap and wait limit', () => {
  let t: TestApp & { url?: string };
  before(async () => {
    t = await buildTestApp({ listen: true, env: { AUDIO_MAX_QUEUED_CHARACTERS_PER_KEY: '3000', AUDIO_MAX_WAIT_MS: '3600000' }, runtime: NO_VOICE_WARM_UP });
    await t.runtime.audioEngines.warmUp();
  });
  after(() => t.close());

  const queue = () => t.runtime.audioEngines.speechQueue;
  const state = (id: string) =>
    queue()
      .snapshot()
      .keys.find((k) => k.key === id);
  const text = (n: number) => Array.from({ length: n }, (_, i) => `This is sentence number ${i + 1} of a long text.`).join(' ');
  function speak(key: string, input: string, ended: string[], name: string) {
    const ac = new AbortController();
    const outcome = fetch(`${t.url}/v1/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tts-1', voice: 'alloy', input, response_format: 'pcm' }),
      signal: ac.signal,
    })
      .then(async (r) => {
        const bytes = Buffer.from(await r.arrayBuffer());
        ended.push(name);
        return { status: r.status, bytes };
      })
      .catch((e: Error) => ({ status: 0, bytes: Buffer.from(e.name) }));
    return { abort: () => ac.abort(), outcome };
  }

  test('a key over its queued characters gets 429; a key that leaves while waiting leaves the queue; B is spoken before the rest of A', async () => {
    const hog = queue().admit('(test hog)', 2);
    const held = [await hog.step(1), await hog.step(1)];
    const a = await keyOf(t, 'anna');
    const b = await keyOf(t, 'bert');
    const d = await keyOf(t, 'dora');
    const ended: string[] = [];
    const long = text(60);
    const first = speak(a.key, long, ended, 'A');
    await eventually(() => state(a.id)?.queued === long.length, PATIENCE, "A's text queued");

    const over = (await a.openai.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: text(12) }).catch((e) => e)) as InstanceType<typeof OpenAI.APIError>;
    assert.ok(over instanceof OpenAI.APIError, String(over));
    assert.equal(over.status, 429);
    assert.equal(over.code, 'rate_limit_exceeded');
    assert.match((over.error as { message: string }).message, /already has \d+ characters of speech waiting.*at most 3000 may wait \(AUDIO_MAX_QUEUED_CHARACTERS_PER_KEY\)/);
    assert.ok(Number(over.headers!.get('retry-after')) >= 1);
    assert.equal(state(a.id)?.queued, long.length, 'nothing of it queued');

    // D sends, then goes away while it waits: out of the queue at once, though no slot has freed
    const gone = speak(d.key, 'I will not wait.', ended, 'D');
    await eventually(() => state(d.id)?.waitingTurns === 1, PATIENCE, "D's turn waiting");
    gone.abort();
    await eventually(() => state(d.id) === undefined, PATIENCE, 'D left the queue');
    assert.equal(queue().snapshot().running, 2, 'the slots were still held');

    const short = speak(b.key, 'Hello there.', ended, 'B');
    await eventually(() => state(b.id)?.waitingTurns === 1, PATIENCE, "B's turn waiting");
    for (const h of held) h.done(false);
    hog.close();
    const bAnswer = await short.outcome;
    assert.equal(bAnswer.status, 200);
    assert.ok(bAnswer.bytes.length > 24000, `B's audio: ${bAnswer.bytes.length} bytes`);
    assert.deepEqual(
      ended.filter((n) => n !== 'D'),
      ['B'],
      "B was spoken while A's 60 sentences still had turns to take",
    );
    first.abort();
    await eventually(() => queue().snapshot().keys.length === 0 && queue().snapshot().running === 0, PATIENCE, 'A left: the queue is empty');
  });

  test('a request whose wait would pass the limit: 503 engine_overloaded with retry-after; served once the slots free', async () => {
    const c = await keyOf(t, 'cleo');
    // two turns of 100,000 characters running here: minutes of work ahead, under this app's limit of an hour
    const hog = queue().admit('(test hog)', 0, { unchecked: true });
    const held = [await hog.step(100_000), await hog.step(100_000)];
    const limited = await buildTestApp({ listen: true, env: { AUDIO_MAX_WAIT_MS: '1000' } });
    try {
      const lq = limited.runtime.audioEngines.speechQueue;
      // ten million characters: hours of work ahead, at any speed of this machine, against a limit of a second
      const lhog = lq.admit('(test hog)', 0, { unchecked: true });
      const lheld = [await lhog.step(10_000_000), await lhog.step(10_000_000)];
      const lc = await keyOf(limited, 'cleo');
      const busy = (await lc.openai.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: 'Hello.' }).catch((e) => e)) as InstanceType<typeof OpenAI.APIError>;
      assert.ok(busy instanceof OpenAI.APIError, String(busy));
      assert.equal(busy.status, 503);
      assert.equal(busy.code, 'engine_overloaded');
      assert.match((busy.error as { message: string }).message, /speech engines of this server are busy.*longer than the 1 s allowed \(AUDIO_MAX_WAIT_MS\)/);
      const ms = Number(busy.headers!.get('retry-after-ms'));
      assert.ok(ms >= 1000);
      assert.equal(busy.headers!.get('retry-after'), String(Math.ceil(ms / 1000)));
      assert.deepEqual(
        lq.snapshot().keys.map((k) => k.key),
        ['(test hog)'],
        'nothing of the refused request queued',
      );
      for (const h of lheld) h.done(false);
      lhog.close();
      const ok = await lc.openai.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: 'Hello.', response_format: 'wav' });
      assert.ok(Buffer.from(await ok.arrayBuffer()).length > 1000);
    } finally {
      await limited.close();
    }
    // with this app's limit (an hour) a wait of minutes is admitted, and served once the slots free
    const ended: string[] = [];
    const waiting = speak(c.key, 'Hello.', ended, 'C');
    await eventually(() => state(c.id)?.waitingTurns === 1, PATIENCE, "C's turn waiting");
    for (const h of held) h.done(false);
    hog.close();
    assert.equal((await waiting.outcome).status, 200);
  });
});
