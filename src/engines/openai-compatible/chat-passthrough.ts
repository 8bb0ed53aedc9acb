/**
 * Chat Completions forwarded to an upstream that speaks them (TextEngine.chatCompletions): the body goes as the
 * chat feature hands it over, the answer comes back as the upstream wrote it, parsed: one JSON object, or each
 * chunk of its event stream. Nothing is translated through the Responses shape.
 *
 * Built on the Upstream's public methods (post, mapError, statusError) so the transport under it can change.
 * The event stream is read with eventsource-parser; `data: [DONE]` ends it (a stream that simply ends is
 * taken as ended too: some servers never send [DONE]); a `data: {"error": ...}` chunk mid-stream is the
 * upstream failing, thrown as an EngineError. An upstream that ignores `stream: true` and answers one JSON
 * object is turned into the chunks a stream would have carried, so the client still gets a stream.
 */
import { EngineError, type ChatCompletionsRequest, type ForwardRequest } from '../types.js';
import { jsonBody, parseErrorBody, type Upstream } from '../shared/http.js';
import { eventObject, forwardedObject, MAX_FORWARDED_JSON_BYTES, relayForwarded } from '../shared/forwarded.js';

export interface PassthroughOptions {
  /** role sent for `developer` messages ('system': most open servers' templates only know system) */
  developerRole: 'system' | 'developer';
}

/** Any other call of the upstream's API, forwarded as it is (TextEngine.forwardJson): one JSON answer. */
export async function forwardJson(up: Upstream, req: ForwardRequest): Promise<Record<string, unknown>> {
  const call = await up.post(req.path, jsonBody(req.body), req.signal);
  let text: string;
  try {
    text = await up.readText(call, MAX_FORWARDED_JSON_BYTES);
  } catch (e) {
    throw up.mapError(e, call);
  }
  return forwardedObject(text);
}

export async function* chatPassthrough(up: Upstream, req: ChatCompletionsRequest, opts: PassthroughOptions): AsyncGenerator<Record<string, unknown>> {
  const body = opts.developerRole === 'system' ? withoutDeveloperRole(req.body) : req.body;
  const call = await up.post('/chat/completions', jsonBody(body), req.signal);
  const stream = body.stream === true;
  yield* relayForwarded(up, call, {
    stream,
    json: (answer) => (stream ? asChunks(answer) : [answer]),
    event(data) {
      if (data === '[DONE]') return undefined;
      const o = eventObject(data);
      if (o instanceof EngineError || !o.error) return o;
      const { message, code } = parseErrorBody(JSON.stringify(o));
      return new EngineError(`upstream failed mid-stream: ${message || 'no message'}`, code ?? 'upstream_error', 502, { retryable: true });
    },
  });
}

/** `developer` messages as `system` ones (the rest of the body is untouched). */
function withoutDeveloperRole(body: Record<string, unknown>): Record<string, unknown> {
  const messages = body.messages;
  if (!Array.isArray(messages) || !messages.some((m) => (m as { role?: unknown })?.role === 'developer')) return body;
  return { ...body, messages: messages.map((m) => ((m as { role?: unknown }).role === 'developer' ? { ...(m as object), role: 'system' } : m)) };
}

/** One chat.completion as the chunks of a stream: the whole message in one delta per choice, then the usage. */
export function asChunks(c: Record<string, unknown>): Record<string, unknown>[] {
  const head = { id: c.id, object: 'chat.completion.chunk', created: c.created, model: c.model, ...(c.system_fingerprint ? { system_fingerprint: c.system_fingerprint } : {}) };
  const choices = Array.isArray(c.choices) ? (c.choices as Array<Record<string, unknown>>) : [];
  const out: Record<string, unknown>[] = [
    {
      ...head,
      choices: choices.map((ch) => {
        const m = (ch.message ?? {}) as Record<string, unknown>;
        const delta: Record<string, unknown> = { role: 'assistant', content: m.content ?? null };
        if (m.refusal) delta.refusal = m.refusal;
        if (m.reasoning_content) delta.reasoning_content = m.reasoning_content;
        if (Array.isArray(m.tool_calls)) delta.tool_calls = (m.tool_calls as object[]).map((t, index) => ({ index, ...t }));
        return { index: ch.index ?? 0, delta, logprobs: ch.logprobs ?? null, finish_reason: ch.finish_reason ?? null };
      }),
    },
  ];
  if (c.usage) out.push({ ...head, choices: [], usage: c.usage });
  return out;
}
