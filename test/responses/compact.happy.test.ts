/**
 * POST /v1/responses/compact with the official SDK (`client.responses.compact()`): a multi-turn chain with tool
 * calls becomes a window of its user messages and one sealed compaction item; a new response starts from that
 * window plus a new message (HTTP and WebSocket), and the model receives the summary the item stands for.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { ResponsesWS } from 'openai/resources/responses/ws';
import OpenAI from 'openai';
import { testDatabases } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { makeTinyGguf } from '../helpers/tiny-gguf.js';
import type { ModelSpec } from '../../src/models/config.js';
import { COMPACT_INSTRUCTIONS } from '../../src/responses/compact.js';
import { SUMMARY_HEADING } from '../../src/responses/compaction.js';
import { MODEL, assertUsage, setup, type Env } from './util.js';
import { finalOf, openWs } from './ws-util.js';

const WEATHER = { type: 'function' as const, name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false };

/** what the summarizing request sent upstream: its instructions and its one user message (the transcript) */
function summarizerSaw(body: any): { system: string; transcript: string } {
  assert.equal(body.messages.length, 2, JSON.stringify(body.messages).slice(0, 300));
  assert.equal(body.messages[0].role, 'system');
  assert.equal(body.messages[1].role, 'user');
  return { system: body.messages[0].content, transcript: body.messages[1].content };
}

/** a three-turn chain: a question, a tool call, the tool's output and the answer */
async function weatherChain(e: Env) {
  e.up.script(
    { text: 'Gladly. When do you want to go?' },
    { toolCalls: [{ id: 'call_p1', name: 'get_weather', arguments: '{"city":"Paris"}' }] },
    { text: 'It is 18 C and sunny in Paris: pack light.' },
  );
  const r1 = await e.client.responses.create({ model: MODEL, instructions: 'You are a travel agent.', input: 'Plan a trip to Paris for me.' });
  const r2 = await e.client.responses.create({ model: MODEL, previous_response_id: r1.id, input: 'What is the weather there?', tools: [WEATHER] });
  const call = r2.output[0];
  assert.equal(call?.type, 'function_call');
  const r3 = await e.client.responses.create({
    model: MODEL,
    previous_response_id: r2.id,
    input: [{ type: 'function_call_output', call_id: (call as any).call_id, output: '{"temp_c":18,"sky":"sunny"}' }],
    tools: [WEATHER],
  });
  assert.equal(r3.status, 'completed');
  return r3;
}

for (const db of testDatabases()) {
  describe(`compaction: happy paths (${db})`, () => {
    let e: Env;
    /** the upstream of `mid-window`, a model with a 600-token window */
    let mid: ScriptedUpstream;
    before(async () => {
      mid = await startScriptedUpstream();
      e = await setup(db, [{ name: 'mid-window', provider: 'openai-compatible', base_url: mid.url, type: 'text', context_window: 600 } as ModelSpec]);
    });
    after(async () => {
      await e.close();
      await mid.close();
    });

    test('a multi-turn chain with tool calls, compacted with client.responses.compact(): user messages kept, one sealed item, usage', async () => {
      const r3 = await weatherChain(e);
      e.up.script({ text: 'SUMMARY-7Q: Paris trip; get_weather said 18 C, sunny; advised to pack light.', usage: { prompt_tokens: 150, completion_tokens: 20 } });
      const before = Math.floor(Date.now() / 1000);
      const cmp = await e.client.responses.compact({ model: MODEL, previous_response_id: r3.id, instructions: 'You are a travel agent.' });

      assert.equal(cmp.object, 'response.compaction');
      assert.match(cmp.id, /^resp_/);
      assert.ok(cmp.created_at >= before && cmp.created_at <= before + 5);
      assertUsage(cmp.usage);
      assert.equal(cmp.usage.input_tokens, 150);
      assert.equal(cmp.usage.output_tokens, 20);
      assert.deepEqual(
        cmp.output.slice(0, -1).map((o: any) => [o.type, o.role, o.status, o.content]),
        [
          ['message', 'user', 'completed', [{ type: 'input_text', text: 'Plan a trip to Paris for me.' }]],
          ['message', 'user', 'completed', [{ type: 'input_text', text: 'What is the weather there?' }]],
        ],
      );
      const item = cmp.output.at(-1) as any;
      assert.equal(item.type, 'compaction');
      assert.match(item.id, /^cmp_/);
      assert.equal(typeof item.encrypted_content, 'string');
      // opaque: the summary is not readable in it
      const decoded = item.encrypted_content
        .split('.')
        .map((p: string) => Buffer.from(p, 'base64url').toString('latin1'))
        .join('|');
      assert.doesNotMatch(item.encrypted_content + decoded, /SUMMARY-7Q|Paris/);

      // the model that wrote the summary saw the whole conversation as a transcript, tool calls and results included
      const { system, transcript } = summarizerSaw(e.last());
      assert.equal(system, COMPACT_INSTRUCTIONS);
      for (const s of [
        'You are a travel agent.',
        'User: Plan a trip to Paris for me.',
        'Assistant: Gladly. When do you want to go?',
        'User: What is the weather there?',
        'Assistant called the tool get_weather (call call_p1) with the arguments {"city":"Paris"}',
        'Tool result for call call_p1: {"temp_c":18,"sky":"sunny"}',
        'Assistant: It is 18 C and sunny in Paris: pack light.',
      ])
        assert.ok(transcript.includes(s), `the transcript has ${s}`);

      // its usage is recorded like a response's
      await e.t.services.usage.flush();
      const rows = await e.t.services.db.db.selectFrom('usage_records').selectAll().where('user_id', '=', 'alice').where('input_tokens', '=', 150).execute();
      assert.equal(rows.length, 1);
      assert.equal(rows[0]!.output_tokens, 20);
      assert.equal(rows[0]!.operation, 'responses');

      // nothing was stored: the window is not a response
      assert.equal((await e.call('GET', `/v1/responses/${cmp.id}`)).status, 404);

      // ---- a new response from the window plus a new message, over HTTP: the model receives the summary
      e.up.script({ text: 'Then Rome: 22 C.' });
      const next = await e.client.responses.create({
        model: MODEL,
        instructions: 'You are a travel agent.',
        input: [...(cmp.output as any[]), { role: 'user', content: 'And Rome?' }],
      });
      assert.equal(next.output_text, 'Then Rome: 22 C.');
      assert.deepEqual(e.last().messages, [
        { role: 'system', content: 'You are a travel agent.' },
        { role: 'user', content: 'Plan a trip to Paris for me.' },
        { role: 'user', content: 'What is the weather there?' },
        { role: 'assistant', content: `${SUMMARY_HEADING}\nSUMMARY-7Q: Paris trip; get_weather said 18 C, sunny; advised to pack light.` },
        { role: 'user', content: 'And Rome?' },
      ]);
      // stored as given: the item stays sealed in input_items, and a chain from it opens it again
      const items = await (await e.call('GET', `/v1/responses/${next.id}/input_items?order=asc`)).json();
      assert.deepEqual(items.data[2], { id: item.id, type: 'compaction', encrypted_content: item.encrypted_content });
      e.up.script({ text: 'Noted.' });
      await e.client.responses.create({ model: MODEL, previous_response_id: next.id, input: 'Thanks!' });
      assert.ok(e.last().messages.some((m: any) => m.role === 'assistant' && String(m.content).includes('SUMMARY-7Q')));

      // ---- and over a WebSocket, with the SDK's ResponsesWS
      const rws = new ResponsesWS(e.client);
      const done = new Promise<any>((resolve, reject) => {
        rws.on('response.completed', (ev: any) => resolve(ev.response));
        rws.on('error', reject);
      });
      await new Promise<void>((resolve) => rws.socket.on('open', () => resolve()));
      e.up.script({ text: 'Over the socket: Rome is 22 C.' });
      rws.send({ type: 'response.create', model: MODEL, store: false, input: [...(cmp.output as any[]), { role: 'user', content: 'And Rome, by socket?' }] });
      const viaWs = await done;
      rws.close();
      assert.equal(viaWs.output[0].content[0].text, 'Over the socket: Rome is 22 C.');
      const sent = e.last().messages;
      assert.equal(sent.at(-2).content, `${SUMMARY_HEADING}\nSUMMARY-7Q: Paris trip; get_weather said 18 C, sunny; advised to pack light.`);
      assert.equal(sent.at(-1).content, 'And Rome, by socket?');
    });

    test('input alone (no chain): a string, or items, with the input_tokens endpoint counting a window', async () => {
      e.up.script({ text: 'Short summary A.' });
      const a = await e.client.responses.compact({ model: MODEL, input: 'Just one message.' });
      assert.deepEqual(
        a.output.map((o: any) => o.type),
        ['message', 'compaction'],
      );
      assert.equal((a.output[0] as any).content[0].text, 'Just one message.');
      e.up.script({ text: 'Short summary B.' });
      const b = await e.client.responses.compact({
        model: MODEL,
        input: [
          { role: 'developer', content: 'Answer in French.' },
          { role: 'user', content: 'Bonjour' },
          { role: 'assistant', content: 'Bonjour !' },
        ],
      });
      // developer and assistant messages are in the summary, not kept
      assert.deepEqual(
        b.output.map((o: any) => [o.type, o.role ?? null]),
        [
          ['message', 'user'],
          ['compaction', null],
        ],
      );
      assert.ok(summarizerSaw(e.last()).transcript.includes('Developer: Answer in French.'));
      const count = await (await e.call('POST', '/v1/responses/input_tokens', { model: MODEL, input: [...b.output, { role: 'user', content: 'Merci' }] })).json();
      assert.equal(count.object, 'response.input_tokens');
      assert.ok(count.input_tokens > 5);
    });

    test('compacting a compacted window: the old summary is summarized again, and the new window has one compaction item', async () => {
      e.up.script({ text: 'FIRST-SUMMARY: the user likes tea.' });
      const first = await e.client.responses.compact({
        model: MODEL,
        input: [
          { role: 'user', content: 'I like tea.' },
          { role: 'assistant', content: 'Noted: tea.' },
        ],
      });
      e.up.script({ text: 'SECOND-SUMMARY: tea, and now coffee too.' });
      const second = await e.client.responses.compact({
        model: MODEL,
        input: [...(first.output as any[]), { role: 'user', content: 'And coffee.' }, { role: 'assistant', content: 'Coffee too.' }],
      });
      assert.ok(summarizerSaw(e.last()).transcript.includes('FIRST-SUMMARY: the user likes tea.'));
      assert.deepEqual(
        second.output.map((o: any) => (o.type === 'message' ? o.content[0].text : o.type)),
        ['I like tea.', 'And coffee.', 'compaction'],
      );
      e.up.script({ text: 'ok' });
      await e.client.responses.create({ model: MODEL, input: [...(second.output as any[]), { role: 'user', content: 'Which drinks?' }] });
      const sent = JSON.stringify(e.last().messages);
      assert.ok(sent.includes('SECOND-SUMMARY') && !sent.includes('FIRST-SUMMARY'));
    });

    test('a conversation longer than the model window: the transcript keeps its newest part, and the compaction still succeeds', async () => {
      // about 300 tokens each: four of them do not fit in 600 with the instructions
      const long = (w: string) => Array.from({ length: 120 }, (_, i) => `${w}${i}`).join(' ');
      const input = [
        { role: 'user', content: `OLDEST ${long('alpha')}` },
        { role: 'assistant', content: long('beta') },
        { role: 'user', content: long('gamma') },
        { role: 'assistant', content: long('delta') },
        { role: 'user', content: 'NEWEST question?' },
      ] as OpenAI.Responses.ResponseInputItem[];
      mid.script({ text: 'Summary of the recent part.' });
      const cmp = await e.client.responses.compact({ model: 'mid-window', input });
      const { transcript } = summarizerSaw(mid.requests.at(-1)!.body);
      assert.match(transcript, /did not fit in the model and is left out/);
      assert.ok(transcript.includes('NEWEST question?'));
      assert.ok(!transcript.includes('OLDEST'));
      // every user message is still kept verbatim in the window
      assert.equal(cmp.output.filter((o: any) => o.type === 'message').length, 3);
    });
  });
}

describe('compaction across instances and engines', () => {
  test('an item made on one instance opens on another that shares KEY_PEPPER', async () => {
    const env = { KEY_PEPPER: randomBytes(24).toString('hex') };
    const a = await setup('pglite', [], env);
    const b = await setup('pglite', [], env);
    try {
      a.up.script({ text: 'MADE-ON-A' });
      const cmp = await a.client.responses.compact({ model: MODEL, input: 'hello from A' });
      // the same user on instance B (its own key, as any instance verifies)
      const bAlice = new OpenAI({ apiKey: await b.t.inferenceKey('alice'), baseURL: b.url + '/v1', maxRetries: 0 });
      await bAlice.responses.create({ model: MODEL, input: [...(cmp.output as any[]), { role: 'user', content: 'on B' }] });
      assert.ok(JSON.stringify(b.last().messages).includes('MADE-ON-A'));
    } finally {
      await a.close();
      await b.close();
    }
  });

  test('the embedded llama engine writes the summary, and a response on it starts from the window (HTTP and WebSocket)', async () => {
    const path = await makeTinyGguf();
    const e = await setup('pglite', [{ name: 'tiny', provider: 'llama', path, type: 'text', context_window: 1024, parallel: 2 } as ModelSpec]);
    try {
      const r1 = await e.client.responses.create({ model: 'tiny', input: 'Plan a trip to Paris.', max_output_tokens: 8 });
      const cmp = await e.client.responses.compact({ model: 'tiny', previous_response_id: r1.id, input: 'And Rome?' });
      assert.deepEqual(
        cmp.output.map((o: any) => o.type),
        ['message', 'message', 'compaction'],
      );
      assertUsage(cmp.usage);
      assert.ok(cmp.usage.output_tokens > 0, 'the model wrote the summary');
      const window = [...(cmp.output as any[]), { role: 'user', content: 'Go on.' }];
      const withWindow = await e.client.responses.create({ model: 'tiny', input: window, max_output_tokens: 4 });
      const without = await e.client.responses.create({ model: 'tiny', input: [{ role: 'user', content: 'Go on.' }], max_output_tokens: 4 });
      // the summary (the model's own earlier output) is in what the model read
      assert.ok(withWindow.usage!.input_tokens > without.usage!.input_tokens + cmp.usage.output_tokens / 2, `${withWindow.usage!.input_tokens} vs ${without.usage!.input_tokens}`);
      const c = await openWs(e.url, e.key);
      const viaWs = finalOf(await c.turn({ model: 'tiny', store: false, input: window, max_output_tokens: 4 }));
      assert.equal(viaWs.usage.input_tokens, withWindow.usage!.input_tokens);
      await c.close();
    } finally {
      await e.close();
    }
  });
});
