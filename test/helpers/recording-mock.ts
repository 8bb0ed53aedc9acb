/**
 * The plumbing every scripted upstream of the tests shares (the provider mocks: anthropic-, azure-, bedrock-,
 * gemini-, entra-mock; the OpenAI-compatible scripted-upstream): a node:http server on 127.0.0.1, port 0; a FIFO
 * queue of scripted replies (or functions of the request body) with a default reply; a record of every request
 * (method, path, headers, parsed body, its text, aborted, closed); waiters on the number of requests; reset; a
 * close that destroys the open connections. A mock gives only what is its own: how a request is described (its
 * path, the deployment or model it names, a signature it checks) and how a reply is written on its wire.
 *
 *   const mock = await startRecordingMock<MyRequest, MyReply>({
 *     defaultReply: { text: 'Hello' },
 *     describe: (head, req, body) => ({ model: ... }),   // the request's own fields, once the body is in
 *     answer: async (rec, req, res, replies) => { const r = replies.next(); ... },
 *   });
 *
 * Also the pieces of a reply most mocks write alike: `split` (a text into pieces), `opening` (a reset, a hang, a
 * delay before the headers), `writeRaw` (garbage as JSON or as a stream), `writeFrames` (a stream that may break,
 * hang or fail after N frames).
 */
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/** a scripted reply, or a function of the request's body that gives it */
export type Scripted<R> = R | ((body: any) => R);

export interface MockRequest {
  method: string;
  /** the URL's path without the query (unless the mock describes it otherwise) */
  path: string;
  headers: http.IncomingHttpHeaders;
  /** the body parsed as JSON (its text when it is no JSON; undefined when empty) */
  body: any;
  /** the body's text as it came */
  raw: string;
  /** set when the client closed the connection before the answer was complete */
  aborted: boolean;
  /** when the request's head arrived (performance.now() of this process) */
  at: number;
  /** resolves when the answer finished or the connection closed */
  closed: Promise<void>;
}

export interface RecordingMock<Req extends MockRequest, Reply, Default = Reply> {
  /** http://127.0.0.1:<port> and the mock's base path */
  url: string;
  port: number;
  /** every request received, in order (unless started with record: false) */
  requests: Req[];
  /** queue answers for the next requests (FIFO); a function reply is called with the request body */
  script(...replies: Scripted<Reply>[]): void;
  /** the answer when the queue is empty */
  defaultReply: Default;
  /** resolves once `n` requests have been received */
  waitForRequests(n: number): Promise<Req[]>;
  /** forget recorded requests and queued replies */
  reset(): void;
  close(): Promise<void>;
}

/** the scripted replies, as an answer takes them */
export interface Replies<Reply> {
  /** the next reply (the queue's head, else the default), resolved against the request's body */
  next(): Reply;
  /** the queue's head, not taken */
  peek(): Scripted<Reply> | undefined;
}

export interface RecordingMockSpec<Req extends MockRequest, Reply, Default> {
  defaultReply: Default;
  /** the request's own fields once its body is in; may also replace the common ones (path, body) */
  describe?(head: MockRequest, req: http.IncomingMessage, body: Buffer): Omit<Req, keyof MockRequest> & Partial<MockRequest>;
  /** writes the answer; a throw destroys the response */
  answer(rec: Req, req: http.IncomingMessage, res: http.ServerResponse, replies: Replies<Reply>): unknown;
  /** appended to the URL (e.g. /v1) */
  basePath?: string;
  /** keep request records (default true; a benchmark turns it off) */
  record?: boolean;
  /** tune the server before it listens */
  setup?(server: http.Server): void;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export async function startRecordingMock<Req extends MockRequest, Reply, Default extends Scripted<Reply> = Reply>(
  spec: RecordingMockSpec<Req, Reply, Default>,
): Promise<RecordingMock<Req, Reply, Default>> {
  const record = spec.record ?? true;
  const queue: Scripted<Reply>[] = [];
  const requests: Req[] = [];
  let waiters: { n: number; resolve: (r: Req[]) => void }[] = [];
  const sockets = new Set<Socket>();

  const server = http.createServer((req, res) => {
    let closedResolve!: () => void;
    const head: MockRequest = {
      method: req.method ?? 'GET',
      path: (req.url ?? '/').split('?')[0]!,
      headers: req.headers,
      body: undefined,
      raw: '',
      aborted: false,
      at: performance.now(),
      closed: new Promise<void>((r) => (closedResolve = r)),
    };
    res.on('close', () => {
      if (!res.writableFinished) head.aborted = true;
      closedResolve();
    });
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      head.raw = body.toString('utf8');
      try {
        head.body = head.raw ? JSON.parse(head.raw) : undefined;
      } catch {
        head.body = head.raw;
      }
      const rec = (spec.describe ? Object.assign(head, spec.describe(head, req, body)) : head) as Req;
      if (record) {
        requests.push(rec);
        if (waiters.length) waiters = waiters.filter((w) => (requests.length >= w.n ? (w.resolve(requests), false) : true));
      }
      const replies: Replies<Reply> = {
        next() {
          const next = queue.length ? queue.shift()! : mock.defaultReply;
          return typeof next === 'function' ? (next as (body: any) => Reply)(rec.body) : (next as Reply);
        },
        peek: () => queue[0],
      };
      void (async () => spec.answer(rec, req, res, replies))().catch(() => res.destroy());
    });
  });
  spec.setup?.(server);
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;

  const mock: RecordingMock<Req, Reply, Default> = {
    url: `http://127.0.0.1:${port}${spec.basePath ?? ''}`,
    port,
    requests,
    script: (...r) => void queue.push(...r),
    defaultReply: spec.defaultReply,
    waitForRequests(n) {
      if (requests.length >= n) return Promise.resolve(requests);
      return new Promise((resolve) => waiters.push({ n, resolve }));
    },
    reset() {
      requests.length = 0;
      queue.length = 0;
    },
    close() {
      return new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      });
    },
  };
  return mock;
}

/** A text as the pieces it is streamed in: its own pieces, or a string cut into `n` (none for an empty one). */
export function split(s: string | string[] | undefined, n: number): string[] {
  if (s === undefined) return [];
  if (Array.isArray(s)) return s;
  if (n <= 1 || s.length <= 1) return s ? [s] : [];
  const size = Math.ceil(s.length / n);
  const out: string[] = [];
  for (let i = 0; i < s.length; i += size) out.push(s.slice(i, i + size));
  return out;
}

/** `body` as JSON: the content type first, then `headers` */
export function sendJson(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

/** The opening of a scripted answer: true when there is no more to it (a reset, a hang); else after the header delay. */
export async function opening(r: Pick<ScriptedFailures, 'reset' | 'hang' | 'headerDelayMs'>, req: http.IncomingMessage): Promise<boolean> {
  if (r.reset) {
    req.socket.destroy();
    return true;
  }
  if (r.hang) return true;
  if (r.headerDelayMs) await sleep(r.headerDelayMs);
  return false;
}

/** A scripted garbage answer: `rawJson` as a 200 JSON body, or `raw` as a 200 stream, one write per piece. True when written. */
export async function writeRaw(res: http.ServerResponse, r: { rawJson?: string; raw?: string[]; delayMs?: number; headers?: Record<string, string> }): Promise<boolean> {
  if (r.rawJson !== undefined) {
    res.writeHead(200, { 'content-type': 'application/json', ...r.headers });
    res.end(r.rawJson);
    return true;
  }
  if (!r.raw) return false;
  res.writeHead(200, { 'content-type': 'text/event-stream', ...r.headers });
  for (const w of r.raw) {
    res.write(w);
    if (r.delayMs) await sleep(r.delayMs);
  }
  res.end();
  return true;
}

export interface FrameScript {
  /** ms between two streamed events */
  delayMs?: number;
  /** destroy the connection after this many streamed events (a stream that breaks mid-way) */
  breakAfter?: number;
  /** stop writing after this many streamed events and keep the connection open (an upstream that hangs) */
  hangAfter?: number;
}

/** What a scripted reply may say of its timing and failures, as every mock takes it (its own wire writes them). */
export interface ScriptedFailures extends FrameScript {
  /** ms before the response headers */
  headerDelayMs?: number;
  /** headers added to the answer */
  headers?: Record<string, string>;
  /** never answer: the request stays open until the client gives up */
  hang?: boolean;
  /** close the connection as soon as the request arrived (a reset before any answer) */
  reset?: boolean;
  /** an error answer: this status, with the mock's error body (of `errorMessage`) */
  status?: number;
  errorMessage?: string;
}

/** A garbage answer (see writeRaw). */
export interface RawReplies {
  /** written verbatim as a 200 text/event-stream body, one write per element */
  raw?: string[];
  /** written verbatim as a 200 application/json body */
  rawJson?: string;
}

/**
 * Writes a stream's frames (the headers written already). Before frame `failAt`, `failure` ends the stream; at
 * `breakAfter` what was written reaches the client (flushed) and the connection is cut mid-body; at `hangAfter` it
 * stops. With `drain`, each frame's write completes before the next step. True when every frame was written (the
 * caller ends the body).
 */
export async function writeFrames(
  res: http.ServerResponse,
  frames: (string | Buffer)[],
  r: FrameScript,
  o: { failAt?: number; failure?: () => string | Buffer; drain?: boolean } = {},
): Promise<boolean> {
  for (let i = 0; i < frames.length; i++) {
    if (o.failAt === i && o.failure) {
      res.end(o.failure());
      return false;
    }
    if (r.breakAfter === i) {
      if (!o.drain) await new Promise<void>((done) => res.write('', () => done()));
      res.socket?.destroy();
      return false;
    }
    if (r.hangAfter === i) return false;
    if (o.drain) await new Promise<void>((done) => res.write(frames[i]!, () => done()));
    else res.write(frames[i]!);
    if (r.delayMs) await sleep(r.delayMs);
  }
  return true;
}
