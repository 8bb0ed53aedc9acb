/**
 * What the realtime tests share: a Portico with a scripted text upstream and the built-in audio models, reached
 * through a TLS front by the official SDK's realtime client (OpenAIRealtimeWS, which always opens wss://), an event
 * log that waits on conditions, and speech made by Portico's own voices.
 */
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';
import { NO_VOICE_WARM_UP, buildTestApp, type TestDb } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { tlsFront, type TlsFront } from '../helpers/tls-front.js';
import type { ModelSpec } from '../../src/models/config.js';
import { quietFor, waitFor } from '../helpers/wait.js';
import { WebSocket } from 'ws';
import type { DestinationStream } from 'pino';

export const TEXT_MODEL = 'answerer';

/**
 * Holds the next admission of a turn (its first step, the key verified again) for `ms`, as a slow database or a
 * remote limiter would, while `work` runs; gives how many verifications there were meanwhile.
 */
export async function withSlowAdmission(e: RtEnv, ms: number, work: () => Promise<void>): Promise<number> {
  const verifier = e.t.runtime.verifier;
  const verify = verifier.verify;
  let calls = 0;
  verifier.verify = async (...args) => {
    if (calls++ === 0) await quietFor(ms);
    return verify.apply(verifier, args);
  };
  try {
    await work();
  } finally {
    verifier.verify = verify;
  }
  return calls;
}

export interface RtEnv {
  t: Awaited<ReturnType<typeof buildTestApp>>;
  url: string;
  key: string;
  client: OpenAI;
  up: ScriptedUpstream;
  front: TlsFront;
  /** an SDK client on the TLS front (its key: `key` unless given) */
  sdk(key?: string): OpenAI;
  open(opts?: { model?: string; key?: string }): Promise<Session>;
  close(): Promise<void>;
}

/**
 * A Portico for realtime tests. Its espeak-ng workers warm no voice (NO_VOICE_WARM_UP): the sessions here speak in
 * flite's voices (alloy, echo), so the warm-up of espeak-ng's six table voices (~2 s of CPU per app) served none of
 * them. `warmEngines: false`: the embedded speech engines are not started before the first test (apps whose sessions
 * are all forwarded to an upstream, and never use them; they would start at a first use all the same).
 */
export async function setupRealtime(
  o: { db?: TestDb; models?: ModelSpec[]; env?: Record<string, string>; textModel?: boolean; logDestination?: DestinationStream; warmEngines?: boolean } = {},
): Promise<RtEnv> {
  const up = await startScriptedUpstream();
  const models: ModelSpec[] = [
    ...(o.textModel === false
      ? []
      : [{ name: TEXT_MODEL, provider: 'openai-compatible', base_url: up.url, upstream_model: 'upstream-model', type: 'text', retries: 0 } as ModelSpec]),
    ...(o.models ?? []),
  ];
  const t = await buildTestApp({ db: o.db ?? 'pglite', listen: true, models, builtins: true, env: o.env ?? {}, logDestination: o.logDestination, runtime: NO_VOICE_WARM_UP });
  const url = t.url!;
  const key = await t.inferenceKey('alice');
  const client = new OpenAI({ apiKey: key, baseURL: url + '/v1', maxRetries: 0, timeout: 60_000 });
  const front = await tlsFront(Number(new URL(url).port));
  if (o.warmEngines !== false) await t.services.audioEngines.warmUp();
  const sdk = (k = key) => new OpenAI({ apiKey: k, baseURL: front.url + '/v1', maxRetries: 0 });
  const sessions: Session[] = [];
  return {
    t,
    url,
    key,
    client,
    up,
    front,
    sdk,
    async open(opts = {}) {
      const rt = new OpenAIRealtimeWS({ model: opts.model ?? 'gpt-realtime', options: { ca: front.ca } }, sdk(opts.key));
      const s = new Session(rt);
      sessions.push(s);
      await s.opened;
      return s;
    },
    async close() {
      for (const s of sessions) s.close();
      await front.close();
      await t.close();
      await up.close();
    },
  };
}

/** the first event of `type` in `events` from index `from` on (waiting for it), and the index after it */
async function nextOfType(events: any[], from: number, type: string, what: string, timeoutMs: number): Promise<{ event: any; seen: number }> {
  const i = await waitFor(
    () => {
      for (let j = from; j < events.length; j++) if (events[j].type === type) return j + 1;
      return 0;
    },
    { what, timeoutMs },
  );
  return { event: events[i - 1], seen: i };
}

/** One SDK realtime socket and every event it got, in order. */
export class Session {
  readonly events: any[] = [];
  readonly errors: any[] = [];
  closedWith: { code: number; reason: string } | undefined;
  readonly opened: Promise<void>;
  private seen = 0;

  constructor(readonly rt: OpenAIRealtimeWS) {
    rt.on('event', (e: any) => this.events.push(e));
    rt.on('error', (e: any) => this.errors.push(e));
    rt.socket.on('close', (code: number, reason: Buffer) => (this.closedWith = { code, reason: reason.toString() }));
    this.opened = new Promise((resolve, reject) => {
      rt.socket.once('open', () => resolve());
      rt.socket.once('error', reject);
      rt.socket.once('unexpected-response', (_req: unknown, res: { statusCode: number }) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
    });
  }

  send(e: Record<string, unknown>) {
    this.rt.send(e as never);
  }

  /** the next event of this type after the ones already taken by next() */
  async next(type: string, what = type, timeoutMs = 60_000): Promise<any> {
    const { event, seen } = await nextOfType(this.events, this.seen, type, what, timeoutMs);
    this.seen = seen;
    return event;
  }

  /** every event from the last next() on, up to (and with) the next of this type */
  async until(type: string, timeoutMs = 60_000): Promise<any[]> {
    const from = this.seen;
    await this.next(type, type, timeoutMs);
    return this.events.slice(from, this.seen);
  }

  types(list: any[] = this.events): string[] {
    return list.map((e) => e.type);
  }

  close() {
    try {
      this.rt.close();
    } catch {
      /* gone */
    }
  }
}

/** speech by Portico's own voices, as 24 kHz 16-bit PCM */
export async function speak(e: RtEnv, text: string, voice = 'alloy'): Promise<Buffer> {
  const r = await e.client.audio.speech.create({ model: 'tts-1', voice, input: text, response_format: 'pcm' });
  return Buffer.from(await r.arrayBuffer());
}

export const silence = (seconds: number) => Buffer.alloc(Math.round(seconds * 24000) * 2);

/** sends PCM as appends of `ms` each */
export function append(s: Session, pcm: Buffer, ms = 100) {
  const step = Math.round((24000 * ms) / 1000) * 2;
  for (let i = 0; i < pcm.length; i += step) s.send({ type: 'input_audio_buffer.append', audio: pcm.subarray(i, i + step).toString('base64') });
}

/** the audio of a response's output_audio.delta events, joined */
export function audioOf(events: any[], itemId?: string): Buffer {
  return Buffer.concat(events.filter((e) => e.type === 'response.output_audio.delta' && (!itemId || e.item_id === itemId)).map((e) => Buffer.from(e.delta, 'base64')));
}

export function assertError(e: any, code: string, param?: string | null) {
  assert.equal(e.type, 'error', JSON.stringify(e));
  assert.equal(e.error.code, code, JSON.stringify(e));
  assert.equal(typeof e.error.message, 'string');
  assert.ok(e.error.message.length > 0);
  if (param !== undefined) assert.equal(e.error.param, param, JSON.stringify(e));
}

/**
 * A raw `ws` client on Portico's plain address (no SDK): for what the SDK cannot send or ask (binary and garbage
 * frames, subprotocols, ?intent=, a socket that stops reading). `opened` rejects with the HTTP status of a refused
 * upgrade (`err.status`).
 */
export class RawSession {
  readonly events: any[] = [];
  closedWith: { code: number; reason: string } | undefined;
  readonly opened: Promise<void>;
  readonly closed: Promise<{ code: number; reason: string }>;
  /** the refused upgrade's status and body */
  refused: { status: number; body: string } | undefined;
  private seen = 0;

  constructor(readonly ws: WebSocket) {
    ws.on('message', (d, isBinary) => {
      if (!isBinary) this.events.push(JSON.parse(d.toString()));
    });
    this.closed = new Promise((r) =>
      ws.on('close', (code: number, reason: Buffer) => {
        this.closedWith = { code, reason: reason.toString() };
        r(this.closedWith);
      }),
    );
    this.opened = new Promise((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => {
          this.refused = { status: res.statusCode ?? 0, body };
          reject(Object.assign(new Error(`upgrade refused: ${res.statusCode} ${body}`), { status: res.statusCode, body }));
        });
      });
    });
  }

  static open(e: RtEnv, o: { query?: string; key?: string | null; protocols?: string[]; headers?: Record<string, string> } = {}): RawSession {
    const headers: Record<string, string> = { ...(o.headers ?? {}) };
    const key = o.key === undefined ? e.key : o.key;
    if (key !== null) headers.authorization = `Bearer ${key}`;
    const url = `${e.url.replace('http', 'ws')}/v1/realtime${o.query ? `?${o.query}` : ''}`;
    return new RawSession(new WebSocket(url, o.protocols ?? [], { headers }));
  }

  send(e: Record<string, unknown> | string | Buffer) {
    this.ws.send(typeof e === 'string' || Buffer.isBuffer(e) ? e : JSON.stringify(e));
  }

  async next(type: string, timeoutMs = 60_000): Promise<any> {
    const { event, seen } = await nextOfType(this.events, this.seen, type, type, timeoutMs);
    this.seen = seen;
    return event;
  }

  close() {
    try {
      this.ws.close();
    } catch {
      /* gone */
    }
  }
}

/** a portal call as `user` (the key management the tests revoke, disable and delete keys through) */
export async function portal(e: RtEnv, user: string, method: string, path: string, body?: unknown): Promise<Response> {
  return fetch(`${e.url}/v1/portal${path}`, {
    method,
    headers: { authorization: `Bearer ${await e.t.token(user)}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
}

/** a new inference key of `user` (with these scopes), its id and the key */
export async function keyRecord(e: RtEnv, user = 'alice', scopes?: string[]): Promise<{ id: string; api_key: string }> {
  const r = await portal(e, user, 'POST', '/api-keys', { name: 'k', ...(scopes ? { scopes } : {}) });
  assert.equal(r.status, 200, await r.clone().text());
  return ((await r.json()) as any).data as { id: string; api_key: string };
}
