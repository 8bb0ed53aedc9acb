/**
 * An upstream's answer relayed as the upstream wrote it, parsed (what Chat Completions forwarded to an
 * openai-compatible server and Messages forwarded to Anthropic have in common): one JSON object, or each event of
 * its stream, read with eventsource-parser. What differs per API is told by the caller: what one event's data is
 * (an object to pass on, the stream's end marker, or the upstream failing), which object is the stream's last, and
 * what a JSON answer becomes (itself, or the events a stream would have carried when the client asked for one).
 *
 * The socket goes back to the pool only when the answer was read to its end; a consumer that stops early, or any
 * failure, destroys the call so the upstream stops generating.
 */
import { createParser } from 'eventsource-parser';
import { EngineError } from '../types.js';
import type { Call, Upstream } from './http.js';

type Obj = Record<string, unknown>;

/** the largest non-streamed answer read from an upstream */
export const MAX_FORWARDED_JSON_BYTES = 64 * 1024 * 1024;

const garbage = (what: string) => new EngineError(`upstream sent ${what}`, 'upstream_error', 502, { retryable: true });

/** An answer's text as one JSON object, or the upstream sent garbage (502, retryable). */
export function forwardedObject(text: string): Obj {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw garbage('an unreadable answer');
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw garbage('an unreadable answer');
  return v as Obj;
}

/** One event's data parsed as a JSON object, or the upstream sent garbage. */
export function eventObject(data: string): Obj | EngineError {
  let v: unknown;
  try {
    v = JSON.parse(data);
  } catch {
    return garbage('an unreadable stream event');
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) return garbage('an unreadable stream event');
  return v as Obj;
}

export interface ForwardedAnswer {
  /** the client asked for a stream */
  stream: boolean;
  /** a JSON answer (the request was not a stream, or the upstream ignored `stream`): what to pass on */
  json(answer: Obj): Iterable<Obj>;
  /** one event's data: an object to pass on, `undefined` for the stream's end marker, or the upstream failing */
  event(data: string): Obj | EngineError | undefined;
  /** whether this object is the stream's last (nothing after it is read) */
  last?(o: Obj): boolean;
  /** the stream ended before its end marker or last object: the error, or nothing when an ended stream is complete */
  unfinished?: () => EngineError;
}

export async function* relayForwarded(up: Upstream, call: Call, how: ForwardedAnswer): AsyncGenerator<Obj> {
  const res = call.res!;
  let complete = false;
  try {
    const isJson = /application\/json/i.test(String(call.headers['content-type'] ?? ''));
    if (isJson || !how.stream) {
      yield* how.json(forwardedObject(await up.readText(call, MAX_FORWARDED_JSON_BYTES)));
      complete = true;
      return;
    }
    const ready: Obj[] = [];
    let done = false;
    let bad: EngineError | undefined;
    const parser = createParser({
      onEvent(ev) {
        if (done || bad) return;
        const v = how.event(ev.data);
        if (v === undefined) done = true;
        else if (v instanceof EngineError) bad = v;
        else {
          ready.push(v);
          if (how.last?.(v)) done = true;
        }
      },
    });
    // leaving the loop at the end must not destroy the response: the socket is reused
    for await (const chunk of res.iterator({ destroyOnReturn: false }) as AsyncIterable<string | Buffer>) {
      call.touch();
      parser.feed(typeof chunk === 'string' ? chunk : call.decoder.write(chunk));
      for (let i = 0; i < ready.length; i++) yield ready[i]!;
      ready.length = 0;
      if (bad) throw bad;
      if (done) break;
      call.touch(); // time spent waiting for our consumer is not upstream silence
    }
    parser.reset({ consume: true });
    for (const v of ready) yield v;
    if (bad) throw bad;
    if (!done && how.unfinished) throw how.unfinished();
    complete = true;
  } catch (e) {
    throw e instanceof EngineError ? e : up.mapError(e, call);
  } finally {
    if (complete) call.release();
    else call.destroy(); // the consumer stopped early or it failed: the upstream stops generating
  }
}
