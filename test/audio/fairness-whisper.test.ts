/**
 * whisper runs one job at a time (its model's one context: TranscriptionEngine.concurrency 1), and its jobs wait for
 * that in the transcription scheduler, not inside the engine holding a slot (src/audio/scheduler.ts, lanes). Through
 * the real route and scheduler, with a fake whisper binding whose jobs end when the test says (prompt `wait`,
 * test/helpers/whisper-hang.ts) beside the scripted pocketsphinx decoder (./fake-decoder.ts), in one app of two
 * slots:
 * - while one whisper job runs and more wait, another key's pocketsphinx clip runs on the other slot;
 * - the waiting whisper jobs are handed to the binding one at a time, in the keys' fair order (round robin), not
 *   in the order they came;
 * - a waiting whisper request whose client leaves leaves the queue and frees nothing: the slots and the lane are
 *   whole at the end.
 * Only orders of events are compared, never durations.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { useHangingWhisper, type FakeWhisperState } from '../helpers/whisper-hang.js';
import { waitFor } from '../helpers/wait.js';
import { wavFile } from './helpers.js';
import { FakeDecoder, PATIENCE } from './fake-decoder.js';
import { PcmListenerService } from '../../src/audio/pcm-listener.js';

/** `seconds` of a tone, 16 kHz mono WAV (the fakes read only its length) */
const clip = (seconds: number) =>
  wavFile(
    new Int16Array(Math.round(seconds * 16000)).map((_, i) => Math.round(Math.sin(i * 0.3) * 3000)),
    16000,
  );

const ANSWER = { isAborted: false, language: 'en', result: ' Done.', segments: [{ text: ' Done.', t0: 0, t1: 500 }] };

describe('transcription: whisper one job at a time, its waiting jobs holding no slot', () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-whisper-lane-'));
  const decoder = new FakeDecoder();
  let t: TestApp & { url?: string };
  let state: FakeWhisperState;
  before(async () => {
    const fake = await useHangingWhisper(dir);
    state = fake.state;
    process.env.PORTICO_FAKE_DECODER_DIR = decoder.dir;
    t = await buildTestApp({
      listen: true,
      models: [fake.model, decoder.spec('asr')],
      env: { AUDIO_MAX_WAIT_MS: '3600000', AUDIO_MAX_QUEUED_SECONDS_PER_KEY: '3600' },
    });
  });
  /** every request sent, abandoned at the end (a failed test leaves some waiting) */
  const sent: Array<{ abort(): void }> = [];
  after(async () => {
    delete process.env.PORTICO_WHISPER_BINDING;
    for (const u of sent) u.abort();
    // the fake's `wait` jobs end only when told, aborted or not: those handed to it until the app is closed are
    // ended as they come, so that the close waits for none of them
    const ender = setInterval(() => {
      for (const j of state.jobs) if (!j.settled) j.resolve(ANSWER);
    }, 10);
    try {
      decoder.close();
      await t.close();
    } finally {
      clearInterval(ender);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  async function keyOf(user: string): Promise<{ key: string; id: string }> {
    const res = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${await t.token(user)}` }, payload: { name: user } });
    assert.equal(res.statusCode, 200, res.body);
    const d = res.json().data as { api_key: string; id: string };
    return { key: d.api_key, id: d.id };
  }

  /** a transcription by fetch that can be abandoned (prompt `wait`: the fake whisper job ends when the test says) */
  function upload(key: string, seconds: number, model: string) {
    const ac = new AbortController();
    const fd = new FormData();
    fd.append('file', new Blob([new Uint8Array(clip(seconds))]), 'a.wav');
    fd.append('model', model);
    fd.append('prompt', 'wait');
    const outcome = fetch(`${t.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: fd, signal: ac.signal }).then(
      async (r) => ({ status: r.status, body: (await r.json()) as Record<string, any> }),
      (e: Error) => ({ status: 0, body: { aborted: e.name } as Record<string, any> }),
    );
    const u = { abort: () => ac.abort(), outcome };
    sent.push(u);
    return u;
  }

  const queue = () => t.runtime.audioEngines.transcriptionQueue;
  const waiting = (id: string) =>
    queue()
      .snapshot()
      .keys.find((k) => k.key === id)?.waitingTurns ?? 0;

  test("another key's pocketsphinx clip runs while whisper's second job waits; whisper's jobs go one at a time in the keys' order; one that leaves frees nothing", async () => {
    const [a, b, c, d] = await Promise.all(['anna', 'bert', 'cleo', 'dora'].map(keyOf));
    // A: three whisper requests of 1, 2 and 3 s (the fake records each job's seconds: that is how they are told apart)
    const a1 = upload(a!.key, 1, 'w');
    await waitFor(() => state.jobs.length === 1, { what: "A's first whisper job handed to the binding", timeoutMs: PATIENCE });
    const a2 = upload(a!.key, 2, 'w');
    const a3 = upload(a!.key, 3, 'w');
    await waitFor(() => waiting(a!.id) === 2, { what: "A's second and third whisper requests waiting in the scheduler (not in a slot)", timeoutMs: PATIENCE });
    // C's whisper request after them; D's too, which its client abandons while it waits
    const c4 = upload(c!.key, 4, 'w');
    await waitFor(() => waiting(c!.id) === 1, { what: "C's whisper request waiting", timeoutMs: PATIENCE });
    const d5 = upload(d!.key, 5, 'w');
    await waitFor(() => waiting(d!.id) === 1, { what: "D's whisper request waiting", timeoutMs: PATIENCE });
    d5.abort();
    await waitFor(
      () =>
        queue()
          .snapshot()
          .keys.every((k) => k.key !== d!.id),
      { what: "D's request gone from the queue", timeoutMs: PATIENCE },
    );
    assert.equal((await d5.outcome).status, 0);
    assert.equal(queue().snapshot().running, 1, 'one slot taken (the first whisper job), nothing freed by the one that left');

    // B's pocketsphinx clip, after all of them: it takes the free slot while whisper's first job still runs
    const b1 = upload(b!.key, 2, 'asr');
    const [p] = await decoder.started(1);
    assert.equal(state.jobs.length, 1, 'no second whisper job was handed to the binding');
    assert.equal(state.jobs[0]!.settled, false, "B's clip ran beside whisper's first job, not after it");
    decoder.release(p!);
    const bAnswer = await b1.outcome;
    assert.equal(bAnswer.status, 200, JSON.stringify(bAnswer.body));

    // whisper's jobs, one at a time: A's first, then A's second (A was in line before C came), C's, then A's third
    state.jobs[0]!.resolve(ANSWER);
    assert.equal((await a1.outcome).status, 200);
    for (const [n, seconds] of [
      [2, 2],
      [3, 4],
      [4, 3],
    ] as const) {
      await waitFor(() => state.jobs.length === n, { what: `whisper job ${n}`, timeoutMs: PATIENCE });
      assert.equal(state.jobs[n - 1]!.seconds, seconds, `job ${n}: ${state.jobs.map((j) => j.seconds)}`);
      assert.equal(state.running, 1);
      state.jobs[n - 1]!.resolve(ANSWER);
    }
    for (const u of [a2, a3, c4]) {
      const r = await u.outcome;
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.text, 'Done.');
    }
    assert.deepEqual(
      state.jobs.map((j) => j.seconds),
      [1, 2, 4, 3],
      "nothing of D's request reached the binding",
    );
    assert.equal(state.maxRunning, 1, 'never two jobs on the context');
    await waitFor(() => queue().snapshot().keys.length === 0, { what: 'the queue empty', timeoutMs: PATIENCE });
    assert.equal(queue().snapshot().running, 0, 'no slot left taken');
  });

  test("a realtime session's turns (the listener) on whisper: the second waits in the scheduler, holding no slot", async () => {
    const listener = new PcmListenerService(t.runtime.models, t.runtime.audioEngines);
    const before = state.jobs.length;
    // 16 kHz float PCM, as a realtime session hands its turns over; the fake tells the jobs apart by their seconds
    const heard = (key: string, seconds: number) =>
      listener.transcribe({ model: 'w', key, pcm16k: new Float32Array(16000 * seconds), prompt: 'wait', signal: new AbortController().signal });
    const first = heard('rt-anna', 6);
    await waitFor(() => state.jobs.length === before + 1, { what: "the first turn's job handed to the binding", timeoutMs: PATIENCE });
    const second = heard('rt-bert', 7);
    await waitFor(() => waiting('rt-bert') === 1, { what: 'the second turn waiting in the scheduler (not in a slot)', timeoutMs: PATIENCE });
    assert.equal(queue().snapshot().running, 1, 'one slot taken: the other stays free for the other engines');
    state.jobs[before]!.resolve(ANSWER);
    assert.equal((await first).text, 'Done.');
    await waitFor(() => state.jobs.length === before + 2, { what: "the second turn's job", timeoutMs: PATIENCE });
    assert.equal(state.jobs[before + 1]!.seconds, 7);
    state.jobs[before + 1]!.resolve(ANSWER);
    assert.equal((await second).text, 'Done.');
    assert.equal(state.maxRunning, 1, 'never two jobs on the context');
  });
});
