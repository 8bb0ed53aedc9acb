/**
 * The WebSocket mode's error rules: every malformed or refused message is answered with an error frame
 * (status, error.code) and the connection stays usable; previous_response_not_found and the eviction of a failed
 * continuation; failures of the engine before and after a response starts; a flood of frames; frames too large;
 * and a client that closes mid-turn, which stops the upstream generation.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { MODEL, eventually, setup, type Env } from './util.js';
import { errorOf, finalOf, openWs, type WsClient } from './ws-util.js';

const FRAME_LIMIT = 64 * 1024;

describe('WebSocket mode: errors', () => {
  let e: Env;
  let c: WsClient;
  before(async () => {
    e = await setup('pglite', [], { WS_MAX_FRAME_BYTES: String(FRAME_LIMIT), WS_MAX_QUEUED_TURNS: '2' });
    c = await openWs(e.url, e.key);
  });
  after(async () => {
    await c?.close();
    await e.close();
  });

  /** the connection still works: a good turn right after */
  const stillUsable = async (client = c) => {
    e.up.script({ text: 'still fine' });
    const r = finalOf(await client.turn({ model: MODEL, store: false, input: 'ok?' }));
    assert.equal(r.output[0].content[0].text, 'still fine');
  };

  const bad: Array<[string, unknown, number, string, string | null]> = [
    ['text that is not JSON', 'hello there', 400, 'invalid_json', null],
    ['truncated JSON', '{"type": "response.create", "model": ', 400, 'invalid_json', null],
    ['a JSON array', '[1, 2, 3]', 400, 'invalid_type', null],
    ['a JSON string', '"response.create"', 400, 'invalid_type', null],
    ['JSON null', 'null', 400, 'invalid_type', null],
    ['no type', { model: MODEL, input: 'x' }, 400, 'missing_required_parameter', 'type'],
    ['an unknown type', { type: 'response.cancel', model: MODEL, input: 'x' }, 400, 'invalid_value', 'type'],
    ['a type that is not a string', { type: 7, model: MODEL, input: 'x' }, 400, 'invalid_value', 'type'],
    ['stream (HTTP only)', { type: 'response.create', model: MODEL, input: 'x', stream: true }, 400, 'unsupported_parameter', 'stream'],
    ['stream: false (still HTTP only)', { type: 'response.create', model: MODEL, input: 'x', stream: false }, 400, 'unsupported_parameter', 'stream'],
    [
      'stream_options (HTTP only)',
      { type: 'response.create', model: MODEL, input: 'x', stream_options: { include_obfuscation: false } },
      400,
      'unsupported_parameter',
      'stream_options',
    ],
    ['background (HTTP only)', { type: 'response.create', model: MODEL, input: 'x', background: true }, 400, 'unsupported_parameter', 'background'],
    ['stream_id (lanes of the 7.x SDK)', { type: 'response.create', model: MODEL, input: 'x', stream_id: 'lane-1' }, 400, 'unsupported_parameter', 'stream_id'],
    ['messages instead of input', { type: 'response.create', model: MODEL, messages: [{ role: 'user', content: 'x' }] }, 400, 'unsupported_parameter', 'messages'],
    [
      'conversation (an OpenAI parameter this server does not implement)',
      { type: 'response.create', model: MODEL, input: 'x', conversation: 'conv_1' },
      400,
      'unsupported_parameter',
      'conversation',
    ],
    [
      'prompt_cache_options (not implemented)',
      { type: 'response.create', model: MODEL, input: 'x', prompt_cache_options: { mode: 'explicit' } },
      400,
      'unsupported_parameter',
      'prompt_cache_options',
    ],
    ['an include value OpenAI does not have', { type: 'response.create', model: MODEL, input: 'x', include: ['bogus'] }, 400, 'invalid_value', 'include[0]'],
    ['no input', { type: 'response.create', model: MODEL }, 400, 'missing_required_parameter', 'input'],
    ['input null', { type: 'response.create', model: MODEL, input: null }, 400, 'validation_error', 'input'],
    ['no model', { type: 'response.create', input: 'x' }, 400, 'missing_required_parameter', 'model'],
    ['an unknown parameter', { type: 'response.create', model: MODEL, input: 'x', temprature: 1 }, 400, 'unknown_parameter', 'temprature'],
    ['a wrong type', { type: 'response.create', model: MODEL, input: 'x', temperature: 'hot' }, 400, 'invalid_type', 'temperature'],
    ['a value out of range', { type: 'response.create', model: MODEL, input: 'x', temperature: 9 }, 400, 'decimal_above_max_value', 'temperature'],
    ['a bad input item', { type: 'response.create', model: MODEL, input: [{ type: 'telepathy' }] }, 400, 'validation_error', 'input[0].type'],
    ['a NUL character', '{"type":"response.create","model":"gpt-test","input":"a\\u0000b"}', 400, 'validation_error', null],
    ['an unknown model', { type: 'response.create', model: 'no-such-model', input: 'x' }, 404, 'model_not_found', 'model'],
    [
      'a tool_choice naming no tool',
      { type: 'response.create', model: MODEL, input: 'x', tool_choice: { type: 'function', name: 'nope' } },
      400,
      'validation_error',
      'tool_choice.name',
    ],
  ];
  for (const [what, frame, status, code, param] of bad) {
    test(`${what}: an error frame (${status} ${code}), and the connection stays usable`, async () => {
      errorOf(await (c.send(frame), c.answer()), status, code, param);
      await stillUsable();
    });
  }

  test('a binary frame: an error frame (415), and the connection stays usable', async () => {
    c.ws.send(Buffer.from(JSON.stringify({ type: 'response.create', model: MODEL, input: 'x' })), { binary: true });
    errorOf(await c.answer(), 415, 'unsupported_media_type', null);
    await stillUsable();
  });

  test('a frame over WS_MAX_FRAME_BYTES: an error frame (413) naming the limit, and the connection stays usable', async () => {
    const big = JSON.stringify({ type: 'response.create', model: MODEL, input: 'x'.repeat(FRAME_LIMIT) });
    const err = errorOf(await (c.send(big), c.answer()), 413, 'payload_too_large', null);
    assert.match(err.message, new RegExp(String(FRAME_LIMIT)));
    await stillUsable();
  });

  test('a frame far over the limit (more than 1 MiB beyond it) closes the connection with 1009: it would have to be read whole', async () => {
    const other = await openWs(e.url, e.key);
    other.send('x'.repeat(FRAME_LIMIT + 1024 * 1024 + 1));
    assert.equal((await other.closed).code, 1009);
    await stillUsable(); // the other connection is untouched
  });

  test('text that is not UTF-8 closes the connection with 1007 (the protocol requires it)', async () => {
    const other = await openWs(e.url, e.key);
    other.ws.send(Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), { binary: false });
    assert.equal((await other.closed).code, 1007);
  });

  test('previous_response_not_found: an unknown id, and a store:false response of another connection', async () => {
    errorOf(await c.turn({ model: MODEL, input: 'x', previous_response_id: 'resp_doesnotexist' }), 404, 'previous_response_not_found', 'previous_response_id');
    const other = await openWs(e.url, e.key);
    const theirs = finalOf(await other.turn({ model: MODEL, store: false, input: 'private' }));
    const err = errorOf(await c.turn({ model: MODEL, input: 'x', previous_response_id: theirs.id }), 404, 'previous_response_not_found', 'previous_response_id');
    assert.match(err.message, new RegExp(theirs.id));
    // the other connection still continues its own
    finalOf(await other.turn({ model: MODEL, store: false, input: 'mine', previous_response_id: theirs.id }));
    await other.close();
  });

  test('a continuation refused before it starts (4xx) evicts the response it named; continuing from it again is previous_response_not_found', async () => {
    const r1 = finalOf(await c.turn({ model: MODEL, store: false, input: 'remember me' }));
    errorOf(await c.turn({ model: MODEL, store: false, previous_response_id: r1.id, input: 'x', tool_choice: 'required' }), 400, 'validation_error');
    errorOf(await c.turn({ model: MODEL, store: false, previous_response_id: r1.id, input: 'again' }), 404, 'previous_response_not_found', 'previous_response_id');
  });

  test('store:false: a function_call_output answering no call of the conversation is refused naming its call_id, and the response it continued is evicted', async () => {
    const weather = { type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } };
    e.up.script({ toolCalls: [{ id: 'call_ws1', name: 'get_weather', arguments: '{"city":"Paris"}' }] });
    const r1 = finalOf(await c.turn({ model: MODEL, store: false, input: 'Weather in Paris?', tools: [weather] }));
    assert.equal(r1.output[0].type, 'function_call');
    const before = e.up.requests.length;
    const err = errorOf(
      await c.turn({
        model: MODEL,
        store: false,
        previous_response_id: r1.id,
        tools: [weather],
        input: [{ type: 'function_call_output', call_id: 'call_other', output: 'sunny' }],
      }),
      400,
      'invalid_value',
      'input[0].call_id',
    );
    assert.match(err.message, /call_other/);
    assert.equal(e.up.requests.length, before, 'nothing ran');
    // the failed continuation dropped r1 from the connection's memory: even the right answer cannot continue it
    errorOf(
      await c.turn({ model: MODEL, store: false, previous_response_id: r1.id, tools: [weather], input: [{ type: 'function_call_output', call_id: 'call_ws1', output: 'sunny' }] }),
      404,
      'previous_response_not_found',
      'previous_response_id',
    );
    await stillUsable();
  });

  test('a malformed continuation (schema error) evicts too', async () => {
    const r1 = finalOf(await c.turn({ model: MODEL, store: false, input: 'remember me' }));
    errorOf(await c.turn({ model: MODEL, store: false, previous_response_id: r1.id, input: 'x', top_p: 3 }), 400, 'decimal_above_max_value', 'top_p');
    errorOf(await c.turn({ model: MODEL, store: false, previous_response_id: r1.id, input: 'again' }), 404, 'previous_response_not_found');
  });

  test('a continuation the engine refuses (upstream 5xx before any output) evicts: error frame 502, then previous_response_not_found', async () => {
    const r1 = finalOf(await c.turn({ model: MODEL, store: false, input: 'remember me' }));
    e.up.script({ status: 500, errorMessage: 'upstream exploded' });
    const f = errorOf(await c.turn({ model: MODEL, store: false, previous_response_id: r1.id, input: 'x' }), 502);
    assert.equal(f.type, 'server_error');
    errorOf(await c.turn({ model: MODEL, store: false, previous_response_id: r1.id, input: 'again' }), 404, 'previous_response_not_found');
    await stillUsable();
  });

  test('a continuation that fails after it started: the SSE error event (with the envelope) and response.failed; then evicted', async () => {
    const r1 = finalOf(await c.turn({ model: MODEL, store: false, input: 'remember me' }));
    e.up.script({ text: ['partial ', 'answer ', 'then'], breakAfter: 3 });
    const answer = await c.turn({ model: MODEL, store: false, previous_response_id: r1.id, input: 'x' });
    const err = answer.at(-2);
    assert.equal(err.type, 'error');
    assert.equal(err.sequence_number, answer.at(-3).sequence_number + 1);
    assert.ok(err.status >= 500 && err.error.code === err.code && err.error.message === err.message, JSON.stringify(err));
    const failed = finalOf(answer);
    assert.equal(failed.status, 'failed');
    assert.equal(failed.error.code, err.code);
    errorOf(await c.turn({ model: MODEL, store: false, previous_response_id: r1.id, input: 'again' }), 404, 'previous_response_not_found');
  });

  test('a failed turn without previous_response_id keeps the memory of the last response', async () => {
    const r1 = finalOf(await c.turn({ model: MODEL, store: false, input: 'keep' }));
    errorOf(await c.turn({ model: MODEL, store: false, input: 'x', temperature: -1 }), 400);
    finalOf(await c.turn({ model: MODEL, store: false, previous_response_id: r1.id, input: 'continued' }));
  });

  test('error frames speak the language of the upgrade request (Accept-Language)', async () => {
    const zh = await openWs(e.url, e.key, { headers: { 'accept-language': 'zh-CN' } });
    const err = errorOf(await zh.turn({ model: MODEL, input: 'x', temprature: 1 }), 400, 'unknown_parameter', 'temprature');
    assert.match(err.message, /未知参数/);
    await zh.close();
  });

  test('a conversation that outgrows the connection memory (4 x the frame limit) is not kept: its continuation is previous_response_not_found, saying why', async () => {
    const m = await openWs(e.url, e.key);
    const chunk = 'y'.repeat(60_000);
    let prev: string | undefined;
    let turns = 0;
    for (;;) {
      const a = await m.turn({ model: MODEL, store: false, input: chunk, ...(prev ? { previous_response_id: prev } : {}) });
      if (a[0].type === 'error') {
        const err = errorOf(a, 404, 'previous_response_not_found', 'previous_response_id');
        assert.match(err.message, /grew beyond what one connection keeps in memory \(262144 bytes\)/);
        break;
      }
      prev = finalOf(a).id;
      turns++;
      assert.ok(turns < 10, 'the memory has a bound');
    }
    // 60 kB a turn: the fifth response takes the conversation past 256 KiB
    assert.equal(turns, 5);
    await stillUsable(m);
    await m.close();
  });

  test('malformed frames sent behind a running turn are answered in order, after it', async () => {
    e.up.script({ text: ['slow', ' ', 'turn'], delayMs: 60 });
    c.create({ model: MODEL, store: false, input: 'first' });
    c.send('not json');
    const first = await c.answer();
    assert.equal(finalOf(first).output[0].content[0].text, 'slow turn');
    errorOf(await c.answer(), 400, 'invalid_json');
  });

  test('a flood: at most WS_MAX_QUEUED_TURNS wait behind the turn in flight; the rest are refused at once (429); the upstream never runs two at a time', async () => {
    const flood = await openWs(e.url, e.key);
    const before = e.up.requests.length;
    let active = 0;
    let most = 0;
    for (let i = 0; i < 3; i++) {
      e.up.script(() => {
        most = Math.max(most, ++active);
        void e.up.requests.at(-1)!.closed.then(() => active--);
        return { text: [`answer ${i}`, '.'], delayMs: 80 };
      });
    }
    for (let i = 0; i < 20; i++) flood.create({ model: MODEL, store: false, input: `message ${i}` });
    // the refusals come first (at once); the three admitted turns follow in order
    const frames: any[] = [];
    const refusals: any[] = [];
    const answers: any[][] = [];
    while (answers.length < 3) {
      const a = await flood.answer();
      if (a.length === 1 && a[0].type === 'error') refusals.push(a[0]);
      else answers.push(a);
      frames.push(...a);
    }
    assert.equal(refusals.length, 17);
    for (const r of refusals) errorOf([r], 429, 'rate_limit_exceeded', null);
    assert.match(refusals[0].error.message, /at most 2/);
    assert.deepEqual(
      answers.map((a) => finalOf(a).output[0].content[0].text),
      ['answer 0.', 'answer 1.', 'answer 2.'],
    );
    assert.equal(e.up.requests.length - before, 3);
    assert.equal(most, 1);
    await stillUsable(flood);
    await flood.close();
  });

  test('a client that closes the socket mid-turn stops the upstream generation, and is charged for what it was sent', async () => {
    const user = 'ws-leaver';
    const key = await e.t.inferenceKey(user);
    const leaver = await openWs(e.url, key);
    e.up.script({ text: Array.from({ length: 40 }, (_, i) => `w${i} `), delayMs: 50 });
    leaver.create({ model: MODEL, store: false, input: 'talk a lot' });
    for (;;) if ((await leaver.next()).type === 'response.output_text.delta') break;
    const rec = e.up.requests.at(-1)!;
    await leaver.close();
    await rec.closed;
    assert.equal(rec.aborted, true, 'the upstream request was cut');
    const rows = await eventually(async () => {
      await e.t.services.usage.flush();
      const r = await e.t.services.db.db.selectFrom('usage_records').selectAll().where('user_id', '=', user).execute();
      return r.length > 0 && r;
    });
    assert.equal(rows.length, 1);
    assert.ok(rows[0]!.output_tokens >= 1);
  });
});
