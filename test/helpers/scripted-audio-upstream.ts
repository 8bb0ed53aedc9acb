/**
 * A tiny OpenAI-compatible audio server for tests (node:http on 127.0.0.1, port 0). It records every request
 * (parsed multipart fields and files, or JSON) and answers from a script: a queue of replies consumed in order,
 * else a default (a verbose_json transcription for /audio/transcriptions and /audio/translations, one second of a
 * 440 Hz tone as pcm for /audio/speech).
 *
 *   const up = await startScriptedAudioUpstream();
 *   up.script({ type: 'pcm', samples, chunkSizes: [3, 1, 5] });
 *   const engine = createOpenAICompatibleSpeechEngine({ baseUrl: up.baseUrl });
 *   ...; up.requests[0].json; await up.close();
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedFile {
  field: string;
  filename: string;
  contentType?: string;
  bytes: Buffer;
}

export interface RecordedAudioRequest {
  method: string;
  /** path without the query, e.g. /v1/audio/transcriptions */
  path: string;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  /** JSON bodies */
  json?: unknown;
  /** multipart text fields, repeated keys kept in order (`timestamp_granularities[]`) */
  fields: Record<string, string[]>;
  files: RecordedFile[];
  /** set when the client closed the connection before the whole answer was sent */
  clientAborted: boolean;
  /** `pcm` replies: when (performance.now()) each piece of the body was written */
  writes: number[];
  /** resolves when the exchange is over (answer finished or client gone) */
  done: Promise<void>;
}

export type ScriptedReply =
  | { type: 'json'; body: unknown; status?: number; delayMs?: number }
  | { type: 'text'; body: string; status?: number; contentType?: string }
  | { type: 'error'; status: number; message: string; code?: string | null; errorType?: string; param?: string | null }
  /** any raw body, e.g. FastAPI's {"detail": ...} or an HTML proxy page */
  | { type: 'raw'; status: number; body: string; contentType?: string }
  /**
   * raw s16le mono PCM; sent in pieces of `chunkSizes` bytes (cycled; default all at once) with `intervalMs`
   * between them; `endless` keeps sending the samples until the client goes away
   */
  | { type: 'pcm'; samples?: Int16Array; bytes?: Buffer; chunkSizes?: number[]; intervalMs?: number; endless?: boolean; status?: number }
  /** accepts the request and never answers */
  | { type: 'hang' }
  /** destroys the connection without an answer */
  | { type: 'destroy' };

export type ScriptEntry = ScriptedReply | ((req: RecordedAudioRequest) => ScriptedReply);

export interface ScriptedAudioUpstream {
  /** http://127.0.0.1:PORT/v1 */
  readonly baseUrl: string;
  readonly port: number;
  readonly requests: RecordedAudioRequest[];
  /** queues replies, used one per request in order */
  script(...replies: ScriptEntry[]): void;
  /** the answer when the queue is empty (default: the built-in defaults) */
  setDefault(reply: ScriptEntry | undefined): void;
  /** waits until `n` requests have arrived */
  waitForRequests(n: number, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export const DEFAULT_VERBOSE_JSON = {
  task: 'transcribe',
  language: 'english',
  duration: 2.5,
  text: 'Hello there, general Kenobi.',
  segments: [
    {
      id: 0,
      seek: 0,
      start: 0.0,
      end: 2.5,
      text: ' Hello there, general Kenobi.',
      tokens: [50364, 2425, 456, 11, 2674, 591, 268, 996, 13],
      temperature: 0.0,
      avg_logprob: -0.25,
      compression_ratio: 0.9,
      no_speech_prob: 0.01,
    },
  ],
  words: [
    { word: 'Hello', start: 0.0, end: 0.4 },
    { word: 'there,', start: 0.4, end: 0.8 },
    { word: 'general', start: 0.9, end: 1.5 },
    { word: 'Kenobi.', start: 1.5, end: 2.4 },
  ],
  usage: { type: 'duration', seconds: 3 },
};

/** one second of a 440 Hz tone at 24 kHz */
export function tone(seconds = 1, sampleRate = 24000, hz = 440): Int16Array {
  const out = new Int16Array(Math.round(seconds * sampleRate));
  for (let i = 0; i < out.length; i++) out[i] = Math.round(Math.sin((2 * Math.PI * hz * i) / sampleRate) * 12000);
  return out;
}

export function int16ToLeBytes(samples: Int16Array): Buffer {
  const b = Buffer.alloc(samples.length * 2);
  for (let i = 0; i < samples.length; i++) b.writeInt16LE(samples[i], i * 2);
  return b;
}

function parseMultipart(body: Buffer, contentType: string): { fields: Record<string, string[]>; files: RecordedFile[] } {
  const fields: Record<string, string[]> = {};
  const files: RecordedFile[] = [];
  const m = /boundary=(?:"([^"]+)"|([^;]+))/i.exec(contentType);
  if (!m) return { fields, files };
  const delim = Buffer.from('--' + (m[1] ?? m[2]).trim());
  let pos = body.indexOf(delim);
  while (pos >= 0) {
    let start = pos + delim.length;
    if (body.subarray(start, start + 2).toString() === '--') break;
    start += 2; // CRLF
    const next = body.indexOf(delim, start);
    if (next < 0) break;
    const part = body.subarray(start, next - 2); // without the CRLF before the delimiter
    const headEnd = part.indexOf('\r\n\r\n');
    const head = part.subarray(0, headEnd).toString('utf8');
    const content = part.subarray(headEnd + 4);
    const disp = /content-disposition:[^\r\n]*/i.exec(head)?.[0] ?? '';
    const name = /\bname="([^"]*)"/i.exec(disp)?.[1] ?? '';
    const filename = /\bfilename="([^"]*)"/i.exec(disp)?.[1];
    const ctype = /content-type:\s*([^\r\n]*)/i.exec(head)?.[1];
    if (filename !== undefined) files.push({ field: name, filename, contentType: ctype, bytes: Buffer.from(content) });
    else (fields[name] ??= []).push(content.toString('utf8'));
    pos = next;
  }
  return { fields, files };
}

function defaultReply(req: RecordedAudioRequest): ScriptedReply {
  if (req.path.endsWith('/audio/speech')) return { type: 'pcm', samples: tone(1) };
  if (req.path.endsWith('/audio/transcriptions') || req.path.endsWith('/audio/translations')) {
    return { type: 'json', body: DEFAULT_VERBOSE_JSON };
  }
  return { type: 'error', status: 404, message: `no route ${req.method} ${req.path}`, code: 'not_found' };
}

export async function startScriptedAudioUpstream(): Promise<ScriptedAudioUpstream> {
  const queue: ScriptEntry[] = [];
  let fallback: ScriptEntry | undefined;
  const requests: RecordedAudioRequest[] = [];
  const waiters: Array<() => void> = [];
  const sockets = new Set<import('node:net').Socket>();

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const ct = req.headers['content-type'] ?? '';
      let finish!: () => void;
      const rec: RecordedAudioRequest = {
        method: req.method ?? 'GET',
        path: (req.url ?? '/').split('?')[0],
        headers: req.headers,
        body,
        fields: {},
        files: [],
        clientAborted: false,
        writes: [],
        done: new Promise<void>((r) => (finish = r)),
      };
      if (ct.includes('multipart/form-data')) Object.assign(rec, parseMultipart(body, ct));
      else if (ct.includes('json')) {
        try {
          rec.json = JSON.parse(body.toString('utf8'));
        } catch {
          rec.json = undefined;
        }
      }
      requests.push(rec);
      for (const w of waiters.splice(0)) w();
      let over = false;
      const end = () => {
        if (!over) {
          over = true;
          finish();
        }
      };
      res.on('close', () => {
        if (!res.writableFinished) rec.clientAborted = true;
        end();
      });
      res.on('finish', end);

      const entry = queue.shift() ?? fallback;
      const reply = entry === undefined ? defaultReply(rec) : typeof entry === 'function' ? entry(rec) : entry;
      switch (reply.type) {
        case 'json': {
          const send = () => {
            res.writeHead(reply.status ?? 200, { 'content-type': 'application/json' });
            res.end(JSON.stringify(reply.body));
          };
          if (reply.delayMs) setTimeout(send, reply.delayMs);
          else send();
          break;
        }
        case 'text':
          res.writeHead(reply.status ?? 200, { 'content-type': reply.contentType ?? 'text/plain; charset=utf-8' });
          res.end(reply.body);
          break;
        case 'raw':
          res.writeHead(reply.status, { 'content-type': reply.contentType ?? 'text/html' });
          res.end(reply.body);
          break;
        case 'error':
          res.writeHead(reply.status, { 'content-type': 'application/json' });
          res.end(
            JSON.stringify({
              error: { message: reply.message, type: reply.errorType ?? 'invalid_request_error', param: reply.param ?? null, code: reply.code ?? null },
            }),
          );
          break;
        case 'hang':
          break;
        case 'destroy':
          req.socket.destroy();
          break;
        case 'pcm': {
          const bytes = reply.bytes ?? int16ToLeBytes(reply.samples ?? tone(1));
          res.writeHead(reply.status ?? 200, { 'content-type': 'audio/pcm', 'transfer-encoding': 'chunked' });
          const sizes = reply.chunkSizes?.length ? reply.chunkSizes : [bytes.length || 1];
          let off = 0;
          let k = 0;
          const step = () => {
            if (res.destroyed) return;
            if (off >= bytes.length) {
              if (reply.endless && bytes.length > 0) off = 0;
              else return void res.end();
            }
            const n = Math.max(1, sizes[k++ % sizes.length]);
            rec.writes.push(performance.now());
            res.write(bytes.subarray(off, off + n));
            off += n;
            if (reply.intervalMs) setTimeout(step, reply.intervalMs);
            else setImmediate(step);
          };
          step();
          break;
        }
      }
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;

  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    port,
    requests,
    script(...replies) {
      queue.push(...replies);
    },
    setDefault(reply) {
      fallback = reply;
    },
    async waitForRequests(n, timeoutMs = 15_000) {
      const until = Date.now() + timeoutMs;
      while (requests.length < n) {
        if (Date.now() > until) throw new Error(`scripted upstream: ${requests.length} of ${n} requests after ${timeoutMs} ms`);
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, 50);
        });
      }
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
