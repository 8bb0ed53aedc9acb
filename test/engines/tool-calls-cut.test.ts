/**
 * The upstream decoders on a token cap: the call the upstream was writing when it was cut ends as incomplete with
 * what was written (no "{}" filler); calls finished before it, and calls followed by text, end as complete.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ChatDecoder, buildChatBody } from '../../src/engines/openai-compatible/chat.js';
import { ResponsesDecoder, buildResponsesBody } from '../../src/engines/openai-compatible/responses.js';
import type { GenerateEvent, GenerateRequest } from '../../src/engines/types.js';

const req: GenerateRequest = { model: 'm', messages: [{ role: 'user', content: 'x' }], tools: [{ name: 'f' }] };
const ends = (out: GenerateEvent[]) => out.flatMap((e) => (e.type === 'tool_call_end' ? [[e.arguments, e.incomplete === true]] : []));
const done = (out: GenerateEvent[]) => out.find((e) => e.type === 'done') as Extract<GenerateEvent, { type: 'done' }>;

function chat(chunks: unknown[]): GenerateEvent[] {
  const d = new ChatDecoder(req);
  for (const c of chunks) d.onSse(JSON.stringify(c));
  d.onSse('[DONE]');
  return d.out;
}
const delta = (x: unknown, finish: string | null = null) => ({ choices: [{ index: 0, delta: x, finish_reason: finish }] });
const call = (index: number, args: string, id?: string) => ({
  tool_calls: [{ index, ...(id ? { id, type: 'function', function: { name: 'f', arguments: args } } : { function: { arguments: args } }) }],
});

test('chat: the cap cuts the call being written; the one before it is complete', () => {
  const out = chat([delta(call(0, '{"a":1}', 'c0')), delta(call(1, '{"b":', 'c1')), delta(call(1, ' "x')), delta({}, 'length')]);
  assert.deepEqual(ends(out), [
    ['{"a":1}', false],
    ['{"b": "x', true],
  ]);
  assert.equal(done(out).finishReason, 'length');
});

test('chat: a call cut before any argument keeps empty arguments; a finished call without arguments gets "{}"', () => {
  assert.deepEqual(ends(chat([delta(call(0, '', 'c0')), delta({}, 'length')])), [['', true]]);
  assert.deepEqual(ends(chat([delta(call(0, '', 'c0')), delta({}, 'tool_calls')])), [['{}', false]]);
});

test('chat: text after the calls, then the cap: the calls were finished', () => {
  const out = chat([delta(call(0, '{"a":1}', 'c0')), delta({ content: 'and then some text' }), delta({}, 'length')]);
  assert.deepEqual(ends(out), [['{"a":1}', false]]);
});

test('chat: a whole (non-streamed) body with finish_reason length cuts its last call', () => {
  const d = new ChatDecoder(req);
  d.onJson({
    choices: [
      {
        message: {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'a', type: 'function', function: { name: 'f', arguments: '{}' } },
            { id: 'b', type: 'function', function: { name: 'f', arguments: '{"q": "hal' } },
          ],
        },
        finish_reason: 'length',
      },
    ],
  });
  assert.deepEqual(ends(d.out), [
    ['{}', false],
    ['{"q": "hal', true],
  ]);
});

function responses(events: Record<string, unknown>[]): GenerateEvent[] {
  const d = new ResponsesDecoder(req);
  for (const e of events) d.onSse(JSON.stringify(e), e.type as string);
  return d.out;
}
const added = (i: number) => ({ type: 'response.output_item.added', output_index: i, item: { id: `fc${i}`, type: 'function_call', call_id: `c${i}`, name: 'f', arguments: '' } });
const argDelta = (i: number, d: string) => ({ type: 'response.function_call_arguments.delta', item_id: `fc${i}`, output_index: i, delta: d });
const itemDone = (i: number, args: string, status: string) => ({
  type: 'response.output_item.done',
  output_index: i,
  item: { id: `fc${i}`, type: 'function_call', call_id: `c${i}`, name: 'f', arguments: args, status },
});
const incomplete = {
  type: 'response.incomplete',
  response: { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, usage: { input_tokens: 1, output_tokens: 2 } },
};

test('responses: the call not finished when the response ends incomplete is cut; one the upstream finished is not', () => {
  const out = responses([added(0), argDelta(0, '{}'), itemDone(0, '{}', 'completed'), added(1), argDelta(1, '{"q": "ha'), incomplete]);
  assert.deepEqual(ends(out), [
    ['{}', false],
    ['{"q": "ha', true],
  ]);
  assert.equal(done(out).finishReason, 'length');
});

test('responses: an item done with status incomplete is cut', () => {
  assert.deepEqual(ends(responses([added(0), argDelta(0, '{"q'), itemDone(0, '{"q', 'incomplete'), incomplete])), [['{"q', true]]);
});

test('responses: a non-streamed incomplete response object with an incomplete call', () => {
  const d = new ResponsesDecoder(req);
  d.onJson({
    status: 'incomplete',
    incomplete_details: { reason: 'max_output_tokens' },
    output: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: '{"q', status: 'incomplete' }],
    usage: { input_tokens: 1, output_tokens: 2 },
  });
  assert.deepEqual(ends(d.out), [['{"q', true]]);
});

test('penalties and max_tool_calls in the upstream bodies', () => {
  const chatBody = buildChatBody({ ...req, presencePenalty: 0.5, frequencyPenalty: -1, maxToolCalls: 3 }, { developerRole: 'system' });
  assert.equal(chatBody.presence_penalty, 0.5);
  assert.equal(chatBody.frequency_penalty, -1);
  assert.equal('max_tool_calls' in chatBody, false, 'Chat Completions has no max_tool_calls');
  const plain = buildChatBody(req, { developerRole: 'system' });
  assert.equal('presence_penalty' in plain || 'frequency_penalty' in plain, false);
  const rb = buildResponsesBody({ ...req, presencePenalty: 0.5, frequencyPenalty: -1, maxToolCalls: 3 });
  assert.equal(rb.max_tool_calls, 3);
  assert.equal('presence_penalty' in rb || 'frequency_penalty' in rb, false, 'the Responses API has no penalties');
});
