/** responses.create through the official SDK against a listening Portico and a scripted Chat Completions upstream. */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { testDatabases } from '../helpers/app.js';
import { MODEL, assertFullObject, assertUsage, expectError, setup, type Env } from './util.js';

const weather = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'Weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
  strict: true,
};
const time = { type: 'function' as const, name: 'get_time', description: null, parameters: { type: 'object', properties: {} }, strict: false };

for (const db of testDatabases()) {
  describe(`responses.create (${db})`, () => {
    let e: Env;
    before(async () => {
      e = await setup(db);
    });
    after(() => e.close());

    test('a non-streaming request asks the upstream for one JSON answer (same object), a streamed one streams', async () => {
      e.up.script({ text: 'One answer.', usage: { prompt_tokens: 4, completion_tokens: 2 } });
      const res = await e.call('POST', '/v1/responses', { model: MODEL, input: 'Hi', store: false });
      assert.equal(res.status, 200);
      const r = await res.json();
      assert.equal(r.status, 'completed');
      assert.equal(r.output_text, 'One answer.');
      assert.deepEqual([r.usage.input_tokens, r.usage.output_tokens], [4, 2]);
      assert.equal(e.last().stream, false);
      assert.equal(e.last().stream_options, undefined);
      e.up.script({ text: 'Streamed.' });
      const s = await e.call('POST', '/v1/responses', { model: MODEL, input: 'Hi', store: false, stream: true });
      assert.match(await s.text(), /response\.completed/);
      assert.equal(e.last().stream, true);
      assert.deepEqual(e.last().stream_options, { include_usage: true });
    });

    test("plain text: the whole ResponseObject, usage total, the client's model name (not the upstream's dated one)", async () => {
      e.up.script({ text: 'Hello there, friend.', chunks: 3, model: 'upstream-model-2026-01-01', usage: { prompt_tokens: 12, completion_tokens: 5 } });
      const res = await e.call('POST', '/v1/responses', { model: MODEL, input: 'Say hello' });
      assert.equal(res.status, 200);
      const r = await res.json();
      assertFullObject(r);
      assert.equal(r.status, 'completed');
      assert.equal(r.model, MODEL, 'the name the client sent, whatever the upstream calls it');
      assert.equal(r.background, false);
      assert.equal(r.store, true);
      for (const f of [
        'error',
        'incomplete_details',
        'instructions',
        'max_output_tokens',
        'max_tool_calls',
        'previous_response_id',
        'prompt_cache_key',
        'safety_identifier',
        'user',
      ]) {
        assert.equal(r[f], null, `${f} is null`);
      }
      assert.equal(typeof r.completed_at, 'number');
      assert.ok(r.completed_at >= r.created_at);
      assert.deepEqual(r.usage, {
        input_tokens: 12,
        input_tokens_details: { cached_tokens: 0 },
        output_tokens: 5,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: 17,
      });
      assert.equal(r.output.length, 1);
      const m = r.output[0];
      assert.equal(m.type, 'message');
      assert.equal(m.role, 'assistant');
      assert.equal(m.status, 'completed');
      assert.match(m.id, /^msg_/);
      assert.deepEqual(m.content, [{ type: 'output_text', text: 'Hello there, friend.', annotations: [], logprobs: [] }]);
      assert.deepEqual(r.tools, []);
      assert.equal(r.tool_choice, 'auto');
      assert.deepEqual(r.text.format, { type: 'text' });
      assert.deepEqual(r.metadata, {});
      assert.equal(r.truncation, 'disabled');
      // what the upstream got
      const up = e.last();
      assert.equal(up.model, 'upstream-model');
      assert.deepEqual(up.messages, [{ role: 'user', content: 'Say hello' }]);
      // a non-streaming request: one JSON answer from the upstream
      assert.equal(up.stream, false);
      assert.equal(up.stream_options, undefined);
      // the SDK gives the same, with output_text
      e.up.script({ text: 'Hi!' });
      const s = await e.client.responses.create({ model: MODEL, input: 'Say hello' });
      assert.equal(s.output_text, 'Hi!');
      assert.equal(s.status, 'completed');
      assert.equal(s.model, MODEL);
      assertUsage(s.usage);
    });

    test("prompt_cache_retention: the SDK's 'in_memory' and the API reference's 'in-memory' and '24h' are accepted and echoed; others refused", async () => {
      for (const v of ['in_memory', 'in-memory', '24h']) {
        e.up.script({ text: 'ok' });
        const r = await e.client.responses.create({ model: MODEL, input: 'x', prompt_cache_key: 'conv-1', prompt_cache_retention: v as 'in_memory' });
        assert.equal(r.prompt_cache_retention, v);
        assert.equal(r.prompt_cache_key, 'conv-1');
      }
      const bad = await e.call('POST', '/v1/responses', { model: MODEL, input: 'x', prompt_cache_retention: 'forever' });
      assert.equal(bad.status, 400);
      assert.equal((await bad.json()).error.param, 'prompt_cache_retention');
    });

    test('instructions become the system message; message arrays with every role and part kind', async () => {
      e.up.script({ text: 'ok' });
      const r = await e.client.responses.create({
        model: MODEL,
        instructions: 'Be brief.',
        input: [
          { role: 'system', content: 'You are terse.' },
          { role: 'developer', content: 'Answer in English.' },
          {
            role: 'user',
            content: [
              { type: 'input_text', text: 'What is in ' },
              { type: 'input_image', image_url: 'https://example.com/a.png', detail: 'low' },
            ],
          },
          { role: 'assistant', content: 'A cat.' },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'And here?' },
              { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA', detail: 'high' } },
            ],
          } as any,
          { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Thanks' }] },
        ],
      });
      assert.equal(r.status, 'completed');
      assert.equal(r.instructions, 'Be brief.');
      assert.deepEqual(e.last().messages, [
        { role: 'system', content: 'Be brief.' },
        { role: 'system', content: 'You are terse.' },
        { role: 'system', content: 'Answer in English.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is in ' },
            { type: 'image_url', image_url: { url: 'https://example.com/a.png', detail: 'low' } },
          ],
        },
        { role: 'assistant', content: 'A cat.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'And here?' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA', detail: 'high' } },
          ],
        },
        { role: 'user', content: 'Thanks' },
      ]);
    });

    test('function tools (flat) go upstream nested; a call comes back as a function_call item', async () => {
      e.up.script({ toolCalls: [{ id: 'call_abc', name: 'get_weather', arguments: ['{"city":', '"Paris"}'] }] });
      const r = await e.client.responses.create({ model: MODEL, input: 'Weather in Paris?', tools: [weather, time] });
      assert.equal(r.status, 'completed');
      const up = e.last();
      assert.deepEqual(up.tools, [
        { type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: weather.parameters, strict: true } },
        { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} }, strict: false } },
      ]);
      assert.equal(up.tool_choice, 'auto');
      assert.equal(up.parallel_tool_calls, true);
      assert.equal(r.output.length, 1);
      const c = r.output[0];
      assert.equal(c.type, 'function_call');
      if (c.type !== 'function_call') return;
      assert.equal(c.call_id, 'call_abc');
      assert.equal(c.name, 'get_weather');
      assert.deepEqual(JSON.parse(c.arguments), { city: 'Paris' });
      assert.equal(c.status, 'completed');
      assert.match(c.id!, /^fc_/);
      assert.deepEqual(
        r.tools.map((t: any) => t.name),
        ['get_weather', 'get_time'],
      );
    });

    test('tool_choice none / auto / required / object', async () => {
      e.up.script({ text: 'no tools' });
      let r = await e.client.responses.create({ model: MODEL, input: 'x', tools: [weather], tool_choice: 'none' });
      assert.equal(r.tool_choice, 'none');
      let up = e.last();
      assert.equal(up.tool_choice, 'none');
      assert.equal(up.tools, undefined, 'none: the tools are not offered');

      e.up.script({ text: 'maybe' });
      r = await e.client.responses.create({ model: MODEL, input: 'x', tools: [weather], tool_choice: 'auto' });
      assert.equal(e.last().tool_choice, 'auto');

      e.up.script({ toolCalls: [{ name: 'get_weather', arguments: '{"city":"Oslo"}' }] });
      r = await e.client.responses.create({ model: MODEL, input: 'x', tools: [weather], tool_choice: 'required' });
      assert.equal(r.tool_choice, 'required');
      assert.equal(e.last().tool_choice, 'required');
      assert.equal(r.output[0].type, 'function_call');

      e.up.script({ toolCalls: [{ name: 'get_time', arguments: '{}' }] });
      r = await e.client.responses.create({ model: MODEL, input: 'x', tools: [weather, time], tool_choice: { type: 'function', name: 'get_time' } });
      assert.deepEqual(r.tool_choice, { type: 'function', name: 'get_time' });
      up = e.last();
      assert.deepEqual(up.tool_choice, { type: 'function', function: { name: 'get_time' } });
    });

    test('parallel_tool_calls false: at most one call even when the upstream sends two', async () => {
      e.up.script({
        toolCalls: [
          { name: 'get_weather', arguments: '{"city":"A"}' },
          { name: 'get_weather', arguments: '{"city":"B"}' },
        ],
      });
      const r = await e.client.responses.create({ model: MODEL, input: 'x', tools: [weather], parallel_tool_calls: false });
      assert.equal(e.last().parallel_tool_calls, false);
      assert.equal(r.parallel_tool_calls, false);
      assert.equal(r.output.filter((o) => o.type === 'function_call').length, 1);
      // with true, both
      e.up.script({
        toolCalls: [
          { name: 'get_weather', arguments: '{"city":"A"}' },
          { name: 'get_weather', arguments: '{"city":"B"}' },
        ],
      });
      const r2 = await e.client.responses.create({ model: MODEL, input: 'x', tools: [weather] });
      assert.deepEqual(
        r2.output.map((o: any) => JSON.parse(o.arguments).city),
        ['A', 'B'],
      );
    });

    test('function_call and function_call_output items are re-attached as assistant tool_calls and tool messages', async () => {
      e.up.script({ text: 'It is sunny in Paris.' });
      const r = await e.client.responses.create({
        model: MODEL,
        tools: [weather],
        input: [
          { role: 'user', content: 'Weather in Paris and Rome?' },
          { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
          { type: 'function_call', call_id: 'call_2', name: 'get_weather', arguments: '{"city":"Rome"}' },
          { type: 'function_call_output', call_id: 'call_1', output: '{"sky":"sunny"}' },
          { type: 'function_call_output', call_id: 'call_2', output: '{"sky":"rain"}' },
        ],
      });
      assert.equal(r.output_text, 'It is sunny in Paris.');
      assert.deepEqual(e.last().messages, [
        { role: 'user', content: 'Weather in Paris and Rome?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
            { id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '{"sky":"sunny"}', name: 'get_weather' },
        { role: 'tool', tool_call_id: 'call_2', content: '{"sky":"rain"}', name: 'get_weather' },
      ]);
    });

    test('text.format json_schema and json_object become response_format', async () => {
      const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false };
      e.up.script({ text: '{"n":42}' });
      const r = await e.client.responses.create({ model: MODEL, input: 'n?', text: { format: { type: 'json_schema', name: 'num', schema, strict: true } } });
      assert.deepEqual(e.last().response_format, { type: 'json_schema', json_schema: { name: 'num', schema, strict: true } });
      assert.deepEqual(JSON.parse(r.output_text), { n: 42 });
      assert.deepEqual(r.text?.format, { type: 'json_schema', name: 'num', schema, strict: true });
      e.up.script({ text: '{}' });
      await e.client.responses.create({ model: MODEL, input: 'json', text: { format: { type: 'json_object' } } });
      assert.deepEqual(e.last().response_format, { type: 'json_object' });
    });

    test('stop (string, up to 4; 5 is 400), temperature, top_p, max_output_tokens, reasoning.effort, metadata', async () => {
      e.up.script({ text: 'a' });
      const r = await e.client.responses.create({
        model: MODEL,
        input: 'x',
        temperature: 0.3,
        top_p: 0.8,
        max_output_tokens: 50,
        reasoning: { effort: 'high' },
        metadata: { run: '7', who: 'test' },
        stop: 'END',
      } as any);
      const up = e.last();
      assert.deepEqual(up.stop, ['END']);
      assert.equal(up.temperature, 0.3);
      assert.equal(up.top_p, 0.8);
      assert.equal(up.max_tokens, 50);
      assert.equal(up.reasoning_effort, 'high');
      assert.equal(r.temperature, 0.3);
      assert.equal(r.top_p, 0.8);
      assert.equal(r.max_output_tokens, 50);
      assert.equal(r.reasoning?.effort, 'high');
      assert.deepEqual(r.metadata, { run: '7', who: 'test' });
      const stored = await e.client.responses.retrieve(r.id);
      assert.deepEqual(stored.metadata, { run: '7', who: 'test' });

      e.up.script({ text: 'a' });
      await e.client.responses.create({ model: MODEL, input: 'x', stop: ['1', '2', '3', '4'] } as any);
      assert.deepEqual(e.last().stop, ['1', '2', '3', '4']);
      const before = e.up.requests.length;
      await expectError(await e.call('POST', '/v1/responses', { model: MODEL, input: 'x', stop: ['1', '2', '3', '4', '5'] }), 400, undefined, 'stop');
      assert.equal(e.up.requests.length, before, 'a refused request never reaches the upstream');
    });

    test('finish_reason length -> incomplete with incomplete_details.reason max_output_tokens', async () => {
      e.up.script({ text: ['one ', 'two ', 'thr'], finishReason: 'length', usage: { prompt_tokens: 4, completion_tokens: 3 } });
      const r = await e.client.responses.create({ model: MODEL, input: 'count', max_output_tokens: 3 });
      assert.equal(r.status, 'incomplete');
      assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
      assert.equal(r.output_text, 'one two thr');
      assert.equal((r.output[0] as any).status, 'incomplete');
      assert.equal(r.usage?.output_tokens, 3);
      assert.equal(r.usage?.total_tokens, 7);
    });

    test('the upstream stream breaks mid-way -> failed with error {code, message}, still a ResponseObject', async () => {
      // asked for one JSON answer, this upstream streams anyway and breaks after three events
      const frame = (t: string) => `data: {"choices":[{"index":0,"delta":{"content":"${t}"}}]}\n\n`;
      e.up.script({ raw: ['a', 'b', 'c', 'd'].map(frame), breakAfter: 3 });
      const res = await e.call('POST', '/v1/responses', { model: MODEL, input: 'x' });
      assert.equal(res.status, 200);
      const r = await res.json();
      assertFullObject(r);
      assert.equal(r.status, 'failed');
      assert.equal(typeof r.error.code, 'string');
      assert.equal(typeof r.error.message, 'string');
      assert.ok(r.error.message.length > 0);
      assert.equal(r.incomplete_details, null);
      // stored as failed too
      const stored = await e.client.responses.retrieve(r.id);
      assert.equal(stored.status, 'failed');
      assert.deepEqual(stored.error, r.error);
    });

    test('an upstream that refuses at once -> a plain HTTP error, never 500', async () => {
      e.up.script({ status: 400, errorMessage: 'this model does not support that' });
      await assert.rejects(e.client.responses.create({ model: MODEL, input: 'x' }), (err: unknown) => {
        assert.ok(err instanceof OpenAI.APIError);
        assert.equal(err.status, 400);
        assert.match(err.message, /does not support that/);
        return true;
      });
      e.up.script({ status: 503, errorMessage: 'overloaded' });
      const err = await expectError(await e.call('POST', '/v1/responses', { model: MODEL, input: 'x' }), 502);
      assert.equal(err.type, 'server_error');
      e.up.script({ status: 429, errorMessage: 'slow down' });
      await expectError(await e.call('POST', '/v1/responses', { model: MODEL, input: 'x' }), 429);
      const res = await e.call('POST', '/v1/responses', { model: 'down', input: 'x' });
      assert.ok(res.status >= 502 && res.status <= 504, `unreachable upstream: ${res.status}`);
      await expectError(res, res.status);
      // a failure at once is not stored as a response (nothing for the SDK to retrieve)
    });
  });
}
