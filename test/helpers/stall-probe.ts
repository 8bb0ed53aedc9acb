/**
 * Measures how long one request stalls a server: from a worker thread (so the measuring client does not share
 * the event loop of a server running in this process), GET /healthz every 20 ms on a keep-alive connection
 * of its own while another connection sends the request; the longest /healthz answer is the stall.
 * Used by bench/stall.ts and test/platform/stall.test.ts.
 */
import http from 'node:http';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

export interface StallOptions {
  /** http://127.0.0.1:port */
  url: string;
  method?: 'POST' | 'GET';
  path: string;
  headers?: Record<string, string>;
  /** the body, built in the worker (a big one is not copied between threads): JSON text */
  body:
    | { kind: 'items'; items: number; textChars: number; model: string; field?: 'input' | 'messages'; extra?: Record<string, unknown> }
    | { kind: 'text'; chars: number; model: string; extra?: Record<string, unknown> }
    /** embeddings: `input` an array of `count` texts */
    | { kind: 'texts'; count: number; textChars: number; model: string; extra?: Record<string, unknown> };
  /** probe interval (ms) */
  everyMs?: number;
  /** probing before the request (the baseline) and after its answer (ms) */
  idleMs?: number;
}

export interface StallResult {
  status: number;
  /** the answer's first 300 characters */
  answer: string;
  bodyBytes: number;
  /** the request's time to its whole answer (ms) */
  requestMs: number;
  /** the longest /healthz latency while the request ran (ms) */
  maxStallMs: number;
  /** when the longest one was sent, from the request's start (ms): past requestMs, it was after the answer */
  maxStallAtMs: number;
  /** the longest /healthz latency while idle, before the request (ms): the baseline */
  idleMaxMs: number;
  probes: number;
}

interface Data extends StallOptions {
  porticoStallProbe: true;
}

export function measureStall(o: StallOptions): Promise<StallResult> {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL(import.meta.url), { workerData: { ...o, porticoStallProbe: true } satisfies Data });
    w.once('message', resolve);
    w.once('error', reject);
    w.once('exit', (code) => code !== 0 && reject(new Error(`stall probe exited ${code}`)));
  });
}

function buildBody(b: StallOptions['body']): Buffer {
  if (b.kind === 'text') return Buffer.from(JSON.stringify({ model: b.model, input: 'a'.repeat(b.chars), ...b.extra }));
  if (b.kind === 'texts') return Buffer.from(JSON.stringify({ model: b.model, input: Array.from({ length: b.count }, () => 'x'.repeat(b.textChars)), ...b.extra }));
  const text = 'x'.repeat(b.textChars);
  const chat = b.field === 'messages';
  const input = Array.from({ length: b.items }, (_, i) => ({ ...(chat ? {} : { type: 'message' }), role: i % 2 ? 'assistant' : 'user', content: text }));
  return Buffer.from(JSON.stringify({ model: b.model, [b.field ?? 'input']: input, ...b.extra }));
}

/** the bytes of an answer kept: its first 300 characters at most */
const HEAD_BYTES = 1200;

function call(agent: http.Agent, url: string, method: string, path: string, headers: Record<string, string>, body?: Buffer): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url + path,
      { method, agent, headers: { ...headers, ...(body ? { 'content-type': 'application/json', 'content-length': String(body.length) } : {}) } },
      (res) => {
        // the answer's first bytes only (StallResult.answer): joining and decoding a whole large answer here (the
        // ~64 MB of 2048 embeddings: Buffer.concat and toString, 0.8 s at load 17 on 2 cores, tens of ms on a quiet
        // machine) held this thread, the probe's own, and the probe measured itself as the server's stall
        const head: Buffer[] = [];
        let kept = 0;
        res.on('data', (c: Buffer) => {
          if (kept >= HEAD_BYTES) return;
          head.push(c);
          kept += c.length;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(head).toString('utf8', 0, Math.min(kept, HEAD_BYTES)) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

async function work(o: StallOptions): Promise<StallResult> {
  const every = o.everyMs ?? 20;
  const idle = o.idleMs ?? 300;
  const probeAgent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const sendAgent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const body = buildBody(o.body);
  let phase = 'idle' as 'idle' | 'busy' | 'done';
  const now = () => phase;
  let idleMax = 0;
  let busyMax = 0;
  let busyAt = 0;
  let started = 0;
  let probes = 0;
  const probing = (async () => {
    for (;;) {
      const at = phase;
      if (at === 'done') return;
      const t = performance.now();
      await call(probeAgent, o.url, 'GET', '/healthz', {});
      const ms = performance.now() - t;
      probes++;
      if (at === 'idle' && now() === 'idle') idleMax = Math.max(idleMax, ms);
      else if (ms > busyMax) {
        busyMax = ms;
        busyAt = t - started;
      }
      await new Promise((r) => setTimeout(r, Math.max(0, every - ms)));
    }
  })();
  await new Promise((r) => setTimeout(r, idle));
  phase = 'busy';
  const t = performance.now();
  started = t;
  const res = await call(sendAgent, o.url, o.method ?? 'POST', o.path, o.headers ?? {}, body);
  const requestMs = performance.now() - t;
  // what the request leaves behind (storing, billing) counts too
  await new Promise((r) => setTimeout(r, idle));
  phase = 'done';
  await probing;
  probeAgent.destroy();
  sendAgent.destroy();
  return { status: res.status, answer: res.text.slice(0, 300), bodyBytes: body.length, requestMs, maxStallMs: busyMax, maxStallAtMs: busyAt, idleMaxMs: idleMax, probes };
}

if (!isMainThread && (workerData as Data | undefined)?.porticoStallProbe) {
  work(workerData as Data).then(
    (r) => parentPort!.postMessage(r),
    (e) => {
      throw e;
    },
  );
}
