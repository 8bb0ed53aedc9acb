/**
 * Anthropic's Messages API forwarded as it is (TextEngine.messages): the body goes as the feature hands it over
 * (the model name mapped), to /v1/messages or /v1/messages/count_tokens, with the deployment's anthropic-version
 * and its anthropic-beta values joined by the ones the client sent; the answer comes back as Anthropic wrote it,
 * parsed: one JSON object, or each event of the stream (its `data`, whose `type` names the event).
 *
 * An `error` event mid-stream is the upstream failing (thrown as an EngineError), and so is a stream that ends
 * before `message_stop`, or an event that is not a JSON object. An answer in JSON to a stream request (a proxy that
 * ignores `stream`) is turned into the events a stream would have carried.
 */
import { EngineError, type MessagesForwardRequest } from '../types.js';
import { jsonBody, type Upstream } from '../shared/http.js';
import { eventObject, relayForwarded } from '../shared/forwarded.js';

const garbage = (what: string) => new EngineError(`upstream sent ${what}`, 'upstream_error', 502, { retryable: true });

/** the anthropic-beta header of one call: the deployment's values, then the client's that are not among them */
export function betaHeader(own: readonly string[] | undefined, client: readonly string[] | undefined): string | undefined {
  const all = [...(own ?? [])];
  for (const b of client ?? []) if (!all.includes(b)) all.push(b);
  return all.length ? all.join(',') : undefined;
}

export async function* messagesPassthrough(up: Upstream, req: MessagesForwardRequest, ownBetas: readonly string[] | undefined): AsyncGenerator<Record<string, unknown>> {
  const beta = betaHeader(ownBetas, req.betas);
  const call = await up.post(req.count ? '/messages/count_tokens' : '/messages', jsonBody(req.body), req.signal, beta ? { 'anthropic-beta': beta } : undefined);
  const stream = !req.count && req.body.stream === true;
  yield* relayForwarded(up, call, {
    stream,
    json(answer) {
      if (answer.type === 'error') throw midStreamError(answer.error);
      return stream ? asEvents(answer) : [answer];
    },
    event(data) {
      const o = eventObject(data);
      if (o instanceof EngineError) return o;
      if (typeof o.type !== 'string') return garbage('an unreadable stream event');
      return o.type === 'error' ? midStreamError(o.error) : o;
    },
    last: (o) => o.type === 'message_stop',
    unfinished: () => new EngineError('upstream stream ended before the answer was finished', 'upstream_stream_broken', 502, { retryable: true }),
  });
}

/** An `error` event (Anthropic: `{type:'error', error:{type, message}}`): the answer failed there. */
function midStreamError(e: unknown): EngineError {
  const x = (e ?? {}) as { type?: unknown; message?: unknown };
  const type = typeof x.type === 'string' ? x.type : 'api_error';
  const msg = typeof x.message === 'string' && x.message ? x.message : type;
  const overloaded = type === 'overloaded_error';
  return new EngineError(`upstream failed mid-stream (${type}): ${msg}`.slice(0, 2000), overloaded ? 'engine_unavailable' : 'upstream_error', overloaded ? 503 : 502, {
    retryable: true,
  });
}

/** One message object as the events of a stream: each block whole at its start, then the stop reason and usage. */
export function asEvents(m: Record<string, unknown>): Record<string, unknown>[] {
  if (m.type !== 'message' || !Array.isArray(m.content)) throw garbage('an unreadable answer');
  const { content, stop_reason, stop_sequence, usage, ...rest } = m;
  const u = (usage ?? {}) as Record<string, unknown>;
  const out: Record<string, unknown>[] = [{ type: 'message_start', message: { ...rest, content: [], stop_reason: null, stop_sequence: null, usage: { ...u, output_tokens: 0 } } }];
  (content as unknown[]).forEach((block, index) => {
    out.push({ type: 'content_block_start', index, content_block: block });
    out.push({ type: 'content_block_stop', index });
  });
  out.push({ type: 'message_delta', delta: { stop_reason: stop_reason ?? null, stop_sequence: stop_sequence ?? null }, usage: u });
  out.push({ type: 'message_stop' });
  return out;
}
