/**
 * The playground's Talk tab in a real Chromium with a fake microphone (a tone): the client secret bought with the
 * key, the WebSocket opened with it as the subprotocol, session.update, the microphone's audio as valid 24 kHz PCM16
 * in 40-100 ms chunks, the answer's audio played back to back, barge-in (playback stopped at once, the truncate says
 * how much was heard, late deltas of the cut answer dropped), the transcript of both sides, the server's errors, a
 * refused microphone, a refused client secret, a dropped connection, and the teardown (tracks stopped, socket
 * closed), in English and Chinese, checked by axe-core. The realtime server is scripted in the test (page.route,
 * page.routeWebSocket): the page's side of the contract is what is proven here.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, BrowserContext, Page, WebSocketRoute } from 'playwright-core';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { launchChromium, openPage, screenshot, signInLink } from '../helpers/browser.js';
import { axeViolations } from '../helpers/axe.js';
import { waitFor } from '../helpers/wait.js';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';

const SECRET = 'ek_test_0123456789abcdef';
const MIC_WAV = 'dist/talk-microphone.wav';
const RATE = 24_000;

/** `ms` of a 440 Hz tone as base64 PCM16 little-endian 24 kHz mono (what the model's audio deltas carry) */
function tone(ms: number): string {
  const n = (RATE * ms) / 1000;
  const b = Buffer.alloc(n * 2);
  for (let i = 0; i < n; i++) b.writeInt16LE(Math.round(Math.sin((2 * Math.PI * 440 * i) / RATE) * 8000), i * 2);
  return b.toString('base64');
}

/** a 440 Hz tone of `seconds` at 48 kHz, 16-bit mono, as a WAV file: the fake microphone's input */
function toneWav(seconds: number): Buffer {
  const rate = 48_000;
  const n = rate * seconds;
  const b = Buffer.alloc(44 + n * 2);
  b.write('RIFF', 0);
  b.writeUInt32LE(36 + n * 2, 4);
  b.write('WAVEfmt ', 8);
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20);
  b.writeUInt16LE(1, 22);
  b.writeUInt32LE(rate, 24);
  b.writeUInt32LE(rate * 2, 28);
  b.writeUInt16LE(2, 32);
  b.writeUInt16LE(16, 34);
  b.write('data', 36);
  b.writeUInt32LE(n * 2, 40);
  for (let i = 0; i < n; i++) b.writeInt16LE(Math.round(Math.sin((2 * Math.PI * 440 * i) / rate) * 12000), 44 + i * 2);
  return b;
}

/**
 * In the page before its scripts: keeps the microphone's streams (to see their tracks stopped) and counts the
 * audio sources started and stopped, and how long the first started one has played, on its context's clock.
 */
function instrument() {
  const w = window as any;
  w.__streams = [];
  w.__starts = 0;
  w.__stops = 0;
  const gum = navigator.mediaDevices.getUserMedia.bind(navigator.mediaDevices);
  navigator.mediaDevices.getUserMedia = async (c?: MediaStreamConstraints) => {
    if (w.__refuseMic) throw new DOMException('Permission denied', 'NotAllowedError');
    const s = await gum(c);
    w.__streams.push(s);
    return s;
  };
  const start = AudioBufferSourceNode.prototype.start;
  AudioBufferSourceNode.prototype.start = function (this: AudioBufferSourceNode, when?: number, ...rest: number[]) {
    w.__starts++;
    if (w.__first === undefined) {
      w.__first = when ?? 0;
      w.__ctx = this.context;
    }
    return start.call(this, when, ...rest);
  } as typeof start;
  const stop = AudioBufferSourceNode.prototype.stop;
  AudioBufferSourceNode.prototype.stop = function (this: AudioBufferSourceNode, when?: number) {
    w.__stops++;
    return stop.call(this, when);
  } as typeof stop;
  w.__played = () => (w.__ctx ? w.__ctx.currentTime - w.__first : 0);
}

/** one scripted realtime connection: what the page sent, and a way to answer */
interface Conn {
  ws: WebSocketRoute;
  url: string;
  protocols: string[];
  sent: any[];
  raw: string[];
  closed: boolean;
  emit(ev: object): void;
}

describe('the playground’s Talk tab in Chromium (a scripted realtime server)', () => {
  let t: TestApp & { url?: string };
  let browser: Browser;
  let ctx: BrowserContext;
  let page: Page;
  let problems: string[];
  const a11y: string[] = [];
  const check = async (state: string) => a11y.push(...(await axeViolations(page, state)));
  const conns: Conn[] = [];
  const secretBodies: any[] = [];
  const secretAuth: string[] = [];
  let secretAnswer: { status: number; body: object } = { status: 200, body: { value: SECRET, expires_at: 0, session: {} } };

  const conn = () => waitFor(() => conns.at(-1), { what: 'a realtime connection' });
  const status = () => page.locator('#talk-status');
  const alert = () => page.locator('#play-talk').getByRole('alert');

  before(async () => {
    t = await buildTestApp({ listen: true, builtins: true });
    mkdirSync('dist', { recursive: true });
    writeFileSync(MIC_WAV, toneWav(2));
    browser = await launchChromium([
      '--use-fake-ui-for-media-stream',
      '--use-fake-device-for-media-stream',
      `--use-file-for-fake-audio-capture=${resolve(MIC_WAV)}`,
      '--autoplay-policy=no-user-gesture-required',
    ]);
    ({ ctx, page, problems } = await openPage(browser));
    // on the context: a second page (the connect timeout's, below) gets the same scripted server
    await ctx.addInitScript(instrument);
    // the realtime models the server will list (GET /me): one that names its voices, one that does not
    await ctx.route('**/v1/portal/me', async (r) => {
      const res = await r.fetch();
      const body = await res.json();
      // (in place of the server's own built-in ones, which are real: test/realtime/talk.browser.test.ts)
      body.data.models = body.data.models.filter((m: { type: string }) => m.type !== 'realtime');
      body.data.models.push({ id: 'gpt-realtime', type: 'realtime' }, { id: 'gpt-realtime-mini', type: 'realtime', voices: ['marin', 'cedar'] });
      await r.fulfill({ response: res, json: body });
    });
    await ctx.route('**/v1/realtime/client_secrets', async (r) => {
      secretAuth.push(r.request().headers().authorization ?? '');
      secretBodies.push(r.request().postDataJSON());
      await r.fulfill({ status: secretAnswer.status, json: secretAnswer.body });
    });
    await ctx.routeWebSocket('**/v1/realtime?*', (ws) => {
      const c: Conn = {
        ws,
        url: ws.url(),
        protocols: ws.protocols(),
        sent: [],
        raw: [],
        closed: false,
        emit: (ev) => ws.send(JSON.stringify(ev)),
      };
      ws.onMessage((m) => {
        const s = String(m);
        c.raw.push(s);
        c.sent.push(JSON.parse(s));
      });
      ws.onClose(() => {
        c.closed = true;
      });
      conns.push(c);
    });
    await page.goto(await signInLink(t, 'alice'));
    await page.getByRole('link', { name: 'Playground' }).click();
    await page.getByRole('button', { name: 'Use a playground key' }).click();
    await page.locator('#play-key option:checked', { hasText: /^Playground \(sk-/ }).waitFor({ state: 'attached' });
    await page.getByRole('tab', { name: 'Talk (Realtime)' }).click();
  });
  after(async () => {
    await browser?.close();
    await t?.close();
    rmSync(MIC_WAV, { force: true });
  });

  test('the tab: realtime models only, their voices (or OpenAI’s), reached by the arrow keys too', async () => {
    assert.deepEqual(await page.locator('#talk-model option').allInnerTexts(), ['gpt-realtime', 'gpt-realtime-mini']);
    assert.deepEqual(await page.locator('#talk-voice option').allInnerTexts(), ['alloy', 'ash', 'ballad', 'coral', 'echo', 'sage', 'shimmer', 'verse', 'marin', 'cedar']);
    await page.getByLabel('Model').selectOption('gpt-realtime-mini');
    assert.deepEqual(await page.locator('#talk-voice option').allInnerTexts(), ['marin', 'cedar']);
    await page.getByLabel('Model').selectOption('gpt-realtime');
    await page.getByRole('tab', { name: 'Talk (Realtime)' }).press('ArrowRight');
    assert.equal(await page.getByRole('tab', { name: 'Text (Responses)' }).getAttribute('aria-selected'), 'true');
    await page.getByRole('tab', { name: 'Text (Responses)' }).press('ArrowLeft');
    assert.equal(await page.getByRole('tab', { name: 'Talk (Realtime)' }).getAttribute('aria-selected'), 'true');
    await page.getByText('What you and the model say appears here.').waitFor();
    await check('talk tab');
  });

  test('a conversation: client secret, subprotocol, session.update, the microphone as PCM16, the answer played, the transcript', async () => {
    await page.getByLabel('Voice').selectOption('coral');
    await page.getByLabel('System prompt').fill('Answer briefly.');
    await page.getByRole('button', { name: 'Start talking' }).click();
    const c = await conn();
    // the key buys the secret; only the secret goes into the socket
    assert.match(secretAuth[0], /^Bearer sk-/);
    assert.deepEqual(secretBodies[0], {
      expires_after: { anchor: 'created_at', seconds: 600 },
      session: { type: 'realtime', model: 'gpt-realtime', instructions: 'Answer briefly.', audio: { output: { voice: 'coral' } } },
    });
    assert.equal(new URL(c.url).pathname, '/v1/realtime');
    assert.equal(new URL(c.url).searchParams.get('model'), 'gpt-realtime');
    assert.equal(new URL(c.url).origin.replace(/^ws/, 'http'), t.url);
    assert.deepEqual(c.protocols, ['realtime', `openai-insecure-api-key.${SECRET}`]);
    assert.ok(!c.protocols.join(' ').includes('sk-'), 'the inference key never goes into the socket');
    await status().getByText('Connecting…').waitFor();
    const update = await waitFor(() => c.sent.find((e) => e.type === 'session.update'), { what: 'session.update' });
    assert.deepEqual(update.session, {
      type: 'realtime',
      instructions: 'Answer briefly.',
      audio: {
        input: { format: { type: 'audio/pcm', rate: 24000 }, turn_detection: { type: 'server_vad' }, transcription: { model: 'whisper-1' } },
        output: { voice: 'coral' },
      },
    });
    assert.equal(c.sent.filter((e) => e.type === 'input_audio_buffer.append').length, 0, 'no audio before the session is there');
    c.emit({ type: 'session.created', session: { type: 'realtime', model: 'gpt-realtime' } });
    await status().getByText('Listening…').waitFor();
    // the fake microphone's tone, in chunks of 40-100 ms of 24 kHz PCM16
    const appends = await waitFor(
      () => {
        const a = c.sent.filter((e) => e.type === 'input_audio_buffer.append');
        return a.length >= 20 && a;
      },
      { what: '20 appends' },
    );
    let loud = 0;
    for (const a of appends) {
      assert.match(a.audio, /^[A-Za-z0-9+/]+={0,2}$/);
      const pcm = Buffer.from(a.audio, 'base64');
      assert.equal(pcm.length % 2, 0);
      const ms = (pcm.length / 2 / RATE) * 1000;
      assert.ok(ms >= 40 && ms <= 100, `${ms} ms in one append`);
      let peak = 0;
      for (let i = 0; i < pcm.length; i += 2) peak = Math.max(peak, Math.abs(pcm.readInt16LE(i)));
      if (peak > 1000) loud++;
    }
    assert.ok(loud > 0, 'the microphone’s tone is in the audio, not silence');
    // resampled to 24 kHz, not merely relabelled: the microphone's 440 Hz is 440 Hz at 24 kHz (upward zero
    // crossings of the loud stretch, which the browser's audio processing leaves at its pitch)
    const pcm = Buffer.concat(appends.map((a: any) => Buffer.from(a.audio, 'base64')));
    const samples = Array.from({ length: pcm.length / 2 }, (_, i) => pcm.readInt16LE(i * 2));
    let first = -1;
    let last = -1;
    let crossings = 0;
    for (let i = 1; i < samples.length; i++) {
      if (samples[i - 1] < 0 && samples[i] >= 0 && Math.abs(samples[i] - samples[i - 1]) > 200) {
        if (first < 0) first = i;
        else crossings++;
        last = i;
      }
    }
    const hz = (crossings * RATE) / (last - first);
    assert.ok(Math.abs(hz - 440) < 440 * 0.03, `${hz.toFixed(1)} Hz heard as 440 Hz`);

    // the user's turn, transcribed; the answer, spoken and transcribed
    c.emit({ type: 'input_audio_buffer.speech_started', audio_start_ms: 100, item_id: 'item_u1' });
    await status().getByText('Hearing you…').waitFor();
    c.emit({ type: 'input_audio_buffer.speech_stopped', audio_end_ms: 900, item_id: 'item_u1' });
    c.emit({ type: 'input_audio_buffer.committed', item_id: 'item_u1' });
    c.emit({ type: 'conversation.item.added', item: { id: 'item_u1', type: 'message', role: 'user', content: [{ type: 'input_audio' }] } });
    c.emit({ type: 'response.created', response: { id: 'resp_1' } });
    await status().getByText('Thinking…').waitFor();
    c.emit({ type: 'conversation.item.added', item: { id: 'item_a1', type: 'message', role: 'assistant', content: [] } });
    c.emit({ type: 'conversation.item.input_audio_transcription.delta', item_id: 'item_u1', delta: 'What is ' });
    c.emit({ type: 'conversation.item.input_audio_transcription.delta', item_id: 'item_u1', delta: 'the time' });
    c.emit({ type: 'conversation.item.input_audio_transcription.completed', item_id: 'item_u1', transcript: 'What is the time?' });
    for (const d of ['It is ', 'half past ', 'two.']) c.emit({ type: 'response.output_audio_transcript.delta', response_id: 'resp_1', item_id: 'item_a1', delta: d });
    for (let i = 0; i < 4; i++) c.emit({ type: 'response.output_audio.delta', response_id: 'resp_1', item_id: 'item_a1', delta: tone(100) });
    await status().getByText('Speaking… (talk to interrupt)').waitFor();
    c.emit({ type: 'response.output_audio_transcript.done', response_id: 'resp_1', item_id: 'item_a1', transcript: 'It is half past two.' });
    c.emit({ type: 'response.done', response: { id: 'resp_1', status: 'completed', usage: { total_tokens: 10 } } });
    await page.locator('#talk-transcript .msg.assistant .text', { hasText: 'It is half past two.' }).waitFor();
    assert.deepEqual(await page.locator('#talk-transcript .msg .text').allInnerTexts(), ['What is the time?', 'It is half past two.']);
    assert.deepEqual(await page.locator('#talk-transcript .msg .who').allInnerTexts(), ['You', 'Assistant']);
    assert.equal(await page.evaluate(() => (window as any).__starts), 4, 'each delta scheduled');
    await check('talking');
    await screenshot(page, 'playground-talk', true);
    // 400 ms of audio plays out, and the page listens again
    await status().getByText('Listening…').waitFor();
    assert.equal(c.sent.filter((e) => e.type === 'conversation.item.truncate').length, 0, 'an answer heard whole is not truncated');
  });

  test('barge-in: speech over the answer stops it at once, the truncate says how much was heard, late deltas are dropped', async () => {
    const c = conns.at(-1)!;
    await page.evaluate(() => {
      const w = window as any;
      w.__first = undefined;
      w.__ctx = undefined;
      w.__starts = 0;
      w.__stops = 0;
    });
    c.emit({ type: 'response.created', response: { id: 'resp_2' } });
    c.emit({ type: 'conversation.item.added', item: { id: 'item_a2', type: 'message', role: 'assistant', content: [] } });
    c.emit({ type: 'response.output_audio_transcript.delta', response_id: 'resp_2', item_id: 'item_a2', delta: 'Let me tell you a long story about' });
    // 3 s of answer in 10 deltas
    for (let i = 0; i < 10; i++) c.emit({ type: 'response.output_audio.delta', response_id: 'resp_2', item_id: 'item_a2', delta: tone(300) });
    await status().getByText('Speaking… (talk to interrupt)').waitFor();
    // some of it is heard
    const before = await waitFor(
      async () => {
        const p = await page.evaluate(() => (window as any).__played() as number);
        return p > 0.3 && p;
      },
      { what: '300 ms played' },
    );
    c.emit({ type: 'input_audio_buffer.speech_started', audio_start_ms: 5000, item_id: 'item_u2' });
    const truncate = await waitFor(() => c.sent.find((e) => e.type === 'conversation.item.truncate'), { what: 'the truncate' });
    const after = await page.evaluate(() => (window as any).__played() as number);
    assert.equal(truncate.item_id, 'item_a2');
    assert.equal(truncate.content_index, 0);
    assert.ok(Number.isInteger(truncate.audio_end_ms));
    assert.ok(
      truncate.audio_end_ms >= Math.floor(before * 1000) && truncate.audio_end_ms <= Math.ceil(after * 1000) && truncate.audio_end_ms < 3000,
      `${truncate.audio_end_ms} ms heard, the clock between ${before} and ${after} s`,
    );
    // every scheduled source was stopped (the ones that had played out had ended already)
    const { starts, stops } = await page.evaluate(() => ({ starts: (window as any).__starts, stops: (window as any).__stops }));
    assert.equal(starts, 10);
    assert.ok(stops >= 1 && stops <= 10, `${stops} stopped`);
    await status().getByText('Hearing you…').waitFor();
    // what the server sent of the cut answer before it heard the truncate is not played
    c.emit({ type: 'response.output_audio.delta', response_id: 'resp_2', item_id: 'item_a2', delta: tone(300) });
    c.emit({ type: 'response.done', response: { id: 'resp_2', status: 'cancelled' } });
    await page.locator('#talk-transcript .msg.assistant', { hasText: '(interrupted)' }).waitFor();
    assert.equal(await page.evaluate(() => (window as any).__starts), 10, 'the late delta was dropped');
    assert.equal(c.sent.filter((e) => e.type === 'response.cancel').length, 0, 'server VAD cancels the response itself');
    c.emit({ type: 'input_audio_buffer.speech_stopped', audio_end_ms: 6000, item_id: 'item_u2' });
    await status().getByText('Listening…').waitFor();
    await screenshot(page, 'playground-talk-interrupted', true);
  });

  test('the server’s error is shown and the conversation goes on; garbage frames are ignored', async () => {
    const c = conns.at(-1)!;
    c.ws.send('not json');
    c.ws.send(Buffer.from([1, 2, 3]));
    c.emit({ type: 'error', error: { type: 'invalid_request_error', code: 'invalid_value', message: 'The audio could not be decoded', param: null } });
    await alert().getByText('The audio could not be decoded.').waitFor();
    assert.equal(await status().innerText(), 'Listening…');
    assert.equal(c.closed, false);
    const n = c.sent.length;
    await waitFor(() => c.sent.length > n + 2, { what: 'audio still sent' });
    await check('a server error');
    await screenshot(page, 'playground-talk-error');
  });

  test('stop: the microphone is released, the socket closed, no more audio', async () => {
    const c = conns.at(-1)!;
    await page.getByRole('button', { name: 'Stop talking' }).click();
    await status().getByText('Stopped.').waitFor();
    await waitFor(() => c.closed, { what: 'the socket closed' });
    const live = await page.evaluate(() => (window as any).__streams.flatMap((s: MediaStream) => s.getTracks()).filter((tr: MediaStreamTrack) => tr.readyState !== 'ended').length);
    assert.equal(live, 0, 'every track stopped');
    assert.equal(await page.getByRole('button', { name: 'Start talking' }).isEnabled(), true);
    // stopping is not an error: what shows is still only the server's error from before
    assert.equal(await alert().innerText(), 'The audio could not be decoded.');
  });

  test('the connection dropped by the server says so; leaving the tab ends the conversation', async () => {
    await page.getByRole('button', { name: 'Start talking' }).click();
    let c = await waitFor(() => conns.length === 2 && conns[1], { what: 'a second connection' });
    c.emit({ type: 'session.created', session: {} });
    await status().getByText('Listening…').waitFor();
    c.ws.close({ code: 1011, reason: 'upstream went away' });
    await alert().getByText('The connection to the realtime model closed (code 1011: upstream went away).').waitFor();
    await status().getByText('Stopped.').waitFor();
    assert.equal(await page.evaluate(() => (window as any).__streams.at(-1).getTracks()[0].readyState), 'ended');
    // a server that refuses the session says why in an error event, then closes: the page shows why
    await page.getByRole('button', { name: 'Start talking' }).click();
    c = await waitFor(() => conns.length === 3 && conns[2], { what: 'a third connection' });
    c.emit({ type: 'error', error: { type: 'invalid_request_error', code: 'model_not_found', message: 'The model gpt-realtime does not exist', param: null } });
    c.ws.close({ code: 1008 });
    await status().getByText('Stopped.').waitFor();
    assert.equal(await alert().innerText(), 'The model gpt-realtime does not exist.');
    // a conversation under way is ended by leaving the tab
    await page.getByRole('button', { name: 'Start talking' }).click();
    c = await waitFor(() => conns.length === 4 && conns[3], { what: 'a fourth connection' });
    c.emit({ type: 'session.created', session: {} });
    await status().getByText('Listening…').waitFor();
    await page.getByRole('tab', { name: 'Speech' }).click();
    await waitFor(() => c.closed, { what: 'the socket closed on leaving' });
    assert.equal(await page.evaluate(() => (window as any).__streams.at(-1).getTracks()[0].readyState), 'ended');
    await page.getByRole('tab', { name: 'Talk (Realtime)' }).click();
  });

  test('a refused client secret shows the server’s message and opens no socket', async () => {
    const before = conns.length;
    secretAnswer = {
      status: 403,
      body: { error: { message: 'permission denied: the key does not have the realtime scope', type: 'invalid_request_error', param: null, code: 'insufficient_scope' } },
    };
    await page.getByRole('button', { name: 'Start talking' }).click();
    await alert().getByText('The key does not have the realtime scope.').waitFor();
    await status().getByText('Stopped.').waitFor();
    assert.equal(conns.length, before);
    assert.equal(await page.evaluate(() => (window as any).__streams.at(-1).getTracks()[0].readyState), 'ended', 'the microphone is released');
    // an answer without a secret is not one
    secretAnswer = { status: 200, body: { expires_at: 0 } };
    await page.getByRole('button', { name: 'Start talking' }).click();
    await alert().getByText('Portico answered something unexpected.').waitFor();
    assert.equal(conns.length, before);
    secretAnswer = { status: 200, body: { value: SECRET, expires_at: 0, session: {} } };
  });

  test('a refused microphone is said plainly, before any secret is asked for', async () => {
    const asked = secretBodies.length;
    await page.evaluate(() => ((window as any).__refuseMic = true));
    await page.getByRole('button', { name: 'Start talking' }).click();
    await alert().getByText('The microphone was refused. Allow it for this site (the icon in the address bar), then start again.').waitFor();
    await status().getByText('Stopped.').waitFor();
    assert.equal(secretBodies.length, asked);
    await check('microphone refused');
    await screenshot(page, 'playground-talk-mic-refused');
    await page.evaluate(() => ((window as any).__refuseMic = false));
  });

  test('a server that never says session.created: the page gives up after 15 s and releases everything', async () => {
    const other = await ctx.newPage();
    await other.goto(`${t.url}/playground`);
    await other.getByRole('button', { name: 'Use a playground key' }).click();
    await other.locator('#play-key option:checked', { hasText: /^Playground \(sk-/ }).waitFor({ state: 'attached' });
    await other.getByRole('tab', { name: 'Talk (Realtime)' }).click();
    // the page's timers from here on a clock the test moves
    await other.clock.install();
    const n = conns.length;
    await other.getByRole('button', { name: 'Start talking' }).click();
    const c = await waitFor(() => conns.length === n + 1 && conns[n], { what: 'a new connection' });
    await waitFor(() => c.sent.some((e) => e.type === 'session.update'), { what: 'session.update' });
    await other.clock.runFor(14_000);
    assert.equal(await other.locator('#talk-status').innerText(), 'Connecting…');
    await other.clock.runFor(1_500);
    await other.locator('#play-talk').getByRole('alert').getByText('The realtime model did not answer in time. Try again.').waitFor();
    await waitFor(() => c.closed, { what: 'the socket closed' });
    assert.equal(await other.evaluate(() => (window as any).__streams.at(-1).getTracks()[0].readyState), 'ended');
    assert.equal(c.sent.filter((e) => e.type === 'input_audio_buffer.append').length, 0);
    await other.close();
  });

  test('in Chinese', async () => {
    await page.getByLabel('Language').selectOption('zh');
    await page.getByRole('tab', { name: '语音对话（Realtime）' }).waitFor();
    const n = conns.length;
    await page.getByRole('button', { name: '开始对话' }).click();
    const c = await waitFor(() => conns.length === n + 1 && conns[n], { what: 'a new connection' });
    await status().getByText('正在连接…').waitFor();
    c.emit({ type: 'session.created', session: {} });
    await status().getByText('正在聆听…').waitFor();
    c.emit({ type: 'conversation.item.added', item: { id: 'u', type: 'message', role: 'user', content: [] } });
    c.emit({ type: 'conversation.item.input_audio_transcription.completed', item_id: 'u', transcript: '你好' });
    c.emit({ type: 'response.output_audio_transcript.delta', response_id: 'r', item_id: 'a', delta: '你好！有什么可以帮你？' });
    await page.locator('#talk-transcript .msg .text', { hasText: '你好！有什么可以帮你？' }).waitFor();
    await check('talk in Chinese');
    await screenshot(page, 'playground-talk-zh', true);
    await page.getByRole('button', { name: '结束对话' }).click();
    await status().getByText('已停止。').waitFor();
    await page.getByLabel('语言').selectOption('en');
    await page.getByRole('heading', { name: 'Playground' }).waitFor();
    assert.deepEqual(a11y, []);
    assert.deepEqual(problems, [], 'no page error, nothing refused by the CSP');
    await ctx.close();
  });
});
