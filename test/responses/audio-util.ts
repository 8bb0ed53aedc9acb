/** Helpers of the spoken-answer tests (modalities audio): an app with the built-in voices, decoding and measuring. */
import { after } from 'node:test';
import assert from 'node:assert/strict';
import { keyedCalls } from '../helpers/calls.js';
import OpenAI from 'openai';
import { NO_VOICE_WARM_UP, buildTestApp, type TestDb } from '../helpers/app.js';
import { startScriptedUpstream } from '../helpers/scripted-upstream.js';
import type { ModelSpec } from '../../src/models/config.js';
import { probe, type Probed } from '../audio/helpers.js';
import { MODEL, type Env } from './util.js';

/** A listening Portico with the built-in audio models (tts-1 speaks answers) in front of a scripted upstream. */
export async function setupAudio(db: TestDb = 'pglite', extra: ModelSpec[] = [], env: Record<string, string> = {}): Promise<Env> {
  const up = await startScriptedUpstream();
  const models: ModelSpec[] = [{ name: MODEL, provider: 'openai-compatible', base_url: up.url, upstream_model: 'upstream-model', type: 'text' } as ModelSpec, ...extra];
  const t = await buildTestApp({ db, listen: true, models, builtins: true, env, runtime: NO_VOICE_WARM_UP });
  const url = t.url!;
  const key = await t.inferenceKey('alice');
  const client = new OpenAI({ apiKey: key, baseURL: url + '/v1', maxRetries: 0, timeout: 60_000 });
  // the engines' workers start (espeak-ng's warm no voice here: NO_VOICE_WARM_UP), then one sentence in a voice of
  // each engine: their first syntheses are slower, and not what the tests time
  await t.services.audioEngines.warmUp();
  const env2: Env = {
    t,
    url,
    up,
    key,
    client,
    ...keyedCalls(url, key, up),
    async close() {
      await t.close();
      await up.close();
    },
  };
  await speechSeconds(env2, 'Warm up.', 'nova');
  await speechSeconds(env2, 'Warm up.', 'alloy');
  return env2;
}

/** The message's parts of a finished response: its text part and its spoken part. */
export function spokenParts(r: any, sdkParsed = false): { text: any; audio: any } {
  const msgs = r.output.filter((o: any) => o.type === 'message');
  assert.equal(msgs.length, 1, 'one message');
  const content = msgs[0].content;
  assert.deepEqual(
    content.map((c: any) => c.type),
    ['output_text', 'output_audio'],
    'the text part, then the spoken part',
  );
  // the SDK's stream helper adds `parsed` to every part of a message
  assert.deepEqual(Object.keys(content[1]).sort(), sdkParsed ? ['data', 'parsed', 'transcript', 'type'] : ['data', 'transcript', 'type'], 'the SDK ResponseOutputAudio fields');
  return { text: content[0], audio: content[1] };
}

/** Probes base64 audio of `format` (ffprobe for the stream, ffmpeg for the exact length). */
export function probeBase64(b64: string, format: string): Promise<Probed> {
  assert.ok(b64.length > 0, 'there is audio');
  const bytes = Buffer.from(b64, 'base64');
  assert.equal(bytes.toString('base64'), b64, 'valid base64 without padding inside');
  return probe(bytes, format === 'pcm16');
}

const refCache = new Map<string, number>();

/** Seconds /v1/audio/speech takes to say `text` with `voice` (the reference a spoken answer is measured against). */
export async function speechSeconds(e: Env, text: string, voice = 'alloy'): Promise<number> {
  const k = `${voice}:${text}`;
  const hit = refCache.get(k);
  if (hit !== undefined) return hit;
  const res = await e.call('POST', '/v1/audio/speech', { model: 'tts-1', voice, input: text, response_format: 'wav' });
  assert.equal(res.status, 200);
  const d = (await probe(Buffer.from(await res.arrayBuffer()))).duration;
  refCache.set(k, d);
  return d;
}

/**
 * The audio says the text: its length is the length /v1/audio/speech gives the same text and voice (within 25 %:
 * the answer is spoken in pieces as they arrive, so pauses between sentences may differ a little), and at a
 * speaking rate a person would call speech (5 to 30 characters a second).
 */
export async function assertPlausibleDuration(e: Env, seconds: number, text: string, voice = 'alloy') {
  const ref = await speechSeconds(e, text, voice);
  const ratio = seconds / ref;
  assert.ok(ratio > 0.75 && ratio < 1.33, `spoken answer ${seconds.toFixed(2)} s, /audio/speech ${ref.toFixed(2)} s for ${JSON.stringify(text)}`);
  const rate = text.length / seconds;
  assert.ok(rate > 5 && rate < 30, `${rate.toFixed(1)} characters a second`);
}

/** The events of an SSE body (without [DONE]), checked for framing by the caller. */
export async function sseJson(res: Response): Promise<any[]> {
  assert.equal(res.status, 200);
  const text = await res.text();
  return text
    .split('\n\n')
    .map((b) => /^data: (.*)$/m.exec(b)?.[1])
    .filter((d): d is string => d !== undefined && d !== '[DONE]')
    .map((d) => JSON.parse(d));
}

/** The joined base64 pieces of response.audio.delta events. */
export function joinedAudio(events: any[]): string {
  return events
    .filter((x) => x.type === 'response.audio.delta')
    .map((x) => x.delta)
    .join('');
}

export interface GatedUpstream {
  /** base URL including /v1 */
  url: string;
  /** the next answer: `before` is streamed at once, `after` once `open` resolves (then the answer ends) */
  script(before: string[], open: Promise<unknown>, after: string[]): void;
  /** requests received: `aborted` when the client closed it before the end */
  requests: Array<{ body: any; aborted: boolean; closed: Promise<void> }>;
  close(): Promise<void>;
}

/**
 * A Chat Completions upstream that holds the rest of its answer until the test opens a gate: what a client gets
 * before the gate opens was made while the model had not finished, whatever the machine's load.
 */
export async function startGatedUpstream(): Promise<GatedUpstream> {
  const { createServer } = await import('node:http');
  const queue: Array<{ before: string[]; open: Promise<unknown>; after: string[] }> = [];
  const requests: GatedUpstream['requests'] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', async () => {
      let closed!: () => void;
      const rec = { body: JSON.parse(body || '{}'), aborted: false, closed: new Promise<void>((r) => (closed = r)) };
      requests.push(rec);
      res.on('close', () => {
        if (!res.writableFinished) rec.aborted = true;
        closed();
      });
      const next = queue.shift() ?? { before: ['Nothing scripted.'], open: Promise.resolve(), after: [] };
      const chunk = (delta: unknown, finish: string | null = null) =>
        `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 0, model: 'gated', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const t of next.before) res.write(chunk({ content: t }));
      await next.open;
      for (const t of next.after) {
        if (res.destroyed) return;
        res.write(chunk({ content: t }));
        await new Promise((r) => setTimeout(r, 20));
      }
      if (res.destroyed) return;
      res.write(chunk({}, 'stop'));
      res.end('data: [DONE]\n\n');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    script: (before, open, after) => void queue.push({ before, open, after }),
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/**
 * One PGlite app with the gated upstream beside the scripted one, for a whole test file: made at the first call (with
 * `models(gatedUrl)` besides the scripted model), closed after the file's tests.
 */
export function sharedGatedApp(models: (gatedUrl: string) => ModelSpec[]): () => Promise<{ e: Env; g: GatedUpstream }> {
  let shared: Promise<{ e: Env; g: GatedUpstream }> | undefined;
  after(async () => {
    if (!shared) return;
    const { e, g } = await shared;
    await e.close();
    await g.close();
  });
  return () =>
    (shared ??= (async () => {
      const g = await startGatedUpstream();
      const e = await setupAudio('pglite', models(g.url));
      return { e, g };
    })());
}

/**
 * Reads an SSE body as it arrives, calling `onEvent` for each event; resolves with all of them at the end.
 */
export async function readEvents(res: Response, onEvent: (e: any) => void = () => {}): Promise<any[]> {
  assert.equal(res.status, 200);
  const events: any[] = [];
  const dec = new TextDecoder();
  let buf = '';
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += dec.decode(chunk, { stream: true });
    let i: number;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (!data || data === '[DONE]') continue;
      const ev = JSON.parse(data);
      events.push(ev);
      onEvent(ev);
    }
  }
  return events;
}
