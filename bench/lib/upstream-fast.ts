/**
 * A minimal OpenAI-compatible upstream for benchmarks: node:http, POST /v1/chat/completions answered at once,
 * as one JSON body or as a short SSE stream written in one go (role, three text pieces, finish, usage, [DONE]),
 * and POST /v1/embeddings (one vector of FAST_EMBEDDING_DIMENSIONS floats per input).
 * It runs in a worker thread (startFastUpstream) so it does not share the event loop of the server under test.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { osThreadId } from './threads.js';

const PIECES = ['Hello', ' from the', ' fast upstream.'];

function chunk(model: string, created: number, delta: string, finish: string | null) {
  return `{"id":"chatcmpl-fast","object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"choices":[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish === null ? 'null' : JSON.stringify(finish)}}]}`;
}

/** the length of the vectors /embeddings answers (text-embedding-3-small's) */
export const FAST_EMBEDDING_DIMENSIONS = 1536;
/** one vector's JSON, made once: every input gets the same (the work measured is Portico's, not this server's) */
let vectorJson: string | undefined;

/** POST /embeddings: one vector of FAST_EMBEDDING_DIMENSIONS floats per input, as float JSON */
function embeddings(bufs: Buffer[], res: http.ServerResponse): void {
  let body: { input?: unknown };
  try {
    body = JSON.parse(Buffer.concat(bufs).toString('utf8'));
  } catch {
    res.writeHead(400, { 'content-type': 'application/json' });
    res.end('{"error":{"message":"bad json","type":"invalid_request_error","param":null,"code":null}}');
    return;
  }
  const n = Array.isArray(body.input) && typeof body.input[0] !== 'number' ? body.input.length : 1;
  vectorJson ??= JSON.stringify(Array.from({ length: FAST_EMBEDDING_DIMENSIONS }, (_, i) => Math.fround(Math.sin(i + 1) / 7)));
  const parts: string[] = [];
  for (let i = 0; i < n; i++) parts.push(`{"object":"embedding","index":${i},"embedding":${vectorJson}}`);
  const out = `{"object":"list","data":[${parts.join(',')}],"model":"fast","usage":{"prompt_tokens":${n * 8},"total_tokens":${n * 8}}}`;
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
  res.end(out);
}

export function fastUpstreamServer(): http.Server {
  const server = http.createServer((req, res) => {
    const bufs: Buffer[] = [];
    req.on('data', (c: Buffer) => bufs.push(c));
    req.on('end', () => {
      if (req.method === 'POST' && req.url?.endsWith('/embeddings')) {
        embeddings(bufs, res);
        return;
      }
      if (req.method !== 'POST' || !req.url?.endsWith('/chat/completions')) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"not found","type":"invalid_request_error","param":null,"code":null}}');
        return;
      }
      let body: any;
      try {
        body = JSON.parse(Buffer.concat(bufs).toString('utf8'));
      } catch {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"bad json","type":"invalid_request_error","param":null,"code":null}}');
        return;
      }
      const model = typeof body.model === 'string' ? body.model : 'fast';
      const created = Math.floor(Date.now() / 1000);
      const usage = { prompt_tokens: 12, completion_tokens: PIECES.length, total_tokens: 12 + PIECES.length };
      if (!body.stream) {
        const out = JSON.stringify({
          id: 'chatcmpl-fast',
          object: 'chat.completion',
          created,
          model,
          choices: [{ index: 0, message: { role: 'assistant', content: PIECES.join('') }, logprobs: null, finish_reason: 'stop' }],
          usage,
        });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
        res.end(out);
        return;
      }
      let s = `data: ${chunk(model, created, '{"role":"assistant","content":""}', null)}\n\n`;
      for (const p of PIECES) s += `data: ${chunk(model, created, JSON.stringify({ content: p }), null)}\n\n`;
      s += `data: ${chunk(model, created, '{}', 'stop')}\n\n`;
      s += `data: {"id":"chatcmpl-fast","object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"choices":[],"usage":${JSON.stringify(usage)}}\n\n`;
      s += 'data: [DONE]\n\n';
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.end(s);
    });
  });
  server.keepAliveTimeout = 60_000;
  server.on('connection', (sock) => sock.setNoDelay(true));
  return server;
}

/**
 * Starts the upstream in a worker thread; resolves with its base URL (ending in /v1), a stop function, and the
 * thread's OS id (a benchmark leaves its CPU out of the server's).
 */
export function startFastUpstream(): Promise<{ url: string; stop: () => Promise<void>; tid?: number }> {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL(import.meta.url), { workerData: { fastUpstream: true } });
    w.once('error', reject);
    w.once('message', ({ port, tid }: { port: number; tid?: number }) =>
      resolve({
        tid,
        url: `http://127.0.0.1:${port}/v1`,
        stop: async () => {
          await w.terminate();
        },
      }),
    );
  });
}

if (!isMainThread && (workerData as { fastUpstream?: boolean } | undefined)?.fastUpstream) {
  const server = fastUpstreamServer();
  server.listen(0, '127.0.0.1', () => parentPort!.postMessage({ port: (server.address() as AddressInfo).port, tid: osThreadId() }));
}
