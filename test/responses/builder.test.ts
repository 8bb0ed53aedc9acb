/**
 * Unit tests of ResponseBuilder (no app, no server): engine events in, output items, statuses, usage and the
 * Responses stream events out. A small stream consumer (as an SDK's stream helper does) rebuilds the object from
 * the events alone; it must agree with the object the builder returns.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ResponseBuilder, copy, toUsage, type StreamEvent } from '../../src/responses/builder.js';
import { initialResponse, outputText, type OutputItem, type ResponseObject } from '../../src/responses/object.js';
import type { GenerateEvent, Usage } from '../../src/engines/types.js';

const USAGE: Usage = { inputTokens: 11, outputTokens: 7, cachedTokens: 3, reasoningTokens: 2 };

function fresh(): ResponseObject {
  return initialResponse({ model: 'm1', input: 'hi' } as never, 'resp_test', 1_700_000_000, 'in_progress');
}

function run(events: GenerateEvent[], limits: { maxToolCalls?: number | null } = {}) {
  const emitted: StreamEvent[] = [];
  const b = new ResponseBuilder(fresh(), (e) => emitted.push(e), limits);
  b.start();
  for (const ev of events) b.handle(ev);
  return { b, emitted };
}

/** Rebuilds the response as a stream consumer would, from the events only; checks each event fits what is open. */
function consume(events: StreamEvent[]): { response: ResponseObject; output: OutputItem[]; text: string } {
  const output: OutputItem[] = [];
  let final: ResponseObject | undefined;
  let text = '';
  for (const e of events) {
    const idx = e.output_index as number;
    switch (e.type) {
      case 'response.output_item.added':
        assert.equal(idx, output.length, 'items are added in order');
        output.push(structuredClone(e.item as OutputItem));
        break;
      case 'response.content_part.added': {
        const it = output[idx] as OutputItem & { content: unknown[] };
        assert.equal(it.id, e.item_id);
        assert.equal(e.content_index, it.content.length);
        it.content.push(structuredClone(e.part));
        break;
      }
      case 'response.output_text.delta': {
        const it = output[idx] as OutputItem & { type: 'message' };
        assert.equal(it.id, e.item_id);
        (it.content[e.content_index as number] as { text: string }).text += e.delta as string;
        text += e.delta as string;
        break;
      }
      case 'response.reasoning_text.delta': {
        const it = output[idx] as OutputItem & { type: 'reasoning' };
        assert.equal(it.id, e.item_id);
        it.content[e.content_index as number]!.text += e.delta as string;
        break;
      }
      case 'response.function_call_arguments.delta': {
        const it = output[idx] as OutputItem & { type: 'function_call' };
        assert.equal(it.id, e.item_id);
        it.arguments += e.delta as string;
        break;
      }
      case 'response.function_call_arguments.done': {
        const it = output[idx] as OutputItem & { type: 'function_call' };
        it.arguments = e.arguments as string;
        break;
      }
      case 'response.output_item.done':
        // the done item must be what the deltas built, plus its final status
        assert.deepEqual({ ...(e.item as object), status: undefined }, { ...output[idx], status: undefined }, `item ${idx} as rebuilt`);
        output[idx] = structuredClone(e.item as OutputItem);
        break;
      case 'response.completed':
      case 'response.incomplete':
      case 'response.failed':
        final = e.response as ResponseObject;
        break;
    }
  }
  assert.ok(final, 'the stream ends with a final response event');
  return { response: final, output, text };
}

function assertSequence(events: StreamEvent[], from = 0) {
  assert.deepEqual(
    events.map((e) => e.sequence_number),
    events.map((_, i) => from + i),
    'sequence numbers increase by one from the start',
  );
}

describe('ResponseBuilder', () => {
  test('text deltas: one message, its events in order, output_text and usage', () => {
    const { b, emitted } = run([
      { type: 'text_delta', delta: 'Hel' },
      { type: 'text_delta', delta: 'lo' },
    ]);
    const r = b.finish('stop', USAGE, 'm1-real');
    assert.deepEqual(
      emitted.map((e) => e.type),
      [
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.content_part.added',
        'response.output_text.delta',
        'response.output_text.delta',
        'response.output_text.done',
        'response.content_part.done',
        'response.output_item.done',
        'response.completed',
      ],
    );
    assertSequence(emitted);
    assert.equal(b.sequence, emitted.length);
    assert.equal(r.status, 'completed');
    assert.equal(r.model, 'm1-real');
    assert.equal(r.incomplete_details, null);
    assert.equal(typeof r.completed_at, 'number');
    assert.equal(r.output.length, 1);
    const m = r.output[0]!;
    assert.equal(m.type, 'message');
    assert.match(m.id, /^msg_[0-9a-f]{24}$/);
    assert.equal(m.status, 'completed');
    assert.deepEqual(m.type === 'message' && m.content, [{ type: 'output_text', text: 'Hello', annotations: [], logprobs: [] }]);
    assert.equal(outputText(r.output), 'Hello');
    // usage: the engine's counts under the Responses names, total = input + output
    assert.deepEqual(r.usage, {
      input_tokens: 11,
      input_tokens_details: { cached_tokens: 3 },
      output_tokens: 7,
      output_tokens_details: { reasoning_tokens: 2 },
      total_tokens: 18,
    });
    // the created/in_progress events carry the object as it was then (no output, in_progress)
    const created = emitted[0]!.response as ResponseObject;
    assert.equal(created.status, 'in_progress');
    assert.deepEqual(created.output, []);
    assert.equal(created.usage, null);
    // the done events carry the whole text
    const textDone = emitted.find((e) => e.type === 'response.output_text.done')!;
    assert.equal(textDone.text, 'Hello');
    assert.equal(textDone.item_id, m.id);
    const itemDone = emitted.find((e) => e.type === 'response.output_item.done')!;
    assert.equal((itemDone.item as OutputItem).status, 'completed');
    // the stream rebuilds the same object
    const rebuilt = consume(emitted);
    assert.deepEqual(rebuilt.response, structuredClone(r));
    assert.deepEqual(rebuilt.output, r.output);
    assert.equal(rebuilt.text, outputText(r.output));
  });

  test('an event snapshot does not change when the object changes later', () => {
    const { b, emitted } = run([{ type: 'text_delta', delta: 'a' }]);
    const added = emitted.find((e) => e.type === 'response.output_item.added')!;
    b.handle({ type: 'text_delta', delta: 'b' });
    b.finish('stop', USAGE);
    assert.equal((added.item as OutputItem).status, 'in_progress');
    assert.deepEqual((added.item as OutputItem & { type: 'message' }).content, []);
    assert.equal((emitted[0]!.response as ResponseObject).status, 'in_progress');
  });

  test('reasoning then text then a function call: three items, each closed before the next opens', () => {
    const { b, emitted } = run([
      { type: 'reasoning_delta', delta: 'think ' },
      { type: 'reasoning_delta', delta: 'hard' },
      { type: 'text_delta', delta: 'Calling.' },
      { type: 'tool_call_start', callId: 'call_1', name: 'get_weather' },
      { type: 'tool_call_delta', callId: 'call_1', delta: '{"city":' },
      { type: 'tool_call_delta', callId: 'call_1', delta: '"Paris"}' },
      { type: 'tool_call_end', callId: 'call_1', arguments: '{"city":"Paris"}' },
    ]);
    const r = b.finish('tool_calls', USAGE);
    assert.deepEqual(
      emitted.map((e) => e.type),
      [
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.content_part.added',
        'response.reasoning_text.delta',
        'response.reasoning_text.delta',
        'response.reasoning_text.done',
        'response.content_part.done',
        'response.output_item.done',
        'response.output_item.added',
        'response.content_part.added',
        'response.output_text.delta',
        'response.output_text.done',
        'response.content_part.done',
        'response.output_item.done',
        'response.output_item.added',
        'response.function_call_arguments.delta',
        'response.function_call_arguments.delta',
        'response.function_call_arguments.done',
        'response.output_item.done',
        'response.completed',
      ],
    );
    assertSequence(emitted);
    assert.equal(r.status, 'completed');
    assert.deepEqual(
      r.output.map((o) => [o.type, o.type === 'reasoning' ? undefined : o.status]),
      [
        ['reasoning', undefined],
        ['message', 'completed'],
        ['function_call', 'completed'],
      ],
    );
    const [rs, msg, fc] = r.output;
    assert.match(rs!.id, /^rs_[0-9a-f]{24}$/);
    assert.deepEqual(rs!.type === 'reasoning' && rs!.content, [{ type: 'reasoning_text', text: 'think hard' }]);
    assert.equal(emitted.find((e) => e.type === 'response.reasoning_text.done')!.text, 'think hard');
    assert.equal(outputText(r.output), 'Calling.');
    assert.match(fc!.id, /^fc_[0-9a-f]{24}$/);
    assert.deepEqual(
      { ...fc, id: undefined },
      {
        id: undefined,
        type: 'function_call',
        status: 'completed',
        call_id: 'call_1',
        name: 'get_weather',
        arguments: '{"city":"Paris"}',
      },
    );
    const argsDone = emitted.find((e) => e.type === 'response.function_call_arguments.done')!;
    assert.deepEqual([argsDone.item_id, argsDone.output_index, argsDone.name, argsDone.arguments], [fc!.id, 2, 'get_weather', '{"city":"Paris"}']);
    // output indexes of the events point at the right item
    for (const e of emitted.filter((x) => typeof x.output_index === 'number' && x.item_id !== undefined))
      assert.equal(e.item_id, r.output[e.output_index as number]!.id, `${e.type} #${e.sequence_number}`);
    assert.notEqual(msg!.id, rs!.id);
    const rebuilt = consume(emitted);
    assert.deepEqual(rebuilt.response, structuredClone(r));
    assert.deepEqual(rebuilt.output, r.output);
  });

  test('the token cap: the cut function call and the response are incomplete', () => {
    const { b, emitted } = run([
      { type: 'tool_call_start', callId: 'call_9', name: 'f' },
      { type: 'tool_call_delta', callId: 'call_9', delta: '{"a":' },
      { type: 'tool_call_end', callId: 'call_9', arguments: '{"a":', incomplete: true },
    ]);
    const r = b.finish('length', { inputTokens: 5, outputTokens: 4 });
    assert.equal(r.status, 'incomplete');
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(r.output.length, 1);
    assert.equal(r.output[0]!.status, 'incomplete');
    assert.equal(r.output[0]!.type === 'function_call' && r.output[0]!.arguments, '{"a":');
    const itemDone = emitted.find((e) => e.type === 'response.output_item.done')!;
    assert.equal((itemDone.item as OutputItem).status, 'incomplete');
    assert.equal(emitted.at(-1)!.type, 'response.incomplete');
    assert.ok(!emitted.some((e) => e.type === 'response.completed'));
    assertSequence(emitted);
    assert.deepEqual(r.usage, toUsage({ inputTokens: 5, outputTokens: 4, cachedTokens: 0, reasoningTokens: 0 }));
    assert.equal(r.usage!.total_tokens, 9);
    const rebuilt = consume(emitted);
    assert.deepEqual(rebuilt.response, structuredClone(r));
  });

  test('a finished call stays completed when a later message is cut by the token cap', () => {
    const { b, emitted } = run([
      { type: 'tool_call_start', callId: 'c1', name: 'f' },
      { type: 'tool_call_end', callId: 'c1', arguments: '{}' },
      { type: 'text_delta', delta: 'and th' },
    ]);
    const r = b.finish('length', USAGE);
    assert.deepEqual(
      r.output.map((o) => [o.type, o.status]),
      [
        ['function_call', 'completed'],
        ['message', 'incomplete'],
      ],
    );
    assert.equal(r.status, 'incomplete');
    assert.deepEqual(rebuiltStatuses(emitted), ['completed', 'incomplete']);
    assertSequence(emitted);
  });

  test('a failure mid-message: the message is closed incomplete, then error and response.failed', () => {
    const { b, emitted } = run([{ type: 'text_delta', delta: 'part' }]);
    const r = b.fail('engine_error', 'the engine stopped', { inputTokens: 2, outputTokens: 1 });
    assert.deepEqual(
      emitted.slice(-5).map((e) => e.type),
      ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'error', 'response.failed'],
    );
    assertSequence(emitted);
    assert.equal(r.status, 'failed');
    assert.deepEqual(r.error, { code: 'engine_error', type: 'server_error', message: 'the engine stopped' });
    assert.equal(r.output[0]!.status, 'incomplete');
    assert.equal(outputText(r.output), 'part');
    assert.equal(r.usage!.total_tokens, 3);
    const err = emitted.at(-2)!;
    assert.deepEqual({ ...err, sequence_number: 0 }, { type: 'error', sequence_number: 0, code: 'engine_error', message: 'the engine stopped', param: null });
    const rebuilt = consume(emitted);
    assert.deepEqual(rebuilt.response, structuredClone(r));
  });

  test('a failure before any output: usage null when the engine gave none, no item events', () => {
    const { b, emitted } = run([]);
    const r = b.fail('upstream_error', 'boom');
    assert.deepEqual(
      emitted.map((e) => e.type),
      ['response.created', 'response.in_progress', 'error', 'response.failed'],
    );
    assert.equal(r.usage, null);
    assert.deepEqual(r.output, []);
    assertSequence(emitted);
  });

  test('max_tool_calls: calls past the limit leave no item and no event, their deltas are dropped', () => {
    const { b, emitted } = run(
      [
        { type: 'tool_call_start', callId: 'a', name: 'f' },
        { type: 'tool_call_end', callId: 'a', arguments: '{"n":1}' },
        { type: 'tool_call_start', callId: 'b', name: 'f' },
        { type: 'tool_call_delta', callId: 'b', delta: '{"n":2}' },
        { type: 'tool_call_end', callId: 'b', arguments: '{"n":2}' },
      ],
      { maxToolCalls: 1 },
    );
    const r = b.finish('tool_calls', USAGE);
    assert.deepEqual(
      r.output.map((o) => o.type === 'function_call' && o.call_id),
      ['a'],
    );
    assert.equal(emitted.filter((e) => e.type === 'response.output_item.added').length, 1);
    assert.ok(!emitted.some((e) => e.type === 'response.function_call_arguments.delta'));
    assertSequence(emitted);
  });

  test('deltas for a call that is not open are ignored', () => {
    const { b, emitted } = run([
      { type: 'tool_call_delta', callId: 'nope', delta: 'x' },
      { type: 'tool_call_end', callId: 'nope', arguments: 'x' },
    ]);
    assert.equal(emitted.length, 2);
    assert.deepEqual(b.finish('stop', USAGE).output, []);
  });

  test('a quiet builder counts the same sequence numbers as a listening one and builds the same object', () => {
    const events: GenerateEvent[] = [
      { type: 'reasoning_delta', delta: 'r' },
      { type: 'text_delta', delta: 't' },
      { type: 'tool_call_start', callId: 'c', name: 'f' },
      { type: 'tool_call_end', callId: 'c', arguments: '{}' },
    ];
    const loud = run(events);
    loud.b.finish('stop', USAGE);
    const q = ResponseBuilder.quiet(fresh());
    q.start();
    for (const ev of events) q.handle(ev);
    const r = q.finish('stop', USAGE);
    assert.equal(q.sequence, loud.emitted.length);
    const strip = (o: ResponseObject) => ({ ...o, completed_at: 0, output: o.output.map((i) => ({ ...i, id: '' })) });
    assert.deepEqual(strip(r), strip(loud.b.response));
  });

  test('background start then running: created (in_progress, never queued), then in_progress; startSeq continues a stream', () => {
    const emitted: StreamEvent[] = [];
    const b = new ResponseBuilder(fresh(), (e) => emitted.push(e), { startSeq: 5 });
    b.start(true);
    // the specification's statuses only: a background response waiting for a worker is in_progress
    assert.equal(b.response.status, 'in_progress');
    assert.equal(b.response.usage, null);
    assert.deepEqual(b.response.output, []);
    assert.deepEqual(
      emitted.map((e) => [e.type, (e.response as ResponseObject).status]),
      [['response.created', 'in_progress']],
    );
    b.running();
    b.handle({ type: 'text_delta', delta: 'x' });
    b.finish('stop', USAGE);
    assert.deepEqual(
      emitted.slice(0, 2).map((e) => [e.type, (e.response as ResponseObject).status]),
      [
        ['response.created', 'in_progress'],
        ['response.in_progress', 'in_progress'],
      ],
    );
    assert.ok(!emitted.some((e) => e.type === 'response.queued' || (e.response as ResponseObject | undefined)?.status === ('queued' as string)));
    assertSequence(emitted, 5);
  });

  test('cancel closes the open item as incomplete and ends with response.incomplete carrying cancelled', () => {
    const { b, emitted } = run([{ type: 'reasoning_delta', delta: 'hm' }]);
    const r = b.cancel();
    assert.equal(r.status, 'cancelled');
    assert.deepEqual(
      emitted.slice(-4).map((e) => e.type),
      ['response.reasoning_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete'],
    );
    assert.equal((emitted.at(-1)!.response as ResponseObject).status, 'cancelled');
    assertSequence(emitted);
  });

  test('the spoken part: content index 1, audio and transcript deltas, done events before the item closes', () => {
    const { b, emitted } = run([{ type: 'text_delta', delta: 'Hi there' }]);
    b.closeText();
    b.audioStart();
    b.audioDelta('AAAA');
    b.audioTranscriptDelta('Hi ');
    b.audioDelta('BBBB');
    b.audioTranscriptDelta('there');
    b.audioDone('WAVDATA');
    const r = b.finish('stop', USAGE);
    const n = emitted.findIndex((e) => e.type === 'response.output_text.done');
    assert.deepEqual(
      emitted.slice(n).map((e) => [e.type, e.content_index]),
      [
        ['response.output_text.done', 0],
        ['response.content_part.done', 0],
        ['response.content_part.added', 1],
        ['response.audio.delta', 1],
        ['response.audio.transcript.delta', 1],
        ['response.audio.delta', 1],
        ['response.audio.transcript.delta', 1],
        ['response.audio.done', 1],
        ['response.audio.transcript.done', 1],
        ['response.content_part.done', 1],
        ['response.output_item.done', undefined],
        ['response.completed', undefined],
      ],
    );
    assertSequence(emitted);
    const m = r.output[0]!;
    assert.deepEqual(m.type === 'message' && m.content[1], { type: 'output_audio', data: 'WAVDATA', transcript: 'Hi there' });
    assert.equal(m.status, 'completed');
    // output_text counts the text part only, not the transcript
    assert.equal(outputText(r.output), 'Hi there');
  });
});

function rebuiltStatuses(events: StreamEvent[]): string[] {
  return events.filter((e) => e.type === 'response.output_item.done').map((e) => (e.item as OutputItem).status as string);
}

describe('copy (the snapshots of streamed events)', () => {
  test('a deep copy equal to structuredClone for JSON values, sharing nothing with the original', () => {
    const v = {
      id: 'resp_1',
      n: 1.5,
      ok: true,
      nothing: null,
      gone: undefined,
      list: [1, 'two', { three: [3] }, null],
      nested: { a: { b: { c: 'd' } } },
      empty: {},
      emptyList: [],
    };
    const c = copy(v);
    assert.deepStrictEqual(c, structuredClone(v));
    assert.deepEqual(Object.keys(c), Object.keys(v), 'keys in the same order');
    c.nested.a.b.c = 'changed';
    (c.list[2] as { three: number[] }).three.push(4);
    assert.equal(v.nested.a.b.c, 'd');
    assert.deepEqual(v.list[2], { three: [3] });
  });

  test('an own "__proto__" key stays a key; a value that is not plain JSON is cloned as structuredClone does', () => {
    const v = JSON.parse('{"metadata":{"__proto__":{"polluted":true},"k":"v"}}') as { metadata: Record<string, unknown> };
    const c = copy(v);
    assert.equal(Object.getPrototypeOf(c.metadata), Object.prototype);
    assert.deepEqual(Object.keys(c.metadata), ['__proto__', 'k']);
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
    assert.equal(JSON.stringify(c), JSON.stringify(v));
    const d = new Date(0);
    const withDate = copy({ at: d });
    assert.ok(withDate.at instanceof Date && withDate.at !== d && withDate.at.getTime() === 0);
  });

  test('events of a stream carry what the response was when they were made', () => {
    const events: StreamEvent[] = [];
    const r = initialResponse({ model: 'm', input: 'x' } as never, 'resp_x', 1, 'in_progress');
    const b = new ResponseBuilder(r, (e) => events.push(e));
    b.start();
    b.handle({ type: 'text_delta', delta: 'Hel' });
    b.handle({ type: 'text_delta', delta: 'lo' });
    b.finish('stop', { inputTokens: 1, outputTokens: 2 });
    const created = events.find((e) => e.type === 'response.created')!.response as ResponseObject;
    assert.equal(created.status, 'in_progress');
    assert.deepEqual(created.output, []);
    const added = events.find((e) => e.type === 'response.output_item.added')!.item as OutputItem & { type: 'message' };
    assert.equal((added.content[0] as { text: string } | undefined)?.text ?? '', '');
    const completed = events.find((e) => e.type === 'response.completed')!.response as ResponseObject;
    assert.equal(outputText(completed.output), 'Hello');
    assert.notEqual(completed, r);
    // what the builder changes later is copied: status, usage, the items and their text
    const inProgress = events.find((e) => e.type === 'response.in_progress')!.response as ResponseObject;
    assert.equal(inProgress.status, 'in_progress');
    assert.equal(inProgress.usage ?? null, null);
    assert.deepEqual(inProgress.output, []);
    assert.equal(completed.status, 'completed');
    assert.notEqual(completed.output[0], r.output[0]);
    b.handle({ type: 'text_delta', delta: ' again' });
    assert.equal(outputText(completed.output), 'Hello', 'a later change to the live response does not reach an event already made');
  });
});
