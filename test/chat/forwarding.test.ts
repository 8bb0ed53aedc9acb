/**
 * Chat Completions forwarded without getting in the way (issue 21, section 6): top-level fields that are not
 * OpenAI parameters (an upstream's own: vLLM's top_k, min_p, repetition_penalty, chat_template_kwargs) reach an
 * upstream that speaks Chat Completions unchanged, streamed or not, raw or through the official SDK; where Portico
 * generates the answer itself they are refused as unsupported, naming the field; a model is judged by every
 * deployment and fallback that may serve it. Known parameters are checked as before.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { keyedCalls } from '../helpers/calls.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { parseModelConfig } from '../../src/models/config.js';
import { forwardsChatCompletions } from '../../src/engines/providers.js';
import { expectError, readChatStream } from './helpers.js';

/** what vLLM, SGLang and llama.cpp server take besides OpenAI's parameters (Qwen3's thinking switch among them) */
const EXTRA = { top_k: 20, min_p: 0.05, repetition_penalty: 1.1, chat_template_kwargs: { enable_thinking: false } };
const user = [{ role: 'user', content: 'hi' }];

function yaml(url: string): string {
  return `
models:
  - { name: fwd, provider: openai-compatible, base_url: ${url}, upstream_model: upstream-model, retries: 0 }
  - { name: gen, provider: openai-compatible, base_url: ${url}, api: responses, retries: 0 }
  - name: fwd-pair
    retries: 0
    deployments:
      - { id: fp-a, provider: openai-compatible, base_url: ${url}, upstream_model: up-a }
      - { id: fp-b, provider: openai-compatible, base_url: ${url}, upstream_model: up-b }
  - name: mixed
    retries: 0
    deployments:
      - { id: mixed-fwd, provider: openai-compatible, base_url: ${url}, weight: 1 }
      - { id: mixed-gen, provider: openai-compatible, base_url: ${url}, api: responses, weight: 0 }
  - { name: falls-to-gen, provider: openai-compatible, base_url: ${url}, retries: 0, fallbacks: [gen] }
  - { name: window-to-gen, provider: openai-compatible, base_url: ${url}, retries: 0, context_window_fallbacks: [gen] }
  - { name: falls-to-fwd, provider: openai-compatible, base_url: ${url}, retries: 0, fallbacks: [fwd-pair] }
  - name: fwd-then-llama
    retries: 0
    deployments:
      - { id: ftl-up, provider: openai-compatible, base_url: ${url}, weight: 1 }
      # an embedded model (never loaded here: the request is refused from the model file)
      - { id: ftl-llama, provider: llama, path: /nonexistent/model.gguf, weight: 0 }
`;
}

describe('chat completions: fields that are not OpenAI parameters', () => {
  let up: ScriptedUpstream;
  let t: TestApp & { url?: string };
  let client: OpenAI;
  let call: ReturnType<typeof keyedCalls>['call'];
  let last: () => any;
  const post = (body: unknown) => call('POST', '/v1/chat/completions', body);

  before(async () => {
    up = await startScriptedUpstream();
    t = await buildTestApp({ listen: true, models: parseModelConfig(yaml(up.url)).models });
    const key = await t.inferenceKey('alice');
    client = new OpenAI({ apiKey: key, baseURL: t.url + '/v1', maxRetries: 0 });
    ({ call, last } = keyedCalls(t.url!, key, up));
  });
  after(async () => {
    await t.close();
    await up.close();
  });

  test('forwarded: they reach the upstream unchanged beside the mapped model, and its answer comes back', async () => {
    up.reset();
    up.script({ text: 'Hello.' });
    const res = await post({ model: 'fwd', messages: user, temperature: 0.7, ...EXTRA });
    assert.equal(res.status, 200, await res.clone().text());
    const body = (await res.json()) as any;
    assert.equal(body.choices[0].message.content, 'Hello.');
    assert.equal(body.model, 'fwd');
    const sent = last();
    assert.equal(sent.model, 'upstream-model');
    assert.equal(sent.temperature, 0.7);
    for (const [k, v] of Object.entries(EXTRA)) assert.deepEqual(sent[k], v, k);
  });

  test('forwarded and streamed: the same fields, with the usage asked for as always', async () => {
    up.reset();
    up.script({ text: 'one two', chunks: 2 });
    const { chunks, done, errors } = await readChatStream(await post({ model: 'fwd', messages: user, stream: true, ...EXTRA }));
    assert.equal(done, true);
    assert.deepEqual(errors, []);
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), 'one two');
    const sent = last();
    assert.equal(sent.stream, true);
    assert.deepEqual(sent.stream_options, { include_usage: true });
    for (const [k, v] of Object.entries(EXTRA)) assert.deepEqual(sent[k], v, k);
  });

  test("the official SDK's extra body fields pass, in create and in a stream", async () => {
    up.reset();
    up.script({ text: 'sdk' }, { text: 'streamed', chunks: 2 });
    // the SDK sends fields its types do not list as they are (its documented way to reach a server's own parameters)
    const r = await client.chat.completions.create({ model: 'fwd', messages: [{ role: 'user', content: 'hi' }], ...EXTRA } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    assert.equal(r.choices[0]!.message.content, 'sdk');
    for (const [k, v] of Object.entries(EXTRA)) assert.deepEqual(up.requests[0]!.body[k], v, k);
    const stream = await client.chat.completions.create({
      model: 'fwd',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      ...EXTRA,
    } as OpenAI.ChatCompletionCreateParamsStreaming);
    let text = '';
    for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
    assert.equal(text, 'streamed');
    for (const [k, v] of Object.entries(EXTRA)) assert.deepEqual(up.requests[1]!.body[k], v, k);
  });

  test('known parameters are checked as before, nested objects still refuse unknown fields, the body limit stays', async () => {
    up.reset();
    await expectError(await post({ model: 'fwd', messages: user, ...EXTRA, temperature: 2.5 }), 400, 'decimal_above_max_value', 'temperature');
    await expectError(await post({ model: 'fwd', messages: [{ role: 'user', content: 'x', top_k: 3 }], ...EXTRA }), 400, 'unknown_parameter', 'messages[0].top_k');
    await expectError(
      await post({ model: 'fwd', messages: user, stream_options: { include_usage: true, top_k: 1 }, stream: true }),
      400,
      'unknown_parameter',
      'stream_options.top_k',
    );
    await expectError(await post({ model: 'fwd', messages: user, top_k: 'x'.repeat(17 * 1024 * 1024) }), 413, 'payload_too_large');
    // fields that would reach an object's prototype are refused by the body parser, as on every route
    await expectError(await post('{"model": "fwd", "messages": [{"role": "user", "content": "x"}], "__proto__": {"top_k": 1}}'), 400);
    await expectError(await post('{"model": "fwd", "messages": [{"role": "user", "content": "x"}], "constructor": {"prototype": {"a": 1}}}'), 400);
    assert.equal(up.requests.length, 0, 'nothing reached the upstream');
  });

  test('generated by Portico (an upstream on the Responses API): refused as unsupported, naming the field; nothing runs', async () => {
    up.reset();
    for (const [k, v] of Object.entries(EXTRA)) {
      for (const stream of [false, true]) {
        const err = await expectError(await post({ model: 'gen', messages: user, stream, [k]: v }), 400, 'unsupported_parameter', k);
        assert.match(err.message, new RegExp(`'${k}' is not a parameter of OpenAI's Chat Completions API.*generates the answer itself`));
      }
    }
    // the first unknown field is named; known ones are still checked first by the schema
    await expectError(await post({ model: 'gen', messages: user, foo: 1, bar: 2 }), 400, 'unsupported_parameter', 'foo');
    await expectError(await post({ model: 'gen', messages: user, foo: 1, temperature: 'hot' }), 400, 'invalid_type', 'temperature');
    assert.equal(up.requests.length, 0, 'nothing was generated');
  });

  test('several deployments: forwarded when every deployment forwards; refused up front when one would generate, naming it', async () => {
    up.reset();
    for (let i = 0; i < 4; i++) {
      up.script({ text: 'ok' });
      const res = await post({ model: 'fwd-pair', messages: user, ...EXTRA });
      assert.equal(res.status, 200, await res.clone().text());
      const sent = last();
      assert.ok(sent.model === 'up-a' || sent.model === 'up-b');
      for (const [k, v] of Object.entries(EXTRA)) assert.deepEqual(sent[k], v, k);
    }
    up.reset();
    // the first deployment forwards (and would serve: the other has weight 0), but the model may be generated
    const mixed = await expectError(await post({ model: 'mixed', messages: user, top_k: 20 }), 400, 'unsupported_parameter', 'top_k');
    assert.match(mixed.message, /'mixed-gen'/);
    const withLlama = await expectError(await post({ model: 'fwd-then-llama', messages: user, repetition_penalty: 1.1 }), 400, 'unsupported_parameter', 'repetition_penalty');
    assert.match(withLlama.message, /'ftl-llama'/);
    // without such fields the model is served as before (forwarded by its first deployment)
    up.script({ text: 'ok' });
    assert.equal((await post({ model: 'mixed', messages: user })).status, 200);
    assert.equal(up.requests.length, 1);
  });

  test('fallbacks count: a fallback (or a context-window fallback) that generates refuses them; one that forwards does not', async () => {
    up.reset();
    for (const model of ['falls-to-gen', 'window-to-gen']) {
      const err = await expectError(await post({ model, messages: user, min_p: 0.1 }), 400, 'unsupported_parameter', 'min_p');
      assert.match(err.message, /fallback 'gen'/);
    }
    assert.equal(up.requests.length, 0);
    up.script({ text: 'ok' });
    const res = await post({ model: 'falls-to-fwd', messages: user, min_p: 0.1 });
    assert.equal(res.status, 200, await res.clone().text());
    assert.equal(last().min_p, 0.1);
  });

  test('which entries forward is told from the model file, and agrees with the engines it makes', async () => {
    for (const name of ['fwd', 'gen']) {
      const spec = t.services.models.get(name)!;
      const engine = await t.services.engines.text(spec);
      assert.equal(forwardsChatCompletions(spec), engine.chatCompletions !== undefined, name);
    }
    assert.equal(forwardsChatCompletions(t.services.models.get('fwd')!), true);
    assert.equal(forwardsChatCompletions(t.services.models.get('gen')!), false);
    assert.equal(forwardsChatCompletions({ name: 'x', provider: 'llama', type: 'text' }), false, 'the embedded engine generates');
    assert.equal(forwardsChatCompletions({ name: 'x', provider: 'nope', type: 'text' }), false);
  });
});
