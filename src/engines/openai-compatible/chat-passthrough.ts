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
import { createParser } from 'eventsource-parser';
import { EngineError, type ChatCompletionsRequest, type ForwardRequest } from '../types.js';
import { jsonBody, parseErrorBody, type Upstream } from '../shared/http.js';

/** the largest non-streamed answer read from an upstream */
const MAX_JSON_BYTES = 64 * 1024 * 1024;

export interface PassthroughOptions {
  /** role sent for `developer` messages ('system': most open servers' templates only know system) */
  developerRole: 'system' | 'developer';
}

/** Any other call of the upstream's API, forwarded as it is (TextEngine.forwardJson): one JSON answer. */
export async function forwardJson(up: Upstream, req: ForwardRequest): Promise<Record<string, unknown>> {
  const call = await up.post(req.path, jsonBody(req.body), req.signal);
  let text: string;
  try {
    text = await up.readText(call, MAX_JSON_BYTES);
  } catch (e) {
    throw up.mapError(e, call);
  }
  return parseObject(text);
}

export async function* chatPassthrough(up: Upstream, req: ChatCompletionsRequest, opts: PassthroughOptions): AsyncGenerator<Record<string, unknown>> {
  const body = opts.developerRole === 'system' ? withoutDeveloperRole(req.body) : req.body;
  const call = await up.post('/chat/completions', jsonBody(body), req.signal);
  const res = call.res!;
  let complete = false;
  try {
    const isJson = /application\/json/i.test(String(call.headers['content-type'] ?? ''));
    if (isJson || body.stream !== true) {
      const answer = parseObject(await up.readText(call, MAX_JSON_BYTES));
      if (body.stream === true) yield* asChunks(answer);
      else yield answer;
      complete = true;
      return;
    }
    const ready: Record<string, unknown>[] = [];
    let done = false;
    let bad: EngineError | undefined;
    const parser = createParser({
      onEvent(ev) {
        if (done || bad) return;
        if (ev.data === '[DONE]') {
          done = true;
          return;
        }
        let v: unknown;
        try {
          v = JSON.parse(ev.data);
        } catch {
          bad = new EngineError('upstream sent an unreadable stream event', 'upstream_error', 502, { retryable: true });
          return;
        }
        if (!v || typeof v !== 'object' || Array.isArray(v)) {
          bad = new EngineError('upstream sent an unreadable stream event', 'upstream_error', 502, { retryable: true });
          return;
        }
        const err = (v as { error?: unknown }).error;
        if (err) {
          const { message, code } = parseErrorBody(JSON.stringify(v));
          bad = new EngineError(`upstream failed mid-stream: ${message || 'no message'}`, code ?? 'upstream_error', 502, { retryable: true });
          return;
        }
        ready.push(v as Record<string, unknown>);
      },
    });
    // leaving the loop at [DONE] must not destroy the response: the socket is reused
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
    complete = true;
  } catch (e) {
    throw e instanceof EngineError ? e : up.mapError(e, call);
  } finally {
    if (complete) call.release();
    else call.destroy(); // the consumer stopped early or it failed: the upstream stops generating
  }
}

/** `developer` messages as `system` ones (the rest of the body is untouched). */
function withoutDeveloperRole(body: Record<string, unknown>): Record<string, unknown> {
  const messages = body.messages;
  if (!Array.isArray(messages) || !messages.some((m) => (m as { role?: unknown })?.role === 'developer')) return body;
  return { ...body, messages: messages.map((m) => ((m as { role?: unknown }).role === 'developer' ? { ...(m as object), role: 'system' } : m)) };
}

function parseObject(text: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new EngineError('upstream sent an unreadable answer', 'upstream_error', 502, { retryable: true });
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new EngineError('upstream sent an unreadable answer', 'upstream_error', 502, { retryable: true });
  return v as Record<string, unknown>;
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
