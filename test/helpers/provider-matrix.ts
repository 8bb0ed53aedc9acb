/**
 * Cells of the native providers' matrix (issue 28) that each provider's app test (test/engines/*-app.test.ts)
 * checks the same way through /v1/chat/completions and /v1/responses: reasoning and cached-token usage in Chat
 * Completions (plain and streamed), a tools round trip through the Responses API, and an upstream's refusal (400),
 * failure (500) and 429 with its retry-after through both APIs. What differs per provider is passed in: how its
 * mock is scripted and what its request must say.
 */
import assert from 'node:assert/strict';
import type OpenAI from 'openai';

/** the reasoning and text every provider's mock is scripted with */
export const THOUGHT = 'Two and two make four.';
export const ANSWER = 'Four.';

export interface ReasoningCase {
  model: string;
  /** scripts one answer: reasoning THOUGHT (where the provider gives its text), then ANSWER */
  script(): void;
  /** the bodies the mock received, in order */
  bodies(): any[];
  /** asserts a request asked for reasoning at effort 'low' in the provider's own shape */
  assertAsked(body: any): void;
  /** whether the upstream gives its reasoning's text */
  text: boolean;
  /** the reasoning tokens the scripted usage reports (0 when the provider reports none) */
  tokens: number;
}

type ChatMessage = OpenAI.Chat.ChatCompletionMessage & { reasoning_content?: string };
type ChatDelta = OpenAI.Chat.ChatCompletionChunk.Choice.Delta & { reasoning_content?: string };

/** Chat Completions with reasoning_effort low, plain then streamed: reasoning_content and reasoning_tokens. */
export async function chatReasoning(client: OpenAI, c: ReasoningCase): Promise<void> {
  c.script();
  c.script();
  const ask = { model: c.model, messages: [{ role: 'user' as const, content: 'What is 2+2?' }], reasoning_effort: 'low' as const };
  const r = await client.chat.completions.create(ask);
  const m = r.choices[0]!.message as ChatMessage;
  assert.deepEqual([m.content, m.reasoning_content], [ANSWER, c.text ? THOUGHT : undefined], c.model);
  assert.equal(r.usage?.completion_tokens_details?.reasoning_tokens, c.tokens, c.model);
  const s = await client.chat.completions.create({ ...ask, stream: true, stream_options: { include_usage: true } });
  let reasoning = '';
  let text = '';
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const chunk of s) {
    const d = chunk.choices[0]?.delta as ChatDelta | undefined;
    reasoning += d?.reasoning_content ?? '';
    text += d?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.deepEqual([text, reasoning], [ANSWER, c.text ? THOUGHT : ''], `${c.model} (stream)`);
  assert.equal(usage?.completion_tokens_details?.reasoning_tokens, c.tokens, `${c.model} (stream)`);
  const bodies = c.bodies();
  assert.equal(bodies.length, 2);
  for (const b of bodies) c.assertAsked(b);
}

/** Chat Completions, plain then streamed, of an answer scripted (twice) with `cached` of its `input` tokens read from the cache. */
export async function chatCached(client: OpenAI, model: string, script: () => void, input: number, cached: number): Promise<void> {
  script();
  script();
  const ask = { model, messages: [{ role: 'user' as const, content: 'Hello again' }] };
  const r = await client.chat.completions.create(ask);
  assert.deepEqual([r.usage?.prompt_tokens, r.usage?.prompt_tokens_details?.cached_tokens], [input, cached], model);
  const s = await client.chat.completions.create({ ...ask, stream: true, stream_options: { include_usage: true } });
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const chunk of s) if (chunk.usage) usage = chunk.usage;
  assert.deepEqual([usage?.prompt_tokens, usage?.prompt_tokens_details?.cached_tokens], [input, cached], `${model} (stream)`);
}

const WEATHER: OpenAI.Responses.FunctionTool = { type: 'function', name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false };

/**
 * A tools round trip through the Responses API: `script` scripts a call of `weather` with {city: 'Paris'}, then the
 * text 'It is sunny in Paris.'; the call comes back as a function_call item, its function_call_output is sent back
 * (stateless: the call and its output as input items), and `assertResult` checks that the upstream's second
 * request carried the output in the provider's own shape, for the call id the client saw.
 */
export async function responsesToolsRoundTrip(
  client: OpenAI,
  model: string,
  script: () => void,
  lastBody: () => any,
  assertResult: (body: any, callId: string) => void,
): Promise<void> {
  script();
  const first = await client.responses.create({ model, input: 'Weather in Paris?', tools: [WEATHER] });
  const call = first.output.find((o): o is OpenAI.Responses.ResponseFunctionToolCall => o.type === 'function_call');
  assert.ok(call, `${model}: ${JSON.stringify(first.output)}`);
  assert.deepEqual([call.name, JSON.parse(call.arguments)], ['weather', { city: 'Paris' }], model);
  const second = await client.responses.create({
    model,
    tools: [WEATHER],
    input: [
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
      { type: 'function_call_output', call_id: call.call_id, output: 'sunny, 24 C' },
    ],
  });
  assert.equal(second.output_text, 'It is sunny in Paris.', model);
  assertResult(lastBody(), call.call_id);
}

/**
 * An upstream's 400 is the client's 400 invalid_request_error with the upstream's message; its 500 a 502
 * server_error (the model has no fallback); its 429 a 429 rate_limit_exceeded with its retry-after (`fail` says it
 * the provider's own way), through /v1/chat/completions and /v1/responses, plain and streamed (a stream refused
 * before its first event is a plain HTTP error). The 429 comes last: the deployment is then left alone for its
 * retry-after (the router waits it out before the model's next try).
 */
export async function upstreamRefusals(
  post: (path: string, body: unknown) => Promise<Response>,
  model: string,
  fail: (status: number, message: string, retryAfter?: number) => void,
): Promise<void> {
  const cases: Array<[number, number, string, number?]> = [
    [400, 400, 'invalid_request_error'],
    [500, 502, 'server_error'],
    [429, 429, 'rate_limit_exceeded', 1],
  ];
  for (const [status, want, type, retryAfter] of cases) {
    for (const stream of [false, true]) {
      for (const [path, body] of [
        ['/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }], stream }],
        ['/v1/responses', { model, input: 'hi', stream }],
      ] as const) {
        const what = `${model} ${path} stream=${stream} upstream ${status}`;
        fail(status, `upstream says ${status}`, retryAfter);
        const res = await post(path, body);
        const text = await res.text();
        assert.equal(res.status, want, `${what}: ${text}`);
        const e = (JSON.parse(text) as { error: { type: string; code: string; message: string } }).error;
        // a 429's type is not the point: its code says what it is
        assert.equal(status === 429 ? e.code : e.type, type, what);
        assert.equal(res.headers.get('retry-after') ?? undefined, retryAfter === undefined ? undefined : String(retryAfter), what);
        if (status === 400) assert.match(e.message, /upstream says 400/, what);
      }
    }
  }
}
