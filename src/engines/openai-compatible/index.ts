/**
 * The `openai-compatible` text engine: an HTTP client of any server speaking the OpenAI Chat Completions API
 * (OpenAI, vLLM, Ollama, llama.cpp server, LocalAI, LiteLLM...) or the Responses API itself.
 *
 * Streams from the upstream (stream: true) and turns its SSE events into GenerateEvents as they arrive; a
 * server that ignores `stream` and answers with one JSON body is handled too. A non-streaming caller
 * (GenerateRequest.stream false) asks for one JSON answer instead (`whole`): no event parsing, one body read;
 * a server that streams anyway is parsed as a stream.
 */
import { type ChatCompletionsRequest, type GenerateEvent, type GenerateRequest, type TextEngine } from '../types.js';
import { chatPassthrough, forwardJson } from './chat-passthrough.js';
import { buildChatBody, ChatDecoder } from './chat.js';
import { buildResponsesBody, ResponsesDecoder } from './responses.js';
import { estimateTokensInTurns } from '../shared/tokens.js';
import { jsonBody, Upstream } from '../shared/http.js';
import { run, whole } from '../shared/answer.js';

export { estimateTokens } from '../shared/tokens.js';
export { SseParser } from '../shared/sse.js';

export interface OpenAICompatibleEngineOptions {
  /** e.g. http://127.0.0.1:11434/v1 (the path the OpenAI routes hang under) */
  baseUrl: string;
  apiKey?: string;
  /** 'chat.completions' (default) or 'responses' when the upstream speaks /v1/responses itself */
  api?: 'chat.completions' | 'responses';
  contextWindow?: number;
  /** ms to wait for the upstream's response headers, and the longest silence allowed mid-stream (default 300000) */
  timeoutMs?: number;
  /** ms a new upstream connection may take to open (unset: only timeoutMs) */
  connectTimeoutMs?: number;
  /** extra headers for every upstream request (e.g. OpenAI-Organization); the api key goes in `apiKey` */
  headers?: Record<string, string>;
  /** chat.completions: role used for `developer` messages (default 'system': most open servers' templates only know system) */
  developerRole?: 'system' | 'developer';
  /** chat.completions: the field of the output cap (default max_tokens; ../shared/chat.ts, ChatOptions.outputCap) */
  outputCap?: 'max_tokens' | 'max_completion_tokens';
}

export function createOpenAICompatibleEngine(opts: OpenAICompatibleEngineOptions): TextEngine {
  const upstream = new Upstream(opts);
  const api = opts.api ?? 'chat.completions';
  if (api !== 'chat.completions' && api !== 'responses') throw new Error(`openai-compatible: unknown api ${JSON.stringify(api)}`);
  const chatOpts = { developerRole: opts.developerRole ?? 'system', outputCap: opts.outputCap ?? 'max_tokens' } as const;
  return {
    kind: 'openai-compatible',
    contextWindow: opts.contextWindow,
    generate(req: GenerateRequest): AsyncIterable<GenerateEvent> {
      if (req.stream === false) {
        return api === 'responses'
          ? whole(upstream, '/responses', req, jsonBody(buildResponsesBody(req)), new ResponsesDecoder(req))
          : whole(upstream, '/chat/completions', req, jsonBody(buildChatBody(req, chatOpts)), new ChatDecoder(req));
      }
      return api === 'responses'
        ? run(upstream, '/responses', req, () => buildResponsesBody(req), new ResponsesDecoder(req))
        : run(upstream, '/chat/completions', req, () => buildChatBody(req, chatOpts), new ChatDecoder(req));
    },
    // Chat Completions forwarded as they are (chat-passthrough.ts), when the upstream speaks them
    ...(api === 'chat.completions' ? { chatCompletions: (r: ChatCompletionsRequest) => chatPassthrough(upstream, r, chatOpts) } : {}),
    // any other call of the upstream's API, as it is (a feature that forwards an endpoint Portico does not model)
    forwardJson: (r) => forwardJson(upstream, r),
    probe(kind, model, signal) {
      return api === 'responses'
        ? upstream.probe(kind, '/responses', { model, input: 'ping', max_output_tokens: 16, store: false }, signal)
        : upstream.probe(kind, '/chat/completions', { model, messages: [{ role: 'user', content: 'ping' }], max_tokens: 1, stream: false }, signal);
    },
    /** estimate: no standard upstream endpoint counts tokens (see tokens.ts for the rule) */
    countTokens(req) {
      return estimateTokensInTurns(req.messages, req.tools);
    },
    close() {
      upstream.close();
      return Promise.resolve();
    },
    retire: () => upstream.retire(),
  };
}
