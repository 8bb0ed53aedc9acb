/**
 * A scripted server that speaks Azure OpenAI, for the azure-openai provider's tests: node:http on 127.0.0.1,
 * port 0. Its answers are typed with the official `openai` package's types (ChatCompletion, ChatCompletionChunk,
 * CreateEmbeddingResponse) plus Azure's own additions (prompt_filter_results, content_filter_results), and its
 * routes are the URLs the package's AzureOpenAI client builds (one test drives the mock with that client).
 *
 *   const az = await startAzureMock({ apiKey: 'az-key' });
 *   az.script({ text: 'Hello', chunks: 2 });
 *   ... POST `${az.url}/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21` with `api-key: az-key`
 *   az.requests[0].deployment / .query / .headers / .body
 *
 * Routes: POST /openai/deployments/{deployment}/{chat/completions|embeddings} (api-version required, as Azure
 * requires it there), POST /openai/v1/{chat/completions|embeddings} (api-version optional; the deployment is the
 * body's model). Credentials: with `apiKey`, the `api-key` header; with `adToken`, `Authorization: Bearer <token>`
 * (a token, or a test of the token: the tokens an Entra mock issued and the test has not revoked); anything else is
 * Azure's 401 (its message for a bad key, or for a bad token). Content filter both ways: a prompt refused (400 `content_filter` with
 * innererror.content_filter_result), a completion cut (finish_reason content_filter). Failure scripts: an error
 * status with OpenAI's error body, a hang before the headers, a stream that breaks or hangs after N chunks,
 * garbage, a reset. A request with `reasoning_effort` (which only reasoning deployments take) and `max_tokens` is
 * refused as Azure's reasoning models refuse it (400 unsupported_parameter: use max_completion_tokens).
 */
import type http from 'node:http';
import type OpenAI from 'openai';
import { opening, sendJson, split as pieces, startRecordingMock, writeFrames, writeRaw } from './recording-mock.js';
import type { MockRequest, RecordingMock, ScriptedFailures, RawReplies } from './recording-mock.js';

type Completion = OpenAI.Chat.Completions.ChatCompletion;
type Chunk = OpenAI.Chat.Completions.ChatCompletionChunk;

/** Azure's per-category filter result */
const SAFE = {
  hate: { filtered: false, severity: 'safe' },
  self_harm: { filtered: false, severity: 'safe' },
  sexual: { filtered: false, severity: 'safe' },
  violence: { filtered: false, severity: 'safe' },
};
const VIOLENT = { ...SAFE, violence: { filtered: true, severity: 'high' } };

export interface AzureToolCall {
  id?: string;
  name: string;
  /** the arguments' JSON text, or its pieces as they should be streamed */
  arguments: string | string[];
}

export interface AzureReply extends ScriptedFailures, RawReplies {
  text?: string | string[];
  /** pieces a string text is split into (default 1) */
  chunks?: number;
  toolCalls?: AzureToolCall[];
  /** default: tool_calls with toolCalls, else stop */
  finishReason?: 'stop' | 'length' | 'tool_calls' | 'content_filter';
  usage?: { prompt_tokens: number; completion_tokens: number; cached_tokens?: number; reasoning_tokens?: number };
  model?: string;
  /** 'prompt': the prompt refused (400 content_filter); 'completion': the answer cut by the filter */
  contentFilter?: 'prompt' | 'completion';
  /** with `status`: the code in OpenAI's error body */
  errorCode?: string;
}

export interface AzureRequest extends MockRequest {
  /** the deployment named in the path (deployments surface), or the body's model (v1) */
  deployment?: string;
  surface: 'deployments' | 'v1' | 'other';
  query: URLSearchParams;
}

/** url: the resource's endpoint (the model file's `endpoint`) */
export type AzureMock = RecordingMock<AzureRequest, AzureReply>;

let seq = 0;

/** Azure's pieces: an empty text is one empty piece, a text shorter than `n` one piece */
function split(s: string | string[] | undefined, n: number): string[] {
  if (s === '') return [''];
  if (typeof s === 'string' && s.length < n) return [s];
  return pieces(s, n);
}

export function azureError(message: string, code: string | null, extra: Record<string, unknown> = {}) {
  return { error: { message, type: null, param: null, code, ...extra } };
}

function usageOf(r: AzureReply): OpenAI.Completions.CompletionUsage {
  const u = r.usage ?? { prompt_tokens: 12, completion_tokens: 5 };
  return {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens,
    total_tokens: u.prompt_tokens + u.completion_tokens,
    prompt_tokens_details: { cached_tokens: u.cached_tokens ?? 0 },
    // a reasoning deployment (o-series) counts its reasoning in completion_tokens and says how much of it there was
    ...(u.reasoning_tokens !== undefined ? { completion_tokens_details: { reasoning_tokens: u.reasoning_tokens } } : {}),
  };
}

function finishOf(r: AzureReply): 'stop' | 'length' | 'tool_calls' | 'content_filter' {
  if (r.contentFilter === 'completion') return 'content_filter';
  return r.finishReason ?? (r.toolCalls?.length ? 'tool_calls' : 'stop');
}

const promptFilter = [{ prompt_index: 0, content_filter_results: SAFE }];

function completion(r: AzureReply, model: string): Completion & { prompt_filter_results: unknown } {
  const text = split(r.text, 1).join('');
  const calls = r.toolCalls?.map((c, i) => ({ id: c.id ?? `call_${i}`, type: 'function' as const, function: { name: c.name, arguments: split(c.arguments, 1).join('') } }));
  const finish = finishOf(r);
  return {
    id: `chatcmpl-az${++seq}`,
    object: 'chat.completion',
    created: 1_760_000_000,
    model,
    system_fingerprint: 'fp_az',
    prompt_filter_results: promptFilter,
    choices: [
      {
        index: 0,
        logprobs: null,
        finish_reason: finish,
        message: { role: 'assistant', content: text || (calls ? null : ''), refusal: null, ...(calls ? { tool_calls: calls } : {}) },
        // Azure's addition on each choice
        ...({ content_filter_results: finish === 'content_filter' ? VIOLENT : SAFE } as object),
      },
    ],
    usage: usageOf(r),
  };
}

function chunks(r: AzureReply, model: string): object[] {
  const id = `chatcmpl-az${++seq}`;
  const head = { id, object: 'chat.completion.chunk' as const, created: 1_760_000_000, model, system_fingerprint: 'fp_az' };
  // Azure's first chunk: no choices, the prompt's filter results
  const out: object[] = [{ id: '', object: '', created: 0, model: '', choices: [], prompt_filter_results: promptFilter }];
  const c = (delta: Chunk['choices'][number]['delta'], finish: Chunk['choices'][number]['finish_reason'] = null, extra: object = { content_filter_results: {} }): Chunk =>
    ({ ...head, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish, ...extra }] }) as Chunk;
  out.push(c({ role: 'assistant', content: '' }));
  for (const t of split(r.text, r.chunks ?? 1)) out.push(c({ content: t }, null, { content_filter_results: SAFE }));
  r.toolCalls?.forEach((tc, index) => {
    const pieces = split(tc.arguments, 1);
    out.push(c({ tool_calls: [{ index, id: tc.id ?? `call_${index}`, type: 'function', function: { name: tc.name, arguments: '' } }] }));
    for (const p of pieces) out.push(c({ tool_calls: [{ index, function: { arguments: p } }] }));
  });
  const finish = finishOf(r);
  out.push(c({}, finish, { content_filter_results: finish === 'content_filter' ? VIOLENT : {} }));
  out.push({ ...head, choices: [], usage: usageOf(r) });
  return out;
}

export async function startAzureMock(opts: { apiKey?: string; adToken?: string | ((token: string) => boolean); defaultReply?: AzureReply } = {}): Promise<AzureMock> {
  const json = (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) =>
    sendJson(res, status, body, { 'apim-request-id': `az-${++seq}`, ...headers });

  return startRecordingMock<AzureRequest, AzureReply>({
    defaultReply: opts.defaultReply ?? { text: 'Hello from Azure.', chunks: 2 },
    describe(head, req) {
      const u = new URL(req.url ?? '/', 'http://x');
      const dep = /^\/openai\/deployments\/([^/]+)\//.exec(u.pathname);
      const surface = dep ? 'deployments' : u.pathname.startsWith('/openai/v1/') ? 'v1' : 'other';
      return { path: u.pathname, deployment: dep ? decodeURIComponent(dep[1]!) : surface === 'v1' ? head.body?.model : undefined, surface, query: u.searchParams };
    },
    async answer(rec, req, res, replies) {
      const op = rec.path.endsWith('/chat/completions') ? 'chat' : rec.path.endsWith('/embeddings') ? 'embeddings' : undefined;
      if (rec.method !== 'POST' || rec.surface === 'other' || !op) return json(res, 404, azureError('Resource not found', '404'));
      if (rec.surface === 'deployments' && !rec.query.get('api-version')) {
        return json(res, 404, azureError('Resource not found', '404'));
      }
      const keyOk = opts.apiKey !== undefined && req.headers['api-key'] === opts.apiKey;
      const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
      const tokenOk = bearer !== undefined && (typeof opts.adToken === 'function' ? opts.adToken(bearer) : opts.adToken !== undefined && bearer === opts.adToken);
      if ((opts.apiKey !== undefined || opts.adToken !== undefined) && !keyOk && !tokenOk) {
        if (bearer !== undefined) {
          return json(res, 401, {
            error: { code: '401', message: 'Unauthorized. Access token is missing, invalid, audience is incorrect (https://cognitiveservices.azure.com), or have expired.' },
          });
        }
        return json(res, 401, {
          error: {
            code: '401',
            message:
              'Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.',
          },
        });
      }
      // a reasoning deployment (the only kind that takes reasoning_effort) refuses max_tokens, as Azure does
      if (op === 'chat' && rec.body?.reasoning_effort !== undefined && rec.body?.max_tokens !== undefined) {
        return json(
          res,
          400,
          azureError("Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", 'unsupported_parameter', {
            type: 'invalid_request_error',
            param: 'max_tokens',
          }),
        );
      }
      const r = replies.next();
      if (await opening(r, req)) return;
      if (r.status !== undefined && r.status >= 400) return json(res, r.status, azureError(r.errorMessage ?? 'error', r.errorCode ?? null), r.headers);
      if (r.contentFilter === 'prompt') {
        return json(
          res,
          400,
          azureError("The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.", 'content_filter', {
            param: 'prompt',
            status: 400,
            innererror: { code: 'ResponsibleAIPolicyViolation', content_filter_result: VIOLENT },
          }),
        );
      }
      if (await writeRaw(res, r)) return;
      if (op === 'embeddings') {
        const input: unknown[] = Array.isArray(rec.body?.input) ? rec.body.input : [rec.body?.input];
        const body: OpenAI.Embeddings.CreateEmbeddingResponse = {
          object: 'list',
          model: r.model ?? 'text-embedding-3-small',
          // floats, or their float32 bytes in base64 when asked (as the openai package asks by default)
          data: input.map((x, index) => {
            const v = [String(x).length, index, 0.5];
            const embedding = rec.body?.encoding_format === 'base64' ? (Buffer.from(new Float32Array(v).buffer).toString('base64') as unknown as number[]) : v;
            return { object: 'embedding' as const, index, embedding };
          }),
          usage: { prompt_tokens: input.length * 3, total_tokens: input.length * 3 },
        };
        return json(res, 200, body, r.headers);
      }
      const model = r.model ?? 'gpt-4o-2024-08-06';
      if (rec.body?.stream !== true) return json(res, 200, completion(r, model), r.headers);
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...r.headers });
      if (
        !(await writeFrames(
          res,
          chunks(r, model).map((c) => `data: ${JSON.stringify(c)}\n\n`),
          r,
        ))
      )
        return;
      res.write('data: [DONE]\n\n');
      res.end();
    },
  });
}
