/**
 * The embedded llama.cpp engine on a generated tiny model with random weights (test/helpers/tiny-gguf.ts).
 * Everything here runs the real model: grammars make JSON and tool calls valid even from random weights.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { createLlamaEngine, type LlamaEngine } from '../../src/engines/llama/index.js';
import { EngineError, type ChatMessage, type FunctionTool, type GenerateEvent, type GenerateRequest } from '../../src/engines/types.js';
import { makeTinyGguf } from '../helpers/tiny-gguf.js';

let engine: LlamaEngine;
let single: LlamaEngine; // parallel 1, for queue and state-spill tests
let modelPath: string;

before(async () => {
  const t0 = Date.now();
  modelPath = await makeTinyGguf();
  const t1 = Date.now();
  engine = await createLlamaEngine({ path: modelPath, contextSize: 1024, parallel: 2, threads: 1 });
  single = await createLlamaEngine({ path: modelPath, contextSize: 1024, parallel: 1, threads: 1, maxSavedStates: 4 });
  console.log(`# tiny model: ${statSync(modelPath).size} bytes, generated in ${t1 - t0} ms; two engines loaded in ${Date.now() - t1} ms`);
});

after(async () => {
  await engine?.close();
  await single?.close();
});

const base: ChatMessage[] = [
  { role: 'system', content: 'You are a terse assistant.' },
  { role: 'user', content: 'Tell me about the weather in Paris.' },
];

interface Collected {
  events: GenerateEvent[];
  text: string;
  reasoning: string;
  done: Extract<GenerateEvent, { type: 'done' }>;
}

async function collect(e: LlamaEngine, req: Omit<GenerateRequest, 'model'>, onEvent?: (ev: GenerateEvent) => void): Promise<Collected> {
  const events: GenerateEvent[] = [];
  for await (const ev of e.generate({ model: 'tiny', ...req })) {
    events.push(ev);
    onEvent?.(ev);
  }
  const done = events[events.length - 1];
  assert.equal(done?.type, 'done', 'the stream ends with done');
  assert.equal(events.filter((x) => x.type === 'done').length, 1);
  return {
    events,
    text: events.map((x) => (x.type === 'text_delta' ? x.delta : '')).join(''),
    reasoning: events.map((x) => (x.type === 'reasoning_delta' ? x.delta : '')).join(''),
    done: done as Collected['done'],
  };
}

/** A small JSON Schema checker for the keywords the tests use. */
function validate(value: unknown, schema: Record<string, unknown>, path = '$'): string[] {
  const errs: string[] = [];
  if ('const' in schema && value !== schema.const) errs.push(`${path}: not const`);
  if (Array.isArray(schema.enum) && !schema.enum.includes(value as never)) errs.push(`${path}: not in enum`);
  const type = schema.type as string | undefined;
  const typeOf = value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value;
  if (type === 'integer') {
    if (!Number.isInteger(value)) errs.push(`${path}: not an integer`);
  } else if (type && type !== typeOf) errs.push(`${path}: ${typeOf} is not ${type}`);
  if (type === 'string' && typeof value === 'string' && typeof schema.maxLength === 'number' && value.length > schema.maxLength) {
    errs.push(`${path}: longer than ${schema.maxLength}`);
  }
  if (type === 'object' && typeOf === 'object') {
    const obj = value as Record<string, unknown>;
    const props = (schema.properties ?? {}) as Record<string, Record<string, unknown>>;
    for (const r of (schema.required ?? []) as string[]) if (!(r in obj)) errs.push(`${path}: missing ${r}`);
    for (const [k, v] of Object.entries(obj)) {
      if (props[k]) errs.push(...validate(v, props[k], `${path}.${k}`));
      else if (schema.additionalProperties === false) errs.push(`${path}: unexpected ${k}`);
    }
  }
  if (type === 'array' && Array.isArray(value)) {
    if (typeof schema.maxItems === 'number' && value.length > schema.maxItems) errs.push(`${path}: too many items`);
    if (typeof schema.minItems === 'number' && value.length < schema.minItems) errs.push(`${path}: too few items`);
    if (schema.items) value.forEach((v, i) => errs.push(...validate(v, schema.items as Record<string, unknown>, `${path}[${i}]`)));
  }
  return errs;
}

test('reports a context window and the chat template from the model', () => {
  assert.ok(engine.contextWindow && engine.contextWindow >= 1024, `context window ${engine.contextWindow}`);
  assert.equal(engine.kind, 'llama');
  assert.ok(engine.chatWrapperName, 'a chat wrapper was resolved from the GGUF template');
});

test('streams text deltas as they are generated; greedy decoding is reproducible', async () => {
  let firstDeltaAt = 0;
  let doneAt = 0;
  const a = await collect(engine, { messages: base, maxOutputTokens: 24, temperature: 0 }, (ev) => {
    if (ev.type === 'text_delta' && !firstDeltaAt) firstDeltaAt = performance.now();
    if (ev.type === 'done') doneAt = performance.now();
  });
  const deltas = a.events.filter((x) => x.type === 'text_delta');
  assert.ok(deltas.length > 3, `several deltas (${deltas.length})`);
  assert.ok(
    deltas.every((d) => d.type === 'text_delta' && d.delta.length > 0),
    'no empty deltas',
  );
  assert.ok(firstDeltaAt > 0 && firstDeltaAt <= doneAt, 'the first delta comes before done');
  assert.ok(a.text.length > 0);
  assert.ok(!a.text.includes('\uFFFD'), 'valid UTF-8 text');
  const b = await collect(engine, { messages: base, maxOutputTokens: 24, temperature: 0 });
  assert.equal(b.text, a.text, 'the concatenated deltas are the same text on a second greedy run');
  assert.equal(a.done.usage.outputTokens, 24);
  assert.ok(a.done.usage.inputTokens > 10);
});

test('maxOutputTokens caps the output: finishReason length, outputTokens equals the cap', async () => {
  for (const cap of [1, 7, 19]) {
    const r = await collect(engine, { messages: base, maxOutputTokens: cap, temperature: 0.7 });
    assert.equal(r.done.finishReason, 'length');
    assert.equal(r.done.usage.outputTokens, cap);
  }
});

test('stop sequences end the text before the stop string', async () => {
  const full = await collect(engine, { messages: base, maxOutputTokens: 40, temperature: 0 });
  assert.ok(full.text.length >= 12, `enough text to pick a stop sequence from: ${JSON.stringify(full.text)}`);
  const k = Math.floor(full.text.length / 2);
  const stop = full.text.slice(k, k + 3);
  const expected = full.text.slice(0, full.text.indexOf(stop));
  const r = await collect(engine, { messages: base, maxOutputTokens: 40, temperature: 0, stop: ['\u0001never', stop] });
  assert.equal(r.done.finishReason, 'stop');
  assert.equal(r.text, expected);
  assert.ok(!r.text.includes(stop));
  assert.ok(r.done.usage.outputTokens < 40);
});

test('json_schema output parses and matches the schema', async () => {
  const schema = {
    type: 'object',
    properties: {
      ok: { type: 'boolean' },
      color: { type: 'string', enum: ['red', 'green', 'blue'] },
      count: { type: 'integer' },
      label: { type: 'string', maxLength: 6 },
      tags: { type: 'array', items: { type: 'string', enum: ['a', 'b'] }, maxItems: 3 },
    },
    required: ['ok', 'color', 'count', 'label', 'tags'],
    additionalProperties: false,
  };
  for (const temperature of [0, 1, 1]) {
    const r = await collect(engine, {
      messages: base,
      maxOutputTokens: 300,
      temperature,
      format: { type: 'json_schema', name: 'answer', schema, strict: true },
    });
    assert.equal(r.done.finishReason, 'stop', `finished: ${r.text}`);
    const parsed = JSON.parse(r.text) as unknown;
    assert.deepEqual(validate(parsed, schema), [], r.text);
  }
});

test('json_object output is a JSON object', async () => {
  const r = await collect(engine, { messages: base, maxOutputTokens: 200, temperature: 1, format: { type: 'json_object' } });
  const parsed = JSON.parse(r.text) as unknown;
  assert.equal(typeof parsed, 'object');
  assert.ok(parsed !== null && !Array.isArray(parsed));
});

const weatherTool: FunctionTool = {
  name: 'get_weather',
  description: 'Current weather of a city',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string', maxLength: 8 }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
    required: ['city', 'unit'],
    additionalProperties: false,
  },
};
const timeTool: FunctionTool = {
  name: 'get_time',
  parameters: { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'] },
};

function toolCalls(events: GenerateEvent[]) {
  const calls: Array<{ callId: string; name: string; deltas: string; args: string; order: string[] }> = [];
  for (const ev of events) {
    if (ev.type === 'tool_call_start') calls.push({ callId: ev.callId, name: ev.name, deltas: '', args: '', order: ['start'] });
    else if (ev.type === 'tool_call_delta') {
      const c = calls[calls.length - 1];
      assert.equal(ev.callId, c.callId, 'deltas belong to the open call');
      c.deltas += ev.delta;
      c.order.push('delta');
    } else if (ev.type === 'tool_call_end') {
      const c = calls[calls.length - 1];
      assert.equal(ev.callId, c.callId);
      c.args = ev.arguments;
      c.order.push('end');
    }
  }
  return calls;
}

test('tool_choice required with parallelToolCalls false forces exactly one valid call', async () => {
  for (const temperature of [0, 1]) {
    const r = await collect(engine, {
      messages: base,
      tools: [weatherTool, timeTool],
      toolChoice: 'required',
      parallelToolCalls: false,
      maxOutputTokens: 120,
      temperature,
    });
    const calls = toolCalls(r.events);
    assert.equal(calls.length, 1, JSON.stringify(r.events));
    const [call] = calls;
    assert.match(call.callId, /^call_[A-Za-z0-9_-]{8,}$/);
    assert.equal(call.order[call.order.length - 1], 'end');
    assert.equal(call.deltas, call.args, 'the deltas concatenate to the final arguments');
    const tool = [weatherTool, timeTool].find((t) => t.name === call.name);
    assert.ok(tool, `known tool name: ${call.name}`);
    const args = JSON.parse(call.args) as unknown;
    assert.deepEqual(validate(args, tool.parameters as Record<string, unknown>), [], call.args);
    assert.equal(r.done.finishReason, 'tool_calls');
    assert.equal(r.text, '', 'no text beside a forced call');
  }
});

test('tool_choice required with parallel calls allowed gives one or more calls in order, each valid', async () => {
  const r = await collect(engine, { messages: base, tools: [weatherTool, timeTool], toolChoice: 'required', maxOutputTokens: 150, temperature: 0.7 });
  const calls = toolCalls(r.events);
  assert.ok(calls.length >= 1);
  const complete = r.done.finishReason === 'length' ? calls.slice(0, -1) : calls;
  if (r.done.finishReason !== 'length') assert.equal(r.done.finishReason, 'tool_calls');
  for (const c of complete) {
    const tool = [weatherTool, timeTool].find((t) => t.name === c.name);
    assert.ok(tool);
    assert.deepEqual(validate(JSON.parse(c.args), tool.parameters as Record<string, unknown>), []);
  }
  for (const c of calls)
    assert.deepEqual(
      c.order.filter((o) => o !== 'delta'),
      ['start', 'end'],
      'each call is ended before the next starts',
    );
});

test('tool_choice naming a function calls that function', async () => {
  const r = await collect(engine, {
    messages: base,
    tools: [weatherTool, timeTool],
    toolChoice: { type: 'function', name: 'get_time' },
    parallelToolCalls: false,
    maxOutputTokens: 60,
    temperature: 0.8,
  });
  const calls = toolCalls(r.events);
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, 'get_time');
  assert.deepEqual(validate(JSON.parse(calls[0].args), timeTool.parameters as Record<string, unknown>), []);
  const ids = new Set<string>();
  for (let i = 0; i < 3; i++) {
    const again = await collect(engine, { messages: base, tools: [timeTool], toolChoice: 'required', parallelToolCalls: false, maxOutputTokens: 60 });
    ids.add(toolCalls(again.events)[0].callId);
  }
  assert.equal(ids.size, 3, 'call ids are fresh for every call');
});

test('tool_choice none offers no tools; auto keeps the conversation countable', async () => {
  const none = await collect(engine, { messages: base, tools: [weatherTool], toolChoice: 'none', maxOutputTokens: 10, temperature: 0 });
  assert.equal(toolCalls(none.events).length, 0);
  assert.equal(none.done.usage.inputTokens, await engine.countTokens({ model: 'tiny', messages: base }), 'no tool text in the prompt');
  const auto = await collect(engine, { messages: base, tools: [weatherTool], toolChoice: 'auto', maxOutputTokens: 10, temperature: 0 });
  assert.ok(auto.done.usage.inputTokens > none.done.usage.inputTokens, 'the tools are described to the model');
  assert.equal(auto.done.usage.inputTokens, await engine.countTokens({ model: 'tiny', messages: base, tools: [weatherTool] }));
  for (const c of toolCalls(auto.events)) JSON.parse(c.args); // if the random model calls, the call is valid JSON
});

test('a conversation with earlier tool calls and results is formatted and counted', async () => {
  const messages: ChatMessage[] = [
    ...base,
    { role: 'assistant', content: '', toolCalls: [{ callId: 'call_1', name: 'get_weather', arguments: '{"city":"Paris","unit":"celsius"}' }] },
    { role: 'tool', toolCallId: 'call_1', content: '{"temperature": 21}' },
  ];
  const r = await collect(engine, { messages, tools: [weatherTool], maxOutputTokens: 8, temperature: 0 });
  assert.equal(r.done.usage.inputTokens, await engine.countTokens({ model: 'tiny', messages, tools: [weatherTool] }));
  const withAnswer: ChatMessage[] = [...messages, { role: 'assistant', content: 'It is 21 degrees.' }, { role: 'user', content: 'Thanks!' }];
  const n = await engine.countTokens({ model: 'tiny', messages: withAnswer, tools: [weatherTool] });
  assert.ok(n > r.done.usage.inputTokens);
});

test('countTokens equals usage.inputTokens for the same conversation', async () => {
  const convs: ChatMessage[][] = [
    [{ role: 'user', content: 'Hi' }],
    base,
    [...base, { role: 'assistant', content: 'Sunny.' }, { role: 'developer', content: 'Answer in one word.' }, { role: 'user', content: 'And tomorrow?' }],
  ];
  const counts: number[] = [];
  for (const messages of convs) {
    const r = await collect(engine, { messages, maxOutputTokens: 3 });
    const n = await engine.countTokens({ model: 'tiny', messages });
    assert.equal(r.done.usage.inputTokens, n);
    counts.push(n);
  }
  assert.ok(counts[0] < counts[1] && counts[1] < counts[2], `longer conversations count more tokens: ${counts}`);
});

test('tool_choice required without tools is refused', async () => {
  await assert.rejects(
    async () => collect(engine, { messages: base, toolChoice: 'required', maxOutputTokens: 5 }),
    (err: unknown) => err instanceof EngineError && err.status === 400,
  );
});

test('a prompt longer than the context is refused with context_length_exceeded', async () => {
  const long = Array.from({ length: 700 }, (_, i) => `word${i}`).join(' ');
  await assert.rejects(
    async () => collect(engine, { messages: [{ role: 'user', content: long }], maxOutputTokens: 5 }),
    (err: unknown) => err instanceof EngineError && err.code === 'context_length_exceeded' && err.status === 400,
  );
});

test('abort stops a running generation', async () => {
  const ac = new AbortController();
  let deltas = 0;
  const t0 = Date.now();
  const r = await collect(engine, { messages: base, maxOutputTokens: 400, temperature: 0.8, signal: ac.signal }, (ev) => {
    if (ev.type === 'text_delta' && ++deltas === 3) ac.abort();
  });
  assert.ok(r.done.usage.outputTokens < 400, `stopped early (${r.done.usage.outputTokens} tokens)`);
  assert.ok(deltas < 20, `few deltas after the abort (${deltas})`);
  assert.ok(Date.now() - t0 < 5000);
  // the engine keeps working afterwards
  const next = await collect(engine, { messages: base, maxOutputTokens: 4 });
  assert.equal(next.done.usage.outputTokens, 4);
});

test('a consumer that stops reading frees the sequence', async () => {
  for (let i = 0; i < 3; i++) {
    for await (const ev of engine.generate({ model: 'tiny', messages: base, maxOutputTokens: 300 })) if (ev.type === 'text_delta') break;
  }
  const r = await collect(engine, { messages: base, maxOutputTokens: 3 });
  assert.equal(r.done.usage.outputTokens, 3);
});

test('requests beyond the parallel limit wait in the queue and all finish', async () => {
  let maxWaiting = 0;
  const jobs = Array.from({ length: 5 }, (_, i) =>
    collect(single, { messages: [...base, { role: 'user', content: `Question ${i}` }], maxOutputTokens: 12, temperature: 0.5 }, () => {
      maxWaiting = Math.max(maxWaiting, single.waiting);
    }),
  );
  const results = await Promise.all(jobs);
  for (const r of results) {
    assert.equal(r.done.finishReason, 'length');
    assert.equal(r.done.usage.outputTokens, 12);
  }
  assert.ok(maxWaiting >= 1, 'some requests had to wait');
  assert.equal(single.waiting, 0);

  const par = await Promise.all(Array.from({ length: 5 }, (_, i) => collect(engine, { messages: [{ role: 'user', content: `Q${i}` }], maxOutputTokens: 10 })));
  assert.ok(par.every((r) => r.done.usage.outputTokens === 10));
});

test('an aborted request leaves the queue', async () => {
  const first = collect(single, { messages: base, maxOutputTokens: 60 });
  await new Promise((r) => setImmediate(r));
  const ac = new AbortController();
  const second = collect(single, { messages: base, maxOutputTokens: 60, signal: ac.signal });
  await new Promise((r) => setImmediate(r));
  assert.equal(single.waiting, 1);
  ac.abort();
  await assert.rejects(second, (err: Error) => err.name === 'AbortError');
  assert.equal(single.waiting, 0);
  assert.equal((await first).done.usage.outputTokens, 60);
});

test('a continued conversation reuses the KV cache (cachedTokens)', async () => {
  const first = await collect(engine, { messages: base, maxOutputTokens: 10, temperature: 0, saveKey: 'resp_1' });
  const continued: ChatMessage[] = [...base, { role: 'assistant', content: first.text }, { role: 'user', content: 'And in London?' }];
  const evaluatedBefore = engine.evaluatedTokens;
  const second = await collect(engine, { messages: continued, maxOutputTokens: 5, cacheKey: 'resp_1', saveKey: 'resp_2' });
  const evaluated = engine.evaluatedTokens - evaluatedBefore;
  const u = second.done.usage;
  assert.ok(u.cachedTokens! >= first.done.usage.inputTokens, `cached ${u.cachedTokens}`);
  assert.ok(u.cachedTokens! < u.inputTokens);
  // llama.cpp really skipped the cached prefix: it evaluated about the uncached prompt tokens (+ fed-back output), not the whole prompt
  assert.ok(evaluated <= u.inputTokens - u.cachedTokens! + u.outputTokens, `evaluated ${evaluated} tokens for ${JSON.stringify(u)}`);
  assert.ok(evaluated < u.inputTokens);
});

test('a saved state survives its sequence being reused by other conversations', async () => {
  const convA: ChatMessage[] = [
    { role: 'system', content: 'Conversation A is about cooking pasta with tomatoes and basil.' },
    { role: 'user', content: 'How long do I boil it?' },
  ];
  const a = await collect(single, { messages: convA, maxOutputTokens: 8, temperature: 0, saveKey: 'A1' });
  // unrelated conversations overwrite the only sequence
  for (let i = 0; i < 2; i++) {
    await collect(single, { messages: [{ role: 'user', content: `Something else entirely, number ${i}, about cars.` }], maxOutputTokens: 6 });
  }
  const continued: ChatMessage[] = [...convA, { role: 'assistant', content: a.text }, { role: 'user', content: 'And the sauce?' }];
  const evaluatedBefore = single.evaluatedTokens;
  const b = await collect(single, { messages: continued, maxOutputTokens: 4, cacheKey: 'A1' });
  assert.ok(single.evaluatedTokens - evaluatedBefore < b.done.usage.inputTokens, 'the restored prefix was not evaluated again');
  assert.ok(b.done.usage.cachedTokens! >= a.done.usage.inputTokens, `restored: cached ${b.done.usage.cachedTokens} of ${b.done.usage.inputTokens}`);
  // without the key, only the shared template prefix would be reusable
  const c = await collect(single, { messages: [{ role: 'user', content: 'Unrelated again.' }], maxOutputTokens: 2 });
  assert.ok(c.done.usage.cachedTokens! < 5, `cached ${c.done.usage.cachedTokens}`);
});

test('a reasoning model streams its thinking as reasoning deltas with reasoningTokens', async () => {
  const path = await makeTinyGguf({ flavour: 'reasoning' });
  const r1 = await createLlamaEngine({ path, contextSize: 512, parallel: 1, threads: 1 });
  try {
    let sawBoth = false;
    for (let i = 0; i < 4 && !sawBoth; i++) {
      const r = await collect(r1, { messages: [{ role: 'user', content: `Think about ${i}` }], maxOutputTokens: 40, temperature: i === 0 ? 0 : 0.8 });
      assert.ok(r.reasoning.length > 0, 'reasoning text');
      assert.ok(r.done.usage.reasoningTokens! > 0 && r.done.usage.reasoningTokens! <= r.done.usage.outputTokens);
      assert.ok(!r.reasoning.includes('<think>') && !r.reasoning.includes('</think>'), 'the thinking markers are not part of the reasoning text');
      const firstText = r.events.findIndex((e) => e.type === 'text_delta');
      const lastReasoning = r.events.map((e) => e.type).lastIndexOf('reasoning_delta');
      if (firstText >= 0) {
        assert.ok(lastReasoning < firstText, 'reasoning comes before the answer');
        assert.ok(r.done.usage.reasoningTokens! < r.done.usage.outputTokens);
        sawBoth = true;
      }
    }
    assert.ok(sawBoth, 'the model ended its thinking and answered at least once');
    // earlier reasoning is part of the history the template renders
    const n1 = await r1.countTokens({
      model: 't',
      messages: [
        { role: 'user', content: 'a' },
        { role: 'assistant', content: 'b' },
        { role: 'user', content: 'c' },
      ],
    });
    const n2 = await r1.countTokens({
      model: 't',
      messages: [
        { role: 'user', content: 'a' },
        { role: 'assistant', content: 'b', reasoning: 'hmm let me see' },
        { role: 'user', content: 'c' },
      ],
    });
    assert.ok(n2 >= n1);
  } finally {
    await r1.close();
  }
});

test('a model that does not exist fails with an EngineError', async () => {
  await assert.rejects(createLlamaEngine({ path: modelPath + '.missing' }), (err: unknown) => err instanceof EngineError && err.code === 'model_load_failed');
});
