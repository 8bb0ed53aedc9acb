/**
 * The `openai-compatible` text engine: an HTTP client of any server speaking the OpenAI Chat Completions API
 * (OpenAI, vLLM, Ollama, llama.cpp server, LocalAI, LiteLLM...) or the Responses API itself.
 *
 * Streams from the upstream (stream: true) and turns its SSE events into GenerateEvents as they arrive; a
 * server that ignores `stream` and answers with one JSON body is handled too. A non-streaming caller
 * (GenerateRequest.stream false) asks for one JSON answer instead (`whole`): no event parsing, one body read;
 * a server that streams anyway is parsed as a stream.
 */
import { EngineError, type ChatCompletionsRequest, type GenerateEvent, type GenerateRequest, type TextEngine } from '../types.js';
import { chatPassthrough, forwardJson } from './chat-passthrough.js';
import { buildChatBody, ChatDecoder, type StreamDecoder } from './chat.js';
import { buildResponsesBody, ResponsesDecoder } from './responses.js';
import { SseParser } from './sse.js';
import { estimateTokensInTurns } from '../shared/tokens.js';
import { jsonBody, Upstream, type Call, type LargeJson } from './http.js';

export { estimateTokens } from '../shared/tokens.js';
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

/** Chunks queued ahead of the consumer before the upstream socket is paused. */
const HIGH_WATER = 32;

const DONE: IteratorReturnResult<undefined> = Object.freeze({ value: undefined, done: true }) as IteratorReturnResult<undefined>;

/**
 * An answer as the engine gives it: its first read makes the call (`start`), which gives either every event at
 * once (a JSON answer read whole) or an iterator of them as they come (an event stream: `read`); later reads are
 * served from there, without a generator around them (a streamed event crosses no extra layer). One reader.
 */
class Answer implements AsyncIterableIterator<GenerateEvent> {
  private events: GenerateEvent[] | undefined;
  private i = 0;
  private inner: AsyncIterator<GenerateEvent> | undefined;
  /** the first read, while the call is made */
  private starting: Promise<IteratorResult<GenerateEvent>> | undefined;
  /** the reader returned (or the answer failed to start): nothing more is read */
  private over = false;

  constructor(private readonly start: () => Promise<GenerateEvent[] | AsyncIterator<GenerateEvent>>) {}

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<GenerateEvent>> {
    if (this.inner !== undefined) return this.inner.next();
    const events = this.events;
    if (events !== undefined) return Promise.resolve(this.i < events.length ? { value: events[this.i++]!, done: false } : DONE);
    if (this.over) return Promise.resolve(DONE);
    // a second read while the call is made waits for it (one reader at a time is the rule; this keeps it safe)
    if (this.starting !== undefined)
      return this.starting.then(
        () => this.next(),
        () => this.next(),
      );
    return (this.starting = this.start().then(
      (r) => {
        if (Array.isArray(r)) this.events = r;
        else this.inner = r;
        if (this.over) {
          // the reader left while the call was made: the stream is closed (the connection is not kept)
          void this.return();
          return DONE;
        }
        return this.next();
      },
      (e: unknown) => {
        this.over = true;
        throw e;
      },
    ));
  }

  return(): Promise<IteratorResult<GenerateEvent>> {
    this.over = true;
    this.events = undefined;
    const inner = this.inner;
    this.inner = undefined;
    if (inner?.return) return inner.return().then(() => DONE);
    return Promise.resolve(DONE);
  }
}

function run(up: Upstream, path: string, req: GenerateRequest, body: () => Record<string, unknown>, decoder: StreamDecoder): AsyncIterable<GenerateEvent> {
  return new Answer(async () => read(up, await up.post(path, jsonBody(body()), req.signal), decoder));
}

/** The events of an answer as its body arrives (an event stream, or one JSON body). */
async function* read(up: Upstream, call: Call, decoder: StreamDecoder): AsyncGenerator<GenerateEvent> {
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
  const utf8 = call.decoder;
  const onData = (chunk: Buffer) => {
    call.touch();
    queue.push(utf8.write(chunk));
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

  const isJson = JSON_TYPE.test(String(call.headers['content-type'] ?? ''));
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
              parser.push(queue[i]!);
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
        for (const ev of out) yield ev;
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
    if (ok || decoder.terminal) call.release();
    else call.destroy();
  }
}

/** the largest non-streamed answer read from an upstream */
const MAX_ANSWER_BYTES = 64 * 1024 * 1024;

/**
 * A non-streaming caller: one upstream answer, read whole, then its events. The call's timeouts bound the
 * wait for the answer's headers and any silence while its body arrives (an upstream sends a non-streamed answer
 * once it is generated, so timeout_ms bounds the generation); an abort closes the connection, which
 * OpenAI, vLLM, llama.cpp and Ollama take as a cancel.
 */
function whole(up: Upstream, path: string, req: GenerateRequest, body: string | LargeJson, decoder: StreamDecoder): AsyncIterable<GenerateEvent> {
  return new Answer(async () => {
    const call = await up.post(path, body, req.signal);
    // the upstream streams anyway: read as a stream (events that came before a break still count)
    if (!JSON_TYPE.test(String(call.headers['content-type'] ?? ''))) return read(up, call, decoder);
    let text: string;
    try {
      text = await up.readText(call, MAX_ANSWER_BYTES);
    } catch (err) {
      call.destroy();
      throw err instanceof EngineError ? err : up.mapError(err, call);
    }
    decoder.onJson(parseJson(text));
    decoder.finish();
    return decoder.out;
  });
}

const JSON_TYPE = /application\/json/i;

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new EngineError('upstream sent an unreadable answer', 'upstream_error', 502, { retryable: true });
  }
}
