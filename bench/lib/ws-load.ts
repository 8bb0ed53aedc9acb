/**
 * A load generator for the WebSocket mode of /v1/responses, in a worker thread (the server under test keeps the
 * main thread's event loop): one socket, `response.create` turns, each timed from its send to its terminal event.
 *
 * - `fresh`: every turn is a new conversation (one user message);
 * - `chain`: every turn continues the last one with previous_response_id and one new message (store false: the
 *   connection's memory), and a new chain starts every `chainLength` turns (so the history stays bounded);
 * - `pipeline` > 1 (fresh only): that many turns are kept waiting on the socket, for turns per second.
 */
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import WebSocket from 'ws';
import type { LoadResult } from './load.js';

export interface WsLoadOptions {
  /** ws://host:port/v1/responses */
  url: string;
  key: string;
  model: string;
  mode: 'fresh' | 'chain';
  chainLength: number;
  pipeline: number;
  durationMs: number;
  warmupMs: number;
}

interface WorkerData extends WsLoadOptions {
  porticoBenchWsLoad: true;
}

export function runWsLoad(opts: WsLoadOptions): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL(import.meta.url), { workerData: { ...opts, porticoBenchWsLoad: true } satisfies WorkerData });
    w.once('message', resolve);
    w.once('error', reject);
    w.once('exit', (code) => code !== 0 && reject(new Error(`ws load worker exited ${code}`)));
  });
}

function pct(s: number[], q: number) {
  return s.length ? s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]! : 0;
}

async function work(o: WsLoadOptions): Promise<LoadResult> {
  const ws = new WebSocket(o.url, { headers: { authorization: `Bearer ${o.key}` }, perMessageDeflate: false });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  let measuring = false;
  let stop = false;
  let requests = 0;
  let failures = 0;
  const lat: number[] = [];
  const first: number[] = [];
  // turns in flight, in order: when each was sent, and when its first event came
  const sent: Array<{ t0: bigint; t1?: bigint }> = [];
  let last: string | undefined;
  let depth = 0;
  let turn = 0;
  const send = () => {
    const cont = o.mode === 'chain' && last !== undefined && depth < o.chainLength;
    if (!cont) depth = 0;
    depth++;
    sent.push({ t0: process.hrtime.bigint() });
    ws.send(
      JSON.stringify({
        type: 'response.create',
        model: o.model,
        store: false,
        input: `Turn ${turn++}: say hello in five words.`,
        ...(cont ? { previous_response_id: last } : {}),
      }),
    );
  };
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  ws.on('message', (data) => {
    const e = JSON.parse(data.toString());
    const head = sent[0];
    if (!head) return;
    head.t1 ??= process.hrtime.bigint();
    const terminal = e.type === 'response.completed' || e.type === 'response.incomplete' || e.type === 'response.failed';
    if (!terminal && !(e.type === 'error' && e.sequence_number === undefined)) return;
    sent.shift();
    const t2 = process.hrtime.bigint();
    if (measuring) {
      requests++;
      if (e.type !== 'response.completed') failures++;
      lat.push(Number(t2 - head.t0) / 1e6);
      first.push(Number(head.t1 - head.t0) / 1e6);
    }
    last = e.type === 'response.completed' ? e.response.id : undefined;
    if (!stop) send();
    else if (sent.length === 0) done();
  });
  ws.on('close', () => done());
  for (let i = 0; i < (o.mode === 'fresh' ? o.pipeline : 1); i++) send();
  await new Promise((r) => setTimeout(r, o.warmupMs));
  measuring = true;
  const start = process.hrtime.bigint();
  await new Promise((r) => setTimeout(r, o.durationMs));
  measuring = false;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  stop = true;
  await finished;
  ws.close();
  lat.sort((a, b) => a - b);
  first.sort((a, b) => a - b);
  return {
    requests,
    non2xx: 0,
    errors: 0,
    failures,
    seconds,
    rps: requests / seconds,
    p50: pct(lat, 0.5),
    p99: pct(lat, 0.99),
    ttfe50: pct(first, 0.5),
    ttfe99: pct(first, 0.99),
  };
}

if (!isMainThread && (workerData as WorkerData | undefined)?.porticoBenchWsLoad) {
  work(workerData as WorkerData).then((r) => parentPort!.postMessage(r));
}
