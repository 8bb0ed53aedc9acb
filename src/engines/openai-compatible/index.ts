/**
 * The `openai-compatible` text engine: an HTTP client of any server speaking the OpenAI Chat Completions API
 * (OpenAI, vLLM, Ollama, llama.cpp server, LocalAI, LiteLLM...) or the Responses API itself.
 *
 * Always streams from the upstream (stream: true) and turns its SSE events into GenerateEvents as they arrive;
 * a server that ignores `stream` and answers with one JSON body is handled too.
 */
import type { IncomingMessage } from 'node:http';
import { EngineError, type ChatCompletionsRequest, type GenerateEvent, type GenerateRequest, type TextEngine } from '../types.js';
import { chatPassthrough } from './chat-passthrough.js';
import { buildChatBody, ChatDecoder, type StreamDecoder } from './chat.js';
import { buildResponsesBody, ResponsesDecoder } from './responses.js';
import { SseParser } from './sse.js';
import { estimateTokens } from './tokens.js';
import { Upstream, type Call } from './http.js';

export { estimateTokens } from './tokens.js';
export { SseParser } from './sse.js';

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
}

export function createOpenAICompatibleEngine(opts: OpenAICompatibleEngineOptions): TextEngine {
  const upstream = new Upstream(opts);
  const api = opts.api ?? 'chat.completions';
  if (api !== 'chat.completions' && api !== 'responses') throw new Error(`openai-compatible: unknown api ${JSON.stringify(api)}`);
  const chatOpts = { developerRole: opts.developerRole ?? 'system' } as const;
  return {
    kind: 'openai-compatible',
    contextWindow: opts.contextWindow,
    generate(req: GenerateRequest): AsyncIterable<GenerateEvent> {
      return api === 'responses'
        ? run(upstream, '/responses', req, () => buildResponsesBody(req), new ResponsesDecoder(req))
        : run(upstream, '/chat/completions', req, () => buildChatBody(req, chatOpts), new ChatDecoder(req));
    },
    // Chat Completions forwarded as they are (chat-passthrough.ts), when the upstream speaks them
    ...(api === 'chat.completions' ? { chatCompletions: (r: ChatCompletionsRequest) => chatPassthrough(upstream, r, chatOpts) } : {}),
    /** estimate: no standard upstream endpoint counts tokens (see tokens.ts for the rule) */
    countTokens(req) {
      return Promise.resolve(estimateTokens(req.messages, req.tools));
    },
    close() {
      upstream.close();
      return Promise.resolve();
    },
  };
}

/** Chunks queued ahead of the consumer before the upstream socket is paused. */
const HIGH_WATER = 32;

async function* run(up: Upstream, path: string, req: GenerateRequest, body: () => Record<string, unknown>, decoder: StreamDecoder): AsyncGenerator<GenerateEvent> {
  const call = await up.post(path, JSON.stringify(body()), req.signal);
  const res = call.res!;
  const out = decoder.out;
  const queue: string[] = [];
  let ended = false;
  let failure: unknown;
  let wake: (() => void) | undefined;
  const notify = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  const onData = (chunk: string) => {
    call.touch();
    queue.push(chunk);
    if (queue.length >= HIGH_WATER) res.pause();
    notify();
  };
  const onEnd = () => {
    ended = true;
    notify();
  };
  const onError = (err: unknown) => {
    failure ??= err;
    notify();
  };
  const onClose = () => {
    if (!ended) failure ??= new Error('premature close');
    notify();
  };
  res.on('data', onData);
  res.on('end', onEnd);
  res.on('error', onError);
  res.on('close', onClose);

  const isJson = /application\/json/i.test(String(res.headers['content-type'] ?? ''));
  const parser = isJson ? undefined : new SseParser((data, event) => decoder.onSse(data, event));
  let json = '';
  let ok = false;
  try {
    for (;;) {
      if (queue.length === 0 && !ended && failure === undefined) {
        await new Promise<void>((r) => (wake = r));
        continue;
      }
      let parseError: unknown;
      if (queue.length) {
        if (res.isPaused() && !decoder.terminal) res.resume();
        call.touch(); // time spent waiting for our consumer is not upstream silence
        for (let i = 0; i < queue.length; i++) {
          if (parser) {
            try {
              parser.push(queue[i]);
            } catch (err) {
              parseError = err;
              break;
            }
          } else json += queue[i];
        }
        queue.length = 0;
      }
      if (parseError === undefined && failure === undefined && ended) {
        try {
          if (parser) parser.end();
          else decoder.onJson(parseJson(json));
          decoder.finish();
        } catch (err) {
          parseError = err;
        }
      }
      // events decoded before a failure are still delivered, then the failure
      if (out.length) {
        for (let i = 0; i < out.length; i++) yield out[i];
        out.length = 0;
      }
      if (parseError !== undefined) throw parseError;
      if (failure !== undefined && !decoder.terminal) throw up.mapError(failure, call);
      if (ended || decoder.terminal) {
        ok = true;
        return;
      }
    }
  } catch (err) {
    throw err instanceof EngineError ? err : up.mapError(err, call);
  } finally {
    res.removeListener('data', onData);
    res.removeListener('end', onEnd);
    res.removeListener('error', onError);
    res.removeListener('close', onClose);
    // the answer is complete (also when the consumer stops right after `done`): keep the connection
    if (ok || decoder.terminal) drain(res, call);
    else call.destroy();
  }
}

/** The answer is complete ([DONE] / response.completed): let the rest of the body drain so the socket is reused. */
function drain(res: IncomingMessage, call: Call): void {
  call.dispose();
  if (res.complete || res.destroyed) return;
  res.on('error', () => {});
  res.resume();
  // an upstream that keeps the stream open after its final event would pin the socket: give it a moment
  const t = setTimeout(() => res.destroy(), 5000);
  t.unref();
  res.once('end', () => clearTimeout(t));
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new EngineError('upstream sent an unreadable answer', 'upstream_error', 502);
  }
}
