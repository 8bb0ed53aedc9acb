/**
 * Reading an upstream's answer into GenerateEvents, for every provider that calls an HTTP upstream (its wire
 * format is the provider's StreamDecoder): an event stream read as it arrives, with backpressure and the call's
 * silence timer, or one JSON answer read whole. Moved here from the openai-compatible engine when a second
 * upstream provider (anthropic) needed exactly the same reading.
 */
import { EngineError, type GenerateEvent, type GenerateRequest } from '../types.js';
import { SseParser } from './sse.js';
import { jsonBody, type Call, type LargeJson, type Upstream } from './http.js';

/** What turns one upstream's wire format into GenerateEvents (the provider's own). */
export interface StreamDecoder {
  readonly out: GenerateEvent[];
  /** the upstream signalled the end and `done` was pushed */
  terminal: boolean;
  onSse(data: string, event: string): void;
  /** a whole JSON body (the upstream ignored stream: true, or a non-streaming caller asked for one) */
  onJson(body: any): void;
  /** end of the upstream body: pushes `done`, or throws if the stream broke before finishing */
  finish(): void;
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

export function run(up: Upstream, path: string, req: GenerateRequest, body: () => Record<string, unknown>, decoder: StreamDecoder): AsyncIterable<GenerateEvent> {
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
export function whole(up: Upstream, path: string, req: GenerateRequest, body: string | LargeJson, decoder: StreamDecoder): AsyncIterable<GenerateEvent> {
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
