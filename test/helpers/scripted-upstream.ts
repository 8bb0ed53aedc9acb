/**
 * A scripted OpenAI-compatible server for tests and benchmarks: node:http on 127.0.0.1, port 0.
 *
 *   const up = await startScriptedUpstream();
 *   up.script({ text: 'Hello world', chunks: 3 });          // next request's answer (queue; FIFO)
 *   ... POST `${up.url}/chat/completions` (up.url ends in /v1)
 *   up.requests[0].body                                     // what was received (parsed JSON)
 *   await up.close();
 *
 * Routes: POST /v1/chat/completions (stream or not), POST /v1/responses (stream or not), POST /v1/embeddings,
 * GET /v1/models; any other POST path when the reply at the head of the queue is a `json` answer or an error.
 * One Reply object describes an answer; it is rendered in the dialect of the route that was called.
 * Chat Completions as OpenAI answers them: a stream carries the usage chunk (and `usage: null` on every other
 * chunk) only when the request asks with `stream_options.include_usage`; `logprobs: true` gets a logprobs entry
 * per text piece. Embeddings: `scriptedEmbedding(text, dimensions)` per input (token arrays: their ids joined by
 * commas), as floats or base64, usage one token per 4 characters (or per token id).
 * When nothing is scripted, `defaultReply` answers (a short text), so a benchmark needs no scripting at all.
 */
import type http from 'node:http';
import { sleep, split, startRecordingMock, type MockRequest, type RecordingMock, type Replies, type Scripted, type ScriptedFailures, type RawReplies } from './recording-mock.js';

export interface ScriptedToolCall {
  /** default call_<n> */
  id?: string;
  name: string;
  /** the argument text, or its pieces as they should be streamed */
  arguments: string | string[];
}

export interface Reply extends Omit<ScriptedFailures, 'reset'>, RawReplies {
  /** answer text: a string (split into `chunks` pieces) or the pieces themselves */
  text?: string | string[];
  /** pieces a string `text` / `reasoning` is split into (default 1) */
  chunks?: number;
  /** reasoning text streamed before the answer: chat `delta.reasoning_content` (or `delta.reasoning`, see reasoningField) */
  reasoning?: string | string[];
  reasoningField?: 'reasoning_content' | 'reasoning';
  /** responses route: stream reasoning as summary text (default) or as raw reasoning_text */
  reasoningAs?: 'summary' | 'text';
  toolCalls?: ScriptedToolCall[];
  /** stream the pieces of all tool calls interleaved (call 0 piece 0, call 1 piece 0, call 0 piece 1...) */
  interleave?: boolean;
  /** default: 'tool_calls' with toolCalls, else 'stop'; null sends no finish_reason */
  finishReason?: 'stop' | 'length' | 'tool_calls' | 'content_filter' | null;
  /** usage sent with the last chunk; false: none; default: counted from the text (1 token per piece) */
  usage?: false | { prompt_tokens: number; completion_tokens: number; cached_tokens?: number; reasoning_tokens?: number };
  /** model named in the answer (default: the request's model) */
  model?: string;
  /** omit the final `data: [DONE]` (chat) */
  noDone?: boolean;
  /** with `status`: the error body (default an OpenAI-shaped error with `errorMessage`) */
  errorBody?: unknown;
  /**
   * this object as a 200 JSON answer, on any POST path: a reply with it (or with an error `status`) at the head
   * of the queue also answers a path the server does not know (an endpoint forwarded as it is, e.g.
   * /images/generations)
   */
  json?: unknown;
  /** embeddings: the vector size when the request gives no `dimensions` (default 8) */
  embeddingSize?: number;
  /** embeddings: refuse `dimensions` as OpenAI does for models without it (400) */
  noDimensions?: boolean;
}

export interface RecordedRequest extends MockRequest {
  /** the client's TCP port (requests on one kept-alive connection share it) */
  remotePort: number;
  /** how many frames (SSE events) of a streamed answer were written so far: a test waits on it, not on a clock */
  written: number;
}

/** url: the base URL including /v1, e.g. http://127.0.0.1:40123/v1 */
export interface ScriptedUpstream extends RecordingMock<RecordedRequest, Reply, Scripted<Reply>> {
  /** models listed by GET /v1/models */
  models: string[];
  /** GET /v1/models answers with this instead of the list (an error status, or hang: never answers) */
  modelsReply?: { status?: number; hang?: boolean };
}

export interface ScriptedUpstreamOptions {
  /** keep request records (default true; a benchmark turns it off) */
  record?: boolean;
  defaultReply?: Reply;
  models?: string[];
  /** Bearer key the server demands (401 otherwise) */
  apiKey?: string;
}

interface Plan {
  model: string;
  reasoning: string[];
  text: string[];
  calls: { id: string; name: string; pieces: string[] }[];
  /** [call index, piece index] in streaming order */
  order: [number, number][];
  finishReason: string | null;
  usage: Reply['usage'];
}

function plan(reply: Reply, reqModel: string): Plan {
  const n = reply.chunks ?? 1;
  const calls = (reply.toolCalls ?? []).map((c, i) => ({ id: c.id ?? `call_${i}`, name: c.name, pieces: split(c.arguments, 1) }));
  const order: [number, number][] = [];
  if (reply.interleave) {
    const max = Math.max(0, ...calls.map((c) => c.pieces.length));
    for (let p = 0; p < Math.max(max, 1); p++) for (let c = 0; c < calls.length; c++) if (p < Math.max(calls[c].pieces.length, 1)) order.push([c, p]);
  } else {
    calls.forEach((c, ci) => {
      for (let p = 0; p < Math.max(c.pieces.length, 1); p++) order.push([ci, p]);
    });
  }
  const text = split(reply.text, n);
  const reasoning = split(reply.reasoning, n);
  const finishReason = reply.finishReason === undefined ? (calls.length ? 'tool_calls' : 'stop') : reply.finishReason;
  let usage = reply.usage;
  if (usage === undefined) usage = { prompt_tokens: 10, completion_tokens: text.length + reasoning.length + order.length };
  return { model: reply.model ?? reqModel ?? 'scripted', reasoning, text, calls, order, finishReason, usage };
}

function chatUsage(u: Exclude<Reply['usage'], undefined | false>) {
  const o: any = { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens, total_tokens: u.prompt_tokens + u.completion_tokens };
  if (u.cached_tokens !== undefined) o.prompt_tokens_details = { cached_tokens: u.cached_tokens };
  if (u.reasoning_tokens !== undefined) o.completion_tokens_details = { reasoning_tokens: u.reasoning_tokens };
  return o;
}

function responsesUsage(u: Exclude<Reply['usage'], undefined | false>) {
  return {
    input_tokens: u.prompt_tokens,
    input_tokens_details: { cached_tokens: u.cached_tokens ?? 0 },
    output_tokens: u.completion_tokens,
    output_tokens_details: { reasoning_tokens: u.reasoning_tokens ?? 0 },
    total_tokens: u.prompt_tokens + u.completion_tokens,
  };
}

let seq = 0;

/** Chat Completions stream: the `data:` payloads in order (without the framing). */
function chatEvents(p: Plan, reply: Reply, req: any = {}): string[] {
  const id = `chatcmpl-${++seq}`;
  const created = Math.floor(Date.now() / 1000);
  const head = `{"id":"${id}","object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(p.model)},"choices":`;
  const ev: string[] = [];
  // OpenAI: with include_usage every chunk has `usage: null` and a last chunk carries it; without, no usage at all
  const includeUsage = req.stream_options?.include_usage === true;
  const tail = includeUsage ? ',"usage":null}' : '}';
  const delta = (d: unknown, finish: string | null = null, logprobs: unknown = null) => head + JSON.stringify([{ index: 0, delta: d, logprobs, finish_reason: finish }]) + tail;
  ev.push(delta({ role: 'assistant', content: '' }));
  const rf = reply.reasoningField ?? 'reasoning_content';
  for (const r of p.reasoning) ev.push(delta({ [rf]: r }));
  for (const t of p.text) ev.push(delta({ content: t }, null, req.logprobs === true ? textLogprobs(t) : null));
  const seen = new Set<number>();
  for (const [c, i] of p.order) {
    const call = p.calls[c];
    const piece = call.pieces[i] ?? '';
    const tc: any = { index: c };
    if (!seen.has(c)) {
      seen.add(c);
      tc.id = call.id;
      tc.type = 'function';
      tc.function = { name: call.name, arguments: piece };
    } else tc.function = { arguments: piece };
    ev.push(delta({ tool_calls: [tc] }));
  }
  if (p.finishReason !== null) ev.push(delta({}, p.finishReason));
  if (p.usage && includeUsage) ev.push(head + '[],"usage":' + JSON.stringify(chatUsage(p.usage)) + '}');
  if (!reply.noDone) ev.push('[DONE]');
  return ev;
}

/** a logprobs entry for a text piece, as OpenAI gives them (one token per piece here) */
function textLogprobs(t: string) {
  return { content: [{ token: t, logprob: -0.25, bytes: [...Buffer.from(t, 'utf8')], top_logprobs: [] }], refusal: null };
}

/** The vector the scripted upstream gives a text: deterministic, unit length. */
export function scriptedEmbedding(text: string, dimensions = 8): number[] {
  let h = 2166136261;
  for (const c of Buffer.from(text, 'utf8')) h = Math.imul(h ^ c, 16777619) >>> 0;
  const v = Array.from({ length: dimensions }, (_, i) => Math.sin(h / 1000 + i * 1.7) + 0.01 * (i + 1));
  const n = Math.sqrt(v.reduce((a, x) => a + x * x, 0));
  return v.map((x) => Math.fround(x / n));
}

function embeddingsAnswer(body: any, reply: Reply) {
  const raw = body?.input;
  const inputs: Array<string | number[]> = typeof raw === 'string' ? [raw] : Array.isArray(raw) && typeof raw[0] === 'number' ? [raw] : (raw ?? []);
  const dims = body?.dimensions ?? reply.embeddingSize ?? 8;
  let tokens = 0;
  const data = inputs.map((x, index) => {
    const text = typeof x === 'string' ? x : x.join(',');
    tokens += typeof x === 'string' ? Math.max(1, Math.ceil(x.length / 4)) : x.length;
    const v = scriptedEmbedding(text, dims);
    const embedding = body?.encoding_format === 'base64' ? Buffer.from(Float32Array.from(v).buffer).toString('base64') : v;
    return { object: 'embedding', index, embedding };
  });
  return { object: 'list', data, model: reply.model ?? body?.model ?? 'scripted', usage: { prompt_tokens: tokens, total_tokens: tokens } };
}

function chatCompletion(p: Plan, req: any = {}) {
  const message: any = { role: 'assistant', content: p.text.length ? p.text.join('') : null };
  if (p.reasoning.length) message.reasoning_content = p.reasoning.join('');
  if (p.calls.length) message.tool_calls = p.calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.pieces.join('') } }));
  const o: any = {
    id: `chatcmpl-${++seq}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: p.model,
    choices: [
      { index: 0, message, logprobs: req.logprobs === true ? { content: p.text.flatMap((t) => textLogprobs(t).content), refusal: null } : null, finish_reason: p.finishReason },
    ],
  };
  if (p.usage) o.usage = chatUsage(p.usage);
  return o;
}

/** Responses stream: [event type, JSON payload] in order. */
function responsesEvents(p: Plan, reply: Reply): string[] {
  const rid = `resp_${++seq}`;
  const base = { id: rid, object: 'response', created_at: Math.floor(Date.now() / 1000), model: p.model, output: [] as any[] };
  const ev: any[] = [];
  ev.push({ type: 'response.created', response: { ...base, status: 'in_progress', usage: null } });
  ev.push({ type: 'response.in_progress', response: { ...base, status: 'in_progress', usage: null } });
  const output: any[] = [];
  let oi = 0;
  if (p.reasoning.length) {
    const item_id = `rs_${seq}`;
    const full = p.reasoning.join('');
    ev.push({ type: 'response.output_item.added', output_index: oi, item: { id: item_id, type: 'reasoning', summary: [] } });
    if ((reply.reasoningAs ?? 'summary') === 'summary') {
      ev.push({ type: 'response.reasoning_summary_part.added', item_id, output_index: oi, summary_index: 0, part: { type: 'summary_text', text: '' } });
      for (const r of p.reasoning) ev.push({ type: 'response.reasoning_summary_text.delta', item_id, output_index: oi, summary_index: 0, delta: r });
      ev.push({ type: 'response.reasoning_summary_text.done', item_id, output_index: oi, summary_index: 0, text: full });
      ev.push({ type: 'response.reasoning_summary_part.done', item_id, output_index: oi, summary_index: 0, part: { type: 'summary_text', text: full } });
      output.push({ id: item_id, type: 'reasoning', summary: [{ type: 'summary_text', text: full }] });
    } else {
      for (const r of p.reasoning) ev.push({ type: 'response.reasoning_text.delta', item_id, output_index: oi, content_index: 0, delta: r });
      ev.push({ type: 'response.reasoning_text.done', item_id, output_index: oi, content_index: 0, text: full });
      output.push({ id: item_id, type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: full }] });
    }
    ev.push({ type: 'response.output_item.done', output_index: oi, item: output[output.length - 1] });
    oi++;
  }
  const incomplete = p.finishReason === 'length' || p.finishReason === 'content_filter';
  if (p.text.length) {
    const item_id = `msg_${seq}`;
    const full = p.text.join('');
    ev.push({ type: 'response.output_item.added', output_index: oi, item: { id: item_id, type: 'message', role: 'assistant', status: 'in_progress', content: [] } });
    ev.push({ type: 'response.content_part.added', item_id, output_index: oi, content_index: 0, part: { type: 'output_text', text: '', annotations: [] } });
    for (const t of p.text) ev.push({ type: 'response.output_text.delta', item_id, output_index: oi, content_index: 0, delta: t, logprobs: [] });
    ev.push({ type: 'response.output_text.done', item_id, output_index: oi, content_index: 0, text: full, logprobs: [] });
    ev.push({ type: 'response.content_part.done', item_id, output_index: oi, content_index: 0, part: { type: 'output_text', text: full, annotations: [] } });
    const item = {
      id: item_id,
      type: 'message',
      role: 'assistant',
      status: incomplete ? 'incomplete' : 'completed',
      content: [{ type: 'output_text', text: full, annotations: [] }],
    };
    ev.push({ type: 'response.output_item.done', output_index: oi, item });
    output.push(item);
    oi++;
  }
  const first = oi;
  const added = new Set<number>();
  const done = (c: number) => {
    const call = p.calls[c];
    const args = call.pieces.join('');
    const item = { id: `fc_${seq}_${c}`, type: 'function_call', call_id: call.id, name: call.name, arguments: args, status: 'completed' };
    ev.push({ type: 'response.function_call_arguments.done', item_id: item.id, output_index: first + c, name: call.name, arguments: args });
    ev.push({ type: 'response.output_item.done', output_index: first + c, item });
    output[first + c] = item;
  };
  const remaining = p.calls.map((c) => Math.max(c.pieces.length, 1));
  for (const [c, i] of p.order) {
    const call = p.calls[c];
    const item_id = `fc_${seq}_${c}`;
    if (!added.has(c)) {
      added.add(c);
      ev.push({
        type: 'response.output_item.added',
        output_index: first + c,
        item: { id: item_id, type: 'function_call', call_id: call.id, name: call.name, arguments: '', status: 'in_progress' },
      });
    }
    if (call.pieces[i]) ev.push({ type: 'response.function_call_arguments.delta', item_id, output_index: first + c, delta: call.pieces[i] });
    if (--remaining[c] === 0) done(c);
  }
  const usage = p.usage ? responsesUsage(p.usage) : null;
  if (p.finishReason === null) return ev.map((e) => JSON.stringify(e));
  const final = {
    ...base,
    status: incomplete ? 'incomplete' : 'completed',
    incomplete_details: incomplete ? { reason: p.finishReason === 'length' ? 'max_output_tokens' : 'content_filter' } : null,
    output,
    usage,
  };
  ev.push({ type: incomplete ? 'response.incomplete' : 'response.completed', response: final });
  return ev.map((e, i) => {
    e.sequence_number = i;
    return JSON.stringify(e);
  });
}

function responseObject(p: Plan, reply: Reply) {
  const evs = responsesEvents(p, reply).map((s) => JSON.parse(s));
  return evs[evs.length - 1].response;
}

export async function startScriptedUpstream(opts: ScriptedUpstreamOptions = {}): Promise<ScriptedUpstream> {
  const base = await startRecordingMock<RecordedRequest, Reply, Scripted<Reply>>({
    defaultReply: opts.defaultReply ?? { text: 'Hello from the scripted upstream.', chunks: 4 },
    basePath: '/v1',
    record: opts.record ?? true,
    setup(server) {
      server.keepAliveTimeout = 60_000;
      server.on('connection', (s) => s.setNoDelay(true));
    },
    describe: (_head, req) => ({ remotePort: req.socket.remotePort ?? 0, written: 0 }),
    answer: (rec, _req, res, replies) => handle(rec, res, replies),
  });
  const up: ScriptedUpstream = Object.assign(base, { models: opts.models ?? ['scripted-model'] });

  async function handle(rec: RecordedRequest, res: http.ServerResponse, replies: Replies<Reply>): Promise<void> {
    const path = rec.path.replace(/^\/v1/, '');
    if (opts.apiKey && rec.headers.authorization !== `Bearer ${opts.apiKey}`) {
      return json(res, 401, { error: { message: 'Incorrect API key provided', type: 'invalid_request_error', param: null, code: 'invalid_api_key' } });
    }
    if (rec.method === 'GET' && path === '/models') {
      if (up.modelsReply?.hang) return;
      if (up.modelsReply?.status) return json(res, up.modelsReply.status, { error: { message: 'scripted models failure', type: 'server_error', param: null, code: null } });
      return json(res, 200, { object: 'list', data: up.models.map((id) => ({ id, object: 'model', created: 0, owned_by: 'scripted' })) });
    }
    const queued = replies.peek();
    const head = typeof queued === 'object' ? queued : undefined;
    const scriptedHere = head !== undefined && (head.json !== undefined || (head.status !== undefined && head.status >= 300));
    if (rec.method !== 'POST' || (path !== '/chat/completions' && path !== '/responses' && path !== '/embeddings' && !scriptedHere)) {
      return json(res, 404, { error: { message: `no route ${rec.method} ${rec.path}`, type: 'invalid_request_error', param: null, code: null } });
    }
    const reply = replies.next();
    if (reply.hang) return; // never answers
    if (reply.headerDelayMs) await sleep(reply.headerDelayMs);
    if (reply.status && reply.status >= 300) {
      const body = reply.errorBody ?? { error: { message: reply.errorMessage ?? `scripted error ${reply.status}`, type: 'invalid_request_error', param: null, code: null } };
      return typeof body === 'string' ? send(res, reply.status, 'text/plain', body, reply.headers) : json(res, reply.status, body, reply.headers);
    }
    if (reply.raw) return stream(rec, res, reply, reply.raw);
    if (reply.rawJson !== undefined) return send(res, 200, 'application/json', reply.rawJson, reply.headers);
    if (reply.json !== undefined) return json(res, 200, reply.json, reply.headers);
    const body = rec.body ?? {};
    if (path === '/embeddings') {
      if (reply.noDimensions && body.dimensions !== undefined) {
        return json(res, 400, { error: { message: 'This model does not support specifying dimensions.', type: 'invalid_request_error', param: 'dimensions', code: null } });
      }
      return json(res, 200, embeddingsAnswer(body, reply), reply.headers);
    }
    const p = plan(reply, typeof body.model === 'string' ? body.model : 'scripted');
    const responses = path === '/responses';
    if (!body.stream) {
      // breakAfter 0 on a JSON answer: the connection is cut before any byte of it (a reset before output)
      if (reply.breakAfter === 0) return void res.socket?.destroy();
      return json(res, 200, responses ? responseObject(p, reply) : chatCompletion(p, body), reply.headers);
    }
    if (responses) {
      const evs = responsesEvents(p, reply);
      return stream(
        rec,
        res,
        reply,
        evs.map((e) => `event: ${JSON.parse(e).type}\ndata: ${e}\n\n`),
      );
    }
    return stream(
      rec,
      res,
      reply,
      chatEvents(p, reply, body).map((e) => `data: ${e}\n\n`),
    );
  }

  async function stream(rec: RecordedRequest, res: http.ServerResponse, reply: Reply, frames: string[]): Promise<void> {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...reply.headers });
    const delay = reply.delayMs ?? 0;
    if (!delay) res.cork();
    for (let i = 0; i < frames.length; i++) {
      if (reply.breakAfter !== undefined && i >= reply.breakAfter) {
        if (!delay) res.uncork();
        // let what was written reach the client, then cut the connection without ending the chunked body
        await sleep(20);
        res.socket?.destroy();
        return;
      }
      if (reply.hangAfter !== undefined && i >= reply.hangAfter) {
        if (!delay) res.uncork();
        await new Promise((r) => res.once('close', r));
        return;
      }
      if (res.destroyed) return;
      if (delay) {
        if (i > 0) await sleep(delay);
        if (res.destroyed) return;
        // a first frame right away so the headers and early events flush
      }
      res.write(frames[i]);
      rec.written++;
    }
    if (!delay) res.uncork();
    res.end();
  }

  function json(res: http.ServerResponse, status: number, body: unknown, headers?: Record<string, string>) {
    send(res, status, 'application/json', JSON.stringify(body), headers);
  }

  function send(res: http.ServerResponse, status: number, type: string, body: string, headers?: Record<string, string>) {
    res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body), ...headers });
    res.end(body);
  }

  return up;
}
