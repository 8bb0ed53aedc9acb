import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { createOpenAICompatibleEngine } from '../../src/engines/openai-compatible/index.js';
import { EngineError, type GenerateEvent, type GenerateRequest, type TextEngine } from '../../src/engines/types.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';

let up: ScriptedUpstream;
let engine: TextEngine;

before(async () => {
  up = await startScriptedUpstream();
  engine = createOpenAICompatibleEngine({ baseUrl: up.url, apiKey: 'sk-up', api: 'responses' });
});
after(async () => {
  await engine.close();
  await up.close();
});
beforeEach(() => up.reset());

async function collect(it: AsyncIterable<GenerateEvent>): Promise<GenerateEvent[]> {
  const out: GenerateEvent[] = [];
  for await (const e of it) out.push(e);
  return out;
}
async function failure(it: AsyncIterable<GenerateEvent>) {
  const events: GenerateEvent[] = [];
  try {
    for await (const e of it) events.push(e);
  } catch (err) {
    assert.ok(err instanceof EngineError);
    return { events, error: err };
  }
  assert.fail('expected a failure');
}
const text = (evs: GenerateEvent[], type = 'text_delta') => evs.flatMap((e) => (e.type === type ? [(e as { delta: string }).delta] : [])).join('');
const done = (evs: GenerateEvent[]) => {
  const d = evs[evs.length - 1];
  assert.equal(d.type, 'done');
  return d as Extract<GenerateEvent, { type: 'done' }>;
};
const req = (over: Partial<GenerateRequest> = {}): GenerateRequest => ({ model: 'gpt-4.1-mini', messages: [{ role: 'user', content: 'Hi' }], ...over });
function toolCalls(evs: GenerateEvent[]) {
  const calls: { callId: string; name: string; arguments: string }[] = [];
  let open: { callId: string; name: string; acc: string } | undefined;
  for (const e of evs) {
    if (e.type === 'tool_call_start') {
      assert.equal(open, undefined);
      open = { callId: e.callId, name: e.name, acc: '' };
    } else if (e.type === 'tool_call_delta') {
      assert.equal(e.callId, open?.callId);
      open!.acc += e.delta;
    } else if (e.type === 'tool_call_end') {
      assert.equal(e.callId, open?.callId);
      assert.equal(e.arguments, open!.acc);
      calls.push({ callId: e.callId, name: open!.name, arguments: e.arguments });
      open = undefined;
    }
  }
  assert.equal(open, undefined);
  return calls;
}

test('responses: the conversation becomes input items, instructions, flat tools, text.format, store false', async () => {
  up.script({ text: 'ok' });
  await collect(
    engine.generate({
      model: 'gpt-4.1-mini',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'developer', content: 'Use metric units.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Weather here?' },
            { type: 'image_url', url: 'https://x/img.png' },
          ],
        },
        { role: 'assistant', content: 'Let me check.', toolCalls: [{ callId: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}' }] },
        { role: 'tool', toolCallId: 'call_1', content: '{"temp":3}' },
        { role: 'assistant', content: 'It is 3 degrees.' },
        { role: 'developer', content: 'Late rule.' },
        { role: 'user', content: 'Thanks' },
      ],
      tools: [{ name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }],
      toolChoice: { type: 'function', name: 'get_weather' },
      parallelToolCalls: false,
      format: { type: 'json_schema', name: 'out', schema: { type: 'object' }, strict: true },
      temperature: 0.5,
      topP: 0.8,
      maxOutputTokens: 100,
      stop: ['END'],
      reasoningEffort: 'medium',
    }),
  );
  const r = up.requests[0];
  assert.equal(r.path, '/v1/responses');
  assert.equal(r.headers.authorization, 'Bearer sk-up');
  assert.deepEqual(r.body, {
    model: 'gpt-4.1-mini',
    instructions: 'Be brief.\n\nUse metric units.',
    input: [
      {
        type: 'message',
        role: 'user',
        content: [
          { type: 'input_text', text: 'Weather here?' },
          { type: 'input_image', image_url: 'https://x/img.png', detail: 'auto' },
        ],
      },
      { type: 'message', role: 'assistant', content: 'Let me check.' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}' },
      { type: 'function_call_output', call_id: 'call_1', output: '{"temp":3}' },
      { type: 'message', role: 'assistant', content: 'It is 3 degrees.' },
      { type: 'message', role: 'developer', content: 'Late rule.' },
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Thanks' }] },
    ],
    store: false,
    stream: true,
    tools: [{ type: 'function', name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }],
    parallel_tool_calls: false,
    tool_choice: { type: 'function', name: 'get_weather' },
    text: { format: { type: 'json_schema', name: 'out', schema: { type: 'object' }, strict: true } },
    temperature: 0.5,
    top_p: 0.8,
    max_output_tokens: 100,
    reasoning: { effort: 'medium', summary: 'auto' },
  });
  // `stop` has no Responses counterpart
  assert.equal('stop' in r.body, false);
});

test('responses: minimal request; json_object format', async () => {
  up.script({ text: 'ok' }, { text: '{}' });
  await collect(engine.generate(req()));
  assert.deepEqual(up.requests[0].body, {
    model: 'gpt-4.1-mini',
    input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi' }] }],
    store: false,
    stream: true,
  });
  await collect(engine.generate(req({ format: { type: 'json_object' }, toolChoice: 'required', tools: [{ name: 'f' }] })));
  assert.deepEqual(up.requests[1].body.text, { format: { type: 'json_object' } });
  assert.equal(up.requests[1].body.tool_choice, 'required');
});

test('responses: text deltas, the upstream model and usage with details', async () => {
  up.script({ text: ['Hel', 'lo', '!'], model: 'gpt-4.1-mini-2025-04-14', usage: { prompt_tokens: 20, completion_tokens: 3, cached_tokens: 16, reasoning_tokens: 0 } });
  const evs = await collect(engine.generate(req()));
  assert.deepEqual(evs.slice(0, 3), [
    { type: 'text_delta', delta: 'Hel' },
    { type: 'text_delta', delta: 'lo' },
    { type: 'text_delta', delta: '!' },
  ]);
  assert.deepEqual(done(evs), {
    type: 'done',
    finishReason: 'stop',
    usage: { inputTokens: 20, outputTokens: 3, cachedTokens: 16, reasoningTokens: 0 },
    model: 'gpt-4.1-mini-2025-04-14',
  });
});

test('responses: reasoning summary and raw reasoning text -> reasoning_delta', async () => {
  up.script({ reasoning: ['Think', 'ing'], text: 'A' }, { reasoning: ['Raw ', 'thoughts'], reasoningAs: 'text', text: 'B' });
  let evs = await collect(engine.generate(req()));
  assert.equal(text(evs, 'reasoning_delta'), 'Thinking');
  assert.equal(evs[0].type, 'reasoning_delta');
  assert.equal(text(evs), 'A');
  evs = await collect(engine.generate(req()));
  assert.equal(text(evs, 'reasoning_delta'), 'Raw thoughts');
  assert.equal(text(evs), 'B');
});

test('responses: function calls, sequential and interleaved, come out well-formed', async () => {
  const calls = [
    { id: 'call_a', name: 'get_weather', arguments: ['{"city":', '"Paris"}'] },
    { id: 'call_b', name: 'get_time', arguments: ['{"tz":', '"CET"', '}'] },
  ];
  up.script({ toolCalls: calls }, { toolCalls: calls, interleave: true });
  for (let i = 0; i < 2; i++) {
    const evs = await collect(engine.generate(req({ tools: [{ name: 'get_weather' }, { name: 'get_time' }] })));
    assert.deepEqual(toolCalls(evs), [
      { callId: 'call_a', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { callId: 'call_b', name: 'get_time', arguments: '{"tz":"CET"}' },
    ]);
    assert.equal(done(evs).finishReason, 'tool_calls');
  }
});

test('responses: sequential calls stream live: the first ends before the second starts arriving', async () => {
  up.script({
    toolCalls: [
      { id: 'c1', name: 'a', arguments: ['{"x":', '1}'] },
      { id: 'c2', name: 'b', arguments: '{}' },
    ],
  });
  const evs = await collect(engine.generate(req({ tools: [{ name: 'a' }, { name: 'b' }] })));
  assert.deepEqual(
    evs.map((e) => e.type),
    ['tool_call_start', 'tool_call_delta', 'tool_call_delta', 'tool_call_end', 'tool_call_start', 'tool_call_delta', 'tool_call_end', 'done'],
  );
});

test('responses: parallelToolCalls false keeps only the first call', async () => {
  up.script({
    toolCalls: [
      { id: 'c1', name: 'a', arguments: '{"x":1}' },
      { id: 'c2', name: 'b', arguments: '{}' },
    ],
  });
  const evs = await collect(engine.generate(req({ tools: [{ name: 'a' }, { name: 'b' }], parallelToolCalls: false })));
  assert.deepEqual(toolCalls(evs), [{ callId: 'c1', name: 'a', arguments: '{"x":1}' }]);
});

test('responses: response.incomplete (max_output_tokens) -> done length', async () => {
  up.script({ text: 'cut', finishReason: 'length' });
  const evs = await collect(engine.generate(req({ maxOutputTokens: 1 })));
  assert.equal(text(evs), 'cut');
  assert.equal(done(evs).finishReason, 'length');
});

test('responses: response.incomplete (content_filter) -> done content_filter', async () => {
  up.script({ text: 'partial', finishReason: 'content_filter' }, { text: 'partial', finishReason: 'content_filter' });
  for (const stream of [true, false]) {
    const evs = await collect(engine.generate(req({ stream })));
    assert.equal(text(evs), 'partial');
    assert.equal(done(evs).finishReason, 'content_filter', `stream ${stream}`);
  }
});

test('responses: response.failed and error events -> EngineError after the output so far', async () => {
  const failed = JSON.stringify({
    type: 'response.failed',
    sequence_number: 2,
    response: { id: 'r', status: 'failed', error: { code: 'server_error', message: 'The model crashed' } },
  });
  up.script(
    { raw: ['event: response.output_text.delta\ndata: {"type":"response.output_text.delta","output_index":0,"delta":"par"}\n\n', `event: response.failed\ndata: ${failed}\n\n`] },
    { raw: ['event: error\ndata: {"type":"error","code":"rate_limit_exceeded","message":"Too many tokens","param":null}\n\n'] },
  );
  let r = await failure(engine.generate(req()));
  assert.equal(text(r.events), 'par');
  assert.equal(r.error.code, 'server_error');
  assert.match(r.error.message, /The model crashed/);
  r = await failure(engine.generate(req()));
  assert.equal(r.error.code, 'rate_limit_exceeded');
  assert.match(r.error.message, /Too many tokens/);
});

test('responses: a stream that breaks, or ends before response.completed, throws', async () => {
  up.script({ text: ['a', 'b', 'c', 'd'], breakAfter: 6 }, { text: 'x', finishReason: null });
  let r = await failure(engine.generate(req()));
  assert.equal(r.error.code, 'upstream_stream_broken');
  assert.ok(text(r.events).length >= 1);
  r = await failure(engine.generate(req()));
  assert.equal(r.error.code, 'upstream_stream_broken');
});

test('responses: upstream errors before the stream map like chat ones', async () => {
  up.script({
    status: 400,
    errorBody: { error: { message: "Unsupported parameter: 'temperature'", type: 'invalid_request_error', param: 'temperature', code: 'unsupported_parameter' } },
  });
  const { error } = await failure(engine.generate(req({ temperature: 1 })));
  assert.equal(error.status, 400);
  assert.equal(error.code, 'unsupported_parameter');
  assert.match(error.message, /Unsupported parameter/);
});

test('responses: no usage from the upstream -> an estimate', async () => {
  up.script({ text: 'abcdefgh', usage: false });
  const d = done(await collect(engine.generate(req())));
  assert.equal(d.usage.outputTokens, 2);
  assert.ok(d.usage.inputTokens > 0);
});

test('responses: abort closes the upstream request', async () => {
  up.script({ text: ['a', 'b', 'c', 'd', 'e'], delayMs: 150 });
  const ac = new AbortController();
  const evs: GenerateEvent[] = [];
  await assert.rejects(
    (async () => {
      for await (const e of engine.generate(req({ signal: ac.signal }))) {
        evs.push(e);
        ac.abort();
      }
    })(),
    (e: unknown) => e instanceof EngineError && e.code === 'aborted',
  );
  assert.equal(evs.length, 1);
  await up.requests[0].closed;
  assert.equal(up.requests[0].aborted, true);
});

test('responses: an upstream that answers one JSON response object instead of a stream', async () => {
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id: 'resp_1',
        object: 'response',
        status: 'completed',
        model: 'm-json',
        output: [
          { type: 'reasoning', id: 'rs', summary: [{ type: 'summary_text', text: 'why' }] },
          { type: 'message', id: 'msg', role: 'assistant', content: [{ type: 'output_text', text: 'Hello', annotations: [] }] },
          { type: 'function_call', id: 'fc', call_id: 'call_9', name: 'f', arguments: '{"a":1}' },
        ],
        usage: { input_tokens: 4, output_tokens: 6, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 2 } },
      }),
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const e = createOpenAICompatibleEngine({ baseUrl: `http://127.0.0.1:${(server.address() as import('node:net').AddressInfo).port}/v1`, api: 'responses' });
  try {
    const evs = await collect(e.generate(req()));
    assert.equal(text(evs, 'reasoning_delta'), 'why');
    assert.equal(text(evs), 'Hello');
    assert.deepEqual(toolCalls(evs), [{ callId: 'call_9', name: 'f', arguments: '{"a":1}' }]);
    assert.deepEqual(done(evs), { type: 'done', finishReason: 'tool_calls', usage: { inputTokens: 4, outputTokens: 6, cachedTokens: 0, reasoningTokens: 2 }, model: 'm-json' });
  } finally {
    await e.close();
    server.close();
  }
});
