/**
 * The playground's Talk tab against the real server, end to end: Chromium's fake microphone plays a question spoken
 * by Portico's own voice, the page buys a client secret with the playground's key and opens /v1/realtime with it,
 * the built-in gpt-realtime (Portico's recognizer, a scripted text model, Portico's voice, server VAD) hears the
 * question, answers it, and the page shows both sides and plays the answer; Stop closes the session on the server.
 * Nothing of the realtime server is mocked here (test/web/talk.browser.test.ts scripts it to prove the page's side).
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, Page, WebSocket as PwWebSocket } from 'playwright-core';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { setupRealtime, type RtEnv } from './util.js';
import { launchChromium, openPage, screenshot, signInLink } from '../helpers/browser.js';
import { metricValue } from '../helpers/metrics.js';
import { waitFor } from '../helpers/wait.js';

const QUESTION = 'What is the weather like today?';
const ANSWER = 'It is sunny and warm today. Enjoy the day!';
const MIC_WAV = 'dist/talk-live-microphone.wav';
/** seconds of silence before the question in the microphone's file (see padWav) and after it (server VAD's end of turn) */
const LEAD_S = 2;
const TAIL_S = 1.5;

/**
 * Portico's WAV with `lead` seconds of silence before the speech and `tail` after it. The lead covers the time
 * from the microphone's opening (when Chromium starts reading the file) to session.created (when the page starts
 * sending audio): the client secret, the worklet and the socket come in between.
 */
function padWav(wav: Buffer, lead: number, tail: number): Buffer {
  assert.equal(wav.toString('ascii', 0, 4), 'RIFF');
  assert.equal(wav.toString('ascii', 8, 12), 'WAVE');
  let fmt: Buffer | undefined;
  let data: Buffer | undefined;
  for (let p = 12; p + 8 <= wav.length;) {
    const id = wav.toString('ascii', p, p + 4);
    // a streamed WAV may say 0xffffffff for the data chunk's size: to the end of the file
    const size = Math.min(wav.readUInt32LE(p + 4), wav.length - p - 8);
    if (id === 'fmt ') fmt = wav.subarray(p + 8, p + 8 + size);
    if (id === 'data') data = wav.subarray(p + 8, p + 8 + size);
    p += 8 + size + (size & 1);
  }
  assert.ok(fmt && data, 'a fmt and a data chunk');
  assert.equal(fmt.readUInt16LE(0), 1, 'PCM');
  const channels = fmt.readUInt16LE(2);
  const rate = fmt.readUInt32LE(4);
  const bits = fmt.readUInt16LE(14);
  const frame = (channels * bits) / 8;
  const quiet = (s: number) => Buffer.alloc(Math.round(s * rate) * frame);
  const pcm = Buffer.concat([quiet(lead), data, quiet(tail)]);
  const head = Buffer.alloc(44);
  head.write('RIFF', 0);
  head.writeUInt32LE(36 + pcm.length, 4);
  head.write('WAVEfmt ', 8);
  head.writeUInt32LE(16, 16);
  head.writeUInt16LE(1, 20);
  head.writeUInt16LE(channels, 22);
  head.writeUInt32LE(rate, 24);
  head.writeUInt32LE(rate * frame, 28);
  head.writeUInt16LE(frame, 32);
  head.writeUInt16LE(bits, 34);
  head.write('data', 36);
  head.writeUInt32LE(pcm.length, 40);
  return Buffer.concat([head, pcm]);
}

/**
 * In the page before its scripts: when the microphone opened, the sockets it opens (the subprotocols asked for, the
 * one the server chose, when the first event came), every text the Talk status showed, and the answer's audio
 * sources started (how many, how many seconds).
 */
function instrument() {
  const w = window as any;
  w.__sockets = [];
  w.__statuses = [];
  w.__starts = 0;
  w.__scheduled = 0;
  const gum = navigator.mediaDevices.getUserMedia.bind(navigator.mediaDevices);
  navigator.mediaDevices.getUserMedia = async (c?: MediaStreamConstraints) => {
    const stream = await gum(c);
    w.__micAt = performance.now();
    return stream;
  };
  const Ws = window.WebSocket;
  w.WebSocket = class extends Ws {
    constructor(url: string | URL, protocols?: string | string[]) {
      super(url, protocols);
      const rec: Record<string, unknown> = { url: String(url), asked: protocols, chosen: '' };
      w.__sockets.push(rec);
      this.addEventListener('open', () => (rec.chosen = this.protocol));
      this.addEventListener('message', () => (rec.firstAt ??= performance.now()), { once: true });
    }
  };
  const start = AudioBufferSourceNode.prototype.start;
  AudioBufferSourceNode.prototype.start = function (this: AudioBufferSourceNode, ...args: number[]) {
    w.__starts++;
    w.__scheduled += this.buffer?.duration ?? 0;
    return start.apply(this, args as never);
  } as typeof start;
  new MutationObserver(() => {
    const s = document.getElementById('talk-status')?.textContent ?? '';
    if (s && w.__statuses.at(-1) !== s) w.__statuses.push(s);
  }).observe(document, { subtree: true, childList: true, characterData: true });
}

describe('the Talk tab against the real server (Portico’s recognizer, voice and VAD; a scripted text model)', () => {
  let e: RtEnv;
  let browser: Browser;
  let page: Page;
  let problems: string[];
  const secretCalls: { auth: string; body: any; status?: number }[] = [];
  const sockets: PwWebSocket[] = [];
  const received: any[] = [];
  const sent: any[] = [];
  let socketClosed = false;
  const consoleErrors: string[] = [];

  const status = () => page.locator('#talk-status');
  const gauge = async () => metricValue((await e.t.app.inject({ method: 'GET', url: '/metrics' })).body, 'portico_realtime_sessions');

  before(async () => {
    e = await setupRealtime();
    // the question in Portico's own voice, as the WAV the speech endpoint gives, with silence around it
    const speech = await e.client.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: QUESTION, response_format: 'wav' });
    mkdirSync('dist', { recursive: true });
    writeFileSync(MIC_WAV, padWav(Buffer.from(await speech.arrayBuffer()), LEAD_S, TAIL_S));
    e.up.script({ text: ANSWER, chunks: 4 });
    browser = await launchChromium([
      '--use-fake-ui-for-media-stream',
      '--use-fake-device-for-media-stream',
      // played once: Chromium loops the file otherwise, and the question heard again would be a second turn
      // (and, spoken over the answer, a barge-in)
      `--use-file-for-fake-audio-capture=${resolve(MIC_WAV)}%noloop`,
      '--autoplay-policy=no-user-gesture-required',
    ]);
    let ctx;
    ({ ctx, page, problems } = await openPage(browser));
    await ctx.addInitScript(instrument);
    page.on('console', (m) => {
      // the page asks whether the person is an operator; alice is not, and Chromium logs the 403 it expects
      if (m.type() === 'error' && !m.location().url.endsWith('/v1/admin/whoami')) consoleErrors.push(`${m.text()} (${m.location().url})`);
    });
    page.on('request', (r) => {
      if (r.url().endsWith('/v1/realtime/client_secrets')) {
        const call: (typeof secretCalls)[number] = { auth: r.headers().authorization ?? '', body: r.postDataJSON() };
        secretCalls.push(call);
        void r.response().then((res) => (call.status = res?.status()));
      }
    });
    page.on('websocket', (ws) => {
      if (!new URL(ws.url()).pathname.startsWith('/v1/realtime')) return;
      sockets.push(ws);
      ws.on('framereceived', (f) => typeof f.payload === 'string' && received.push(JSON.parse(f.payload)));
      ws.on('framesent', (f) => typeof f.payload === 'string' && sent.push(JSON.parse(f.payload)));
      ws.on('close', () => (socketClosed = true));
    });
    await page.goto(await signInLink(e.t, 'alice'));
    await page.getByRole('link', { name: 'Playground' }).click();
    await page.getByRole('button', { name: 'Use a playground key' }).click();
    await page.locator('#play-key option:checked', { hasText: /^Playground \(sk-/ }).waitFor({ state: 'attached' });
    await page.getByRole('tab', { name: 'Talk (Realtime)' }).click();
  });
  after(async () => {
    await browser?.close();
    await e?.close();
    rmSync(MIC_WAV, { force: true });
  });

  test('a spoken question heard, answered in words and in audio; Stop closes the session on the server', async (tc) => {
    let passed = false;
    tc.after(async () => {
      // what happened, when something failed: the page's statuses and what went both ways (the audio left out)
      if (passed) return;
      const st = await page.evaluate(() => (window as any).__statuses).catch(() => []);
      tc.diagnostic(`statuses: ${JSON.stringify(st)}`);
      tc.diagnostic(
        `received: ${received
          .map((x) => x.type)
          .filter((x) => x !== 'response.output_audio.delta')
          .join(' ')}`,
      );
      tc.diagnostic(`errors: ${JSON.stringify(received.filter((x) => x.type === 'error'))} ${JSON.stringify(consoleErrors)} ${JSON.stringify(problems)}`);
    });
    // the server's own realtime models (GET /v1/portal/me), as its /v1/models lists them
    const listed = JSON.parse((await e.t.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${e.key}` } })).body);
    const realtime = listed.data.filter((m: { type: string }) => m.type === 'realtime').map((m: { id: string }) => m.id);
    assert.ok(realtime.includes('gpt-realtime'), realtime.join(', '));
    assert.deepEqual((await page.locator('#talk-model option').allInnerTexts()).sort(), realtime.sort());
    await page.getByLabel('Model').selectOption('gpt-realtime');
    assert.equal(await gauge(), 0);
    await page.getByRole('button', { name: 'Start talking' }).click();

    // the playground's key (the one selected: "Playground (sk-abcd…wxyz)") buys the secret; the socket carries only
    // the secret, and the server picks the `realtime` subprotocol
    const call = await waitFor(() => (secretCalls[0]?.status !== undefined ? secretCalls[0] : undefined), { what: 'the client secret' });
    assert.equal(call.status, 200);
    const shown = /^Playground \((sk-\w+)…(\w+)\)$/.exec(await page.locator('#play-key option:checked').innerText());
    assert.ok(shown, 'the playground key is the one selected');
    assert.ok(call.auth.startsWith(`Bearer ${shown[1]}`) && call.auth.endsWith(shown[2]!), `${call.auth.slice(0, 14)}… is the playground key`);
    assert.equal(call.body.session.model, 'gpt-realtime');
    const sock = await waitFor(() => page.evaluate(() => (window as any).__sockets.find((s: any) => s.chosen)), { what: 'the socket open' });
    assert.equal(new URL(sock.url).pathname, '/v1/realtime');
    assert.equal(sock.asked.length, 2);
    assert.equal(sock.asked[0], 'realtime');
    assert.match(sock.asked[1], /^openai-insecure-api-key\.ek_/);
    assert.ok(!sock.asked.join(' ').includes('sk-'), 'the inference key never goes into the socket');
    assert.equal(sock.chosen, 'realtime');
    assert.equal(sockets.length, 1);
    assert.equal(await gauge(), 1, 'one session open on the server');

    // the session: created, configured as the page asked (server VAD, the transcription the page named)
    const created = await waitFor(() => received.find((x) => x.type === 'session.created'), { what: 'session.created' });
    // the microphone's file plays from when the microphone opened, the page sends it from session.created on: the
    // lead silence must have covered the time between, or the recognizer would hear the question's end only
    const connecting = await page.evaluate(() => (window as any).__sockets[0].firstAt - (window as any).__micAt);
    tc.diagnostic(`${Math.round(connecting)} ms from the microphone to session.created`);
    assert.ok(connecting < LEAD_S * 1000 - 300, `${Math.round(connecting)} ms from the microphone to session.created: more than the file's ${LEAD_S} s of lead silence`);
    assert.equal(created.session.model, 'gpt-realtime');
    const updated = await waitFor(() => received.find((x) => x.type === 'session.updated'), { what: 'session.updated' });
    assert.equal(updated.session.audio.input.turn_detection.type, 'server_vad');
    assert.equal(updated.session.audio.input.transcription.model, sent.find((x) => x.type === 'session.update').session.audio.input.transcription.model);
    assert.deepEqual(
      received.filter((x) => x.type === 'error'),
      [],
      'the server took the page’s session.update',
    );

    // the question: heard by the server's VAD (the page shows it), transcribed, and answered
    const user = page.locator('#talk-transcript .msg.user .text');
    await user.filter({ hasText: /weather/i }).waitFor({ timeout: 30_000 });
    const heard = (await user.innerText()).trim();
    assert.match(heard, /what.*weather.*today/i);
    const assistant = page.locator('#talk-transcript .msg.assistant .text');
    await assistant.filter({ hasText: ANSWER }).waitFor({ timeout: 30_000 });
    assert.equal((await assistant.innerText()).trim(), ANSWER);
    const done = await waitFor(() => received.find((x) => x.type === 'response.done'), { what: 'response.done', timeoutMs: 30_000 });
    assert.equal(done.response.status, 'completed');
    // what the text model was asked: the recognizer's words
    assert.equal((e.up.requests.at(-1)!.body as any).messages.at(-1).content, heard);

    // the answer's audio played whole: every delta scheduled, then the page back to listening
    const deltas = received.filter((x) => x.type === 'response.output_audio.delta');
    const seconds = deltas.reduce((n, d) => n + Buffer.from(d.delta, 'base64').length / 48_000, 0);
    assert.ok(seconds > 1, `${seconds} s of answer`);
    await waitFor(
      async () => {
        const st = await page.evaluate(() => (window as any).__statuses as string[]);
        return st.lastIndexOf('Listening…') > st.indexOf('Speaking… (talk to interrupt)') && st.includes('Speaking… (talk to interrupt)');
      },
      { what: 'the answer played out', timeoutMs: 30_000 },
    );
    const played = await page.evaluate(() => ({ starts: (window as any).__starts as number, scheduled: (window as any).__scheduled as number }));
    assert.equal(played.starts, deltas.length);
    assert.ok(Math.abs(played.scheduled - seconds) < 0.01, `${played.scheduled} s scheduled of ${seconds} s received`);
    // the status went through the turn in order
    const statuses = await page.evaluate(() => (window as any).__statuses as string[]);
    const order = ['Connecting…', 'Listening…', 'Hearing you…', 'Listening…', 'Thinking…', 'Speaking… (talk to interrupt)', 'Listening…'];
    let at = -1;
    for (const s of order) {
      at = statuses.indexOf(s, at + 1);
      assert.ok(at >= 0, `${s} in ${statuses.join(' → ')}`);
    }
    // one question, one answer: the file was not heard twice
    assert.equal(await user.count(), 1);
    assert.equal(await assistant.count(), 1);
    assert.equal(received.filter((x) => x.type === 'input_audio_buffer.speech_started').length, 1);
    assert.deepEqual(
      received.filter((x) => x.type === 'error'),
      [],
    );
    assert.equal(await page.locator('#play-talk').getByRole('alert').count(), 0);
    await screenshot(page, 'playground-talk-live', true);

    // Stop: the socket closed, and the server's session with it
    await page.getByRole('button', { name: 'Stop talking' }).click();
    await status().getByText('Stopped.').waitFor();
    await waitFor(() => socketClosed, { what: 'the socket closed' });
    await waitFor(async () => (await gauge()) === 0, { what: 'the server’s session closed' });
    assert.deepEqual(problems, [], 'no page error, nothing refused by the CSP');
    assert.deepEqual(consoleErrors, [], 'no error in the console');
    passed = true;
  });
});
