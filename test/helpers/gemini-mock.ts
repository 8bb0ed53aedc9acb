/**
 * A scripted server that speaks Gemini's API, for the gemini provider's tests: node:http on 127.0.0.1, port 0. Its
 * answers are typed with the official SDK's own types (@google/genai: GenerateContentResponse, Part,
 * EmbedContentResponse), so a field the wire has is a field the mock writes.
 *
 *   const up = await startGeminiMock({ apiKey: 'AIza-test' });
 *   up.script({ text: 'Hello', chunks: 2, usage: { promptTokenCount: 10, candidatesTokenCount: 2 } });
 *   ... POST `${up.url}/v1beta/models/gemini-test:streamGenerateContent?alt=sse` (up.url: the model file's base_url)
 *   up.requests[0].body / .headers / .path / .query
 *
 * Routes: POST /v1beta/models/{m}:generateContent (one GenerateContentResponse), :streamGenerateContent (SSE when
 * `alt=sse`, each event one GenerateContentResponse chunk), :batchEmbedContents, :embedContent; GET /v1beta/models.
 * A request without the right key (`x-goog-api-key`, or `key=` in the query, as Google takes it) is refused as
 * Google refuses it: a 400 API_KEY_INVALID. Failure scripts: an error status with Google's error body (and
 * RetryInfo), a hang before the headers, a stream that breaks, hangs or sends an error after N chunks, garbage.
 */
import type http from 'node:http';
import type { GenerateContentResponse, Part, EmbedContentResponse, GenerateContentResponseUsageMetadata } from '@google/genai';
import { opening, sendJson, split, startRecordingMock, writeFrames, writeRaw } from './recording-mock.js';
import type { MockRequest, RecordingMock, ScriptedFailures, RawReplies } from './recording-mock.js';

/** the wire's shape of a response (the SDK's class, without its computed getters and the HTTP response it keeps) */
type Wire = Omit<GenerateContentResponse, 'text' | 'data' | 'functionCalls' | 'executableCode' | 'codeExecutionResult' | 'initialPromptTokenCount' | 'sdkHttpResponse'>;

export interface GeminiCall {
  name: string;
  args: Record<string, unknown>;
  id?: string;
  /** the part's thoughtSignature (thinking models put one on a call) */
  signature?: string;
}

export interface GeminiReply extends ScriptedFailures, RawReplies {
  /** answer text, or its pieces (one chunk each when streamed) */
  text?: string | string[];
  /** pieces a string text / thought is split into (default 1) */
  chunks?: number;
  /** thought parts (`thought: true`) before the text */
  thought?: string | string[];
  calls?: GeminiCall[];
  /** default STOP; null: no finishReason at all */
  finishReason?: string | null;
  /** promptFeedback.blockReason: the prompt is blocked, no candidate */
  blockReason?: string;
  usage?: GenerateContentResponseUsageMetadata;
  modelVersion?: string;
  /** an error object in the stream after this many chunks */
  errorAfter?: number;
  /** with `status`: the status name in Google's error body (default: the status's) */
  errorStatus?: string;
  /** google.rpc.RetryInfo's retryDelay, e.g. '7s' */
  retryDelay?: string;
  /** embeddings: the size of each vector (default 4) */
  dimensions?: number;
}

const STATUS: Record<number, string> = {
  400: 'INVALID_ARGUMENT',
  403: 'PERMISSION_DENIED',
  404: 'NOT_FOUND',
  429: 'RESOURCE_EXHAUSTED',
  500: 'INTERNAL',
  503: 'UNAVAILABLE',
  504: 'DEADLINE_EXCEEDED',
};

export interface GeminiRequest extends MockRequest {
  /** the path, decoded */
  path: string;
  query: URLSearchParams;
}

/** url: the model file's base_url */
export type GeminiMock = RecordingMock<GeminiRequest, GeminiReply>;

/** Google's error body: {error: {code, message, status, details}} */
export function googleError(status: number, message: string, statusName?: string, retryDelay?: string, reason?: string) {
  const details: unknown[] = [];
  if (reason) details.push({ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason, domain: 'googleapis.com' });
  if (retryDelay) details.push({ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay });
  return { error: { code: status, message, status: statusName ?? STATUS[status] ?? 'UNKNOWN', ...(details.length ? { details } : {}) } };
}

let seq = 0;

/** The answer's chunks: each one new parts of the first candidate; the last one the finish reason and the usage. */
function chunks(r: GeminiReply, model: string): Wire[] {
  const n = r.chunks ?? 1;
  const id = `resp_${++seq}`;
  const modelVersion = r.modelVersion ?? model;
  const thought = split(r.thought, n);
  const text = split(r.text, n);
  const usage: GenerateContentResponseUsageMetadata = r.usage ?? {
    promptTokenCount: 10,
    candidatesTokenCount: text.length + (r.calls?.length ?? 0),
    totalTokenCount: 10 + text.length,
  };
  if (r.blockReason) return [{ promptFeedback: { blockReason: r.blockReason as never, safetyRatings: [] }, usageMetadata: usage, modelVersion, responseId: id }];
  const parts: Part[][] = [...thought.map((t) => [{ text: t, thought: true }]), ...text.map((t) => [{ text: t }])];
  if (r.calls?.length)
    parts.push(r.calls.map((c) => ({ functionCall: { name: c.name, args: c.args, ...(c.id ? { id: c.id } : {}) }, ...(c.signature ? { thoughtSignature: c.signature } : {}) })));
  if (parts.length === 0) parts.push([]);
  return parts.map((p, i) => {
    const last = i === parts.length - 1;
    const c: Wire = { candidates: [{ content: { role: 'model', parts: p }, index: 0 }], modelVersion, responseId: id };
    if (last && r.finishReason !== null) c.candidates![0]!.finishReason = (r.finishReason ?? 'STOP') as never;
    // Gemini repeats the usage on every chunk, complete on the last
    c.usageMetadata = last ? usage : { promptTokenCount: usage.promptTokenCount };
    return c;
  });
}

/** The answer as one response (generateContent): every chunk's parts in one candidate. */
function whole(cs: Wire[]): Wire {
  const last = cs[cs.length - 1]!;
  if (!last.candidates) return last;
  const parts = cs.flatMap((c) => c.candidates?.[0]?.content?.parts ?? []);
  const merged: Part[] = [];
  for (const p of parts) {
    const prev = merged[merged.length - 1];
    if (prev && typeof p.text === 'string' && typeof prev.text === 'string' && !!p.thought === !!prev.thought) prev.text += p.text;
    else merged.push({ ...p });
  }
  return { ...last, candidates: [{ ...last.candidates[0], content: { role: 'model', parts: merged } }] };
}

export async function startGeminiMock(opts: { apiKey?: string; defaultReply?: GeminiReply } = {}): Promise<GeminiMock> {
  const json = (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) =>
    sendJson(res, status, body, { 'content-type': 'application/json; charset=UTF-8', ...headers });

  return startRecordingMock<GeminiRequest, GeminiReply>({
    defaultReply: opts.defaultReply ?? { text: 'Hello from Gemini.', chunks: 2 },
    describe(_head, req) {
      const u = new URL(req.url ?? '/', 'http://x');
      return { path: decodeURIComponent(u.pathname), query: u.searchParams };
    },
    async answer(rec, req, res, replies) {
      const key = req.headers['x-goog-api-key'] ?? rec.query.get('key');
      if (opts.apiKey !== undefined && key !== opts.apiKey) {
        return json(res, 400, googleError(400, 'API key not valid. Please pass a valid API key.', 'INVALID_ARGUMENT', undefined, 'API_KEY_INVALID'));
      }
      if (rec.method === 'GET' && rec.path === '/v1beta/models') return json(res, 200, { models: [{ name: 'models/gemini-test', displayName: 'Gemini Test' }] });
      const m = /^\/v1beta\/models\/([^:/]+):(generateContent|streamGenerateContent|batchEmbedContents|embedContent)$/.exec(rec.path);
      if (rec.method !== 'POST' || !m) return json(res, 404, googleError(404, `Not found: ${rec.path}`));
      const r = replies.next();
      if (await opening(r, req)) return;
      if (r.status !== undefined && r.status >= 400) return json(res, r.status, googleError(r.status, r.errorMessage ?? 'error', r.errorStatus, r.retryDelay), r.headers);
      if (await writeRaw(res, r)) return;
      const method = m[2]!;
      if (method === 'batchEmbedContents' || method === 'embedContent') {
        const dims = r.dimensions ?? 4;
        const reqs: any[] = method === 'embedContent' ? [rec.body] : (rec.body?.requests ?? []);
        const vector = (text: string, i: number) => Array.from({ length: reqs[i]?.outputDimensionality ?? dims }, (_, k) => ((text.length + k + i) % 7) / 7);
        const out: Omit<EmbedContentResponse, 'sdkHttpResponse'> = { embeddings: reqs.map((q, i) => ({ values: vector(String(q?.content?.parts?.[0]?.text ?? ''), i) })) };
        return json(res, 200, method === 'embedContent' ? { embedding: out.embeddings![0] } : out, r.headers);
      }
      const cs = chunks(r, m[1]!);
      if (method === 'generateContent') return json(res, 200, whole(cs), r.headers);
      if (rec.query.get('alt') !== 'sse') return json(res, 200, cs, r.headers); // a JSON array, as Google answers without alt=sse
      res.writeHead(200, { 'content-type': 'text/event-stream', ...r.headers });
      const frames = cs.map((c) => `data: ${JSON.stringify(c)}\r\n\r\n`);
      const failure = () => `data: ${JSON.stringify(googleError(503, r.errorMessage ?? 'The model is overloaded.', 'UNAVAILABLE'))}\r\n\r\n`;
      if (await writeFrames(res, frames, r, { failAt: r.errorAfter, failure })) res.end();
    },
  });
}
