/**
 * Unit tests of the Responses input normalisation (src/responses/input.ts): what each accepted shape becomes as
 * stored items, and the exact error (code, status, param) each refused shape gives. No app, no server.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ITEMS_PER_TURN, expandReasoningContent, largeInput, normalizeInput, normalizeInputInTurns, toChatMessages, type StoredItem } from '../../src/responses/input.js';
import { AppError } from '../../src/platform/errors.js';
import { countTurns } from '../helpers/turns.js';

/** The items without their ids (new ids are random), after checking each new id has the item type's prefix. */
function noIds(items: StoredItem[]): Array<Omit<StoredItem, 'id'>> {
  const prefix: Record<string, string> = { message: 'msg', function_call: 'fc', function_call_output: 'fco', reasoning: 'rs', compaction: 'cmp' };
  return items.map(({ id, ...rest }) => {
    assert.match(id, new RegExp(`^${prefix[rest.type]}_[0-9a-f]{32}$`), `new id of a ${rest.type}`);
    return rest;
  });
}

function refused(input: string | unknown[], param: string, message?: RegExp) {
  assert.throws(
    () => normalizeInput(input),
    (e: unknown) => {
      assert.ok(e instanceof AppError, `an AppError, got ${String(e)}`);
      assert.equal(e.code, 'validation_error');
      assert.equal(e.status, 400);
      assert.equal(e.param, param);
      if (message) assert.match(e.message, message);
      return true;
    },
    `refused at ${param}: ${JSON.stringify(input).slice(0, 120)}`,
  );
}

describe('normalizeInput: accepted shapes', () => {
  test('a string is one user message with one input_text part', () => {
    assert.deepEqual(noIds(normalizeInput('Hello')), [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hello' }] }]);
  });

  test('string content: input_text for user, system and developer; output_text for assistant', () => {
    const items = normalizeInput([
      { role: 'system', content: 'S' },
      { role: 'developer', content: 'D' },
      { role: 'user', content: 'U' },
      { role: 'assistant', content: 'A' },
    ]);
    assert.deepEqual(noIds(items), [
      { type: 'message', role: 'system', content: [{ type: 'input_text', text: 'S' }] },
      { type: 'message', role: 'developer', content: [{ type: 'input_text', text: 'D' }] },
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'U' }] },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'A' }] },
    ]);
  });

  test('type message is implied by a role, and may be given explicitly', () => {
    const [a, b] = noIds(
      normalizeInput([
        { role: 'user', content: 'x' },
        { type: 'message', role: 'user', content: 'x' },
      ]),
    );
    assert.deepEqual(a, b);
    assert.equal(a!.type, 'message');
  });

  test('content parts of every kind, with the chat-style aliases mapped to the Responses names', () => {
    const items = normalizeInput([
      {
        role: 'user',
        content: [
          { type: 'input_text', text: 'a' },
          { type: 'text', text: 'b' },
          { type: 'input_text', text: '' },
          { type: 'input_image', image_url: 'https://x.test/i.png' },
          { type: 'input_image', image_url: 'data:image/png;base64,AAAA', detail: 'low' },
          { type: 'input_image', image_url: 'https://x.test/j.png', detail: null, file_id: 'file_1' },
          { type: 'image_url', image_url: 'https://x.test/k.png' },
          { type: 'image_url', image_url: { url: 'https://x.test/l.png', detail: 'high' } },
        ],
      },
    ]);
    assert.deepEqual(noIds(items), [
      {
        type: 'message',
        role: 'user',
        content: [
          { type: 'input_text', text: 'a' },
          { type: 'input_text', text: 'b' },
          { type: 'input_text', text: '' },
          { type: 'input_image', image_url: 'https://x.test/i.png', detail: 'auto' },
          { type: 'input_image', image_url: 'data:image/png;base64,AAAA', detail: 'low' },
          { type: 'input_image', image_url: 'https://x.test/j.png', detail: 'auto' },
          { type: 'input_image', image_url: 'https://x.test/k.png', detail: 'auto' },
          { type: 'input_image', image_url: 'https://x.test/l.png', detail: 'high' },
        ],
      },
    ]);
  });

  test('assistant parts: output_text, refusal (as output_text) and a lone output_audio (as its transcript)', () => {
    const items = normalizeInput([
      {
        role: 'assistant',
        content: [
          { type: 'output_text', text: 'ok', annotations: [{ type: 'url_citation' }] },
          { type: 'refusal', refusal: 'no' },
        ],
      },
      { role: 'assistant', content: [{ type: 'output_audio', data: 'UklG', transcript: 'spoken' }] },
    ]);
    assert.deepEqual(noIds(items), [
      {
        type: 'message',
        role: 'assistant',
        content: [
          // client annotations are not kept
          { type: 'output_text', text: 'ok', annotations: [] },
          { type: 'output_text', text: 'no', annotations: [] },
        ],
      },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'spoken', annotations: [] }] },
    ]);
  });

  test('an output_audio beside the output_text of the same answer is dropped (the text is not sent twice)', () => {
    const items = normalizeInput([
      {
        role: 'assistant',
        content: [
          { type: 'output_text', text: 'Hi' },
          { type: 'output_audio', data: 'UklG', transcript: 'Hi' },
        ],
      },
    ]);
    assert.deepEqual(noIds(items), [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hi', annotations: [] }] }]);
  });

  test('a client id (1 to 200 characters) is kept; a longer, empty or non-string id is replaced by a new one', () => {
    const long = 'x'.repeat(201);
    const items = normalizeInput([
      { id: 'msg_client', role: 'user', content: 'a' },
      { id: 'y'.repeat(200), role: 'user', content: 'a' },
      { id: long, role: 'user', content: 'a' },
      { id: '', role: 'user', content: 'a' },
      { id: 42, role: 'user', content: 'a' },
    ]);
    const others = normalizeInput([
      { type: 'function_call', id: 'fc_client', call_id: 'c', name: 'f' },
      { type: 'function_call_output', id: 'fco_client', call_id: 'c', output: 'o' },
      { type: 'reasoning', id: 'rs_client', summary: [] },
    ]);
    assert.deepEqual(
      others.map((i) => i.id),
      ['fc_client', 'fco_client', 'rs_client'],
    );
    assert.equal(items[0]!.id, 'msg_client');
    assert.equal(items[1]!.id, 'y'.repeat(200));
    for (const it of items.slice(2)) assert.match(it.id, /^msg_[0-9a-f]{32}$/);
    assert.equal(new Set(items.map((i) => i.id)).size, items.length, 'new ids are distinct');
  });

  test('a message keeps a non-empty name, drops an empty one, and ignores its status', () => {
    const [a, b] = normalizeInput([
      { role: 'user', name: 'alice', content: 'a', status: 'whatever' },
      { role: 'user', name: '', content: 'b' },
    ]);
    assert.deepEqual({ ...a, id: '' }, { id: '', type: 'message', role: 'user', name: 'alice', content: [{ type: 'input_text', text: 'a' }] });
    assert.ok(!('name' in b!));
  });

  test('function_call items: arguments kept as a string, an object is serialised, missing ones are {}', () => {
    const items = normalizeInput([
      { type: 'function_call', call_id: 'call_a', name: 'f', arguments: '{"x":1}' },
      { type: 'function_call', call_id: 'call_b', name: 'g', arguments: { y: [1, 2] } },
      { type: 'function_call', call_id: 'call_c', name: 'h' },
    ]);
    assert.deepEqual(noIds(items), [
      { type: 'function_call', call_id: 'call_a', name: 'f', arguments: '{"x":1}', status: 'completed' },
      { type: 'function_call', call_id: 'call_b', name: 'g', arguments: '{"y":[1,2]}', status: 'completed' },
      { type: 'function_call', call_id: 'call_c', name: 'h', arguments: '{}', status: 'completed' },
    ]);
  });

  test('function_call_output: a string is kept (even empty); an array of parts becomes its text joined', () => {
    const items = normalizeInput([
      { type: 'function_call_output', call_id: 'call_a', output: '{"t":20}' },
      { type: 'function_call_output', call_id: 'call_b', output: '' },
      {
        type: 'function_call_output',
        call_id: 'call_c',
        output: [
          { type: 'input_text', text: 'one ' },
          { type: 'input_image', image_url: 'https://x.test/i.png' },
          { type: 'output_text', text: 'two' },
        ],
      },
    ]);
    assert.deepEqual(noIds(items), [
      { type: 'function_call_output', call_id: 'call_a', output: '{"t":20}', status: 'completed' },
      { type: 'function_call_output', call_id: 'call_b', output: '', status: 'completed' },
      { type: 'function_call_output', call_id: 'call_c', output: 'one two', status: 'completed' },
    ]);
  });

  test('reasoning items keep the text of their summary and content parts, and encrypted_content', () => {
    const items = normalizeInput([
      {
        type: 'reasoning',
        summary: [{ type: 'summary_text', text: 's1' }, null, { text: 5 }, { type: 'summary_text', text: 's2' }],
        content: [{ type: 'reasoning_text', text: 'c1' }],
        encrypted_content: 'enc',
      },
      { type: 'reasoning', summary: 'not an array' },
    ]);
    assert.deepEqual(noIds(items), [
      {
        type: 'reasoning',
        summary: [
          { type: 'summary_text', text: 's1' },
          { type: 'summary_text', text: 's2' },
        ],
        content: [{ type: 'reasoning_text', text: 'c1' }],
        encrypted_content: 'enc',
      },
      { type: 'reasoning', summary: [], content: undefined, encrypted_content: null },
    ]);
  });

  test('compaction items keep their sealed window', () => {
    assert.deepEqual(noIds(normalizeInput([{ type: 'compaction', encrypted_content: 'sealed' }])), [{ type: 'compaction', encrypted_content: 'sealed' }]);
  });
});

describe('normalizeInput: refused shapes (validation_error, 400, the exact param)', () => {
  test('the input array and its items', () => {
    refused([], 'input', /empty array/);
    refused(['text'], 'input[0]', /must be an object/);
    refused([null], 'input[0]');
    refused([[{ role: 'user', content: 'x' }]], 'input[0]');
    refused([{ role: 'user', content: 'ok' }, 7], 'input[1]');
    refused([{ content: 'no role, no type' }], 'input[0].type', /got undefined/);
    refused([{ type: 'file_search_call' }], 'input[0].type', /got "file_search_call"/);
    refused([{ type: 'item_reference', id: 'msg_1' }], 'input[0].type', /previous_response_id/);
  });

  test('messages: roles and chat-completions fields', () => {
    refused([{ role: 'tool', content: 'x', tool_call_id: undefined }], 'input[0].role', /function_call_output/);
    refused([{ role: 'robot', content: 'x' }], 'input[0].role', /user, assistant, system, developer/);
    refused([{ type: 'message', content: 'x' }], 'input[0].role');
    refused([{ role: 'assistant', content: '', tool_calls: [] }], 'input[0].tool_calls', /function_call items/);
    refused([{ role: 'user', content: 'x', tool_call_id: 'c' }], 'input[0].tool_call_id');
    refused([{ role: 'assistant', content: 'x', reasoning_content: 5 }], 'input[0].reasoning_content');
  });

  test('message content', () => {
    refused([{ role: 'user' }], 'input[0].content', /required/);
    refused(
      [
        { role: 'user', content: 'a' },
        { role: 'user', content: null },
      ],
      'input[1].content',
      /null/,
    );
    refused([{ role: 'user', content: 5 }], 'input[0].content', /string or an array/);
    refused([{ role: 'user', content: { type: 'input_text', text: 'x' } }], 'input[0].content');
    refused([{ role: 'user', content: ['x'] }], 'input[0].content[0]', /must be an object/);
    refused([{ role: 'user', content: [{ type: 'input_text', text: 'a' }, null] }], 'input[0].content[1]');
    refused([{ role: 'user', content: [{ type: 'input_audio' }] }], 'input[0].content[0].type', /got "input_audio"/);
    refused([{ role: 'user', content: [{ text: 'no type' }] }], 'input[0].content[0].type');
  });

  test('content part fields', () => {
    const one = (part: unknown) => [{ role: 'user', content: [part] }];
    refused(one({ type: 'input_text' }), 'input[0].content[0].text', /must be a string/);
    refused(one({ type: 'text', text: 1 }), 'input[0].content[0].text');
    refused(one({ type: 'output_text', text: null }), 'input[0].content[0].text');
    refused(one({ type: 'refusal' }), 'input[0].content[0].refusal');
    refused(one({ type: 'output_audio', data: 'x' }), 'input[0].content[0].transcript');
    refused(one({ type: 'input_image' }), 'input[0].content[0].image_url', /must be a string/);
    refused(one({ type: 'input_image', image_url: '' }), 'input[0].content[0].image_url', /must not be empty/);
    refused(one({ type: 'input_image', file_id: 'file_1' }), 'input[0].content[0].file_id', /not supported/);
    refused(one({ type: 'input_image', image_url: 'https://x.test/a.png', detail: 'max' }), 'input[0].content[0].detail', /auto, low, high/);
    refused(one({ type: 'image_url' }), 'input[0].content[0].image_url', /required/);
    refused(one({ type: 'image_url', image_url: {} }), 'input[0].content[0].image_url.url');
    refused(one({ type: 'image_url', image_url: { url: 'https://x.test/a.png', detail: 'huge' } }), 'input[0].content[0].image_url.detail');
  });

  test('function_call and function_call_output fields', () => {
    refused([{ type: 'function_call', name: 'f' }], 'input[0].call_id', /must be a string/);
    refused([{ type: 'function_call', call_id: '', name: 'f' }], 'input[0].call_id', /must not be empty/);
    refused([{ type: 'function_call', call_id: 'c' }], 'input[0].name');
    refused([{ type: 'function_call', call_id: 'c', name: '' }], 'input[0].name');
    refused([{ type: 'function_call_output', output: 'x' }], 'input[0].call_id');
    refused([{ type: 'function_call_output', call_id: 'c' }], 'input[0].output', /must be a string/);
    refused([{ type: 'function_call_output', call_id: 'c', output: { a: 1 } }], 'input[0].output');
    refused([{ type: 'function_call_output', call_id: 'c', output: 5 }], 'input[0].output');
    refused([{ type: 'function_call_output', call_id: 'c', output: [{ type: 'bad' }] }], 'input[0].output[0].type');
  });

  test('compaction fields', () => {
    refused([{ type: 'compaction' }], 'input[0].encrypted_content');
    refused([{ type: 'compaction', encrypted_content: '' }], 'input[0].encrypted_content');
    refused([{ type: 'compaction', encrypted_content: 'x'.repeat(10 * 1024 * 1024 + 1) }], 'input[0].encrypted_content', /10485760/);
  });

  test('the first bad item is the one named, even after good ones', () => {
    refused(
      [
        { role: 'user', content: 'fine' },
        { type: 'function_call', call_id: 'c', name: 'f' },
        {
          role: 'user',
          content: [
            { type: 'input_image', image_url: 'https://x.test/a.png' },
            { type: 'input_text', text: 3 },
          ],
        },
      ],
      'input[2].content[1].text',
    );
  });

  // an empty URL is no image, in the chat-style alias as in input_image
  test('a chat-style image_url part with an empty string URL is refused like input_image', () => {
    refused([{ role: 'user', content: [{ type: 'image_url', image_url: '' }] }], 'input[0].content[0].image_url', /must not be empty/);
  });
});

describe('expandReasoningContent and toChatMessages', () => {
  test('reasoning_content on an assistant message becomes a reasoning item before it, and reaches the engine', () => {
    const input = [
      { role: 'user', content: 'q' },
      { role: 'assistant', content: 'a', reasoning_content: 'because' },
      { role: 'user', content: 'q2', reasoning_content: 'ignored on a user message' },
    ];
    const items = expandReasoningContent(input, normalizeInput(input));
    assert.deepEqual(
      items.map((i) => i.type + (i.type === 'message' ? `:${i.role}` : '')),
      ['message:user', 'reasoning', 'message:assistant', 'message:user'],
    );
    assert.deepEqual(items[1]!.type === 'reasoning' && items[1]!.content, [{ type: 'reasoning_text', text: 'because' }]);
    assert.deepEqual(toChatMessages('Be brief.', items), [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'q' },
      { role: 'assistant', content: 'a', reasoning: 'because' },
      { role: 'user', content: 'q2' },
    ]);
  });

  test('function calls join the assistant turn before them; outputs become tool messages; images stay parts', () => {
    const items = normalizeInput([
      {
        role: 'user',
        content: [
          { type: 'input_text', text: 'look: ' },
          { type: 'input_image', image_url: 'https://x.test/a.png', detail: 'low' },
        ],
      },
      { role: 'assistant', content: 'Checking.' },
      { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
      { type: 'function_call', call_id: 'c2', name: 'g', arguments: '{"a":1}' },
      { type: 'function_call_output', call_id: 'c1', output: 'r1' },
      { type: 'function_call_output', call_id: 'c2', output: 'r2' },
      { type: 'function_call', call_id: 'c3', name: 'f' },
    ]);
    assert.deepEqual(toChatMessages(null, items), [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look: ' },
          { type: 'image_url', url: 'https://x.test/a.png', detail: 'low' },
        ],
      },
      {
        role: 'assistant',
        content: 'Checking.',
        toolCalls: [
          { callId: 'c1', name: 'f', arguments: '{}' },
          { callId: 'c2', name: 'g', arguments: '{"a":1}' },
        ],
      },
      { role: 'tool', content: 'r1', toolCallId: 'c1' },
      { role: 'tool', content: 'r2', toolCallId: 'c2' },
      { role: 'assistant', content: '', toolCalls: [{ callId: 'c3', name: 'f', arguments: '{}' }] },
    ]);
  });
});

describe('normalizeInputInTurns: a large input a slice of items at a time', () => {
  const kinds = (i: number): unknown =>
    [
      { role: 'user', content: `u${i}` },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: `a${i}` }] },
      { type: 'function_call', call_id: `c${i}`, name: 'f', arguments: { x: i } },
      { type: 'function_call_output', call_id: `c${i}`, output: [{ type: 'input_text', text: `o${i}` }] },
      { type: 'reasoning', summary: [{ type: 'summary_text', text: `r${i}` }] },
    ][i % 5];

  test('the same items as normalizeInput, with turns of the event loop between slices; small inputs are not large', async () => {
    const input = Array.from({ length: 5 * ITEMS_PER_TURN + 3 }, (_, i) => kinds(i));
    assert.equal(largeInput(input), true);
    assert.equal(largeInput(input.slice(0, ITEMS_PER_TURN)), false);
    assert.equal(largeInput('x'.repeat(100_000)), false);
    const counter = countTurns();
    const got = await normalizeInputInTurns(input);
    const turns = counter.stop();
    assert.deepEqual(noIds(got), noIds(normalizeInput(input)));
    assert.ok(turns >= 3, `the loop turned ${turns} times over 6 slices`);
  });

  test('the same first error, in a later slice too', async () => {
    const input = Array.from({ length: 3 * ITEMS_PER_TURN }, (_, i) => kinds(i));
    input[2 * ITEMS_PER_TURN + 7] = { role: 'tool', content: 'x' };
    input[2 * ITEMS_PER_TURN + 9] = 5;
    const expected = (() => {
      try {
        normalizeInput(input);
      } catch (e) {
        return e as AppError;
      }
      assert.fail('normalizeInput must refuse it');
    })();
    await assert.rejects(normalizeInputInTurns(input), (e: unknown) => e instanceof AppError && e.param === expected.param && e.message === expected.message);
    assert.equal(expected.param, `input[${2 * ITEMS_PER_TURN + 7}].role`);
  });
});
